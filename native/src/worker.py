"""Lancet's native-tier worker: runs inside the bubblewrap sandbox, loads one function, then
computes the batches the host sends. Protocol on the original stdin/stdout (frames of a kind
byte, a little-endian u32 length and the payload); the function's own prints go to stderr.

argv: site directories to add (the function's environment)."""
import base64
import json
import os
import pickle
import signal
import struct
import sys
import time
import traceback


def _channel():
    proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
    proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # print() must not write into the protocol
    return proto_in, proto_out


IN, OUT = _channel()
OUT_FD = OUT.fileno()


def read_exact(n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = IN.readinto(view[got:])
        if not k:
            sys.exit(0)  # the host closed the pipe: done
        got += k
    return buf


def receive():
    kind, length = struct.unpack("<cI", read_exact(5))
    return kind, read_exact(length)


def send(kind, payload):
    # Head and payload in one writev: the host wakes once per frame, and a result is not
    # copied behind its head first.
    parts = [memoryview(struct.pack("<cI", kind, len(payload))), memoryview(payload).cast("B")]
    while parts:
        n = os.writev(OUT_FD, parts)
        while n:
            if n >= len(parts[0]):
                n -= len(parts.pop(0))
            else:
                parts[0] = parts[0][n:]
                n = 0


SHM = None  # the memory file shared with the host (see shm.rs), as a memoryview
SLOT = 0  # bytes of a slot
WAYS = 0  # slots each way: batches in 0..WAYS, results in WAYS..2*WAYS


def map_shared(setup):
    """Maps the host's shared memory file; False (the pipe carries everything) if it cannot."""
    global SHM, SLOT, WAYS
    shm = setup.get("shm")
    if not shm:
        return False
    try:
        import mmap
        SHM = memoryview(mmap.mmap(shm["fd"], 2 * shm["ways"] * shm["slot"]))
        SLOT, WAYS = shm["slot"], shm["ways"]
        return True
    except (OSError, ValueError):
        return False


def fail(message, row=None):
    send(b"E", json.dumps({"message": message, "row": row}).encode())


def describe(e):
    return f"{type(e).__name__}: {e}"


FILES = "/tmp/lancet-files"
MAX_FAILURES = 100  # as the host's worker.rs


def ship_files(files):
    """Modules shipped with the function, written under the private /tmp, first on sys.path."""
    if not files:
        return
    root = os.path.realpath(FILES)
    for path, data in files.items():
        target = os.path.realpath(os.path.join(root, path))
        if os.path.isabs(path) or not target.startswith(root + os.sep):
            raise ValueError(f"shipped file {path!r} is outside its directory")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as f:
            f.write(base64.b64decode(data))
    sys.path.insert(0, root)


def params_of(obj):
    """The callable's parameter names and how many of them have no default."""
    import inspect
    target = obj.__call__ if isinstance(obj, type) else obj
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return [], 0
    if isinstance(obj, type) and params[:1] and params[0].name == "self":
        params = params[1:]
    return [p.name for p in params], sum(p.default is inspect.Parameter.empty for p in params)


def load(setup):
    if setup.get("pickle") is not None:
        # The sandbox, not the pickle, is the boundary: a pickle runs code as it loads, as any
        # function does when called.
        obj = pickle.loads(base64.b64decode(setup["pickle"]))
    else:
        namespace = {"__name__": "__lancet_udf__"}
        exec(compile(setup["source"], "<udf>", "exec"), namespace)
        entry = setup["entry"]
        if entry not in namespace:
            raise NameError(f"the source defines no '{entry}'")
        obj = namespace[entry]
    if setup.get("load_only"):
        return obj
    if isinstance(obj, type):
        # A stateful function: set up once per worker, reused for every batch.
        obj = obj(**(setup.get("init") or {}))
    if not callable(obj):
        raise TypeError(f"'{setup['entry']}' is not callable")
    return obj


def sandbox_processes():
    """Every process of the sandbox but bwrap's init (1) and this worker. The sandbox has its own
    PID namespace, so /proc lists only its processes."""
    me = os.getpid()
    return {int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me)}


KEPT = set()  # processes the function started while it was set up: its state, kept across calls
LAST_PID = None  # the namespace's last allocated pid when no stray was left


def last_pid():
    """The last pid (or thread id) allocated in the sandbox's PID namespace; None if unreadable.
    Unchanged since the last clean-up means no process was started since: nothing to end, and
    the /proc scan (~40 us, a large share of a small batch) is skipped for ~5 us."""
    try:
        with open("/proc/sys/kernel/ns_last_pid", "rb") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def end_strays():
    """Ends every process a call started in the sandbox and reaps the worker's children, before
    the call is answered: a call's processes do not outlive it. Left alone, children that exit
    stay zombies of this worker (nothing else waits for them) and count against its process
    limit until its later calls cannot fork; ones still running would go on using its CPU and
    memory between calls. What the function started at setup (a pool) is kept."""
    global LAST_PID
    now = last_pid()
    if now is not None and now == LAST_PID:
        if KEPT:
            reap_kept()
        return
    # Until none is left: an orphan's zombie stays listed until bwrap's init reaps it, a moment
    # after the kill. Bounded: a process that cannot be ended is the call's deadline's to deal with.
    deadline = time.monotonic() + 5
    while True:
        others = sandbox_processes() - KEPT
        if not others or time.monotonic() > deadline:
            break
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in others:  # killed: those that are this worker's children are waited for
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                time.sleep(0.001)  # an orphan: bwrap's init reaps it
    reap_kept()
    LAST_PID = last_pid()


def reap_kept():
    """Reaps the kept processes that exited."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        KEPT.discard(pid)


def compute(fn, setup, batch, out_type, pa):
    """(result, nulled rows, their first errors [(row, message)], error (message, row) or None)."""
    mode = setup["mode"]
    n = batch.num_rows
    nulled = 0
    errors = []
    if mode == "batch":
        result = fn(*batch.columns)
    elif mode == "record_batch":
        result = fn(batch)
    else:
        columns = [c.to_pylist() for c in batch.columns]
        skip_nulls = not setup.get("pass_nulls")
        try:
            # The fast path: one comprehension (a null input gives a null output, unless the
            # function takes nulls).
            if not skip_nulls:
                result = [fn(*args) for args in zip(*columns)]
            elif len(columns) == 1:
                result = [None if v is None else fn(v) for v in columns[0]]
            else:
                result = [None if None in args else fn(*args) for args in zip(*columns)]
        except Exception:  # noqa: BLE001 - find the row, apply on_error, row by row
            result = []
            for i, args in enumerate(zip(*columns)):
                if skip_nulls and None in args:
                    result.append(None)
                    continue
                try:
                    result.append(fn(*args))
                except Exception as e:  # noqa: BLE001 - the user's function may raise anything
                    if not setup.get("null_on_error"):
                        return None, 0, [], (describe(e), i)
                    result.append(None)
                    nulled += 1
                    if len(errors) < MAX_FAILURES:
                        errors.append((i, describe(e)[:2000]))
    if isinstance(result, pa.ChunkedArray):
        result = result.combine_chunks()
    if isinstance(result, pa.Array):
        if result.type != out_type:
            result = result.cast(out_type)
    else:
        result = pa.array(result, type=out_type)
    if len(result) != n:
        raise ValueError(f"returned {len(result)} values for {n} rows")
    return result, nulled, errors, None


def main():
    global LAST_PID
    import site
    for d in sys.argv[1:]:
        site.addsitedir(d)
    kind, payload = receive()
    assert kind == b"S", kind
    setup = json.loads(bytes(payload))
    for k, v in (setup.get("env") or {}).items():
        os.environ[k] = v
    try:
        import pyarrow as pa
        schema = pa.ipc.open_stream(pa.py_buffer(base64.b64decode(setup["output_schema"]))).schema
        ship_files(setup.get("files"))
        fn = load(setup)
        KEPT.update(sandbox_processes())
        LAST_PID = last_pid()
    except BaseException as e:  # noqa: BLE001 - report, then exit
        fail(describe(e) + "\n" + traceback.format_exc(limit=-3))
        return
    # A Geneva UDF object says what it returns: a flat type other than the column's is refused
    # when the column is defined or altered, not when a backfill casts its first values.
    out_type = schema.field(0).type
    declared = getattr(fn, "data_type", None)
    if not setup.get("load_only") and isinstance(declared, pa.DataType) \
            and not pa.types.is_nested(declared) and not pa.types.is_nested(out_type) \
            and declared != out_type:
        fail(f"the UDF returns {declared}, but the column holds {out_type}")
        return
    version = "%d.%d.%d" % sys.version_info[:3]
    params, required = params_of(fn)
    shared = not setup.get("load_only") and map_shared(setup)
    send(b"R", json.dumps(
        {"python": version, "params": params, "required": required, "shm": shared}).encode())
    if setup.get("load_only"):
        return
    in_schema = None  # of the last stream: bare messages ("b") are batches of it
    answers = 0  # results sent through the shared file: they take its result slots in turn
    while True:
        kind, payload = receive()
        if kind == b"m" and SHM is not None:
            # A bare message in an input slot: copied out (the host writes the slot again once
            # this batch is answered; a function may keep its input).
            slot, n = struct.unpack("<II", payload)
            if slot >= WAYS or n > SLOT:
                fail(f"shared slot {slot} with {n} bytes")
                return
            payload = bytearray(SHM[slot * SLOT:slot * SLOT + n])
            kind = b"b"
        if kind not in (b"B", b"b"):
            fail(f"unexpected frame {kind!r}")
            return
        try:
            if kind == b"B":
                # A host pipelining batches sends the next ones bare before it reads this
                # answer: if this stream cannot be read, they must fail, not be read with an
                # older schema.
                in_schema = None
                reader = pa.ipc.open_stream(pa.py_buffer(payload))
                in_schema = reader.schema
                batch = reader.read_next_batch()
            elif in_schema is None:
                raise ValueError("a batch message before any schema")
            else:
                batch = pa.ipc.read_record_batch(pa.py_buffer(payload), in_schema)
            try:
                result, nulled, errors, error = compute(fn, setup, batch, out_type, pa)
            finally:
                end_strays()
        except Exception as e:  # noqa: BLE001
            fail(describe(e))
            continue
        if error:
            fail(error[0], error[1])
            continue
        if not nulled:
            # The host knows the schema: the batch alone.
            data = pa.RecordBatch.from_arrays([result], schema=schema).serialize()
            if SHM is not None and data.size <= SLOT:
                slot = WAYS + answers % WAYS
                answers += 1
                SHM[slot * SLOT:slot * SLOT + data.size] = memoryview(data).cast("B")
                send(b"v", struct.pack("<II", slot, data.size))
            else:
                send(b"o", data)
            continue
        sink = pa.BufferOutputStream()
        counted = schema.with_metadata(
            {"lancet.nulled": str(nulled), "lancet.errors": json.dumps(errors)})
        with pa.ipc.new_stream(sink, counted) as w:
            w.write_batch(pa.RecordBatch.from_arrays([result], schema=counted))
        send(b"O", sink.getvalue())


main()
