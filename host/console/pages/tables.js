// Tables: the namespace tree on the left, the selected namespace's tables, views and
// materialized views on the right, with a name search and row counts for the rows shown.

import * as api from "../api.js";
import { h, clear, num, errorBox, loading, badge } from "../ui.js";
import { typeName } from "./table.js";

const SHOWN = 100;

export function tablesPage(main, rest) {
  const selected = (rest[0] ? decodeURIComponent(rest[0]) : "").split("$").filter(Boolean);
  const tree = h("nav", { class: "tree panel", "aria-label": "Namespaces" });
  const right = h("section", { "aria-labelledby": "ns-title" });
  clear(main, h("div", { class: "layout" }, tree, right));
  let alive = true;

  const nodeFor = (id) => {
    const label = id.length ? id[id.length - 1] : "(root)";
    const children = h("ul", { hidden: true });
    const toggle = h("button", { "aria-expanded": "false", "aria-label": `expand ${label}`, class: "twisty" }, "▸");
    const pick = h("button", {
      "aria-current": String(id.join("$") === selected.join("$")),
      onclick: () => { location.hash = `#/tables/${encodeURIComponent(id.join("$"))}`; },
    }, label);
    let loaded = false;
    toggle.addEventListener("click", async () => {
      const open = toggle.getAttribute("aria-expanded") !== "true";
      toggle.setAttribute("aria-expanded", String(open));
      toggle.textContent = open ? "▾" : "▸";
      children.hidden = !open;
      if (open && !loaded) {
        loaded = true;
        try {
          const names = await api.all(api.namespace(id, "list"), "namespaces");
          if (!names.length) children.append(h("li", { class: "muted" }, "no namespaces"));
          for (const n of names.sort()) children.append(nodeFor([...id, n]));
        } catch (err) {
          children.append(h("li", {}, errorBox(err)));
        }
      }
    });
    const li = h("li", {}, h("div", { class: "row", style: "margin:0;flex-wrap:nowrap" }, toggle, pick), children);
    // Open the path down to the selected namespace.
    if (!id.length || (selected.length > id.length && id.every((p, i) => selected[i] === p))) toggle.click();
    return li;
  };
  tree.append(h("ul", {}, nodeFor([])));

  (async () => {
    clear(right, loading());
    try {
      const [tables, views, mviews] = await Promise.all([
        api.all(api.namespace(selected, "table/list"), "tables"),
        api.all(api.namespace(selected, "view/list"), "views").catch(() => []),
        api.all(api.namespace(selected, "materialized_view/list"), "views").catch(() => []),
      ]);
      if (!alive) return;
      const mvNames = new Set(mviews.map((v) => (typeof v === "string" ? v : v.name)));
      const rows = [
        ...tables.map((name) => ({ name, kind: mvNames.has(name) ? "materialized view" : "table" })),
        ...views.map((v) => ({ name: typeof v === "string" ? v : v.name, kind: "view" })),
      ].sort((a, b) => a.name.localeCompare(b.name));
      renderList(right, selected, rows, () => alive);
    } catch (err) {
      clear(right, errorBox(err));
    }
  })();
  return () => { alive = false; };
}

function renderList(right, ns, rows, alive) {
  const search = h("input", { type: "search", placeholder: "Search tables", "aria-label": "Search tables", id: "table-search", class: "grow" });
  const body = h("tbody");
  const more = h("button", { hidden: true }, "Show more");
  const count = h("span", { class: "muted" });
  let shown = SHOWN;
  const title = ns.length ? ns.join(".") : "root namespace";
  clear(right,
    h("h1", { id: "ns-title" }, `Tables in ${title}`),
    h("div", { class: "row" }, search, count),
    h("div", { class: "scroll" }, h("table", { class: "grid", id: "tables" },
      h("thead", {}, h("tr", {}, h("th", {}, "Name"), h("th", {}, "Kind"), h("th", { class: "num" }, "Rows"))),
      body)),
    more);
  const draw = () => {
    const q = search.value.trim().toLowerCase();
    const matches = rows.filter((r) => r.name.toLowerCase().includes(q));
    count.textContent = `${num(matches.length)} of ${num(rows.length)}`;
    clear(body);
    if (!matches.length) body.append(h("tr", {}, h("td", { colspan: "3", class: "muted" }, rows.length ? "No table matches." : "No tables here yet.")));
    const visible = matches.slice(0, shown);
    const counts = [];
    for (const r of visible) {
      const id = [...ns, r.name];
      const rowsCell = h("td", { class: "num" }, r.kind === "view" ? "–" : "…");
      const path = encodeURIComponent(id.join("$"));
      const href = r.kind === "view" ? `#/view/${path}` : `#/table/${path}/overview`;
      body.append(h("tr", {},
        h("td", {}, h("a", { href }, r.name)),
        h("td", {}, badge(r.kind, r.kind === "table" ? "" : "accent")),
        rowsCell));
      if (r.kind !== "view") counts.push([id, rowsCell]);
    }
    more.hidden = matches.length <= shown;
    fillCounts(counts, alive);
  };
  search.addEventListener("input", () => { shown = SHOWN; draw(); });
  more.addEventListener("click", () => { shown += SHOWN; draw(); });
  draw();
}

/** Row counts from `stats`, a few at a time, for the rows on screen only. */
async function fillCounts(cells, alive) {
  const queue = [...cells];
  const worker = async () => {
    while (queue.length && alive()) {
      const [id, cell] = queue.shift();
      if (!cell.isConnected) continue;
      try {
        const stats = await api.call(api.table(id, "stats"), {});
        cell.textContent = num(stats.num_rows);
      } catch {
        cell.textContent = "?";
      }
    }
  };
  await Promise.all([worker(), worker(), worker(), worker()]);
}

/** A saved view: its query, the database its names resolve from, and its columns. */
export function viewPage(main, id) {
  let alive = true;
  (async () => {
    clear(main, loading());
    try {
      const v = await api.call(`/v1/view/${api.pathId(id)}/describe`, {});
      if (!alive) return;
      const ns = id.slice(0, -1);
      clear(main,
        h("p", { class: "muted" }, h("a", { href: `#/tables/${encodeURIComponent(ns.join("$"))}` }, ns.length ? ns.join(".") : "root"), " /"),
        h("h1", {}, v.name, " ", badge("view", "accent")),
        h("p", { class: "muted" }, "A named query: SQL over Flight SQL reads it as a table, running the query each time."),
        h("h2", {}, "Query"),
        h("pre", { id: "view-query" }, v.query),
        h("h2", {}, "Columns"),
        h("table", { class: "grid", id: "view-schema" },
          h("thead", {}, h("tr", {}, h("th", {}, "Column"), h("th", {}, "Type"), h("th", {}, "Nullable"))),
          h("tbody", {}, (v.schema.fields || []).map((f) => h("tr", {},
            h("td", {}, h("code", {}, f.name)), h("td", {}, typeName(f.type)), h("td", {}, f.nullable ? "yes" : "no"))))));
    } catch (err) {
      clear(main, errorBox(err));
    }
  })();
  return () => { alive = false; };
}
