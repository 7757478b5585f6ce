"""Lancet's Ray driver: runs one backfill job's open tasks as Ray tasks.

Submitted by the Lancet node that owns the job (crate `lancet-ray`), with its spec as the one
argument (base64 JSON). A first Ray task lists the job's open tasks (`lancet jobs tasks`);
then each runs as a Ray task asking for the cluster's CPUs, GPUs and memory, and computes its
rows with `lancet jobs run-task`, which writes the task's checkpoints under the job's root.
The owning Lancet node stages and commits from those checkpoints: nothing here writes to the
table. Ray runs a task again elsewhere when its worker or node dies (`max_retries`); a task
that fails, or exceeds its time or memory limit, fails the job: the reason is printed after
`LANCET-FAILURE: ` and the driver exits 1.
"""
import base64
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import ray

FAILURE = "LANCET-FAILURE: "
SPEC = json.loads(base64.b64decode(sys.argv[1]))


def command(*args):
    return [SPEC["lancet"], "jobs", *args, "--data", SPEC["data"], *SPEC["args"]]


def here():
    ctx = ray.get_runtime_context()
    return f"ray node {ctx.get_node_id()[:12]} ({ray.util.get_node_ip_address()})"


def die_with_parent():
    # The task's process dies with the Ray worker that started it (a killed node leaves no
    # orphan computing beside the retry).
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def processes():
    """Each process's resident bytes, and each process's children, from /proc."""
    rss, children = {}, {}
    page = os.sysconf("SC_PAGE_SIZE")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        rss[int(pid)] = int(fields[21]) * page
        children.setdefault(int(fields[1]), []).append(int(pid))
    return rss, children


def tree(root, children):
    """`root` and every process under it (the native tier's sandboxed workers run in sessions
    of their own: a process group would miss them)."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def tree_rss(root):
    rss, children = processes()
    return sum(rss.get(pid, 0) for pid in tree(root, children))


def kill_tree(root):
    for pid in tree(root, processes()[1]):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run(argv, what):
    """Run `argv`; its stdout, or an exception naming `what` and the reason."""
    limit = SPEC.get("memory_bytes")
    timeout = SPEC.get("timeout_seconds")
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, preexec_fn=die_with_parent,
                                start_new_session=True)
        started = time.monotonic()
        exceeded = None
        while proc.poll() is None:
            time.sleep(0.1)
            if timeout is not None and time.monotonic() - started > timeout:
                exceeded = f"exceeded its time limit of {timeout:g} s"
            elif limit is not None and (rss := tree_rss(proc.pid)) > limit:
                exceeded = (f"exceeded its memory limit of {limit >> 20} MiB "
                            f"(its processes held {rss >> 20} MiB)")
            if exceeded:
                kill_tree(proc.pid)
                proc.wait()
                raise RuntimeError(f"{what} {exceeded} on {here()}")
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            # The task's stderr carries what a guest wrote: read and keep a bounded tail.
            err.seek(max(0, os.fstat(err.fileno()).st_size - 8192))
            tail = [line[:400] for line in err.read().decode(errors="replace").strip().splitlines()[-5:]]
            raise RuntimeError(f"{what} failed on {here()} (exit {proc.returncode}): "
                               + " | ".join(tail))
        return out.read().decode()


def resources():
    r = {"num_cpus": SPEC["num_cpus"], "num_gpus": SPEC["num_gpus"]}
    if SPEC.get("memory_bytes"):
        r["memory"] = SPEC["memory_bytes"]
    return r


@ray.remote(max_retries=3)
def open_tasks():
    lines = run(command("tasks", SPEC["job_id"]), "listing the tasks")
    return [json.loads(line) for line in lines.splitlines() if line.strip()]


@ray.remote
def run_task(t):
    what = f"task fragment {t['fragment']} rows {t['start']}..{t['end']}"
    argv = command("run-task", SPEC["job_id"], "--fragment", str(t["fragment"]),
                   "--start", str(t["start"]), "--end", str(t["end"]), "--worker", here())
    run(argv, what)
    return f"{what} computed on {here()}"


def main():
    ray.init()
    tasks = ray.get(open_tasks.options(num_cpus=SPEC["num_cpus"]).remote())
    print(f"lancet job {SPEC['job_id']}: {len(tasks)} open tasks", flush=True)
    pending = {}
    for t in tasks:
        name = f"lancet-{SPEC['job_id']}-{t['fragment']}-{t['end']}"
        ref = run_task.options(name=name, max_retries=SPEC["max_retries"],
                               retry_exceptions=False, **resources()).remote(t)
        pending[ref] = t
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        for ref in done:
            pending.pop(ref)
            try:
                print(ray.get(ref), flush=True)
            except Exception as e:  # noqa: BLE001 - every failure ends the job, with its reason
                cause = getattr(e, "cause", None) or e
                reason = str(cause).strip().splitlines()
                print(FAILURE + (reason[-1] if reason else type(cause).__name__), flush=True)
                for other in pending:
                    ray.cancel(other, force=True)
                sys.exit(1)
    print(f"lancet job {SPEC['job_id']}: every task computed", flush=True)


main()
