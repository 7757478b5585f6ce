// The operator's view (an operator key signed in): tenants with their state, quotas, stored
// bytes and tables, suspend / resume; one tenant's keys; usage by tenant and hour; audit
// search. Everything here is read from and done through /v1/admin/... .

import * as api from "../api.js";
import { h, clear, num, bytes, badge, errorBox, toast, confirmDialog } from "../ui.js";

const stateBadge = (state) => badge(state, { active: "ok", suspended: "warn", deleting: "bad" }[state] || "");

function quotaText(q) {
  if (!q) return "none";
  const parts = [];
  if (q.storage_bytes != null) parts.push(`${bytes(q.storage_bytes)} stored`);
  if (q.tables != null) parts.push(`${num(q.tables)} tables`);
  if (q.jobs != null) parts.push(`${num(q.jobs)} jobs`);
  if (q.requests_per_second != null) parts.push(`${num(q.requests_per_second)} req/s`);
  return parts.join(", ") || "none";
}

async function act(verb, name, after) {
  try {
    await api.call(`/v1/admin/tenants/${encodeURIComponent(name)}/${verb}`, {});
    toast(`${name}: ${verb}ed`);
  } catch (err) {
    toast(err.message, true);
  }
  after();
}

export function tenantsPage(main, rest) {
  if (rest[0]) return tenantPage(main, decodeURIComponent(rest[0]));
  const body = h("tbody");
  const render = async () => {
    let listed;
    try {
      listed = await api.call("/v1/admin/tenants", {}, { method: "GET" });
    } catch (err) {
      clear(main, errorBox(err));
      return;
    }
    clear(body, ...listed.tenants.map((t) => {
      const state = t.state;
      const buttons = [];
      if (t.registered && state === "active") {
        buttons.push(h("button", { class: "suspend", onclick: async () => {
          if (await confirmDialog(`Suspend tenant ${t.name}? Every request of its keys is refused and its jobs pause.`, null, "Suspend")) act("suspend", t.name, render);
        } }, "Suspend"));
      }
      if (state === "suspended") buttons.push(h("button", { class: "resume", onclick: () => act("resume", t.name, render) }, "Resume"));
      return h("tr", { "data-tenant": t.name },
        h("td", {}, h("a", { href: `#/tenants/${encodeURIComponent(t.name)}` }, t.name)),
        h("td", {}, stateBadge(state)),
        h("td", { class: "num" }, num(t.tables)),
        h("td", { class: "num" }, t.storage_bytes == null ? "–" : bytes(t.storage_bytes)),
        h("td", {}, quotaText(t.settings && t.settings.quota)),
        h("td", { class: "num" }, num(t.usage_24h && t.usage_24h.requests)),
        h("td", {}, ...buttons));
    }));
  };
  clear(main,
    h("h1", {}, "Tenants"),
    h("table", { id: "tenants", class: "grid" },
      h("thead", {}, h("tr", {}, ...["Tenant", "State", "Tables", "Stored", "Quota", "Requests (24 h)", ""].map((c) => h("th", {}, c)))),
      body));
  render();
}

function tenantPage(main, name) {
  const load = async () => {
    let t;
    try {
      t = await api.call(`/v1/admin/tenants/${encodeURIComponent(name)}`, {}, { method: "GET" });
    } catch (err) {
      clear(main, errorBox(err));
      return;
    }
    clear(main,
      h("h1", {}, `Tenant ${t.name} `, stateBadge(t.state)),
      h("p", {}, `Quota: ${quotaText(t.settings && t.settings.quota)}. Stored: ${t.storage_bytes == null ? "not measured yet" : bytes(t.storage_bytes)}. Tables: ${num(t.tables)}. Open jobs: ${num(t.jobs_open)}.`),
      h("h2", {}, "Keys"),
      h("table", { id: "keys", class: "grid" },
        h("thead", {}, h("tr", {}, ...["Key", "Role", "Namespace", "State", "Created", "Expires", "Last used", ""].map((c) => h("th", {}, c)))),
        h("tbody", {}, ...t.keys.map((k) => h("tr", { "data-key": k.id },
          h("td", {}, h("code", {}, k.id)),
          h("td", {}, k.role),
          h("td", {}, (k.namespace || []).join(".") || "all"),
          h("td", {}, badge(k.state, { active: "ok", expired: "warn", revoked: "bad" }[k.state] || "")),
          h("td", {}, k.created || ""),
          h("td", {}, k.expires || "never"),
          h("td", {}, k.last_used || "–"),
          h("td", {}, k.state === "active" ? h("button", { class: "danger revoke", onclick: async () => {
            if (!(await confirmDialog(`Revoke key ${k.id}? Requests with it are refused from now on.`, null, "Revoke"))) return;
            try {
              await api.call(`/v1/admin/keys/${encodeURIComponent(k.id)}/revoke`, {});
              toast(`${k.id} revoked`);
            } catch (err) {
              toast(err.message, true);
            }
            load();
          } }, "Revoke") : null))))));
  };
  clear(main, h("p", {}, "Loading…"));
  load();
}

export function usagePage(main) {
  api.call("/v1/admin/usage", {}, { method: "GET" }).then((u) => {
    const cols = ["tenant", "hour", "requests", "bytes_in", "bytes_out", "rows_read", "rows_written", "udf_ms", "model_tokens", "job_rows", "storage_bytes"];
    clear(main,
      h("h1", {}, "Usage"),
      h("p", { class: "muted" }, "By tenant and hour; CSV and Arrow: lancet admin usage --format csv, or /v1/admin/usage?format=arrow."),
      h("table", { id: "usage", class: "grid" },
        h("thead", {}, h("tr", {}, ...cols.map((c) => h("th", {}, c.replace("_", " "))))),
        h("tbody", {}, ...u.usage.slice().reverse().map((r) => h("tr", {},
          ...cols.map((c) => h("td", { class: typeof r[c] === "number" ? "num" : "" },
            c.endsWith("bytes") || c.startsWith("bytes") ? bytes(r[c]) : typeof r[c] === "number" ? num(r[c]) : r[c])))))));
  }).catch((err) => clear(main, errorBox(err)));
}

export function auditPage(main) {
  const field = (id, label, placeholder) => h("label", { for: id }, label, h("input", { id, placeholder }));
  const out = h("div", { id: "audit-results" });
  const form = h("form", { class: "form inline", id: "audit-search" },
    field("audit-tenant", "Tenant", "any"),
    field("audit-principal", "Principal", "key:… or operator:…"),
    field("audit-since", "Since", "2026-12-01T00:00:00Z"),
    h("button", { class: "primary", type: "submit" }, "Search"),
    h("button", { type: "button", id: "audit-verify", onclick: async () => {
      try {
        const r = await api.call("/v1/admin/audit/verify", {}, { method: "GET" });
        toast(r.ok ? `Verified: ${num(r.records)} records, ${num(r.writers)} writers, every chain intact` : `Broken: ${r.problems.join("; ")}`, !r.ok);
      } catch (err) {
        toast(err.message, true);
      }
    } }, "Verify chains"));
  const search = async () => {
    const q = new URLSearchParams({ limit: "200" });
    for (const [k, id] of [["tenant", "audit-tenant"], ["principal", "audit-principal"], ["since", "audit-since"]]) {
      const v = document.getElementById(id).value.trim();
      if (v) q.set(k, v);
    }
    try {
      const r = await api.call(`/v1/admin/audit?${q}`, {}, { method: "GET" });
      clear(out, h("table", { id: "audit", class: "grid" },
        h("thead", {}, h("tr", {}, ...["Time", "Tenant", "Principal", "Action", "Object", "Outcome", "Status", "Request"].map((c) => h("th", {}, c)))),
        h("tbody", {}, ...r.records.map((a) => h("tr", {},
          h("td", {}, a.time), h("td", {}, a.tenant), h("td", {}, h("code", {}, a.principal)),
          h("td", {}, a.action), h("td", {}, a.object),
          h("td", {}, badge(a.outcome, { ok: "ok", refused: "warn", failed: "bad" }[a.outcome] || "")),
          h("td", { class: "num" }, String(a.status)), h("td", {}, h("code", {}, a.request_id)))))));
    } catch (err) {
      clear(out, errorBox(err));
    }
  };
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    search();
  });
  clear(main, h("h1", {}, "Audit log"), form, out);
  search();
}
