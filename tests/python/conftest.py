"""A live `lancet serve` on a free loopback port for each test module."""
import json
import os
import subprocess
import tempfile
import urllib.request

import pyarrow as pa
import pytest


class Lancet:
    def __init__(self, data_dir):
        self.data = data_dir
        binary = os.environ.get("LANCET_BIN", "lancet")
        self.proc = subprocess.Popen(
            [binary, "serve", "--addr", "127.0.0.1:0", "--data", data_dir],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        line = self.proc.stdout.readline().strip()
        assert line.startswith("listening on "), line
        self.base = line[len("listening on "):]

    def post(self, path, body=None, data=None, content_type="application/json"):
        payload = data if data is not None else json.dumps(body or {}).encode()
        req = urllib.request.Request(self.base + path, data=payload, method="POST", headers={"content-type": content_type})
        with urllib.request.urlopen(req) as r:
            return json.loads(r.read())

    def create_table(self, name, table: pa.Table):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
        return self.post(f"/v1/table/{name}/create", data=sink.getvalue().to_pybytes(), content_type="application/vnd.apache.arrow.stream")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture()
def lancet():
    with tempfile.TemporaryDirectory() as d:
        server = Lancet(d)
        try:
            yield server
        finally:
            server.stop()
