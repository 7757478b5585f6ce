"""`lancet.call`: a function applied to columns by the sandbox's rules (lancet_runner.py)."""
import dataclasses
import traceback


@dataclasses.dataclass
class Output:
    """What one call gave: a value per row (None for a null or failed row) and the failed
    rows' messages by row index, worded as the server records them."""

    values: list
    errors: dict


def _is_batch(fn):
    return bool(getattr(fn, "__lancet_batch__", False)
                or getattr(getattr(fn, "__call__", None), "__lancet_batch__", False))


def _source_file(fn):
    """The file a function (or a callable object's class) was defined in."""
    target = fn if hasattr(fn, "__code__") else getattr(type(fn), "__call__", fn)
    code = getattr(target, "__code__", None)
    return code.co_filename if code else None


def _describe(exc, source):
    """`ZeroDivisionError: division by zero (line 2)`: the type, the message and the deepest
    line of the UDF's own file, as the sandbox words a row's error."""
    where = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_filename == source:
            where = f"line {lineno}"
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return f"{text} ({where})" if where else text


def call(fn, *columns, init=None):
    """Calls `fn` over `columns` (lists of equal length, one per input column, in the column's
    order) as the sandbox does, and returns an `Output`.

    A class is instantiated with `init` (a dict of keyword arguments) first. A row function is
    called once per row; a row that raises is None with its error recorded and the others go
    on. A `@lancet.batch` function is called once with the lists; if it raises, every row
    fails with its error; a result that is not a list of as many values is a `ValueError`.
    """
    rows = len(columns[0]) if columns else 0
    if any(len(c) != rows for c in columns):
        raise ValueError("every column must hold as many rows")
    if isinstance(fn, type):
        fn = fn(**(init or {}))
    elif init:
        raise TypeError(f"'{getattr(fn, '__name__', fn)}' is a function: it takes no init")
    source = _source_file(fn)
    if _is_batch(fn):
        try:
            results = fn(*[list(c) for c in columns])
        except BaseException as e:  # noqa: BLE001 - SystemExit too fails the rows, as there
            message = _describe(e, source)
            return Output([None] * rows, {row: message for row in range(rows)})
        if isinstance(results, (str, bytes, dict)):
            raise ValueError(f"a batch function returned {type(results).__name__}, not a list "
                             f"of {rows} values")
        results = list(results)
        if len(results) != rows:
            raise ValueError(f"a batch function returned {len(results)} values for {rows} rows")
        return Output(results, {})
    values, errors = [], {}
    for row, args in enumerate(zip(*columns) if columns else [()] * rows):
        try:
            values.append(fn(*args))
        except BaseException as e:  # noqa: BLE001
            values.append(None)
            errors[row] = _describe(e, source)
    return Output(values, errors)
