// Indexes and search through @lancedb/lancedb's remote client. Distances are checked against
// values computed here, not only counted.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Index, rerankers } from "@lancedb/lancedb";

import { rows, start } from "./server.mjs";

let s;
let t;
const N = 40;
const QUERY = [3, 1, 0.5, -2];

function l2(a, b) {
  return a.reduce((sum, x, i) => sum + (x - b[i]) ** 2, 0);
}
function cosine(a, b) {
  const dot = a.reduce((sum, x, i) => sum + x * b[i], 0);
  const norm = (v) => Math.sqrt(v.reduce((sum, x) => sum + x * x, 0));
  return 1 - dot / (norm(a) * norm(b));
}
/** The ids of every row, nearest first under `dist`. */
function nearest(dist) {
  return rows(N)
    .map((r) => ({ id: r.id, d: dist(r.vector, QUERY) }))
    .sort((a, b) => a.d - b.d || a.id - b.id);
}

before(async () => {
  s = await start();
  // Every third row mentions "apple", each in a longer text than the one before: BM25 scores
  // them in id order, with no ties (so pages of a full-text search are well defined).
  const text = (id) => (id % 3 === 0 ? `apple${" pie".repeat(id / 3)}` : `plain text ${id}`);
  t = await s.db.createTable("docs", rows(N).map((r) => ({ ...r, text: text(r.id) })));
});
after(async () => s?.stop());

test("vector search answers the nearest rows with their distances (l2 and cosine)", async () => {
  const got = await t.vectorSearch(QUERY).limit(5).toArray();
  const want = nearest(l2).slice(0, 5);
  assert.deepEqual(got.map((r) => Number(r.id)), want.map((w) => w.id));
  for (const [i, r] of got.entries()) assert.ok(Math.abs(r._distance - want[i].d) < 1e-3, `${r._distance} vs ${want[i].d}`);

  const cos = await t.vectorSearch(QUERY).distanceType("cosine").limit(3).toArray();
  const wantCos = nearest(cosine).slice(0, 3);
  for (const [i, r] of cos.entries()) assert.ok(Math.abs(r._distance - wantCos[i].d) < 1e-4, `${r._distance} vs ${wantCos[i].d}`);
});

test("vector search pages with offset: the k + offset nearest less the first offset", async () => {
  const want = nearest(l2);
  const page = await t.vectorSearch(QUERY).limit(5).offset(5).toArray();
  assert.deepEqual(page.map((r) => Number(r.id)), want.slice(5, 10).map((w) => w.id));
});

test("distance ranges, filters before and after the search, selected columns", async () => {
  const want = nearest(l2).filter((w) => w.d >= 10 && w.d < 200);
  const ranged = await t.vectorSearch(QUERY).distanceRange(10, 200).limit(100).toArray();
  assert.deepEqual(ranged.map((r) => Number(r.id)).sort((a, b) => a - b), want.map((w) => w.id).sort((a, b) => a - b));

  const pre = await t.vectorSearch(QUERY).where("id >= 20").limit(3).select(["id"]).toArray();
  assert.deepEqual(pre.map((r) => Number(r.id)), nearest(l2).filter((w) => w.id >= 20).slice(0, 3).map((w) => w.id));
  assert.deepEqual(Object.keys(pre[0]).sort(), ["_distance", "id"]);
  // Postfilter: the filter runs on the 3 nearest only.
  const post = await t.vectorSearch(QUERY).where("id >= 20").postfilter().limit(3).toArray();
  const nearest3 = nearest(l2).slice(0, 3).map((w) => w.id);
  assert.deepEqual(post.map((r) => Number(r.id)), nearest3.filter((id) => id >= 20));
});

test("order_by sorts a plain query, and offset pages it", async () => {
  const desc = await t.query().orderBy({ columnName: "id", ascending: false }).limit(4).toArray();
  assert.deepEqual(desc.map((r) => Number(r.id)), [39, 38, 37, 36]);
  const next = await t.query().orderBy({ columnName: "id", ascending: false }).limit(4).offset(4).toArray();
  assert.deepEqual(next.map((r) => Number(r.id)), [35, 34, 33, 32]);
});

test("columns as SQL expressions", async () => {
  const got = await t.query().where("id < 3").select({ id: "id", twice: "id * 2" }).toArray();
  assert.deepEqual(got.map((r) => [Number(r.id), Number(r.twice)]).sort((a, b) => a[0] - b[0]), [[0, 0], [1, 2], [2, 4]]);
});

test("indexes: a vector index, a scalar index and a full-text index, listed and searched", async () => {
  await t.createIndex("vector", { config: Index.ivfFlat({ numPartitions: 2, distanceType: "l2" }) });
  await t.createIndex("id", { config: Index.btree() });
  await t.createIndex("text", { config: Index.fts() });
  const names = (await t.listIndices()).map((i) => i.name).sort();
  assert.deepEqual(names, ["id_idx", "text_idx", "vector_idx"]);
  const stats = await t.indexStats("vector_idx");
  assert.equal(stats.numIndexedRows, N);
  assert.equal(stats.distanceType, "l2");

  // Searched through the index (all partitions probed): the same nearest rows.
  const got = await t.vectorSearch(QUERY).nprobes(2).limit(5).toArray();
  assert.deepEqual(got.map((r) => Number(r.id)), nearest(l2).slice(0, 5).map((w) => w.id));

  const fts = await t.search("apple", "fts").limit(50).toArray();
  const want = rows(N).filter((r) => r.id % 3 === 0).map((r) => r.id);
  assert.deepEqual(fts.map((r) => Number(r.id)), want);
  assert.ok(fts.every((r, i) => r._score > 0 && (i === 0 || r._score < fts[i - 1]._score)));
  const ftsPage = await t.search("apple", "fts").limit(3).offset(3).toArray();
  assert.deepEqual(ftsPage.map((r) => Number(r.id)), [9, 12, 15]);

  const hybrid = await t
    .query()
    .fullTextSearch("apple")
    .nearestTo(QUERY)
    .rerank(await rerankers.RRFReranker.create())
    .limit(5)
    .toArray();
  assert.ok(hybrid.length > 0 && hybrid.length <= 5);
  assert.ok(hybrid.every((r) => r._relevance_score > 0));

  await t.dropIndex("id_idx");
  assert.deepEqual((await t.listIndices()).map((i) => i.name).sort(), ["text_idx", "vector_idx"]);
});
