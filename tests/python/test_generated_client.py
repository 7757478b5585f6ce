"""The spec's own generated REST client (`lance-namespace-urllib3-client` 0.13) against Lancet:
every one of its operations called through it and its answers read its own way (its
deserialisation, its statuses, its Accept and Content-Type), and a walk of Lancet's route table
(`/v1/openapi.json`) against what the client's generated code expects of each operation."""
import ast
import base64
import inspect
import json
import os
import re
import shutil
import time
import urllib.request

import pyarrow as pa
import pytest

from conftest import ipc_stream as ipc

import lance_namespace_urllib3_client.api as generated_api
from lance_namespace_urllib3_client import ApiClient, Configuration
from lance_namespace_urllib3_client.api import (
    MaterializedViewApi, NamespaceApi, TableApi, TagApi, TransactionApi,
)
from lance_namespace_urllib3_client.exceptions import BadRequestException, NotFoundException
from lance_namespace_urllib3_client.models import (
    AddColumnsEntry, AddVirtualColumnEntry, AddVirtualColumnOutputEntry, AlterColumnsEntry,
    AlterTableAddColumnsRequest, AlterTableAlterColumnsRequest, AlterTableBackfillColumnsRequest,
    AlterTableDropColumnsRequest, AlterTransactionAction, AlterTransactionRequest,
    AlterTransactionSetProperty, AnalyzeTableQueryPlanRequest, BatchCommitTablesRequest,
    BatchCreateTableVersionsRequest, BatchDeleteTableVersionsRequest, CommitTableOperation,
    CountTableRowsRequest, CreateMaterializedViewRequest, CreateNamespaceRequest,
    CreateTableBranchRequest, CreateTableIndexRequest, CreateTableTagRequest,
    CreateTableVersionEntry, CreateTableVersionRequest, DeclareTableRequest,
    DeleteFromTableRequest, DeleteTableBranchRequest, DeleteTableTagRequest,
    DeregisterTableRequest, DescribeNamespaceRequest, DescribeTableIndexStatsRequest,
    DescribeTableRequest, DescribeTableVersionRequest, DescribeTransactionRequest,
    DropNamespaceRequest, ExplainTableQueryPlanRequest, GetTableStatsRequest,
    GetTableTagVersionRequest, ListTableIndicesRequest, NamespaceExistsRequest,
    QueryTableRequest, QueryTableRequestColumns, QueryTableRequestVector,
    RefreshMaterializedViewRequest, RegisterTableRequest, RenameTableRequest,
    RestoreTableRequest, TableExistsRequest, UpdateFieldMetadataEntry, UpdateFieldMetadataRequest,
    UpdateTableRequest, UpdateTableTagRequest, VersionRange,
)


# ---------------------------------------------------------------------------------------------
# What the generated code expects of each operation, read from its own source.


def client_operations():
    """{operation: {method, path, ok: {status: model}, accept: [...], content: [...] | None}},
    from the generated `*_api.py` modules: each public method's `_response_types_map` and its
    `_<op>_serialize` (method, path, Accept list, Content-Type list)."""
    ops = {}
    folder = os.path.dirname(inspect.getsourcefile(generated_api))
    for name in sorted(os.listdir(folder)):
        if not name.endswith("_api.py"):
            continue
        src = open(os.path.join(folder, name)).read()
        tree = ast.parse(src)
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}
            for op, fn in methods.items():
                if op.startswith("_") or op.endswith(("_with_http_info", "_without_preload_content")):
                    continue
                body = ast.get_source_segment(src, fn)
                types = re.search(r"_response_types_map: Dict\[str, Optional\[str\]\] = (\{.*?\})", body, re.S)
                ser = ast.get_source_segment(src, methods[f"_{op}_serialize"])
                accept = re.search(r"select_header_accept\(\s*\[(.*?)\]", ser, re.S)
                content = re.search(r"select_header_content_type\(\s*\[(.*?)\]", ser, re.S)
                ops[op] = {
                    "method": re.search(r"method='(\w+)'", ser).group(1),
                    "path": re.search(r"resource_path='([^']+)'", ser).group(1),
                    "ok": {k: v for k, v in ast.literal_eval(types.group(1)).items() if k.startswith("2")},
                    "accept": re.findall(r"'([^']+)'", accept.group(1)) if accept else [],
                    "content": re.findall(r"'([^']+)'", content.group(1)) if content else None,
                }
    return ops


def openapi(lancet):
    req = urllib.request.Request(lancet.base + "/v1/openapi.json",
                                 headers={"authorization": f"Bearer {lancet.key}"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())


def test_route_table_matches_the_generated_clients_expectations(lancet):
    ops = client_operations()
    assert len(ops) == 54, sorted(ops)
    doc = openapi(lancet)
    problems = []
    for op, want in sorted(ops.items()):
        served = doc["paths"].get(want["path"], {}).get(want["method"].lower())
        if served is None:
            problems.append(f"{op}: Lancet has no {want['method']} {want['path']}")
            continue
        ok = {s: r for s, r in served["responses"].items() if s.startswith("2")}
        (status, model), = want["ok"].items()
        if status not in ok:
            problems.append(f"{op}: the client reads only {status}; Lancet answers {sorted(ok)}")
            continue
        answer_types = set(ok[status].get("content", {}))
        if model == "bytearray":
            if not answer_types & set(want["accept"]) - {"application/json"}:
                problems.append(f"{op}: the client accepts {want['accept']}; Lancet answers {answer_types}")
        elif model is not None and "application/json" not in answer_types:
            problems.append(f"{op}: the client parses JSON ({model}); Lancet answers {answer_types}")
        body_types = set(served.get("requestBody", {}).get("content", {}))
        for sent in want["content"] or []:
            if served.get("requestBody") is None:
                problems.append(f"{op}: the client sends {sent}; Lancet reads no body")
            elif sent not in body_types:
                problems.append(f"{op}: the client sends {sent}; Lancet reads {body_types}")
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------
# Every operation, through the client.


def rows(n, start=0):
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "text": [f"row {i}" for i in ids]})


def arrow_rows(raw):
    return pa.ipc.open_file(pa.BufferReader(bytes(raw))).read_all()


def local_path(location):
    return location[len("file://"):] if location.startswith("file://") else location


def take_latest(tables, table, name):
    """Lance's latest manifest of `table` staged under `name` and that version deleted through
    the client: publishing the staged file brings it back."""
    described = tables.describe_table(table, DescribeTableRequest())
    version = described.version
    versions = os.path.join(local_path(described.location), "_versions")
    newest = max((os.path.join(versions, f) for f in os.listdir(versions) if f.endswith(".manifest")),
                 key=os.path.getmtime)
    staged = os.path.join(local_path(described.location), name)
    shutil.copy(newest, staged)
    return version, staged.lstrip("/")


def test_every_operation_through_the_generated_client(lancet):
    client = ApiClient(Configuration(host=lancet.base, access_token=lancet.key))
    ns, tables, tags = NamespaceApi(client), TableApi(client), TagApi(client)
    tx, views = TransactionApi(client), MaterializedViewApi(client)
    called = set()

    def call(api, op, *args, **kwargs):
        called.add(op)
        return getattr(api, op)(*args, **kwargs)

    # Namespaces.
    call(ns, "create_namespace", "gen", CreateNamespaceRequest())
    assert "gen" in call(ns, "list_namespaces", "$").namespaces
    assert call(ns, "describe_namespace", "gen", DescribeNamespaceRequest()) is not None
    assert call(ns, "namespace_exists", "gen", NamespaceExistsRequest()) is None
    with pytest.raises(NotFoundException):
        ns.namespace_exists("ghost", NamespaceExistsRequest())

    # Data: create, insert, merge, update, delete, count, query (Arrow IPC, with the client's
    # own `Accept: application/json` among its accept list), plans.
    t = "gen$t"
    assert call(tables, "create_table", t, ipc(rows(5))).version == 1
    assert call(tables, "insert_into_table", t, ipc(rows(2, start=5))).version == 2
    merged = call(tables, "merge_insert_into_table", t, ["id"],
                  ipc(pa.table({"id": pa.array([0, 100], pa.int64()), "text": ["zero", "hundred"]})),
                  when_matched_update_all=True, when_not_matched_insert_all=True)
    assert (merged.num_updated_rows, merged.num_inserted_rows, merged.version) == (1, 1, 3)
    updated = call(tables, "update_table", t, UpdateTableRequest(predicate="id = 1", updates=[["text", "'one'"]]))
    assert updated.updated_rows == 1
    assert call(tables, "delete_from_table", t, DeleteFromTableRequest(predicate="id = 2")).version == 5
    assert call(tables, "count_table_rows", t, CountTableRowsRequest()) == 7
    assert call(tables, "count_table_rows", t, CountTableRowsRequest(predicate="id >= 5")) == 3
    raw = call(tables, "query_table", t, QueryTableRequest(
        k=100, filter="id < 2", vector=QueryTableRequestVector(),
        columns=QueryTableRequestColumns(column_names=["id", "text"])))
    got = arrow_rows(raw)
    assert sorted(zip(got["id"].to_pylist(), got["text"].to_pylist())) == [(0, "zero"), (1, "one")]
    # Geneva's plain read: an empty single_vector.
    raw = call(tables, "query_table", t, QueryTableRequest(k=3, vector=QueryTableRequestVector(single_vector=[]), offset=1))
    assert arrow_rows(raw).num_rows == 3
    plan = call(tables, "explain_table_query_plan", t, ExplainTableQueryPlanRequest(
        query=QueryTableRequest(k=3, vector=QueryTableRequestVector(), filter="id > 1")))
    assert "id > Int64(1)" in plan or "id > 1" in plan, plan
    analysis = call(tables, "analyze_table_query_plan", t, AnalyzeTableQueryPlanRequest(
        k=3, vector=QueryTableRequestVector(), filter="id > 1"))
    assert "output_rows" in analysis or "metrics" in analysis, analysis
    # An unknown column is invalid input (400), not "not found".
    with pytest.raises(BadRequestException) as err:
        tables.query_table(t, QueryTableRequest(k=3, vector=QueryTableRequestVector(), filter="nosuch = 1"))
    assert json.loads(err.value.body)["code"] == 12

    # Indexes.
    call(tables, "create_table_scalar_index", t, CreateTableIndexRequest(column="id", index_type="BTREE", name="id_idx"))
    call(tables, "create_table_index", t, CreateTableIndexRequest(column="text", index_type="FTS", name="text_idx"))
    names = sorted(i.index_name for i in call(tables, "list_table_indices", t, ListTableIndicesRequest()).indexes)
    assert names == ["id_idx", "text_idx"]
    stats = call(tables, "describe_table_index_stats", t, "id_idx", DescribeTableIndexStatsRequest())
    assert stats.num_indexed_rows == 7
    call(tables, "drop_table_index", t, "text_idx")
    assert [i.index_name for i in tables.list_table_indices(t, ListTableIndicesRequest()).indexes] == ["id_idx"]

    # Columns and metadata.
    call(tables, "alter_table_add_columns", t, AlterTableAddColumnsRequest(
        new_columns=[AddColumnsEntry(name="twice", expression="id * 2")]))
    call(tables, "alter_table_alter_columns", t, AlterTableAlterColumnsRequest(
        alterations=[AlterColumnsEntry(path="twice", rename="double")]))
    got = arrow_rows(tables.query_table(t, QueryTableRequest(k=1, filter="id = 3", vector=QueryTableRequestVector())))
    assert got["double"].to_pylist() == [6]
    call(tables, "alter_table_drop_columns", t, AlterTableDropColumnsRequest(columns=["double"]))
    call(tables, "update_field_metadata", t, UpdateFieldMetadataRequest(
        updates=[UpdateFieldMetadataEntry(path="id", metadata={"unit": "rows"})]))
    assert call(tables, "update_table_schema_metadata", t, {"owner": "ana"})["owner"] == "ana"
    described = call(tables, "describe_table", t, DescribeTableRequest())
    fields = {f.name: f for f in described.var_schema.fields}
    assert list(fields) == ["id", "text"] and fields["id"].metadata == {"unit": "rows"}
    assert call(tables, "get_table_stats", t, GetTableStatsRequest()).num_rows == 7

    # A virtual column as upstream's clients send one (`struct_field` filled with the column's
    # name for a one-output UDF), backfilled: 202 with a job id the client reads.
    call(tables, "alter_table_add_columns", t, AlterTableAddColumnsRequest(new_columns=[AddColumnsEntry(
        name="doubled", virtual_column=AddVirtualColumnEntry(
            input_columns=["id"], image="python:3.11-slim", udf_name="doubled", udf_version="1",
            udf=base64.b64encode(b"def doubled(id):\n    return id * 2\n").decode(),
            outputs=[AddVirtualColumnOutputEntry(column="doubled", struct_field="doubled",
                                                 data_type={"type": "int64"}, nullable=True)]))]))
    job = call(tables, "alter_table_backfill_columns", t, AlterTableBackfillColumnsRequest(column="doubled"))
    assert job is not None and job.job_id
    for _ in range(600):
        got = arrow_rows(tables.query_table(t, QueryTableRequest(k=100, vector=QueryTableRequestVector(),
                                                               columns=QueryTableRequestColumns(column_names=["id", "doubled"]))))
        if all(v is not None for v in got["doubled"].to_pylist()):
            break
        time.sleep(0.1)
    assert sorted(zip(got["id"].to_pylist(), got["doubled"].to_pylist())) == sorted((i, i * 2) for i in got["id"].to_pylist())

    # Versions, tags, branches, restore, and the restore's transaction.
    versions = call(tables, "list_table_versions", t).versions
    latest = max(v.version for v in versions)
    assert latest == tables.describe_table(t, DescribeTableRequest()).version
    assert call(tables, "describe_table_version", t, DescribeTableVersionRequest(version=1)).version.version == 1
    call(tags, "create_table_tag", t, CreateTableTagRequest(tag="first", version=1))
    assert call(tags, "get_table_tag_version", t, GetTableTagVersionRequest(tag="first")).version == 1
    call(tags, "update_table_tag", t, UpdateTableTagRequest(tag="first", version=2))
    listed = call(tags, "list_table_tags", t).tags
    assert listed["first"].version == 2
    call(tags, "delete_table_tag", t, DeleteTableTagRequest(tag="first"))
    assert tags.list_table_tags(t).tags == {}
    call(tables, "create_table_branch", t, CreateTableBranchRequest(name="dev"))
    branches = call(tables, "list_table_branches", t).branches
    assert branches["dev"].parent_version == latest
    call(tables, "delete_table_branch", t, DeleteTableBranchRequest(name="dev"))
    restored = call(tables, "restore_table", t, RestoreTableRequest(version=1))
    assert tables.count_table_rows(t, CountTableRowsRequest()) == 5
    described = call(tx, "describe_transaction", restored.transaction_id, DescribeTransactionRequest())
    assert described.status == "Succeeded"
    # A committed transaction cannot be altered: the client's actions (camelCase) are read, and
    # refused as a conflict.
    with pytest.raises(Exception) as err:
        call(tx, "alter_transaction", restored.transaction_id, AlterTransactionRequest(
            actions=[AlterTransactionAction(set_property_action=AlterTransactionSetProperty(key="k", value="v"))]))
    assert getattr(err.value, "status", None) == 409, err.value

    # Versions managed by the caller: delete the latest, publish a staged manifest again.
    version, staged = take_latest(tables, t, "next.manifest")
    deleted = call(tables, "batch_delete_table_versions", t, BatchDeleteTableVersionsRequest(
        ranges=[VersionRange(start_version=version, end_version=version + 1)]))
    assert deleted.deleted_count == 1
    created = call(tables, "create_table_version", t, CreateTableVersionRequest(version=version, manifest_path=staged))
    assert created.version.version == version
    version, staged = take_latest(tables, t, "again.manifest")
    tables.batch_delete_table_versions(t, BatchDeleteTableVersionsRequest(
        ranges=[VersionRange(start_version=version, end_version=version + 1)]))
    call(tables, "batch_create_table_versions", BatchCreateTableVersionsRequest(entries=[
        CreateTableVersionEntry(id=["gen", "t"], version=version, manifest_path=staged)]))
    assert tables.describe_table(t, DescribeTableRequest()).version == version
    assert tables.count_table_rows(t, CountTableRowsRequest()) == 5

    # Declared, registered, deregistered, renamed, dropped tables; the batch commit.
    declared = call(tables, "declare_table", "gen$d", DeclareTableRequest())
    assert declared.location
    assert call(tables, "table_exists", "gen$d", TableExistsRequest()) is None
    committed = call(tables, "batch_commit_tables", BatchCommitTablesRequest(operations=[
        CommitTableOperation(declare_table=DeclareTableRequest(id=["gen", "d2"]))]))
    assert committed.results[0].declare_table.location
    gone = call(tables, "deregister_table", "gen$t", DeregisterTableRequest())
    with pytest.raises(NotFoundException):
        tables.table_exists("gen$t", TableExistsRequest())
    call(tables, "register_table", "gen$t2", RegisterTableRequest(location=gone.location))
    assert tables.count_table_rows("gen$t2", CountTableRowsRequest()) == 5
    call(tables, "rename_table", "gen$t2", RenameTableRequest(new_table_name="t3"))
    assert sorted(call(tables, "list_tables", "gen").tables) == ["d", "d2", "t3"]
    assert "t3" in str(call(tables, "list_all_tables").tables)

    # A materialized view: 201 on create, 202 on refresh.
    out = pa.schema([pa.field("id", pa.int64())])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, out):
        pass
    view = call(views, "create_materialized_view", "gen$mv", CreateMaterializedViewRequest(
        kind="query", source_query="SELECT id FROM gen.t3 WHERE id < 3",
        output_schema=base64.b64encode(sink.getvalue().to_pybytes()).decode(), with_no_data=True))
    assert view is not None and view.version == 1
    refreshed = call(views, "refresh_materialized_view", "gen$mv",
                     refresh_materialized_view_request=RefreshMaterializedViewRequest())
    assert refreshed is not None and refreshed.job_id
    for _ in range(600):
        if tables.count_table_rows("gen$mv", CountTableRowsRequest()) == 3:
            break
        time.sleep(0.1)
    assert tables.count_table_rows("gen$mv", CountTableRowsRequest()) == 3

    call(tables, "drop_table", "gen$t3")
    # Dropping a namespace with content: the spec's behavior values.
    with pytest.raises(Exception) as err:
        ns.drop_namespace("gen", DropNamespaceRequest())
    assert getattr(err.value, "status", None) == 409
    call(ns, "drop_namespace", "gen", DropNamespaceRequest(behavior="Cascade"))
    assert "gen" not in ns.list_namespaces("$").namespaces

    assert called == set(client_operations()), sorted(set(client_operations()) - called)


# ---------------------------------------------------------------------------------------------
# Errors: SEED-SPEC.md Part 7 fixes `type` and `title` per status, whatever happened (issue 70).

PART7 = {
    400: ("/errors/bad-request", "Malformed request"),
    401: ("/errors/unauthorized-request", "No valid authentication credentials for the operation"),
    403: ("/errors/forbidden-request", "Not authorized to make this request"),
    404: ("/errors/not-found-error", "Not found Error"),
    409: ("/errors/conflict", "The namespace has been concurrently modified"),
    500: ("/errors/server-error", "Internal Server Error"),
    503: ("/errors/service-unavailable", "Slow down"),
}


def refused(call, status, *words):
    """The generated client raises for `call`, with `status`, Part 7's type and title, and the
    words of what happened in `detail` and `error`."""
    from lance_namespace_urllib3_client.exceptions import ApiException
    with pytest.raises(ApiException) as err:
        call()
    body = json.loads(err.value.body)
    got = (err.value.status, body["status"], body["type"], body["title"])
    assert got == (status, status, *PART7[status]), body
    for word in words:
        assert word in body["detail"] and word in body["error"], (word, body)
    return body


def test_every_error_has_part_7s_type_and_title(lancet):
    client = ApiClient(Configuration(host=lancet.base, access_token=lancet.key))
    ns, tables, tags = NamespaceApi(client), TableApi(client), TagApi(client)
    query = QueryTableRequest(k=3, vector=QueryTableRequestVector())

    # A missing table, on every table operation that names one (the 13 routes the seed's
    # checks walk among them): 404 "Not found Error", the detail says what was not found.
    g = "ghost"
    for call in [
        lambda: tables.describe_table(g, DescribeTableRequest()),
        lambda: tables.table_exists(g, TableExistsRequest()),
        lambda: tables.count_table_rows(g, CountTableRowsRequest()),
        lambda: tables.query_table(g, query),
        lambda: tables.explain_table_query_plan(g, ExplainTableQueryPlanRequest(query=query)),
        lambda: tables.analyze_table_query_plan(g, AnalyzeTableQueryPlanRequest(k=3, vector=QueryTableRequestVector())),
        lambda: tables.insert_into_table(g, ipc(rows(1))),
        lambda: tables.merge_insert_into_table(g, ["id"], ipc(rows(1)), when_matched_update_all=True),
        lambda: tables.update_table(g, UpdateTableRequest(predicate="id = 1", updates=[["text", "'x'"]])),
        lambda: tables.delete_from_table(g, DeleteFromTableRequest(predicate="id = 1")),
        lambda: tables.alter_table_add_columns(g, AlterTableAddColumnsRequest(
            new_columns=[AddColumnsEntry(name="twice", expression="id * 2")])),
        lambda: tables.alter_table_alter_columns(g, AlterTableAlterColumnsRequest(
            alterations=[AlterColumnsEntry(path="id", rename="x")])),
        lambda: tables.alter_table_drop_columns(g, AlterTableDropColumnsRequest(columns=["text"])),
        lambda: tables.update_field_metadata(g, UpdateFieldMetadataRequest(
            updates=[UpdateFieldMetadataEntry(path="id", metadata={"a": "b"})])),
        lambda: tables.alter_table_backfill_columns(g, AlterTableBackfillColumnsRequest(column="v")),
        lambda: tables.list_table_indices(g, ListTableIndicesRequest()),
        lambda: tables.create_table_index(g, CreateTableIndexRequest(column="id", index_type="BTREE")),
        lambda: tables.describe_table_index_stats(g, "idx", DescribeTableIndexStatsRequest()),
        lambda: tables.get_table_stats(g, GetTableStatsRequest()),
        lambda: tables.list_table_versions(g),
        lambda: tables.describe_table_version(g, DescribeTableVersionRequest(version=1)),
        lambda: tables.restore_table(g, RestoreTableRequest(version=1)),
        lambda: tables.list_table_branches(g),
        lambda: tables.create_table_branch(g, CreateTableBranchRequest(name="dev")),
        lambda: tags.list_table_tags(g),
        lambda: tags.get_table_tag_version(g, GetTableTagVersionRequest(tag="t")),
        lambda: tags.create_table_tag(g, CreateTableTagRequest(tag="t", version=1)),
        lambda: tables.rename_table(g, RenameTableRequest(new_table_name="g2")),
        lambda: tables.deregister_table(g, DeregisterTableRequest()),
        lambda: tables.drop_table(g),
    ]:
        refused(call, 404, "not found")
    refused(lambda: ns.describe_namespace("nowhere", DescribeNamespaceRequest()), 404, "not found")

    # Unknown field paths on an existing table: 400 "Malformed request" (code 12 says which).
    tables.create_table("t", ipc(rows(3)))
    for call in [
        lambda: tables.alter_table_alter_columns("t", AlterTableAlterColumnsRequest(
            alterations=[AlterColumnsEntry(path="nosuch", rename="x")])),
        lambda: tables.alter_table_drop_columns("t", AlterTableDropColumnsRequest(columns=["nosuch"])),
        lambda: tables.update_field_metadata("t", UpdateFieldMetadataRequest(
            updates=[UpdateFieldMetadataEntry(path="nosuch", metadata={"a": "b"})])),
        lambda: tables.query_table("t", QueryTableRequest(k=3, vector=QueryTableRequestVector(), filter="nosuch = 1")),
        lambda: tables.count_table_rows("t", CountTableRowsRequest(predicate="nosuch = 1")),
        lambda: tables.create_table_index("t", CreateTableIndexRequest(column="nosuch", index_type="BTREE")),
    ]:
        assert refused(call, 400, "nosuch")["code"] == 12
    # Create of an existing table: a 400 whose words the lancedb SDKs recognise.
    refused(lambda: tables.create_table("t", ipc(rows(1))), 400, "already exists")

    # Conflicts: 409, titled as Part 7 says whatever the conflict.
    tables.create_table_branch("t", CreateTableBranchRequest(name="dev"))
    refused(lambda: tables.create_table_branch("t", CreateTableBranchRequest(name="dev")), 409, "dev")
    ns.create_namespace("full", CreateNamespaceRequest())
    tables.create_table("full$t", ipc(rows(1)))
    refused(lambda: ns.drop_namespace("full", DropNamespaceRequest()), 409)

    # No credential, and a read key on a write: 401 and 403.
    anonymous = TableApi(ApiClient(Configuration(host=lancet.base)))
    refused(lambda: anonymous.describe_table("t", DescribeTableRequest()), 401)
    reader = TableApi(ApiClient(Configuration(host=lancet.base, access_token=lancet.new_key("default", "read"))))
    refused(lambda: reader.drop_table("t"), 403)
