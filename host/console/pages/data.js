// The Data tab (a paged grid read with server-side paging: never a whole table) and the
// Search tab (vector, meaning, full-text and filter searches, their plans, and the same request
// as curl and as Python).

import * as api from "../api.js";
import { h, clear, num, errorBox, loading, copy } from "../ui.js";
import { isVector, typeName } from "./table.js";

const PAGE = 50;
const FOLD = 120;

/** What the version picker offers: latest, branches, tags, recent versions. */
async function refs(id) {
  const [versions, tags, branches] = await Promise.all([
    api.call(`${api.table(id, "version/list")}?descending=true&limit=50`, {}),
    api.call(api.table(id, "tags/list"), {}).catch(() => ({ tags: {} })),
    api.call(api.table(id, "branches/list"), {}).catch(() => ({ branches: {} })),
  ]);
  return [
    { value: "main", label: "main (latest)" },
    ...Object.keys(branches.branches || {}).map((b) => ({ value: `branch:${b}`, label: `branch ${b}` })),
    ...Object.keys(tags.tags || {}).map((t) => ({ value: `tag:${t}`, label: `tag ${t}` })),
    ...(versions.versions || []).map((v) => ({ value: String(v.version), label: `version ${v.version}` })),
  ];
}

/** The body fields that select `ref` ("main", "42", "tag:x", "branch:b"). */
async function at(id, ref) {
  if (!ref || ref === "main") return {};
  if (/^\d+$/.test(ref)) return { version: Number(ref) };
  if (ref.startsWith("branch:")) return { branch: ref.slice(7) };
  if (ref.startsWith("tag:")) {
    const t = await api.call(api.table(id, "tags/version"), { tag: ref.slice(4) });
    return { version: t.version };
  }
  throw new Error(`unknown version '${ref}'`);
}

function refPicker(options, value) {
  return h("select", { id: "ref", "aria-label": "Version, branch or tag" },
    options.map((o) => h("option", { value: o.value, selected: o.value === value }, o.label)));
}

export async function dataTab(ctx) {
  const { id, panel } = ctx;
  const options = await refs(id);
  if (!ctx.alive) return;
  const ref = ctx.ref || "main";
  if (!options.some((o) => o.value === ref)) options.push({ value: ref, label: ref });
  const picker = refPicker(options, ref);
  const filter = h("input", { id: "filter", class: "grow", placeholder: "SQL filter, e.g. id > 10 AND text LIKE '%cat%'", "aria-label": "Filter" });
  const apply = h("button", { class: "primary", id: "apply" }, "Apply");
  const columnList = h("div", { class: "row" });
  const columnPicker = h("details", { class: "fold", id: "column-picker" }, h("summary", {}, "Columns"), columnList);
  const status = h("div", { "aria-live": "polite", id: "data-status" });
  const grid = h("div", { class: "scroll", id: "data-grid" });
  const prev = h("button", { id: "prev", "aria-label": "Previous page" }, "← Previous");
  const next = h("button", { id: "next", "aria-label": "Next page" }, "Next →");
  const info = h("span", { class: "muted", id: "page-info" });
  clear(panel,
    h("div", { class: "row" }, picker, filter, apply, columnPicker),
    status, grid, h("div", { class: "row" }, prev, next, info));
  let offset = 0;
  let total = null;
  // The schema of the version shown (columns differ between versions); hidden columns are
  // remembered by name.
  let fields = null;
  let fieldsAt = null;
  const hidden = new Set();
  const columnsAt = async (where) => {
    const key = JSON.stringify(where);
    if (fieldsAt === key) return;
    const desc = await api.call(api.table(id, "describe"), where);
    fields = desc.schema.fields;
    fieldsAt = key;
    clear(columnList, fields.map((f) => {
      const box = h("input", { type: "checkbox", checked: !hidden.has(f.name), value: f.name, "aria-label": f.name });
      box.addEventListener("change", () => {
        if (box.checked) hidden.delete(f.name);
        else hidden.add(f.name);
        load();
      });
      return h("label", {}, box, f.name);
    }));
  };
  const load = async () => {
    clear(status);
    grid.setAttribute("aria-busy", "true");
    try {
      const where = await at(id, picker.value);
      await columnsAt(where);
      const columns = fields.map((f) => f.name).filter((n) => !hidden.has(n));
      const predicate = filter.value.trim();
      const body = { ...where, k: PAGE, offset, columns, with_row_id: true };
      if (predicate) body.filter = predicate;
      const countBody = { ...where };
      if (predicate) countBody.predicate = predicate;
      const [result, count] = await Promise.all([
        api.call(api.table(id, "query"), body),
        total === null ? api.call(api.table(id, "count_rows"), countBody) : Promise.resolve(total),
      ]);
      if (!ctx.alive) return;
      total = count;
      renderRows(grid, id, result, fields);
      const last = offset + result.num_rows;
      info.textContent = total ? `Rows ${num(offset + 1)}–${num(last)} of ${num(total)}` : "No rows";
      prev.disabled = offset === 0;
      next.disabled = last >= total;
    } catch (err) {
      clear(status, errorBox(err));
    } finally {
      grid.removeAttribute("aria-busy");
    }
  };
  const restart = () => { offset = 0; total = null; load(); };
  apply.addEventListener("click", restart);
  filter.addEventListener("keydown", (e) => { if (e.key === "Enter") restart(); });
  picker.addEventListener("change", () => { ctx.ref = picker.value; restart(); });
  prev.addEventListener("click", () => { offset = Math.max(0, offset - PAGE); load(); });
  next.addEventListener("click", () => { offset += PAGE; load(); });
  await load();
}

/** Rows of a JSON query answer as a grid; `fields` (the table's) tells blob columns. */
export function renderRows(grid, id, result, fields) {
  const byName = new Map(fields.map((f) => [f.name, f]));
  const cols = result.schema.fields.map((f) => f.name);
  const body = h("tbody");
  for (const row of result.rows) {
    body.append(h("tr", {}, cols.map((c) => h("td", {}, cell(id, c, row[c], byName.get(c) || result.schema.fields.find((f) => f.name === c), row._rowid)))));
  }
  clear(grid, h("table", { class: "grid" },
    h("thead", {}, h("tr", {}, cols.map((c) => h("th", { scope: "col", title: typeName(byName.get(c)?.type) }, c)))),
    body));
  if (!result.rows.length) grid.append(h("p", { class: "muted", style: "padding:8px" }, "No rows."));
}

const IMAGE_MAGIC = [["89504e47", "image/png"], ["ffd8ff", "image/jpeg"], ["47494638", "image/gif"], ["52494646", "image/webp"]];

/** A lance blob column (v2: an extension type; v1: field metadata). Queries answer only a
 * description of each value (where it is, its size); the bytes come from the blob endpoint. */
function isBlob(field) {
  const m = field && field.metadata;
  return !!m && (m["ARROW:extension:name"] === "lance.blob.v2" || m["lance-encoding:blob"] === "true");
}

function cell(id, name, value, field, rowId) {
  if (value === null || value === undefined) return h("span", { class: "muted" }, "null");
  if (isBlob(field)) {
    if (value.size === 0) return h("span", { class: "muted" }, "empty");
    if (rowId !== undefined) return blobCell(id, name, rowId);
    return h("span", { class: "muted" }, `blob, ${num(value.size)} bytes`);
  }
  const type = field && field.type;
  if (type && isVector(type) && Array.isArray(value)) {
    const head = value.slice(0, 4).map((x) => (typeof x === "number" ? x.toPrecision(3) : x)).join(", ");
    return h("span", { title: `${value.length} dimensions` }, `[${head}${value.length > 4 ? ", …" : ""}]`);
  }
  if (type && /binary/.test(type.type) && typeof value === "string") {
    const magic = IMAGE_MAGIC.find(([m]) => value.startsWith(m));
    if (magic) {
      const img = h("img", { class: "cell-img", alt: `${name} image`, src: `data:${magic[1]};base64,${hexToBase64(value)}` });
      return img;
    }
    return h("span", { class: "muted" }, `${num(value.length / 2)} bytes`);
  }
  const text = typeof value === "object" ? JSON.stringify(value) : String(value);
  if (text.length > FOLD) {
    return h("details", { class: "fold" }, h("summary", {}, `${text.slice(0, FOLD)}…`), text);
  }
  return text;
}

function hexToBase64(hex) {
  let bin = "";
  for (let i = 0; i + 1 < hex.length; i += 2) bin += String.fromCharCode(parseInt(hex.slice(i, i + 2), 16));
  return btoa(bin);
}

/** A blob column's bytes, fetched with the key through the blob endpoint; images inline. */
function blobCell(id, column, rowId) {
  const holder = h("span", { class: "muted" }, "…");
  api.bytes(`${api.table(id, `blob/${encodeURIComponent(column)}/${rowId}/bytes`)}`).then((blob) => {
    if (/^image\//.test(blob.type)) {
      clear(holder, h("img", { class: "cell-img", alt: `${column} image`, src: URL.createObjectURL(blob) }));
    } else {
      blob.slice(0, 4).arrayBuffer().then((head) => {
        const hex = [...new Uint8Array(head)].map((b) => b.toString(16).padStart(2, "0")).join("");
        const magic = IMAGE_MAGIC.find(([m]) => hex.startsWith(m));
        if (magic) {
          clear(holder, h("img", { class: "cell-img", alt: `${column} image`, src: URL.createObjectURL(blob.slice(0, blob.size, magic[1])) }));
        } else {
          holder.textContent = `${num(blob.size)} bytes`;
        }
      });
    }
  }).catch(() => { holder.textContent = "blob"; });
  return holder;
}

export async function searchTab(ctx) {
  const { id, panel } = ctx;
  const desc = await api.call(api.table(id, "describe"), {});
  if (!ctx.alive) return;
  const fields = desc.schema.fields;
  const vectors = fields.filter((f) => isVector(f.type)).map((f) => f.name);
  const texts = fields.filter((f) => /utf8|string/.test(f.type.type)).map((f) => f.name);
  // Embedding columns: the server embeds query text with the column's own model.
  const defs = desc.virtual_columns || {};
  const embedded = vectors.filter((v) => defs[v] && defs[v].udf_backend === "model");
  const mode = h("select", { id: "search-mode", "aria-label": "Search kind" },
    vectors.length ? h("option", { value: "vector" }, "Vector: rows like this one") : null,
    embedded.length ? h("option", { value: "meaning" }, "Meaning: rows about these words") : null,
    h("option", { value: "fts" }, "Full-text"),
    h("option", { value: "filter" }, "Filter only"));
  const vcol = h("select", { id: "vector-column", "aria-label": "Vector column" }, vectors.map((v) => h("option", {}, v)));
  const like = h("input", { id: "like-row", placeholder: "the row, as a filter: id = 7", "aria-label": "Row to search like", class: "grow" });
  const vector = h("textarea", { id: "query-vector", rows: "2", "aria-label": "Query vector (JSON array)", placeholder: "[0.1, 0.2, …] or load it from a row" });
  const loadRow = h("button", { id: "load-row" }, "Use this row's vector");
  const ecol = h("select", { id: "embedding-column", "aria-label": "Embedding column" },
    embedded.map((v) => h("option", { value: v }, `${v} (model ${defs[v].udf_name})`)));
  const meaning = h("input", { id: "query-text", class: "grow", placeholder: "what the rows are about", "aria-label": "Query text" });
  const text = h("input", { id: "fts-text", class: "grow", placeholder: "words to find", "aria-label": "Full-text query" });
  const tcol = h("select", { id: "fts-column", "aria-label": "Text column" }, h("option", { value: "" }, "all indexed columns"), texts.map((t) => h("option", {}, t)));
  const filter = h("input", { id: "search-filter", class: "grow", placeholder: "optional SQL filter", "aria-label": "Filter" });
  const k = h("input", { id: "k", type: "number", min: "1", max: "1000", value: "10", "aria-label": "k (rows)", style: "width:6em" });
  const run = h("button", { class: "primary", id: "run-search" }, "Search");
  const explain = h("button", { id: "explain" }, "Explain plan");
  const analyze = h("button", { id: "analyze" }, "Analyze plan");
  const status = h("div", { "aria-live": "polite", id: "search-status" });
  const results = h("div", { class: "scroll", id: "search-results" });
  const plan = h("pre", { id: "plan", hidden: true });
  const curl = h("pre", { id: "as-curl" });
  const python = h("pre", { id: "as-python" });
  const vectorRow = h("div", { class: "row" }, vcol, like, loadRow);
  const vectorBox = h("div", {}, vectorRow, vector);
  const ftsRow = h("div", { class: "row" }, text, tcol);
  const meaningRow = h("div", { class: "row" }, meaning, ecol);
  clear(panel,
    h("div", { class: "row" }, mode, h("label", {}, "k", k)),
    vectorBox, meaningRow, ftsRow,
    h("div", { class: "row" }, filter, run, explain, analyze),
    status, results, plan,
    h("h2", {}, "The same request"),
    h("div", { class: "row" }, h("button", { onclick: () => copy(curl.textContent, curl) }, "Copy as curl"),
      h("button", { onclick: () => copy(python.textContent, python) }, "Copy as Python")),
    curl, python);
  const show = () => {
    vectorBox.hidden = mode.value !== "vector";
    ftsRow.hidden = mode.value !== "fts";
    meaningRow.hidden = mode.value !== "meaning";
    examples();
  };
  const body = () => {
    const b = { k: Number(k.value) || 10 };
    if (filter.value.trim()) b.filter = filter.value.trim();
    if (mode.value === "vector") {
      let v;
      try {
        v = JSON.parse(vector.value || "null");
      } catch {
        throw new Error("the query vector is not a JSON array of numbers");
      }
      if (!Array.isArray(v)) throw new Error("give a query vector, or load one from a row");
      b.vector = v;
      b.vector_column = vcol.value;
    } else if (mode.value === "meaning") {
      if (!meaning.value.trim()) throw new Error("type what the rows should be about");
      b.query_text = meaning.value.trim();
      b.vector_column = ecol.value;
    } else if (mode.value === "fts") {
      if (!text.value.trim()) throw new Error("type the words to find");
      b.full_text_query = { string_query: { query: text.value.trim(), ...(tcol.value ? { columns: [tcol.value] } : {}) } };
    }
    return b;
  };
  const examples = () => {
    let b;
    try {
      b = body();
    } catch {
      b = { k: Number(k.value) || 10 };
    }
    const short = { ...b };
    if (Array.isArray(short.vector) && short.vector.length > 8) short.vector = short.vector.map((x) => Number(x.toPrecision(4)));
    curl.textContent = [
      `curl -s -X POST '${location.origin}${api.table(id, "query")}' \\`,
      "  -H \"x-api-key: $LANCET_API_KEY\" -H 'content-type: application/json' -H 'accept: application/vnd.lancet.rows+json' \\",
      `  -d '${JSON.stringify(short).replaceAll("'", "'\\''")}'`,
    ].join("\n");
    python.textContent = pythonOf(id, b);
  };
  loadRow.addEventListener("click", async () => {
    clear(status);
    try {
      const r = await api.call(api.table(id, "query"), { filter: like.value || "true", k: 1, columns: [vcol.value] });
      if (!r.rows.length) throw new Error("no row matches that filter");
      vector.value = JSON.stringify(r.rows[0][vcol.value]);
      examples();
    } catch (err) {
      clear(status, errorBox(err));
    }
  });
  run.addEventListener("click", async () => {
    clear(status);
    plan.hidden = true;
    try {
      const r = await api.call(api.table(id, "query"), body());
      if (!ctx.alive) return;
      renderRows(results, id, r, fields);
      status.append(h("p", { class: "muted" }, `${num(r.num_rows)} rows`));
    } catch (err) {
      clear(status, errorBox(err));
    }
  });
  const planOf = (op) => async () => {
    clear(status);
    try {
      const r = await api.call(api.table(id, op), { query: body(), verbose: op === "explain_plan" });
      plan.textContent = typeof r === "string" ? r : r.plan || r.analysis || JSON.stringify(r, null, 2);
      plan.hidden = false;
    } catch (err) {
      clear(status, errorBox(err));
    }
  };
  explain.addEventListener("click", planOf("explain_plan"));
  analyze.addEventListener("click", planOf("analyze_plan"));
  for (const el of [mode, vcol, ecol, meaning, text, tcol, filter, k, vector]) el.addEventListener("input", show);
  show();
}

function pythonOf(id, b) {
  const [db, ...rest] = id.length > 1 ? id : ["<database>", ...id];
  const name = rest.join("$");
  const lines = [
    "import lancedb",
    `db = lancedb.connect("db://${db}", api_key=os.environ["LANCET_API_KEY"],`,
    `                     host_override="${location.origin}")`,
    `tbl = db.open_table(${JSON.stringify(name)})`,
  ];
  if (b.query_text !== undefined) {
    // lancedb's clients embed text on the client; the server's own model needs the REST field.
    return [
      "import json, os, urllib.request",
      "import pyarrow as pa",
      `req = urllib.request.Request("${location.origin}${api.table(id, "query")}",`,
      `    data=json.dumps(${JSON.stringify(b)}).encode(),`,
      '    headers={"x-api-key": os.environ["LANCET_API_KEY"], "content-type": "application/json"})',
      "rows = pa.ipc.open_file(pa.BufferReader(urllib.request.urlopen(req).read())).read_all()",
    ].join("\n");
  }
  let q;
  if (b.vector) q = `tbl.search(${JSON.stringify(b.vector.length > 8 ? "<vector>" : b.vector).replaceAll('"', "")}, vector_column_name=${JSON.stringify(b.vector_column)})`;
  else if (b.full_text_query) q = `tbl.search(${JSON.stringify(b.full_text_query.string_query.query)}, query_type="fts")`;
  else q = "tbl.search()";
  if (b.filter) q += `.where(${JSON.stringify(b.filter)})`;
  q += `.limit(${b.k}).to_arrow()`;
  return ["import os", ...lines, q].join("\n");
}
