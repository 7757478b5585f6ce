"""What Lancet's UDF sandbox offers a Python function (`import lancet`), for use outside it.

Inside the sandbox the server provides this module; here the same names work on your machine,
so a UDF's module imports and can be unit-tested before it is published:

- `batch`: marks a function (or class) to be called once per call with a list per column;
- `embed(model, texts)`: one vector per text, from a Lancet server (`connect`, or the
  `LANCET_URL` and `LANCET_API_KEY` environment variables) or from a model registered here
  with `use_model` (e.g. a `LocalModel`: ONNX Runtime and tokenizers, as the server runs it);
- `call(fn, *columns, init=None)`: the sandbox's rules for calling a function on columns.
"""
from ._call import Output, call
from ._embed import connect, embed, use_model
from ._local import LocalModel

__all__ = ["LocalModel", "Output", "batch", "call", "connect", "embed", "use_model"]


def batch(fn):
    """`@lancet.batch`: the function (or class) is called once per call with a list per input
    column (None where a row is null) and returns a list of as many results, in order."""
    if not callable(fn):
        raise TypeError("@lancet.batch decorates a function or a class")
    # The attribute the sandbox's runner reads: a module decorated here is decorated there.
    fn.__lancet_batch__ = True
    return fn
