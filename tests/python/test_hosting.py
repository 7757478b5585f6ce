"""Lancet as a service for many tenants (docs/hosting.md): the operator's API through
`lancet admin` and over HTTP; the tenants' side through lancedb and the generated REST client.
Tenant lifecycle, keys (expiry, rotation, revocation), quotas, the audit log and its chain."""
import base64
import hashlib
import hmac
import json
import os
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

import lance
import lancedb
import pyarrow as pa
import pytest
from lance_namespace_urllib3_client import ApiClient, Configuration
from lance_namespace_urllib3_client.api import TableApi
from lance_namespace_urllib3_client.exceptions import (
    ForbiddenException, ServiceException, UnauthorizedException)
from lance_namespace_urllib3_client.models import CountTableRowsRequest

from conftest import Lancet, ipc_stream

OPERATOR_KEY = "python-tests-operator-key"


@pytest.fixture()
def hosted():
    with tempfile.TemporaryDirectory() as d:
        server = Lancet(d, env={"LANCET_OPERATOR_KEY": OPERATOR_KEY, "LANCET_USAGE_FLUSH": "200ms"})
        try:
            yield server
        finally:
            server.stop()


def admin(server, *args, check=True):
    """`lancet admin ...` against `server`: its JSON answer (or the failed process)."""
    out = subprocess.run([server.binary, "admin", *args], capture_output=True, text=True,
                         env={**os.environ, "LANCET_URL": server.base,
                              "LANCET_OPERATOR_KEY": OPERATOR_KEY})
    if not check:
        return out
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def http(server, method, path, body=None, key=OPERATOR_KEY):
    """The operator's API (or a tenant's `/v1/tenant/...`) over plain HTTP: (status, JSON)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(server.base + path, data=data, method=method,
                                 headers={"x-api-key": key, "content-type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def db(server, key, database="main"):
    return lancedb.connect(f"db://{database}", api_key=key, host_override=server.base,
                           region="us-east-1")


def tables_api(server, key):
    return TableApi(ApiClient(Configuration(host=server.base, access_token=key)))


def count(server, key, table):
    return tables_api(server, key).count_table_rows(table, CountTableRowsRequest())


def eventually(check, timeout=10.0):
    deadline = time.time() + timeout
    while True:
        try:
            result = check()
            assert result is not False
            return result
        except AssertionError:
            if time.time() > deadline:
                raise
            time.sleep(0.1)


def rows(n, start=0, width=8):
    return [{"id": i, "blob": os.urandom(width).hex()} for i in range(start, start + n)]


def test_tenant_lifecycle_keys_and_audit(hosted):
    made = admin(hosted, "tenants", "create", "acme", "--settings",
                 json.dumps({"description": "first customer", "quota": {"tables": 10}}))
    assert made["state"] == "active" and made["settings"]["quota"] == {"tables": 10}
    # Made twice: 409, told so.
    status, err = http(hosted, "POST", "/v1/admin/tenants/acme/create", {})
    assert status == 409 and "exists already" in err["detail"]
    # An unknown settings field is named, not dropped.
    status, err = http(hosted, "POST", "/v1/admin/tenants/zeta/create", {"quotas": {}})
    assert status == 400 and "quotas" in err["detail"]

    admin_key = admin(hosted, "keys", "create", "acme", "--role", "admin", "--description", "ops")
    key, key_id = admin_key["key"], admin_key["id"]
    assert admin_key["created_by"] == "operator:env"
    acme = db(hosted, key)
    t = acme.create_table("orders", data=rows(10))
    t.add(rows(5, start=10))
    assert count(hosted, key, "main$orders") == 15

    # The tenant's admin makes its own keys, within its tenant; a read key cannot.
    status, reader = http(hosted, "POST", "/v1/tenant/keys/create",
                          {"role": "read", "description": "dashboards"}, key=key)
    assert status == 200 and reader["tenant"] == "acme" and reader["created_by"] == f"key:{key_id}"
    assert db(hosted, reader["key"]).open_table("orders").count_rows() == 15
    status, err = http(hosted, "POST", "/v1/tenant/keys/create", {"role": "read"}, key=reader["key"])
    assert status == 403
    status, err = http(hosted, "POST", "/v1/tenant/keys/create", {"role": "operator"}, key=key)
    assert status == 400 and "operator" in err["detail"]

    # Expiry: accepted until then, then a 401 that says it expired.
    short = admin(hosted, "keys", "create", "acme", "--role", "read", "--expires-in", "2s")
    assert count(hosted, short["key"], "main$orders") == 15
    time.sleep(2.5)
    with pytest.raises(UnauthorizedException) as err:
        count(hosted, short["key"], "main$orders")
    assert "expired" in json.loads(err.value.body)["detail"]

    # Rotation: the new key works at once, the old one for the overlap only.
    rotated = admin(hosted, "keys", "rotate", reader["id"], "--overlap", "2s")
    assert rotated["role"] == "read" and rotated["id"] != reader["id"]
    assert count(hosted, rotated["key"], "main$orders") == 15
    assert count(hosted, reader["key"], "main$orders") == 15
    time.sleep(2.5)
    with pytest.raises(UnauthorizedException):
        count(hosted, reader["key"], "main$orders")
    assert count(hosted, rotated["key"], "main$orders") == 15

    # Revocation keeps a tombstone: whose the key was stays answerable.
    status, gone = http(hosted, "POST", f"/v1/tenant/keys/{rotated['id']}/revoke", {}, key=key)
    assert status == 200 and gone["state"] == "revoked"
    with pytest.raises(UnauthorizedException) as err:
        count(hosted, rotated["key"], "main$orders")
    assert "revoked" in json.loads(err.value.body)["detail"]
    listed = {k["id"]: k for k in admin(hosted, "keys", "list", "acme")["keys"]}
    assert listed[rotated["id"]]["state"] == "revoked"
    assert listed[reader["id"]]["rotated_to"] == rotated["id"]
    assert listed[short["id"]]["state"] == "expired"
    assert listed[key_id]["last_used"] is not None

    # Suspended: every request of its keys is a 403 saying so; resumed: served again.
    assert admin(hosted, "tenants", "suspend", "acme")["state"] == "suspended"
    with pytest.raises(Exception) as err:
        db(hosted, key).open_table("orders").count_rows()
    assert "403" in str(err.value) and "suspended" in str(err.value)
    with pytest.raises(ForbiddenException):
        count(hosted, key, "main$orders")
    assert admin(hosted, "tenants", "resume", "acme")["state"] == "active"
    assert db(hosted, key).open_table("orders").count_rows() == 15

    # The audit log: the tenant's writes under its key, refused credentials, admin actions.
    records = admin(hosted, "audit", "--tenant", "acme", "--principal", f"key:{key_id}",
                    "--limit", "1000")["records"]
    actions = [r["action"] for r in records]
    assert "POST /v1/table/{id}/create" in actions and "POST /v1/table/{id}/insert" in actions
    assert all(r["tenant"] == "acme" and r["request_id"] for r in records)
    refused = admin(hosted, "audit", "--action", "authenticate", "--limit", "1000")["records"]
    details = " ".join(r["detail"] for r in refused)
    assert "expired" in details and "revoked" in details and "suspended" in details
    ops = admin(hosted, "audit", "--principal", "operator:env", "--limit", "1000")["records"]
    assert {"POST /v1/admin/tenants/{tenant}/suspend", "POST /v1/admin/keys/{key_id}/rotate"} \
        <= {r["action"] for r in ops}
    # A tenant's admin reads its own tenant's records only.
    status, own = http(hosted, "GET", "/v1/tenant/audit?limit=1000", key=key)
    assert status == 200 and own["records"] and all(r["tenant"] == "acme" for r in own["records"])
    status, _ = http(hosted, "GET", "/v1/admin/audit", key=key)
    assert status == 403
    verified = admin(hosted, "audit", "verify")
    assert verified["ok"] and verified["records"] > 20

    # Deleted: every byte it owned is gone, its keys are tombstones.
    acme.create_table("second", data=rows(3))
    gone = admin(hosted, "tenants", "delete", "acme", "--yes")
    assert gone["deleted"] and gone["objects_removed"] > 10
    left = []
    hexed = b"acme".hex()
    for top, _, files in os.walk(hosted.data):
        for f in files:
            rel = os.path.relpath(os.path.join(top, f), hosted.data)
            if "acme" in rel or hexed in rel:
                left.append(rel)
    assert left == [], left
    with pytest.raises(UnauthorizedException):
        count(hosted, key, "main$orders")
    refused = admin(hosted, "tenants", "describe", "acme", check=False)
    assert refused.returncode == 1 and "404" in refused.stderr


def test_operator_and_tenant_credentials_reach_only_their_own(hosted):
    status, doc = http(hosted, "GET", "/v1/openapi.json", key=hosted.key)
    assert status == 200
    admin_paths = [p for p in doc["paths"] if p.startswith("/v1/admin/")]
    assert len(admin_paths) >= 10
    for path in admin_paths:
        for method in doc["paths"][path]:
            concrete = path.replace("{tenant}", "default").replace("{key_id}", "key_x")
            status, err = http(hosted, method.upper(), concrete, {}, key=hosted.key)
            assert status == 403 and err["title"] == "Not authorized to make this request", path
            status, _ = http(hosted, method.upper(), concrete, {}, key="lk_forged")
            assert status == 401, path
    # A suspended tenant's key is refused on every route, saying why.
    admin(hosted, "tenants", "create", "paused-co")
    key = admin(hosted, "keys", "create", "paused-co", "--role", "admin")["key"]
    admin(hosted, "tenants", "suspend", "paused-co")
    walked = 0
    for path, methods in doc["paths"].items():
        for method in methods:
            concrete = (path.replace("{id}", "t").replace("{index_name}", "i")
                        .replace("{tenant}", "paused-co").replace("{key_id}", "k")
                        .replace("{name}", "n").replace("{column}", "c").replace("{row_id}", "0"))
            status, err = http(hosted, method.upper(), concrete, {}, key=key)
            assert status == 403, (method, path, status, err)
            if not path.startswith("/v1/admin/"):
                assert "suspended" in err["detail"], (path, err)
            walked += 1
    assert walked > 100
    # The operator's key is no tenant's.
    with pytest.raises(ForbiddenException):
        count(hosted, OPERATOR_KEY, "t")
    status, who = http(hosted, "GET", "/v1/admin/whoami")
    assert status == 200 and who["operator"] is True


def test_quotas_are_enforced_with_clear_errors(hosted):
    admin(hosted, "tenants", "create", "small", "--settings", json.dumps(
        {"quota": {"storage_bytes": 400_000, "tables": 2, "jobs": 1}}))
    admin(hosted, "tenants", "create", "big")
    small = admin(hosted, "keys", "create", "small", "--role", "admin")["key"]
    big = admin(hosted, "keys", "create", "big", "--role", "admin")["key"]
    s, b = db(hosted, small), db(hosted, big)
    a = s.create_table("a", data=rows(1))
    s.create_table("b", data=rows(1))
    with pytest.raises(Exception) as err:
        s.create_table("c", data=rows(1))
    assert "403" in str(err.value) and "its quota is 2" in str(err.value)

    # Eight writers race to the storage quota while another tenant writes on.
    width = 2_000  # 4 KB of random hex a row, ~80 KB a write
    written, refusals, errors = [], [], []
    lock = threading.Lock()

    def writer(i):
        t = db(hosted, small).open_table("a")
        for j in range(40):
            try:
                t.add(rows(20, start=100_000 * i + 20 * j, width=width))
                with lock:
                    written.append(20)
            except Exception as e:  # noqa: BLE001 - sorted below
                with lock:
                    (refusals if "storage quota exceeded" in str(e) else errors).append(str(e))
                return

    other = b.create_table("x", data=rows(1))
    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for j in range(10):
        other.add(rows(20, width=width))
    for th in threads:
        th.join()
    assert errors == [], errors[:2]
    assert len(refusals) == 8, refusals[:2]
    assert "403" in refusals[0]
    assert other.count_rows() == 201
    assert a.count_rows() == 1 + sum(written)
    used = admin(hosted, "tenants", "describe", "small")["storage_bytes"]
    print(f"storage quota 400000: {len(written)} writes accepted, {len(refusals)} refused, "
          f"{used} bytes stored; the other tenant's 10 writes all accepted")
    # Within one write of the limit (a write is ~80 KB of hex, stored ~40-85 KB).
    assert 400_000 - 100_000 < used <= 400_000 + 100_000, used
    # A refused write changed nothing; dropping data gives the room back.
    before = a.count_rows()
    with pytest.raises(Exception):
        a.add(rows(20, width=width))
    assert a.count_rows() == before
    s.drop_table("a")
    eventually(lambda: s.create_table("a", data=rows(5)) is not None)

    # Requests per second: 503 "Slow down" with Retry-After, then served again.
    admin(hosted, "tenants", "update", "small", "--settings",
          json.dumps({"quota": {"requests_per_second": 2, "burst": 2, "tables": 5}}))
    api = tables_api(hosted, small)
    statuses = []
    for _ in range(6):
        try:
            api.count_table_rows("main$a", CountTableRowsRequest())
            statuses.append(200)
        except ServiceException as e:
            statuses.append(e.status)
            assert json.loads(e.body)["title"] == "Slow down"
            assert int(e.headers["retry-after"]) >= 1
    assert statuses[:2] == [200, 200] and 503 in statuses, statuses
    assert count(hosted, big, "main$x") == 201  # the other tenant is not slowed
    time.sleep(1.1)
    assert api.count_table_rows("main$a", CountTableRowsRequest()) == 5


def test_settings_are_live_on_every_replica():
    with tempfile.TemporaryDirectory() as d:
        one = Lancet(d, env={"LANCET_OPERATOR_KEY": OPERATOR_KEY, "LANCET_NODE_ID": "one"})
        two = Lancet(d, env={"LANCET_OPERATOR_KEY": OPERATOR_KEY, "LANCET_NODE_ID": "two"})
        try:
            admin(one, "tenants", "create", "shared")
            key = admin(one, "keys", "create", "shared", "--role", "write")["key"]
            eventually(lambda: count_or(two, key) == "missing")
            db(two, key).create_table("t", data=rows(3))
            admin(one, "tenants", "suspend", "shared")
            eventually(lambda: count_or(two, key) == 403, timeout=5)
            admin(two, "tenants", "resume", "shared")
            eventually(lambda: count_or(one, key) == 3, timeout=5)
            admin(one, "tenants", "update", "shared", "--settings",
                  json.dumps({"quota": {"tables": 1}}))

            def refused_on_two():
                try:
                    db(two, key).create_table("u", data=rows(1))
                except Exception as e:  # noqa: BLE001
                    assert "its quota is 1" in str(e)
                    return True
                raise AssertionError("made a table past the quota")
            eventually(refused_on_two, timeout=5)
            # Both replicas' records are in the one log, each chain intact.
            report = admin(one, "audit", "verify")
            assert report["ok"] and report["writers"] == 2
        finally:
            one.stop()
            two.stop()
        # Both stopped cleanly: their chains are closed (only the new server's is open).
        three = Lancet(d, env={"LANCET_OPERATOR_KEY": OPERATOR_KEY, "LANCET_NODE_ID": "three"})
        try:
            report = admin(three, "audit", "verify")
            assert report["ok"] and report["writers"] >= 2
            assert all(w.startswith("three/") for w in report["open"]), report["open"]
        finally:
            three.stop()


def count_or(server, key):
    try:
        return count(server, key, "main$t")
    except ForbiddenException:
        return 403
    except UnauthorizedException:
        return 401
    except Exception:  # noqa: BLE001 - the table is not there yet
        return "missing"


def b64(obj):
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


def jwt(secret, claims):
    head = b64({"alg": "HS256", "typ": "JWT"}) + "." + b64(claims)
    sig = hmac.new(secret.encode(), head.encode(), hashlib.sha256).digest()
    return head + "." + base64.urlsafe_b64encode(sig).rstrip(b"=").decode()


def test_tokens_forged_expired_or_of_a_suspended_tenant_are_refused():
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "_auth"))
        with open(os.path.join(d, "_auth", "auth.toml"), "w") as f:
            f.write('[jwt]\nissuer = "https://idp.test"\naudience = "lancet"\n'
                    'algorithm = "HS256"\nsecret = "s3cret-s3cret-s3cret-s3cret-s3cret"\n')
        server = Lancet(d, env={"LANCET_OPERATOR_KEY": OPERATOR_KEY})
        try:
            admin(server, "tenants", "create", "jwt-co")
            now = int(time.time())
            claims = {"iss": "https://idp.test", "aud": "lancet", "sub": "alice",
                      "tenant": "jwt-co", "role": "write", "exp": now + 60}
            good = jwt("s3cret-s3cret-s3cret-s3cret-s3cret", claims)
            # A token travels as a bearer token (the generated client's access_token).
            tables_api(server, good).create_table("main$t", ipc_stream(pa.Table.from_pylist(rows(2))))
            assert count(server, good, "main$t") == 2
            for bad in [jwt("not-the-secret-at-all-not-the-secret", claims),
                        jwt("s3cret-s3cret-s3cret-s3cret-s3cret", {**claims, "exp": now - 120}),
                        jwt("s3cret-s3cret-s3cret-s3cret-s3cret", {**claims, "role": "operator"})]:
                with pytest.raises(UnauthorizedException):
                    count(server, bad, "main$t")
            admin(server, "tenants", "suspend", "jwt-co")
            with pytest.raises(ForbiddenException) as err:
                count(server, good, "main$t")
            assert "suspended" in json.loads(err.value.body)["detail"]
            records = admin(server, "audit", "--action", "POST /v1/table/{id}/create")["records"]
            assert records[0]["principal"] == "token:alice"
        finally:
            server.stop()


def test_a_changed_or_removed_audit_record_is_detected(hosted):
    admin(hosted, "tenants", "create", "t1")
    key = admin(hosted, "keys", "create", "t1", "--role", "write")["key"]
    t = db(hosted, key).create_table("t", data=rows(2))
    for i in range(5):
        t.add(rows(1, start=10 + i))
    assert admin(hosted, "audit", "verify")["ok"]
    log = lance.dataset(os.path.join(hosted.data, "_audit", "log.lance"))
    victim = log.to_table(filter="action = 'POST /v1/table/{id}/insert'").to_pylist()[2]
    log.update({"principal": "'key:someone-else'"},
               where=f"writer = '{victim['writer']}' AND seq = {victim['seq']}")
    broken = admin(hosted, "audit", "verify", check=False)
    assert broken.returncode == 1
    report = json.loads(broken.stdout)
    assert any(f"record {victim['seq']} was altered" in p for p in report["problems"]), report
    log = lance.dataset(os.path.join(hosted.data, "_audit", "log.lance"))
    log.update({"principal": f"'{victim['principal']}'"},
               where=f"writer = '{victim['writer']}' AND seq = {victim['seq']}")
    assert admin(hosted, "audit", "verify")["ok"]
    log.delete(f"writer = '{victim['writer']}' AND seq = {victim['seq']}")
    report = json.loads(admin(hosted, "audit", "verify", check=False).stdout)
    assert any("missing" in p for p in report["problems"]), report


SLOW = """def slow(id):
    x = 0
    for i in range(200000):
        x += i
    return id * 2
"""


def python_column(source, name, inputs):
    return {"input_columns": inputs, "udf": base64.b64encode(source.encode()).decode(),
            "udf_name": name, "udf_version": "1", "image": "python:3.11-slim",
            "outputs": [{"column": name, "data_type": {"type": "int64"}, "nullable": True}]}


def job_state(server, key, job_id):
    status, d = http(server, "POST", "/v1/jobs/describe", {"job_id": job_id}, key=key)
    assert status == 200, d
    return d["job_state"]


def test_suspension_pauses_jobs_and_the_jobs_quota_holds(hosted):
    admin(hosted, "tenants", "create", "busy", "--settings", json.dumps({"quota": {"jobs": 1}}))
    key = admin(hosted, "keys", "create", "busy", "--role", "admin")["key"]
    t = db(hosted, key).create_table("t", data=[{"id": i} for i in range(20)])
    for start in range(20, 120, 20):
        t.add([{"id": i} for i in range(start, start + 20)])
    status, _ = http(hosted, "POST", "/v1/table/main$t/add_columns", {"new_columns": [
        {"name": "slow", "virtual_column": python_column(SLOW, "slow", ["id"])}]}, key=key)
    assert status == 200
    status, started = http(hosted, "POST", "/v1/table/main$t/backfill_column", {
        "column": "slow", "checkpoint_size": 2, "max_checkpoint_size": 2, "concurrency": 1}, key=key)
    assert status in (200, 202), started
    job_id = started["job_id"]
    # One job open: a second is refused, told why.
    status, err = http(hosted, "POST", "/v1/table/main$t/backfill_column", {"column": "slow"}, key=key)
    assert status == 403 and "its quota is 1" in err["detail"]
    suspended = admin(hosted, "tenants", "suspend", "busy")
    assert suspended["settings"]["suspended_jobs"] == [job_id]
    # The job stops where it stands and keeps its work (read on the root: the tenant's keys
    # are refused while it is suspended).
    def paused():
        described = admin(hosted, "tenants", "describe", "busy")
        assert described["jobs_open"] == 1
        record = json.load(open(os.path.join(hosted.data, "_jobs", job_id, "job.json")))
        assert record["state"] in ("PAUSED", "Paused"), record["state"]
        return True
    eventually(paused, timeout=30)
    admin(hosted, "tenants", "resume", "busy")
    eventually(lambda: job_state(hosted, key, job_id) == "DONE", timeout=120)
    got = db(hosted, key).open_table("t").search().select(["id", "slow"]).limit(200).to_arrow()
    assert sorted(zip(got["id"].to_pylist(), got["slow"].to_pylist())) == [(i, 2 * i) for i in range(120)]


def test_usage_is_counted_once_and_exported(hosted):
    admin(hosted, "tenants", "create", "metered")
    key = admin(hosted, "keys", "create", "metered", "--role", "admin")["key"]
    t = db(hosted, key).create_table("t", data=[{"id": i} for i in range(30)])
    t.add([{"id": i} for i in range(30, 50)])
    assert len(t.search().limit(100).to_list()) == 50
    status, _ = http(hosted, "POST", "/v1/table/main$t/add_columns", {"new_columns": [
        {"name": "dbl", "virtual_column": python_column("def dbl(id):\n    return id * 2\n", "dbl", ["id"])}]}, key=key)
    assert status == 200
    job_id = http(hosted, "POST", "/v1/table/main$t/backfill_column", {"column": "dbl"}, key=key)[1]["job_id"]
    eventually(lambda: job_state(hosted, key, job_id) == "DONE", timeout=60)

    def counted():
        rows = admin(hosted, "usage", "--tenant", "metered")["usage"]
        assert len(rows) == 1, rows
        u = rows[0]
        assert u["rows_written"] == 50 and u["job_rows"] == 50, u
        assert u["rows_read"] >= 50 and u["requests"] >= 6 and u["bytes_in"] > 0
        assert u["bytes_out"] > 0 and u["udf_ms"] >= 0
        return u
    u = eventually(counted, timeout=10)
    listed = {t["name"]: t for t in admin(hosted, "tenants", "list")["tenants"]}
    assert listed["metered"]["usage_24h"]["rows_written"] == 50
    assert admin(hosted, "tenants", "describe", "metered")["storage_bytes"] > 0
    # The tenant sees its own, as JSON, CSV or Arrow, and nobody else's.
    status, own = http(hosted, "GET", "/v1/tenant/usage", key=key)
    assert status == 200 and {r["tenant"] for r in own["usage"]} == {"metered"}
    csv = subprocess.run([hosted.binary, "admin", "usage", "--format", "csv"], capture_output=True,
                         text=True, env={**os.environ, "LANCET_URL": hosted.base,
                                         "LANCET_OPERATOR_KEY": OPERATOR_KEY}, check=True).stdout
    header, *lines = csv.strip().splitlines()
    assert header.startswith("tenant,hour,requests,bytes_in,bytes_out,rows_read,rows_written")
    assert any(line.startswith("metered,") for line in lines)
    req = urllib.request.Request(hosted.base + "/v1/admin/usage?format=arrow&tenant=metered",
                                 headers={"x-api-key": OPERATOR_KEY})
    with urllib.request.urlopen(req) as r:
        table = pa.ipc.open_stream(r.read()).read_all()
    assert table["rows_written"].to_pylist() == [50] and table["tenant"].to_pylist() == ["metered"]
    # Stored under the root, once: the rows of every flush add up to the figures.
    stored = lance.dataset(os.path.join(hosted.data, "_usage", "usage.lance")).to_table(
        filter="tenant = 'metered'")
    assert sum(stored["rows_written"].to_pylist()) == 50


def test_the_audit_log_and_usage_can_be_turned_off():
    with tempfile.TemporaryDirectory() as d:
        server = Lancet(d, args=["--audit", "off", "--usage", "off"],
                        env={"LANCET_OPERATOR_KEY": OPERATOR_KEY})
        try:
            admin(server, "tenants", "create", "quiet")
            status, err = http(server, "GET", "/v1/admin/audit")
            assert status == 400 and "--audit off" in err["detail"]
            assert http(server, "GET", "/v1/admin/usage")[1]["usage"] == []
            assert not os.path.exists(os.path.join(d, "_audit"))
        finally:
            server.stop()
