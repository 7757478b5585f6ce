// Mistakes through @lancedb/lancedb's remote client come back as the SDK's own error kinds:
// a 4xx the SDK maps (invalid input, not found, already exists), with a message that names
// the problem and none of lance's internals.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { rejection, rows, start } from "./server.mjs";

let s;
let t;
before(async () => {
  s = await start();
  t = await s.db.createTable("t", rows(5));
});
after(async () => s?.stop());

/** The error's text, which must not claim the table is missing. */
async function invalid(promise, words) {
  const err = String(await rejection(promise));
  assert.doesNotMatch(err, /Table '?t'? was not found|table not found/i, err);
  assert.match(err, /400/, err);
  assert.match(err, words, err);
  assert.doesNotMatch(err, /Schema \{ fields|Invalid user input: Invalid user input|\.rs:\d+/, err);
  return err;
}

test("an unknown column is invalid input, not a missing table", async () => {
  await invalid(t.query().where("nosuch > 1").toArray(), /nosuch/);
  await invalid(t.query().select(["nosuch"]).toArray(), /nosuch/);
  await invalid(t.dropColumns(["nosuch"]), /nosuch/);
  await invalid(t.alterColumns([{ path: "nosuch", rename: "x" }]), /nosuch/);
  await invalid(t.update({ where: "id = 1", valuesSql: { nosuch: "1" } }), /nosuch/);
  await invalid(
    t.mergeInsert("nosuch").whenMatchedUpdateAll().execute([{ id: 1, text: "x", vector: [1, 1, 1, 1] }]),
    /nosuch/,
  );
  await invalid(t.query().orderBy({ columnName: "nosuch" }).toArray(), /nosuch/);
  // Nothing was changed by any of them.
  assert.equal(await t.version(), 1);
  assert.equal(await t.countRows(), 5);
});

test("bad SQL is invalid input that says so once", async () => {
  await invalid(t.query().where("id >>>= 1").toArray(), /./);
  await invalid(t.delete("id = = 1"), /./);
});

test("a vector of the wrong size is invalid input", async () => {
  await invalid(t.vectorSearch([1, 2]).limit(1).toArray(), /dim/i);
});

test("missing things are not found", async () => {
  const err = String(await rejection(s.db.openTable("ghost")));
  assert.match(err, /not found/i);
  const tags = await t.tags();
  assert.match(String(await rejection(tags.getVersion("nope"))), /not found|404/i);
  assert.match(String(await rejection(t.checkout(99))), /not found|404|version/i);
});

test("a duplicate tag is a conflict that says what happened", async () => {
  const tags = await t.tags();
  await tags.create("v1", 1);
  const err = String(await rejection(tags.create("v1", 1)));
  // What happened is in the detail the SDK shows; the title is Part 7's for a 409, whatever
  // the conflict ("The namespace has been concurrently modified").
  assert.match(err, /"detail":"tag already exists: v1"/);
  assert.match(err, /"title":"The namespace has been concurrently modified"/);
});
