// History through @lancedb/lancedb's remote client: versions, checkout, restore, tags, branches.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { rows, start } from "./server.mjs";

let s;
before(async () => {
  s = await start();
});
after(async () => s?.stop());

test("versions, checkout and restore", async () => {
  const t = await s.db.createTable("hist", rows(3));
  await t.add(rows(2, 3));
  await t.delete("id = 0");
  const versions = await t.listVersions();
  assert.deepEqual(versions.map((v) => v.version), [1, 2, 3]);
  assert.equal(await t.version(), 3);

  await t.checkout(1);
  assert.equal(await t.countRows(), 3);
  await t.checkoutLatest();
  assert.equal(await t.countRows(), 4);

  await t.checkout(2);
  await t.restore();
  await t.checkoutLatest();
  assert.equal(await t.countRows(), 5);
  assert.equal(await t.version(), 4);
});

test("tags: create, list, version, update, delete, checkout by tag", async () => {
  const t = await s.db.createTable("tagged", rows(2));
  await t.add(rows(3, 2));
  const tags = await t.tags();
  await tags.create("first", 1);
  await tags.create("second", 2);
  const listed = await tags.list();
  assert.deepEqual(Object.keys(listed).sort(), ["first", "second"]);
  assert.equal(listed.first.version, 1);
  assert.equal(await tags.getVersion("second"), 2);
  await tags.update("second", 1);
  assert.equal(await tags.getVersion("second"), 1);
  await tags.delete("second");
  assert.deepEqual(Object.keys(await tags.list()), ["first"]);

  await t.checkout("first");
  assert.equal(await t.countRows(), 2);
  await t.checkoutLatest();
  assert.equal(await t.countRows(), 5);
});

test("branches: create, write on the branch, list, delete", async () => {
  const t = await s.db.createTable("branched", rows(4));
  const branches = await t.branches();
  const dev = await branches.create("dev");
  await dev.delete("id < 2");
  assert.equal(await dev.countRows(), 2);
  assert.equal(await t.countRows(), 4);
  const listed = await branches.list();
  assert.ok(Object.keys(listed).includes("dev"), JSON.stringify(listed));
  await branches.delete("dev");
  assert.ok(!Object.keys(await branches.list()).includes("dev"));
});
