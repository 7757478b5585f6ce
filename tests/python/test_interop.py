"""Real clients against Lancet: pylance, lance-namespace's REST and directory clients."""
import json
import time
import urllib.request

import lance
import lance_namespace
import pyarrow as pa
import pytest

from conftest import ipc_stream as ipc
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


def test_rest_namespace_client_full_table_lifecycle(lancet):
    from lance_namespace import (
        AlterTableAddColumnsRequest, AlterTableDropColumnsRequest, CreateTableBranchRequest,
        CreateTableIndexRequest, CreateTableRequest, CreateTableTagRequest, DeleteFromTableRequest,
        DeleteTableBranchRequest, DeleteTableTagRequest, DescribeTableIndexStatsRequest,
        DropNamespaceRequest, DropTableRequest, GetTableTagVersionRequest, InsertIntoTableRequest,
        ListTableBranchesRequest, ListTableIndicesRequest, ListTableTagsRequest,
        ListTableVersionsRequest, MergeInsertIntoTableRequest, RenameTableRequest,
        RestoreTableRequest, TableExistsRequest, UpdateTableRequest,
    )
    from lance_namespace_urllib3_client.models.add_columns_entry import AddColumnsEntry

    ns = lance_namespace.connect("rest", {"uri": lancet.base, "header.x-api-key": lancet.key})
    ns.create_namespace(CreateNamespaceRequest(id=["life"]))
    t = ["life", "t"]
    assert ns.create_table(CreateTableRequest(id=t), ipc(rows(5))).version == 1
    assert ns.insert_into_table(InsertIntoTableRequest(id=t), ipc(rows(2, start=5))).version == 2
    merged = ns.merge_insert_into_table(
        MergeInsertIntoTableRequest(id=t, on=["id"], when_matched_update_all=True, when_not_matched_insert_all=True),
        ipc(pa.table({"id": pa.array([0, 100], pa.int64()), "text": ["zero", "hundred"]})),
    )
    assert (merged.num_updated_rows, merged.num_inserted_rows, merged.version) == (1, 1, 3)
    assert ns.update_table(UpdateTableRequest(id=t, predicate="id = 1", updates=[["text", "'one'"]])).updated_rows == 1
    assert ns.delete_from_table(DeleteFromTableRequest(id=t, predicate="id = 2")).version == 5
    assert ns.count_table_rows(CountTableRowsRequest(id=t)).count == 7
    raw = ns.query_table(QueryTableRequest(id=t, k=100, filter="id < 2", vector={}, columns={"column_names": ["id", "text"]}))
    got = pa.ipc.open_file(pa.BufferReader(raw.data)).read_all()
    assert sorted(zip(got["id"].to_pylist(), got["text"].to_pylist())) == [(0, "zero"), (1, "one")]

    ns.create_table_index(CreateTableIndexRequest(id=t, column="id", index_type="BTREE", name="id_idx"))
    indexes = ns.list_table_indices(ListTableIndicesRequest(id=t)).indexes
    assert [i.index_name for i in indexes] == ["id_idx"]
    assert ns.describe_table_index_stats(DescribeTableIndexStatsRequest(id=t, index_name="id_idx")).num_indexed_rows == 7

    ns.alter_table_add_columns(AlterTableAddColumnsRequest(id=t, new_columns=[AddColumnsEntry(name="twice", expression="id * 2")]))
    assert "twice" in [f.name for f in ns.describe_table(DescribeTableRequest(id=t)).var_schema.fields]
    ns.alter_table_drop_columns(AlterTableDropColumnsRequest(id=t, columns=["twice"]))

    versions = ns.list_table_versions(ListTableVersionsRequest(id=t)).versions
    latest = max(v.version for v in versions)
    assert latest == ns.describe_table(DescribeTableRequest(id=t)).version
    ns.create_table_tag(CreateTableTagRequest(id=t, tag="first", version=1))
    assert ns.get_table_tag_version(GetTableTagVersionRequest(id=t, tag="first")).version == 1
    assert "first" in ns.list_table_tags(ListTableTagsRequest(id=t)).tags
    ns.delete_table_tag(DeleteTableTagRequest(id=t, tag="first"))

    ns.create_table_branch(CreateTableBranchRequest(id=t, name="dev"))
    ns.delete_from_table(DeleteFromTableRequest(id=t, predicate="true", branch="dev"))
    assert ns.count_table_rows(CountTableRowsRequest(id=t, branch="dev")).count == 0
    assert ns.count_table_rows(CountTableRowsRequest(id=t)).count == 7
    assert "dev" in ns.list_table_branches(ListTableBranchesRequest(id=t)).branches
    ns.delete_table_branch(DeleteTableBranchRequest(id=t, name="dev"))

    ns.restore_table(RestoreTableRequest(id=t, version=1))
    assert ns.count_table_rows(CountTableRowsRequest(id=t)).count == 5

    ns.rename_table(RenameTableRequest(id=t, new_table_name="u"))
    ns.table_exists(TableExistsRequest(id=["life", "u"]))
    ns.drop_table(DropTableRequest(id=["life", "u"]))
    assert ns.list_tables(ListTablesRequest(id=["life"])).tables == []
    ns.drop_namespace(DropNamespaceRequest(id=["life"]))
    assert "life" not in ns.list_namespaces(ListNamespacesRequest(id=[])).namespaces


def test_table_and_field_metadata_through_both_clients(lancet):
    import lancedb
    from lance_namespace import CreateNamespaceRequest, DescribeTableRequest, UpdateTableSchemaMetadataRequest

    ns = lance_namespace.connect("rest", {"uri": lancet.base, "header.x-api-key": lancet.key})
    ns.create_namespace(CreateNamespaceRequest(id=["md"]))
    lancet.create_table("md$t", pa.table({"id": [1, 2, 3], "text": ["a", "b", "c"]}))
    r = ns.update_table_schema_metadata(UpdateTableSchemaMetadataRequest(id=["md", "t"], metadata={"owner": "ana"}))
    assert r.metadata == {"owner": "ana"}
    r = ns.update_table_schema_metadata(UpdateTableSchemaMetadataRequest(id=["md", "t"], metadata={"team": "x", "owner": "ana"}))
    assert r.metadata == {"team": "x", "owner": "ana"}
    r = ns.update_table_schema_metadata(UpdateTableSchemaMetadataRequest(id=["md", "t"], metadata={"owner": "ana"}))
    assert r.metadata == {"owner": "ana"}  # replaced, as the spec says
    assert ns.describe_table(DescribeTableRequest(id=["md", "t"])).metadata == {"owner": "ana"}

    db = lancedb.connect("db://md", api_key=lancet.key, host_override=lancet.base, region="us-east-1")
    t = db.open_table("t")
    before = t.version
    result = t.update_field_metadata({"path": "text", "metadata": {"lancedb:description": "letters"}})
    assert result.version == before + 1
    assert t.schema.field("text").metadata == {b"lancedb:description": b"letters"}


def test_transactions_through_the_namespace_client(lancet):
    from lance_namespace import DescribeTransactionRequest

    ns = lance_namespace.connect("rest", {"uri": lancet.base, "header.x-api-key": lancet.key})
    lancet.create_table("tx", pa.table({"id": [1, 2, 3]}))
    r = lancet.post("/v1/table/tx/delete", {"predicate": "id = 1"})
    d = ns.describe_transaction(DescribeTransactionRequest(id=[r["transaction_id"]]))
    assert d.status == "Succeeded"
    assert d.properties["operation"] == "Delete" and d.properties["version"] == str(r["version"])


def version_creates(lancet):
    """How many `version/create` requests the server has answered 200 (from /metrics)."""
    with urllib.request.urlopen(lancet.base + "/metrics") as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith('lancet_http_requests_total{route="/v1/table/{id}/version/create",method="POST",status="200"'):
            return int(line.rsplit(" ", 1)[1])
    return 0


def test_pylance_writes_a_table_through_the_rest_namespace(lancet):
    """lance.write_dataset with namespace_client + table_id on a namespace-managed table
    (`managed_versioning` true): the namespace declares the table and tells lance where it
    lives; lance writes the data files there and commits each version through Lancet
    (`version/create`); Lancet serves what it wrote."""
    ns = lance_namespace.connect("rest", {"uri": lancet.base, "header.Authorization": f"Bearer {lancet.key}"})
    ns.create_namespace(CreateNamespaceRequest(id=["pw"]))
    ds = lance.write_dataset(pa.table({"id": list(range(10))}), namespace_client=ns, table_id=["pw", "t"], mode="create")
    assert (ds.version, ds.count_rows()) == (1, 10)
    assert version_creates(lancet) == 1
    ds = lance.write_dataset(pa.table({"id": [100, 101]}), namespace_client=ns, table_id=["pw", "t"], mode="append")
    assert (ds.version, ds.count_rows()) == (2, 12)
    assert version_creates(lancet) == 2
    # A version Lancet itself wrote is the latest for the namespace-managed reader too.
    lancet.insert("pw$t", pa.table({"id": [200]}))
    assert lance.dataset(namespace_client=ns, table_id=["pw", "t"]).count_rows() == 13
    ds = lance.write_dataset(pa.table({"id": [300]}), namespace_client=ns, table_id=["pw", "t"], mode="append")
    assert (ds.version, ds.count_rows()) == (4, 14)
    ds = lance.write_dataset(pa.table({"id": [1]}), namespace_client=ns, table_id=["pw", "t"], mode="overwrite")
    assert (ds.version, ds.count_rows()) == (5, 1)
    assert version_creates(lancet) == 4
    lancet.insert("pw$t", pa.table({"id": [2]}))
    described = ns.describe_table(DescribeTableRequest(id=["pw", "t"]))
    assert (described.version, described.managed_versioning) == (6, True)
    # A branch made by pylance: its first version is committed through the namespace before
    # lance records the branch (404 from Lancet before).
    lance.dataset(namespace_client=ns, table_id=["pw", "t"]).create_branch("side")
    branches = lancet.post("/v1/table/pw$t/branches/list", {})
    assert "side" in json.dumps(branches), branches
    assert ns.count_table_rows(CountTableRowsRequest(id=["pw", "t"], predicate="id >= 1")).count == 2


def test_materialized_view_through_the_rest_namespace_client(lancet):
    """The spec's CreateMaterializedView (kind `query`, the source query as SQL, the output
    schema checked) and RefreshMaterializedView, through pylance's REST namespace client."""
    import base64

    from lance_namespace import CreateMaterializedViewRequest, RefreshMaterializedViewRequest

    ns = lance_namespace.connect("rest", {"uri": lancet.base, "header.Authorization": f"Bearer {lancet.key}"})
    lancet.create_table("src", rows(20))
    out = pa.schema([pa.field("id", pa.int64()), pa.field("text", pa.string())])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, out):
        pass
    schema_b64 = base64.b64encode(sink.getvalue().to_pybytes()).decode()
    created = ns.create_materialized_view(CreateMaterializedViewRequest(
        id=["mv"], kind="query", source_query="SELECT id, text FROM src WHERE id < 5", output_schema=schema_b64,
        with_no_data=False))
    assert created.job_id and created.version == 1
    job = lancet.post("/v1/jobs/describe", {"job_id": created.job_id})
    for _ in range(200):
        if job["job_state"] == "DONE":
            break
        time.sleep(0.05)
        job = lancet.post("/v1/jobs/describe", {"job_id": created.job_id})
    assert job["result"]["rows_written"] == 5, job
    assert ns.count_table_rows(CountTableRowsRequest(id=["mv"])).count == 5
    lancet.insert("src", rows(3, start=1))
    refreshed = ns.refresh_materialized_view(RefreshMaterializedViewRequest(id=["mv"]))
    assert refreshed.job_id
    # A kind Lancet cannot maintain is refused by name.
    with pytest.raises(Exception, match="udtf"):
        ns.create_materialized_view(CreateMaterializedViewRequest(
            id=["mv2"], kind="udtf", source_query="SELECT id FROM src", output_schema=schema_b64))
