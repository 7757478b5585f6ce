"""Real clients against Lancet: pylance, lance-namespace's REST and directory clients."""
import lance
import lance_namespace
import pyarrow as pa
import pytest
from lance_namespace import (
    CountTableRowsRequest,
    CreateNamespaceRequest,
    DescribeTableRequest,
    ListNamespacesRequest,
    ListTablesRequest,
    QueryTableRequest,
)


def rows(n, start=0):
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "text": [f"row {i}" for i in range(start, start + n)]})


def test_pylance_and_directory_namespace_read_what_lancet_wrote(lancet):
    lancet.post("/v1/namespace/ns/create")
    lancet.create_table("ns$items", rows(5))
    import urllib.request
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows(1).schema) as w:
        w.write_table(rows(3, start=5))
    lancet.post("/v1/table/ns$items/insert", data=sink.getvalue().to_pybytes(), content_type="application/vnd.apache.arrow.stream")

    # The tenant's directory through lance's own directory namespace.
    dir_ns = lance_namespace.connect("dir", {"root": lancet.tenant_root})
    assert dir_ns.list_tables(ListTablesRequest(id=["ns"])).tables == ["items"]
    ds = lance.dataset(namespace_client=dir_ns, table_id=["ns", "items"])
    assert ds.count_rows() == 8
    assert ds.version == 2
    assert sorted(ds.to_table(columns=["id"])["id"].to_pylist()) == list(range(8))


def test_rest_namespace_client(lancet):
    ns = lance_namespace.connect("rest", {"uri": lancet.base, "header.Authorization": f"Bearer {lancet.key}"})
    ns.create_namespace(CreateNamespaceRequest(id=["r"]))
    assert "r" in ns.list_namespaces(ListNamespacesRequest(id=[])).namespaces
    lancet.create_table("r$t", rows(10))
    described = ns.describe_table(DescribeTableRequest(id=["r", "t"]))
    assert described.version == 1
    assert ns.count_table_rows(CountTableRowsRequest(id=["r", "t"], predicate="id < 4")).count == 4

    # pylance opens the table through the REST namespace (describe -> location).
    ds = lance.dataset(namespace_client=ns, table_id=["r", "t"])
    assert ds.count_rows() == 10

    raw = ns.query_table(QueryTableRequest(id=["r", "t"], k=100, filter="id >= 7", vector={}))
    table = pa.ipc.open_file(pa.BufferReader(raw.data)).read_all()
    assert sorted(table["id"].to_pylist()) == [7, 8, 9]

    # Errors are classified by the numeric code in the body.
    with pytest.raises(Exception) as err:
        ns.describe_table(DescribeTableRequest(id=["r", "missing"]))
    assert "not found" in str(err.value).lower()


def test_rest_namespace_client_credentials_and_tenants(lancet):
    lancet.create_table("shared", rows(4))
    anonymous = lance_namespace.connect("rest", {"uri": lancet.base})
    with pytest.raises(Exception) as err:
        anonymous.list_tables(ListTablesRequest(id=[]))
    assert "401" in str(err.value) or "unauthenticated" in str(err.value).lower()

    # x-api-key works as well as a bearer token; another tenant sees nothing of ours.
    other_key = lancet.new_key("other", "write")
    other = lance_namespace.connect("rest", {"uri": lancet.base, "header.x-api-key": other_key})
    assert other.list_tables(ListTablesRequest(id=[])).tables == []
    with pytest.raises(Exception) as err:
        other.describe_table(DescribeTableRequest(id=["shared"]))
    assert "not found" in str(err.value).lower()

    # A read key of our tenant reads but cannot write.
    reader_key = lancet.new_key("default", "read")
    reader = lance_namespace.connect("rest", {"uri": lancet.base, "header.Authorization": f"Bearer {reader_key}"})
    assert reader.count_table_rows(CountTableRowsRequest(id=["shared"])).count == 4
    with pytest.raises(Exception) as err:
        reader.create_namespace(CreateNamespaceRequest(id=["nope"]))
    assert "403" in str(err.value) or "permission" in str(err.value).lower() or "forbidden" in str(err.value).lower()
