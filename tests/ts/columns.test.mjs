// Schema changes through @lancedb/lancedb's remote client: add (SQL and null columns), alter,
// drop, field metadata.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { createRequire } from "node:module";

// The SDK checks `instanceof` against the CommonJS build of apache-arrow it requires; the ESM
// build's classes are others.
const { Int64 } = createRequire(import.meta.url)("apache-arrow");

import { rows, start } from "./server.mjs";

let s;
before(async () => {
  s = await start();
});
after(async () => s?.stop());

async function names(t) {
  return (await t.schema()).fields.map((f) => f.name);
}

test("add columns from SQL and as nulls, then alter and drop them", async () => {
  const t = await s.db.createTable("cols", rows(4));
  await t.addColumns([{ name: "twice", valueSql: "CAST(id * 2 AS INT)" }]);
  const got = await t.query().select(["id", "twice"]).toArray();
  assert.deepEqual(got.map((r) => [Number(r.id), Number(r.twice)]).sort((a, b) => a[0] - b[0]), [[0, 0], [1, 2], [2, 4], [3, 6]]);

  // (A column from an Arrow field is refused by the SDK itself for remote tables.)
  await t.addColumns([{ name: "score", valueSql: "CAST(NULL AS DOUBLE)" }]);
  const nulls = await t.query().select(["score"]).toArray();
  assert.ok(nulls.length === 4 && nulls.every((r) => r.score === null));

  await t.alterColumns([{ path: "twice", rename: "double" }]);
  assert.deepEqual(await names(t), ["id", "text", "vector", "double", "score"]);
  const before = (await t.schema()).fields.find((f) => f.name === "double");
  assert.equal(String(before.type), "Int32");
  await t.alterColumns([{ path: "double", dataType: new Int64() }]);
  const typed = (await t.schema()).fields.find((f) => f.name === "double");
  assert.equal(String(typed.type), "Int64");
  const cast = await t.query().select(["id", "double"]).where("id = 3").toArray();
  assert.equal(Number(cast[0].double), 6);

  await t.dropColumns(["double", "score"]);
  assert.deepEqual(await names(t), ["id", "text", "vector"]);
});
