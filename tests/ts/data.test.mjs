// Writes through @lancedb/lancedb's remote client: add, merge insert, update, delete.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { rows, start } from "./server.mjs";

let s;
before(async () => {
  s = await start();
});
after(async () => s?.stop());

async function ids(t, filter) {
  let q = t.query().select(["id"]).limit(1000);
  if (filter) q = q.where(filter);
  return (await q.toArray()).map((r) => Number(r.id)).sort((a, b) => a - b);
}

test("add appends and overwrite replaces", async () => {
  const t = await s.db.createTable("add", rows(3));
  await t.add(rows(2, 3));
  assert.deepEqual(await ids(t), [0, 1, 2, 3, 4]);
  assert.equal(await t.version(), 2);
  await t.add(rows(1, 100), { mode: "overwrite" });
  assert.deepEqual(await ids(t), [100]);
});

test("merge insert updates matches and inserts the rest", async () => {
  const t = await s.db.createTable("merge", rows(4));
  const changed = [
    { id: 1, text: "one", vector: [9, 9, 9, 9] },
    { id: 10, text: "ten", vector: [1, 1, 1, 1] },
  ];
  const result = await t.mergeInsert("id").whenMatchedUpdateAll().whenNotMatchedInsertAll().execute(changed);
  assert.equal(result.numUpdatedRows, 1);
  assert.equal(result.numInsertedRows, 1);
  assert.deepEqual(await ids(t), [0, 1, 2, 3, 10]);
  const one = await t.query().where("id = 1").toArray();
  assert.equal(one[0].text, "one");
  assert.deepEqual(Array.from(one[0].vector), [9, 9, 9, 9]);

  // Delete the target rows the source lacks.
  await t
    .mergeInsert("id")
    .whenNotMatchedBySourceDelete()
    .execute([{ id: 0, text: "row 0", vector: [0, 0, 1, 0] }]);
  assert.deepEqual(await ids(t), [0]);
});

test("update by SQL and by values, delete by predicate", async () => {
  const t = await s.db.createTable("upd", rows(6));
  const u = await t.update({ where: "id < 2", valuesSql: { text: "'small'" } });
  assert.equal(u.rowsUpdated, 2);
  await t.update({ where: "id = 5", values: { text: "five" } });
  const got = await t.query().select(["id", "text"]).where("id < 2 OR id = 5").toArray();
  const texts = Object.fromEntries(got.map((r) => [Number(r.id), r.text]));
  assert.deepEqual(texts, { 0: "small", 1: "small", 5: "five" });

  const d = await t.delete("id >= 4");
  assert.ok(d.version >= 3);
  assert.equal(await t.countRows(), 4);
  assert.equal(await t.countRows("text = 'small'"), 2);
});
