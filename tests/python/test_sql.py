"""SQL over Arrow Flight SQL with real clients: ADBC's Flight SQL driver (statements, joins,
aggregates, window functions, parameters, catalog calls, time travel, cancellation), the
lancedb client's SQL (execute_query, describe_query, cancel) and pyarrow's plain Flight client
(a raw DoGet of a statement's ticket); one tenant never sees another's tables."""
import tempfile
import threading
import time

import adbc_driver_flightsql as flightsql
import adbc_driver_flightsql.dbapi as adbc
import lancedb
import pyarrow as pa
import pyarrow.flight as flight
import pytest

from conftest import Lancet

CUSTOMERS = {1: "ada", 2: "bob", 3: "cy"}
ORDERS = [(i, 1 + i % 3, float((i * 37) % 101)) for i in range(60)]


@pytest.fixture(scope="module")
def server():
    with tempfile.TemporaryDirectory() as d:
        s = Lancet(d, args=["--flight-addr", "127.0.0.1:0"], env={"LANCET_USAGE_FLUSH": "200ms"})
        try:
            s.post("/v1/namespace/shop/create")
            s.create_table("shop$customers", pa.table({
                "id": pa.array(list(CUSTOMERS), pa.int64()), "name": list(CUSTOMERS.values())}))
            s.create_table("shop$orders", pa.table({
                "id": pa.array([o[0] for o in ORDERS], pa.int64()),
                "customer": pa.array([o[1] for o in ORDERS], pa.int64()),
                "amount": [o[2] for o in ORDERS]}))
            yield s
        finally:
            s.stop()


def connect(server, key=None):
    return adbc.connect(server.flight, db_kwargs={
        flightsql.DatabaseOptions.AUTHORIZATION_HEADER.value: f"Bearer {key or server.key}"},
        autocommit=True)


def rows(cur, sql, parameters=None):
    cur.execute(sql, parameters=parameters)
    return cur.fetchall()


def test_adbc_statements_joins_aggregates_windows_and_parameters(server):
    with connect(server) as conn, conn.cursor() as cur:
        totals = {}
        for _, customer, amount in ORDERS:
            totals[CUSTOMERS[customer]] = totals.get(CUSTOMERS[customer], 0.0) + amount
        got = rows(cur, "SELECT c.name, sum(o.amount) AS total, count(*) AS n FROM shop.orders o "
                        "JOIN shop.customers c ON o.customer = c.id GROUP BY c.name ORDER BY c.name")
        assert [(n, round(t, 6), k) for n, t, k in got] == [
            (n, round(totals[n], 6), 20) for n in sorted(totals)]
        # The biggest order of each customer, by a window function.
        got = rows(cur, "SELECT customer, id FROM (SELECT customer, id, row_number() OVER "
                        "(PARTITION BY customer ORDER BY amount DESC, id) AS r FROM shop.orders) "
                        "WHERE r = 1 ORDER BY customer")
        want = []
        for c in sorted(CUSTOMERS):
            mine = sorted((o for o in ORDERS if o[1] == c), key=lambda o: (-o[2], o[0]))
            want.append((c, mine[0][0]))
        assert got == want
        # Parameters, bound again for a second run of the same statement.
        for floor in (50.0, 90.0):
            got = rows(cur, "SELECT count(*) FROM shop.orders WHERE amount > $1", parameters=(floor,))
            assert got == [(sum(1 for o in ORDERS if o[2] > floor),)]
        got = rows(cur, "SELECT name FROM shop.customers WHERE id = $1 OR id = $2 ORDER BY id",
                   parameters=(1, 3))
        assert got == [("ada",), ("cy",)]
        # qmark placeholders, as ADBC, JDBC and ODBC tools bind them: numbered in written order.
        for floor in (50.0, 90.0):
            got = rows(cur, "SELECT count(*) FROM shop.orders WHERE amount > ?", parameters=(floor,))
            assert got == [(sum(1 for o in ORDERS if o[2] > floor),)]
        got = rows(cur, "SELECT name FROM shop.customers WHERE id = ? OR id = ? ORDER BY id",
                   parameters=(3, 2))
        assert got == [("bob",), ("cy",)]
        with pytest.raises(Exception, match="either"):
            rows(cur, "SELECT name FROM shop.customers WHERE id = ? OR id = $1", parameters=(1,))
        # Results are Arrow.
        cur.execute("SELECT id, amount FROM shop.orders ORDER BY id LIMIT 5")
        table = cur.fetch_arrow_table()
        assert table.schema.field("amount").type == pa.float64()
        assert table["id"].to_pylist() == [0, 1, 2, 3, 4]


def test_vector_distance_functions_in_where_and_order_by(server):
    vectors = [[float(i), float(i % 7), 1.0] for i in range(40)]
    server.create_table("shop$points", pa.table({
        "id": pa.array(range(40), pa.int64()),
        "vec": pa.FixedSizeListArray.from_arrays(
            pa.array([x for v in vectors for x in v], pa.float32()), 3)}))
    q = [10.0, 3.0, 1.0]
    dist = {i: sum((a - b) ** 2 for a, b in zip(v, q)) ** 0.5 for i, v in enumerate(vectors)}
    with connect(server) as conn, conn.cursor() as cur:
        got = rows(cur, "SELECT id FROM shop.points ORDER BY array_distance(vec, [10.0, 3.0, 1.0]) "
                        "LIMIT 3")
        assert [r[0] for r in got] == sorted(dist, key=lambda i: (dist[i], i))[:3]
        got = rows(cur, "SELECT id FROM shop.points WHERE array_distance(vec, [10.0, 3.0, 1.0]) < 4 "
                        "ORDER BY id")
        assert [r[0] for r in got] == sorted(i for i in dist if dist[i] < 4)


def test_saved_views_are_tables(server):
    server.post("/v1/view/shop$big_orders/create",
                {"query": "SELECT id, customer, amount FROM shop.orders WHERE amount > 90"})
    with connect(server) as conn, conn.cursor() as cur:
        got = rows(cur, "SELECT c.name, count(*) FROM shop.big_orders b JOIN shop.customers c "
                        "ON b.customer = c.id GROUP BY c.name ORDER BY c.name")
        want = {}
        for _, customer, amount in ORDERS:
            if amount > 90:
                want[CUSTOMERS[customer]] = want.get(CUSTOMERS[customer], 0) + 1
        assert got == sorted(want.items())


def test_adbc_catalog_calls(server):
    with connect(server) as conn:
        objects = conn.adbc_get_objects(depth="tables").read_all().to_pylist()
        assert [c["catalog_name"] for c in objects] == ["lancet"]
        schemas = {s["db_schema_name"]: sorted(t["table_name"] for t in s["db_schema_tables"] or [])
                   for s in objects[0]["catalog_db_schemas"]}
        assert {"customers", "orders"} <= set(schemas["shop"])
        schema = conn.adbc_get_table_schema("orders", db_schema_filter="shop")
        assert schema.names == ["id", "customer", "amount"]
        info = conn.adbc_get_info()
        assert info["vendor_name"] == "Lancet"
        assert conn.adbc_get_table_types() == ["TABLE"]


def test_time_travel_by_version_tag_and_branch(server):
    server.create_table("shop$events", pa.table({"id": pa.array([1, 2], pa.int64())}))
    server.post("/v1/table/shop$events/tags/create", {"tag": "two", "version": 1})
    server.post("/v1/table/shop$events/branches/create", {"name": "dev", "from_version": 1})
    server._arrow("/v1/table/shop$events/insert?branch=dev", pa.table({"id": pa.array([100], pa.int64())}))
    server.insert("shop$events", pa.table({"id": pa.array([3, 4, 5], pa.int64())}))
    with connect(server) as conn, conn.cursor() as cur:
        assert rows(cur, "SELECT count(*) FROM shop.events") == [(5,)]
        assert rows(cur, 'SELECT count(*) FROM shop."events@1"') == [(2,)]
        assert rows(cur, 'SELECT count(*) FROM shop."events@v2"') == [(5,)]
        assert rows(cur, 'SELECT count(*) FROM shop."events@tag:two"') == [(2,)]
        got = rows(cur, 'SELECT id FROM shop."events@branch:dev" ORDER BY id')
        assert got == [(1,), (2,), (100,)]
        # Two versions in one statement: what version 2 added.
        got = rows(cur, 'SELECT id FROM shop.events EXCEPT SELECT id FROM shop."events@1" ORDER BY id')
        assert got == [(3,), (4,), (5,)]
        with pytest.raises(Exception, match="tag"):
            rows(cur, 'SELECT count(*) FROM shop."events@tag:nope"')
        with pytest.raises(Exception, match="version"):
            rows(cur, 'SELECT count(*) FROM shop."events@99"')


def test_writes_are_refused_and_errors_are_clear(server):
    with connect(server) as conn, conn.cursor() as cur:
        for statement in ("DELETE FROM shop.orders", "DROP TABLE shop.orders",
                          "CREATE TABLE t AS SELECT 1", "INSERT INTO shop.orders VALUES (1, 1, 1.0)"):
            with pytest.raises(Exception, match="read-only"):
                cur.execute(statement)
        with pytest.raises(Exception, match="nope"):
            cur.execute("SELECT * FROM shop.nope")
        with pytest.raises(Exception, match="no_such_column"):
            cur.execute("SELECT no_such_column FROM shop.orders")
        # The server serves on.
        assert rows(cur, "SELECT count(*) FROM shop.orders") == [(len(ORDERS),)]
    with pytest.raises(Exception, match="(?i)unauth|invalid API key"):
        with connect(server, key="wrong-key") as conn, conn.cursor() as cur:
            cur.execute("SELECT 1")


def test_adbc_cancel_stops_a_running_statement(server):
    with connect(server) as conn, conn.cursor() as cur:
        # A cross join of 60^6 rows, aggregated: far more than a second of work.
        sql = ("SELECT count(*), sum(a.amount * f.amount) FROM shop.orders a, shop.orders b, "
               "shop.orders c, shop.orders d, shop.orders e, shop.orders f")
        errors = []

        def run():
            try:
                cur.execute(sql)
                cur.fetchall()
            except Exception as e:  # noqa: BLE001 - what the cancel raises is the point
                errors.append(e)

        t = threading.Thread(target=run)
        t.start()
        time.sleep(1.0)
        cur.adbc_cancel()
        t.join(60)
        assert not t.is_alive()
        assert errors and "cancel" in str(errors[0]).lower(), errors
    with connect(server) as conn, conn.cursor() as cur:
        assert rows(cur, "SELECT count(*) FROM shop.customers") == [(3,)]


def test_lancedb_sql_execute_describe_and_cancel(server):
    db = lancedb.connect("db://shop", api_key=server.key, host_override=server.base,
                         sql_host_override=f"grpc://{server.flight.split('//')[1]}",
                         region="us-east-1")
    # The client's database is a namespace: its tables are named without it.
    reader = db.execute_query("SELECT id FROM orders WHERE amount > 95 ORDER BY id")
    assert reader.read_all()["id"].to_pylist() == [o[0] for o in ORDERS if o[2] > 95]
    q = db.execute_query_async("SELECT name FROM customers ORDER BY id")
    assert q.reader().read_all()["name"].to_pylist() == ["ada", "bob", "cy"]
    assert q.describe().status == "finished"
    assert db.describe_query(q.id).status == "finished"
    q = db.execute_query_async("SELECT count(*) FROM orders a, orders b, orders c, orders d, orders e")
    q.cancel()
    assert q.describe().status == "cancelled"
    with pytest.raises(Exception, match="cancel"):
        q.reader().read_all()
    with pytest.raises(Exception, match="read-only"):
        db.execute_query("DELETE FROM orders")


def statement_command(sql):
    """A Flight SQL CommandStatementQuery packed in protobuf Any, encoded by hand."""
    def field(number, payload):
        n, out = len(payload), bytearray([number << 3 | 2])
        while True:
            out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
            n >>= 7
            if not n:
                break
        return bytes(out) + payload
    url = b"type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery"
    return field(1, url) + field(2, field(1, sql.encode()))


def test_pyarrow_flight_raw_doget(server):
    client = flight.FlightClient(server.flight)
    options = flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {server.key}".encode())])
    info = client.get_flight_info(
        flight.FlightDescriptor.for_command(statement_command("SELECT id FROM shop.customers ORDER BY id")),
        options)
    assert info.schema.names == ["id"]
    table = client.do_get(info.endpoints[0].ticket, options).read_all()
    assert table["id"].to_pylist() == [1, 2, 3]
    # The ticket is planned again for whoever presents it: without a key, nothing.
    with pytest.raises(flight.FlightUnauthenticatedError):
        client.do_get(info.endpoints[0].ticket).read_all()


def test_a_tenant_sees_only_its_own_tables(server):
    other = server.new_key("other", "admin")
    server.post("/v1/namespace/shop/create", key=other)
    server.post("/v1/table/shop$secret/create", data=arrow_stream(pa.table({"x": [42]})),
                content_type="application/vnd.apache.arrow.stream", key=other)
    with connect(server, key=other) as conn, conn.cursor() as cur:
        # Its own table of the same namespace name; the default tenant's are not there.
        assert rows(cur, "SELECT x FROM shop.secret") == [(42,)]
        for sql in ("SELECT * FROM shop.orders", "SELECT * FROM lancet.shop.orders",
                    'SELECT * FROM "shop"."orders@1"', "SELECT * FROM default.shop.orders",
                    "SELECT * FROM information_schema.tables"):
            with pytest.raises(Exception):
                cur.execute(sql)
                cur.fetchall()
        objects = conn.adbc_get_objects(depth="tables").read_all().to_pylist()
        names = [t["table_name"] for s in objects[0]["catalog_db_schemas"]
                 for t in s["db_schema_tables"] or []]
        assert names == ["secret"]
    with connect(server) as conn, conn.cursor() as cur:
        with pytest.raises(Exception):
            cur.execute("SELECT * FROM shop.secret")
    # A ticket planned for one tenant, presented by another, is planned again for the other:
    # the first tenant's table is not found.
    client = flight.FlightClient(server.flight)
    mine = flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {server.key}".encode())])
    theirs = flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {other}".encode())])
    info = client.get_flight_info(flight.FlightDescriptor.for_command(
        statement_command("SELECT * FROM shop.orders")), mine)
    with pytest.raises(Exception, match="not found.*orders"):
        client.do_get(info.endpoints[0].ticket, theirs).read_all()
    # A read key scoped to one namespace sees only it.
    server.post("/v1/namespace/hidden/create")
    server.create_table("hidden$t", pa.table({"x": [1]}))
    scoped = new_scoped_key(server)
    with connect(server, key=scoped) as conn, conn.cursor() as cur:
        assert rows(cur, "SELECT count(*) FROM shop.orders") == [(len(ORDERS),)]
        with pytest.raises(Exception, match="(?i)covers|permission"):
            cur.execute("SELECT * FROM hidden.t")
        objects = conn.adbc_get_objects(depth="tables").read_all().to_pylist()
        schemas = [s["db_schema_name"] for s in objects[0]["catalog_db_schemas"]]
        assert "hidden" not in schemas and "shop" in schemas


def new_scoped_key(server):
    import subprocess
    out = subprocess.run([server.binary, "keys", "--data", server.data, "create", "--tenant",
                          "default", "--role", "read", "--namespace", "shop"],
                         check=True, capture_output=True, text=True)
    key = out.stdout.strip()
    for _ in range(100):
        try:
            server.post("/v1/namespace/shop/exists", key=key)
            return key
        except Exception:
            time.sleep(0.1)
    return key


def arrow_stream(table):
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def test_limits_per_statement_end_it_with_a_clear_error(server):
    with tempfile.TemporaryDirectory() as d:
        small = Lancet(d, args=["--flight-addr", "127.0.0.1:0", "--sql-max-rows", "10",
                                "--sql-memory-mb", "4", "--sql-timeout", "2s"])
        try:
            small.post("/v1/namespace/shop/create")
            small.create_table("shop$orders", pa.table({
                "id": pa.array([o[0] for o in ORDERS], pa.int64()),
                "amount": [o[2] for o in ORDERS]}))
            with connect(small) as conn, conn.cursor() as cur:
                assert rows(cur, "SELECT id FROM shop.orders ORDER BY id LIMIT 10") == [
                    (i,) for i in range(10)]
                with pytest.raises(Exception, match="more than 10 rows"):
                    rows(cur, "SELECT id FROM shop.orders")
                # Grouping 60^3 rows into 60^3 groups does not fit in 4 MiB.
                with pytest.raises(Exception, match="more memory than its limit"):
                    rows(cur, "SELECT a.id, b.id, c.id, sum(c.amount) AS s FROM shop.orders a, "
                              "shop.orders b, shop.orders c GROUP BY a.id, b.id, c.id "
                              "ORDER BY s DESC LIMIT 5")
                with pytest.raises(Exception, match="longer than 2 s"):
                    rows(cur, "SELECT count(*), sum(a.amount * f.amount) FROM shop.orders a, "
                              "shop.orders b, shop.orders c, shop.orders d, shop.orders e, "
                              "shop.orders f")
                # The server serves on.
                assert rows(cur, "SELECT count(*) FROM shop.orders") == [(len(ORDERS),)]
        finally:
            small.stop()


def test_statements_show_in_metrics(server):
    import urllib.request
    with connect(server) as conn, conn.cursor() as cur:
        rows(cur, "SELECT count(*) FROM shop.orders")
        with pytest.raises(Exception):
            cur.execute("SELECT nope FROM shop.orders")
    with urllib.request.urlopen(server.base + "/metrics") as r:
        text = r.read().decode()
    assert 'route="flight/plan",method="GRPC",status="200",tenant="default"' in text
    assert 'route="flight/plan",method="GRPC",status="400",tenant="default"' in text
    assert 'route="flight/run",method="GRPC",status="200",tenant="default"' in text


def test_handshake_with_the_key_as_password(server):
    with adbc.connect(server.flight, autocommit=True,
                      db_kwargs={"username": "anyone", "password": server.key}) as conn:
        with conn.cursor() as cur:
            assert rows(cur, "SELECT count(*) FROM shop.customers") == [(3,)]
    with pytest.raises(Exception, match="(?i)unauth|invalid"):
        with adbc.connect(server.flight, autocommit=True,
                          db_kwargs={"username": "anyone", "password": "wrong"}) as conn:
            with conn.cursor() as cur:
                cur.execute("SELECT 1")


def test_statements_count_in_the_tenants_usage(server):
    """A Flight SQL statement is a request of its tenant's usage and its rows are rows read."""
    import json
    import time
    import urllib.request

    def read_so_far():
        req = urllib.request.Request(server.base + "/v1/tenant/usage",
                                     headers={"x-api-key": server.key})
        with urllib.request.urlopen(req) as r:
            return sum(u["rows_read"] for u in json.loads(r.read())["usage"])

    time.sleep(0.5)  # what earlier tests read is flushed
    before = read_so_far()
    with connect(server) as conn, conn.cursor() as cur:
        assert len(rows(cur, "SELECT id FROM shop.orders")) == 60
    deadline = time.time() + 10
    while read_so_far() < before + 60:
        assert time.time() < deadline, (before, read_so_far())
        time.sleep(0.2)
