"""A live `lancet serve` on a free loopback port for each test module."""
import json
import os
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pyarrow as pa
import pytest


ADMIN_KEY = "python-tests-admin-key"


def ipc_stream(table: pa.Table) -> bytes:
    """`table` as an Arrow IPC stream (what Arrow-body routes read)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


class Lancet:
    def __init__(self, data_dir, args=(), env=None):
        self.data = data_dir
        # Tables of tenant `default` (what the admin key sees) live here.
        self.tenant_root = os.path.join(data_dir, "tenants", "default")
        self.key = ADMIN_KEY
        self.binary = os.environ.get("LANCET_BIN", "lancet")
        self.proc = subprocess.Popen(
            [self.binary, "serve", "--addr", "127.0.0.1:0", "--data", data_dir, *args],
            stdout=subprocess.PIPE,
            stderr=open(os.environ["LANCET_STDERR"], "a") if os.environ.get("LANCET_STDERR") else subprocess.DEVNULL,
            text=True,
            # Jobs at normal CPU priority: the suite runs servers side by side, and at nice 19
            # one test's jobs starve while another test's server is busy (see
            # tests/api/common.rs). Priority itself is tested in host/src/background.rs.
            env={**os.environ, "LANCET_BOOTSTRAP_KEY": ADMIN_KEY,
                 "LANCET_BACKGROUND_PRIORITY": "normal", **(env or {})},
        )
        line = self.proc.stdout.readline().strip()
        while line and not line.startswith("listening on "):
            line = self.proc.stdout.readline().strip()
        assert line.startswith("listening on "), line
        self.base = line[len("listening on "):]
        # With --flight-addr, the next line names the Flight SQL address.
        self.flight = None
        if "--flight-addr" in args:
            line = self.proc.stdout.readline().strip()
            assert line.startswith("flight sql listening on "), line
            self.flight = line[len("flight sql listening on "):]

    def lancedb(self):
        """The lancedb 0.40 remote client on this server (database `test`)."""
        import lancedb
        return lancedb.connect("db://test", api_key=self.key, host_override=self.base,
                               region="us-east-1")

    def new_key(self, tenant, role):
        """A key made by `lancet keys create`, once the running server accepts it."""
        out = subprocess.run(
            [self.binary, "keys", "--data", self.data, "create", "--tenant", tenant, "--role", role],
            check=True, capture_output=True, text=True,
        )
        key = out.stdout.strip()
        for _ in range(100):
            try:
                self.post("/v1/namespace/$/exists", key=key)
                return key
            except urllib.error.HTTPError as e:
                if e.code != 401:
                    return key
            time.sleep(0.1)
        raise AssertionError("server never accepted the new key")

    def post(self, path, body=None, data=None, content_type="application/json", key=None):
        payload = data if data is not None else json.dumps(body or {}).encode()
        headers = {"content-type": content_type, "authorization": f"Bearer {key or self.key}"}
        req = urllib.request.Request(self.base + path, data=payload, method="POST", headers=headers)
        with urllib.request.urlopen(req) as r:
            return json.loads(r.read())

    def create_table(self, name, table: pa.Table):
        return self._arrow(f"/v1/table/{name}/create", table)

    def insert(self, name, table: pa.Table):
        return self._arrow(f"/v1/table/{name}/insert", table)

    def _arrow(self, path, table: pa.Table):
        return self.post(path, data=ipc_stream(table), content_type="application/vnd.apache.arrow.stream")

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
