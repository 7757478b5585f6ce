// One table: Overview, Schema, Data, Search, Versions and Indexes tabs.

import * as api from "../api.js";
import { canWrite } from "../api.js";
import { h, clear, num, bytes, time, ago, card, badge, errorBox, loading, toast, tabs } from "../ui.js";
import { dataTab, searchTab } from "./data.js";
import { versionsTab } from "./history.js";

const TABS = ["Overview", "Schema", "Data", "Search", "Versions", "Indexes"];

export function tablePage(main, id, tab, ref) {
  const current = TABS.find((t) => t.toLowerCase() === (tab || "overview")) || "Overview";
  const panel = h("div", { role: "tabpanel", id: "tab-panel", "aria-labelledby": `tab-${current.toLowerCase()}` });
  const ns = id.slice(0, -1);
  clear(main,
    h("p", { class: "muted" }, h("a", { href: `#/tables/${encodeURIComponent(ns.join("$"))}` }, ns.length ? ns.join(".") : "root"), " /"),
    h("h1", { id: "table-name" }, id[id.length - 1] || "?"),
    tabs(TABS, current, (name) => { location.hash = `#/table/${encodeURIComponent(id.join("$"))}/${name.toLowerCase()}`; }),
    panel);
  const ctx = { id, alive: true, panel, ref: ref ? decodeURIComponent(ref) : null };
  const render = { Overview: overview, Schema: schema, Data: dataTab, Search: searchTab, Versions: versionsTab, Indexes: indexes }[current];
  clear(panel, loading());
  render(ctx).catch((err) => ctx.alive && clear(panel, errorBox(err)));
  return () => { ctx.alive = false; };
}

/** A field's type as people write it: int64, string, vector(768 x float32), list<string>. */
export function typeName(t) {
  if (!t) return "?";
  switch (t.type) {
    case "fixed_size_list": {
      const item = t.fields && t.fields[0] ? typeName(t.fields[0].type) : "?";
      return `fixed_size_list<${item}, ${t.length}>`;
    }
    case "list": case "large_list":
      return `${t.type}<${t.fields && t.fields[0] ? typeName(t.fields[0].type) : "?"}>`;
    case "struct":
      return `struct<${(t.fields || []).map((f) => `${f.name}: ${typeName(f.type)}`).join(", ")}>`;
    default:
      return t.type;
  }
}

export function isVector(t) {
  return t && t.type === "fixed_size_list" && t.fields && /^float|^int8|^uint8/.test(t.fields[0].type.type);
}

async function overview(ctx) {
  const { id, panel } = ctx;
  const [desc, stats, versions, indexes, branches, tags] = await Promise.all([
    api.call(api.table(id, "describe"), {}),
    api.call(api.table(id, "stats"), {}),
    api.call(`${api.table(id, "version/list")}?descending=true&limit=1`, {}),
    api.call(api.table(id, "index/list"), {}),
    api.call(api.table(id, "branches/list"), {}).catch(() => ({ branches: {} })),
    api.call(api.table(id, "tags/list"), {}).catch(() => ({ tags: {} })),
  ]);
  if (!ctx.alive) return;
  const last = (versions.versions || [])[0];
  const unindexed = (indexes.indexes || []).reduce((s, i) => s + (i.num_unindexed_rows || 0), 0);
  const small = stats.fragment_stats ? stats.fragment_stats.num_small_fragments : 0;
  const branchNames = Object.keys(branches.branches || {});
  const tagEntries = Object.entries(tags.tags || {});
  clear(panel,
    h("div", { class: "cards", id: "overview" },
      card("Rows", num(stats.num_rows)),
      card("Version", num(desc.version)),
      card("Fragments", num(stats.fragment_stats ? stats.fragment_stats.num_fragments : desc.stats?.num_fragments)),
      card("Size", bytes(stats.total_bytes)),
      card("Last write", last ? ago(last.timestamp_millis) : "–"),
      card("Deleted rows", num(desc.stats ? desc.stats.num_deleted_rows : 0)),
      card("Small fragments (to compact)", num(small), small > 1),
      card("Unindexed rows", num(unindexed), unindexed > 0),
      card("Indexes", num(stats.num_indices))),
    last ? h("p", { class: "muted" }, `Last write ${time(last.timestamp_millis)}.`) : null,
    h("h2", {}, "Branches"),
    branchNames.length ? h("ul", {}, branchNames.map((b) => h("li", {}, b, " ", badge(`from v${branches.branches[b].parent_version ?? "?"}`))))
      : h("p", { class: "muted" }, "Only main."),
    h("h2", {}, "Tags"),
    tagEntries.length ? h("ul", {}, tagEntries.map(([t, v]) => h("li", {}, t, " ", badge(`v${v.version}`))))
      : h("p", { class: "muted" }, "No tags."));
}

async function schema(ctx) {
  const { id, panel } = ctx;
  const desc = await api.call(api.table(id, "describe"), {});
  const virtual = desc.virtual_columns || {};
  const jobs = await api.call(`/v1/jobs/list?${new URLSearchParams({ table_id: id.join("$"), limit: "200" })}`, {}).catch(() => ({ jobs: [] }));
  if (!ctx.alive) return;
  const body = h("tbody");
  for (const f of desc.schema.fields) {
    const notes = [];
    if (isVector(f.type)) notes.push(badge(`vector, ${f.type.length} dims`, "accent"));
    const def = virtual[f.name];
    if (def) {
      const lang = def.udf_backend === "python" ? "Python" : "Wasm";
      notes.push(badge(`virtual: ${def.udf_name} ${def.udf_version} (${lang})`, "accent"));
      const job = (jobs.jobs || []).filter((j) => j.job_type === "backfill" && j.spec && j.spec.column === f.name)
        .sort((a, b) => b.creation_ms - a.creation_ms)[0];
      const cell = badge("backfill: …");
      notes.push(cell);
      api.call(api.table(id, "count_rows"), { predicate: `\`${f.name}\` IS NULL` }).then((n) => {
        const state = job ? job.job_state.toLowerCase() : "never run";
        cell.textContent = `backfill ${state}; ${num(n)} rows not computed`;
        cell.className = `badge ${n === 0 ? "ok" : "warn"}`;
      }).catch(() => { cell.textContent = job ? `backfill ${job.job_state.toLowerCase()}` : "backfill never run"; });
    }
    body.append(h("tr", {},
      h("td", {}, h("code", {}, f.name)),
      h("td", {}, typeName(f.type)),
      h("td", {}, f.nullable ? "yes" : "no"),
      h("td", {}, notes)));
  }
  clear(panel,
    h("p", { class: "muted" }, `Schema at version ${desc.version}.`),
    h("div", { class: "scroll" }, h("table", { class: "grid", id: "schema" },
      h("thead", {}, h("tr", {}, h("th", {}, "Column"), h("th", {}, "Type"), h("th", {}, "Nullable"), h("th", {}, ""))),
      body)));
}

const INDEX_TYPES = ["IVF_PQ", "IVF_FLAT", "IVF_HNSW_SQ", "BTREE", "BITMAP", "LABEL_LIST", "FTS"];

async function indexes(ctx) {
  const { id, panel } = ctx;
  const [list, desc] = await Promise.all([
    api.call(api.table(id, "index/list"), {}),
    api.call(api.table(id, "describe"), {}),
  ]);
  if (!ctx.alive) return;
  const rows = (list.indexes || []).map((i) => h("tr", {},
    h("td", {}, h("code", {}, i.index_name)),
    h("td", {}, i.index_type),
    h("td", {}, (i.columns || []).join(", ")),
    h("td", { class: "num" }, num(i.num_indexed_rows)),
    h("td", { class: "num" }, num(i.num_unindexed_rows),
      i.num_unindexed_rows > 0 ? badge("behind", "warn") : badge("current", "ok")),
    h("td", { class: "num" }, bytes(i.size_bytes))));
  const behind = (list.indexes || []).filter((i) => i.num_unindexed_rows > 0);
  clear(panel,
    behind.length ? h("div", { class: "notice", role: "status" },
      `${behind.length} index(es) behind: new rows are searched without the index until upkeep (or an optimize) folds them in.`) : null,
    h("div", { class: "scroll" }, h("table", { class: "grid", id: "indexes" },
      h("thead", {}, h("tr", {}, ["Name", "Type", "Columns", "Indexed rows", "Unindexed rows", "Size"].map((c) => h("th", {}, c)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: "6", class: "muted" }, "No indexes."))))),
    canWrite() ? indexActions(ctx, desc) : null);
}

function indexActions(ctx, desc) {
  const { id } = ctx;
  const column = h("select", { "aria-label": "Column", id: "index-column" },
    desc.schema.fields.map((f) => h("option", { value: f.name }, f.name)));
  const type = h("select", { "aria-label": "Index type", id: "index-type" },
    INDEX_TYPES.map((t) => h("option", { value: t }, t)));
  const status = h("div", { "aria-live": "polite" });
  const create = h("button", { class: "primary", id: "create-index" }, "Create index");
  create.addEventListener("click", async () => {
    create.disabled = true;
    clear(status);
    try {
      await api.call(api.table(id, "create_index"), { column: column.value, index_type: type.value });
      toast(`Index on ${column.value} created`);
      indexes(ctx).catch((err) => clear(ctx.panel, errorBox(err)));
    } catch (err) {
      clear(status, errorBox(err));
    } finally {
      create.disabled = false;
    }
  });
  const optimize = h("button", { id: "optimize" }, "Optimize now");
  optimize.addEventListener("click", async () => {
    try {
      const job = await api.call(api.table(id, "optimize"), {});
      clear(status, h("p", {}, "Optimize started: ", h("a", { href: `#/jobs/${encodeURIComponent(job.job_id)}` }, job.job_id)));
    } catch (err) {
      clear(status, errorBox(err));
    }
  });
  return h("section", { class: "panel", style: "margin-top:16px" },
    h("h2", {}, "Create an index"),
    h("div", { class: "row" }, column, type, create, optimize),
    status);
}
