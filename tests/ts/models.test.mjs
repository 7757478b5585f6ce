// Embedding columns written and read through @lancedb/lancedb's remote client: a column that
// a registered model (all-MiniLM-L6-v2, as scripts/models.sh fetches it) computes on every
// `add` and `mergeInsert` (auto_backfill), read back and searched with the SDK's own calls.
// The model is registered over REST (no client has a model API); each vector the SDK reads must
// equal the server's own embedding of that text (the Python suite checks those against Python's
// onnxruntime), and the nearest rows must be the ones that mean the same.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { KEY, start } from "./server.mjs";

const MODELS = process.env.LANCET_MODELS_DIR || join(homedir(), ".cache", "lancet", "models");
const ORT = join(MODELS, "libonnxruntime.so.1.31.1");
const ONNX = join(MODELS, "minilm", "model.onnx");
const TOKENIZER = join(MODELS, "minilm", "tokenizer.json");
const DIM = 384;

let s;

async function post(path, body, contentType = "application/json") {
  const r = await fetch(s.base + path, {
    method: "POST",
    headers: { "x-api-key": KEY, "content-type": contentType },
    body: contentType === "application/json" ? JSON.stringify(body) : body,
  });
  const answer = await r.json();
  assert.equal(r.status, 200, JSON.stringify(answer));
  return answer;
}

const sha = (bytes) => createHash("sha256").update(bytes).digest("hex");

async function embed(texts) {
  return (await post("/v1/model/minilm/embed", { texts })).vectors;
}

function cosine(a, b) {
  const dot = a.reduce((sum, x, i) => sum + x * b[i], 0);
  const norm = (v) => Math.sqrt(v.reduce((sum, x) => sum + x * x, 0));
  return dot / (norm(a) * norm(b));
}

before(async () => {
  assert.ok(existsSync(ORT), `${ORT} is missing: bash scripts/models.sh fetches it`);
  s = await start(["--onnxruntime", ORT]);
  const onnx = readFileSync(ONNX);
  const tokenizer = readFileSync(TOKENIZER);
  await post("/v1/model/file", onnx, "application/octet-stream");
  await post("/v1/model/file", tokenizer, "application/octet-stream");
  await post("/v1/model/minilm/create", {
    files: { "model.onnx": sha(onnx), "tokenizer.json": sha(tokenizer) },
    dimension: DIM, max_tokens: 256, pooling: "mean", normalize: true,
    inputs: { input_ids: "input_ids", attention_mask: "attention_mask", token_type_ids: "token_type_ids" },
    output: "last_hidden_state",
  });
});
after(async () => s?.stop());

test("an embedding column is computed on add and mergeInsert, read back and searched", async () => {
  const t = await s.db.createTable("docs", [{ id: 0, text: "seed" }]);
  await t.delete("id = 0");
  await post("/v1/table/test$docs/add_columns", {
    new_columns: [{
      name: "vec",
      virtual_column: {
        input_columns: ["text"], udf_backend: "model", udf_name: "minilm", auto_backfill: true,
        outputs: [{
          column: "vec", struct_field: "vec", nullable: true,
          data_type: { type: "fixed_size_list", length: DIM, fields: [{ name: "item", nullable: true, type: { type: "float32" } }] },
        }],
      },
    }],
  });
  const docs = ["A cat sits on the mat.", "The stock market fell sharply today.", null, "Kittens sleep a lot."];
  await t.add(docs.map((text, id) => ({ id, text })));
  await t.mergeInsert("id").whenMatchedUpdateAll().whenNotMatchedInsertAll()
    .execute([{ id: 3, text: "Interest rates and bond yields rose." }, { id: 4, text: "A puppy naps on a rug." }]);

  const got = new Map((await t.query().select(["id", "text", "vec"]).toArray()).map((r) => [r.id, r]));
  assert.equal(got.size, 5);
  assert.equal(got.get(2).vec, null, "a null text gives a null vector");
  const ids = [0, 1, 3, 4];
  const want = await embed(ids.map((id) => got.get(id).text));
  ids.forEach((id, i) => {
    const v = Array.from(got.get(id).vec);
    assert.equal(v.length, DIM);
    assert.ok(cosine(v, want[i]) >= 0.9999, `row ${id}: cosine ${cosine(v, want[i])}`);
  });
  // The merge replaced row 3's vector with its new text's.
  assert.equal(got.get(3).text, "Interest rates and bond yields rose.");

  // The SDK's vector search, with the server's embedding of a question: the pets come first.
  const [question] = await embed(["a sleeping animal"]);
  const hits = await t.vectorSearch(question).column("vec").limit(2).select(["id"]).toArray();
  assert.deepEqual(hits.map((r) => r.id).sort(), [0, 4]);
  assert.ok(hits[0]._distance <= hits[1]._distance);
});
