// The Versions tab: the table's history, newest first, with each version's operation, tags
// and branches; open a version's data, tag it, restore it.

import * as api from "../api.js";
import { canWrite } from "../api.js";
import { h, clear, num, time, badge, errorBox, toast, confirmDialog, promptDialog } from "../ui.js";

const PAGE = 50;

export async function versionsTab(ctx) {
  const { id, panel } = ctx;
  const list = h("tbody");
  const more = h("button", { id: "more-versions", hidden: true }, "Older versions");
  const status = h("div", { "aria-live": "polite" });
  const [tags, branches] = await Promise.all([
    api.call(api.table(id, "tags/list"), {}).catch(() => ({ tags: {} })),
    api.call(api.table(id, "branches/list"), {}).catch(() => ({ branches: {} })),
  ]);
  if (!ctx.alive) return;
  const tagsAt = new Map();
  for (const [name, t] of Object.entries(tags.tags || {})) {
    if (t.branch) continue;
    tagsAt.set(t.version, [...(tagsAt.get(t.version) || []), name]);
  }
  const branchesFrom = new Map();
  for (const [name, b] of Object.entries(branches.branches || {})) {
    if (b.parent_branch) continue;
    branchesFrom.set(b.parent_version, [...(branchesFrom.get(b.parent_version) || []), name]);
  }
  const name = id[id.length - 1];
  const hash = encodeURIComponent(id.join("$"));
  let latest = null;
  let token = null;
  const load = async () => {
    const q = new URLSearchParams({ descending: "true", limit: String(PAGE) });
    if (token) q.set("page_token", token);
    const page = await api.call(`${api.table(id, "version/list")}?${q}`, { with_operations: true });
    if (!ctx.alive) return;
    for (const v of page.versions) {
      if (latest === null) latest = v.version;
      const actions = [h("a", { href: `#/table/${hash}/data/${v.version}` }, "Data")];
      if (canWrite()) {
        actions.push(h("button", { class: "tag-version", onclick: () => tag(v.version) }, "Tag"));
        if (v.version !== latest) {
          actions.push(h("button", { class: "danger restore", onclick: () => restore(v.version) }, "Restore"));
        }
      }
      list.append(h("tr", { dataset: { version: String(v.version) } },
        h("td", { class: "num" }, String(v.version), v.version === latest ? badge("latest", "ok") : null),
        h("td", {}, time(v.timestamp_millis)),
        h("td", {}, v.operation || h("span", { class: "muted" }, "–")),
        h("td", { class: "num" }, num(v.metadata && v.metadata.total_rows)),
        h("td", { class: "num" }, num(v.metadata && v.metadata.total_fragments)),
        h("td", {}, (tagsAt.get(v.version) || []).map((t) => badge(`tag ${t}`, "accent")),
          (branchesFrom.get(v.version) || []).map((b) => badge(`branch ${b}`))),
        h("td", {}, h("div", { class: "row", style: "margin:0" }, actions))));
    }
    token = page.page_token;
    more.hidden = !token;
  };
  const tag = async (version) => {
    const t = await promptDialog(`Tag version ${version} as`, "release-1");
    if (!t) return;
    try {
      await api.call(api.table(id, "tags/create"), { tag: t, version });
      toast(`Tagged version ${version} as ${t}`);
      versionsTab(ctx).catch((err) => clear(panel, errorBox(err)));
    } catch (err) {
      clear(status, errorBox(err));
    }
  };
  const restore = async (version) => {
    const ok = await confirmDialog(
      `Restore ${name} to version ${version}? This writes a new version with that version's data; nothing is deleted.`,
      name, "Restore");
    if (!ok) return;
    try {
      await api.call(api.table(id, "restore"), { version });
      toast(`Restored version ${version}`);
      versionsTab(ctx).catch((err) => clear(panel, errorBox(err)));
    } catch (err) {
      clear(status, errorBox(err));
    }
  };
  more.addEventListener("click", () => load().catch((err) => clear(status, errorBox(err))));
  clear(panel, status,
    h("div", { class: "scroll" }, h("table", { class: "grid", id: "versions" },
      h("thead", {}, h("tr", {}, ["Version", "Written", "Operation", "Rows", "Fragments", "Refs", ""].map((c) => h("th", {}, c)))),
      list)),
    more);
  await load();
}
