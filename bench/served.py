"""A `lancet serve` child on a free loopback port with an admin key, for the bench scripts."""
import os
import subprocess

KEY = "bench-key"


def start(binary, root, *args):
    """The process and the `http://host:port` it listens on."""
    proc = subprocess.Popen(
        [binary, "serve", "--addr", "127.0.0.1:0", "--data", root, "--upkeep", "false", *args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "LANCET_BOOTSTRAP_KEY": KEY})
    line = proc.stdout.readline().strip()
    while line and not line.startswith("listening on "):
        line = proc.stdout.readline().strip()
    if not line:
        raise RuntimeError(f"{binary} did not start")
    return proc, line[len("listening on "):]
