// Tables and namespaces through @lancedb/lancedb's remote client.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { rejection, rows, start } from "./server.mjs";

let s;
before(async () => {
  s = await start();
});
after(async () => s?.stop());

test("create, list, open, rename and drop tables", async () => {
  const t = await s.db.createTable("items", rows(5));
  assert.equal(await t.countRows(), 5);
  assert.deepEqual(await s.db.tableNames(), ["items"]);
  const opened = await s.db.openTable("items");
  const names = (await opened.schema()).fields.map((f) => f.name);
  assert.deepEqual(names, ["id", "text", "vector"]);
  assert.equal(await opened.version(), 1);

  // exist_ok keeps it; overwrite replaces it.
  const same = await s.db.createTable("items", rows(2), { existOk: true });
  assert.equal(await same.countRows(), 5);
  const replaced = await s.db.createTable("items", rows(3), { mode: "overwrite" });
  assert.equal(await replaced.countRows(), 3);

  const empty = await s.db.createEmptyTable("empty", (await opened.schema()));
  assert.equal(await empty.countRows(), 0);

  await s.db.renameTable("empty", "renamed");
  assert.deepEqual((await s.db.tableNames()).sort(), ["items", "renamed"]);
  await s.db.dropTable("renamed");
  assert.deepEqual(await s.db.tableNames(), ["items"]);
  const listed = await s.db.listTables();
  assert.deepEqual(listed.tables, ["items"]);
});

test("a table that exists already is the SDK's own already-exists error", async () => {
  await s.db.createTable("dup", rows(1));
  const err = await rejection(s.db.createTable("dup", rows(1)));
  assert.match(String(err), /already exists/i);
  assert.doesNotMatch(String(err), /not found/i);
});

test("a missing table is the SDK's not-found error", async () => {
  const err = await rejection(s.db.openTable("ghost"));
  assert.match(String(err), /not found/i);
});

test("namespaces: create, list, describe, tables inside, drop with cascade", async () => {
  await s.db.createNamespace(["team"]);
  const listed = await s.db.listNamespaces();
  assert.ok(listed.namespaces.includes("team"), JSON.stringify(listed));
  await s.db.describeNamespace(["team"]);
  const t = await s.db.createTable("inner", rows(4), ["team"]);
  assert.equal(await t.countRows(), 4);
  assert.deepEqual(await s.db.tableNames(["team"]), ["inner"]);
  const reopened = await s.db.openTable("inner", ["team"]);
  assert.equal(await reopened.countRows(), 4);

  // Not empty: restrict refuses (and says why), cascade drops it and its table.
  const err = await rejection(s.db.dropNamespace(["team"]));
  assert.match(String(err), /not empty/i);
  assert.ok((await s.db.listNamespaces()).namespaces.includes("team"));
  await s.db.dropNamespace(["team"], { behavior: "cascade" });
  assert.ok(!(await s.db.listNamespaces()).namespaces.includes("team"));
  // Its table went with it. (openTable would answer from the SDK's own table cache; a missing
  // namespace lists no tables, as lance's directory namespace answers.)
  assert.deepEqual(await s.db.tableNames(["team"]), []);
  await s.db.createNamespace(["team"]);
  assert.deepEqual(await s.db.tableNames(["team"]), []);
});

test("stats count live rows", async () => {
  const t = await s.db.createTable("stats", rows(10));
  await t.delete("id < 3");
  const stats = await t.stats();
  assert.equal(stats.numRows, 7);
});
