// Jobs: every job of the tenant with live progress, a state filter, and cancel / pause /
// resume; one job's detail: its spec and result, the event timeline, and row errors.

import * as api from "../api.js";
import { canWrite } from "../api.js";
import { h, clear, num, time, badge, progress, errorBox, toast } from "../ui.js";

const STATES = ["", "PENDING", "IN_PROGRESS", "PAUSED", "DONE", "FAILED", "CANCELLED"];
const LIVE = new Set(["PENDING", "IN_PROGRESS", "PAUSED"]);
const REFRESH_MS = 1000;

/** A job's table id: describe answers a list, list answers it joined by `$`. */
function tableId(job) {
  const t = job.table;
  if (!t) return [];
  return Array.isArray(t) ? t : String(t).split("$");
}

export function fraction(job) {
  if (job.job_state === "DONE") return 1;
  const p = job.progress || {};
  if (p.rows_total) return p.rows_done / p.rows_total;
  if (p.fragments_total) return p.fragments_done / p.fragments_total;
  if (p.phases_total) return p.phases_done / p.phases_total;
  return 0;
}

function stateBadge(state) {
  const kind = { DONE: "ok", FAILED: "bad", CANCELLED: "warn", PAUSED: "warn", IN_PROGRESS: "accent" }[state] || "";
  return badge(state.toLowerCase().replace("_", " "), kind);
}

function progressText(job) {
  const p = job.progress || {};
  if (p.rows_total) return `${num(p.rows_done)} / ${num(p.rows_total)} rows`;
  if (p.fragments_total) return `${num(p.fragments_done)} / ${num(p.fragments_total)} fragments`;
  if (p.phases_total) return `${p.phase || ""} ${num(p.phases_done)} / ${num(p.phases_total)} phases`;
  return "";
}

async function act(verb, job, after) {
  try {
    await api.call(`/v1/jobs/${verb}`, { job_id: job.job_id });
    toast(`${verb}: ${job.job_id}`);
  } catch (err) {
    toast(err.message, true);
  }
  after();
}

function actions(job, after) {
  if (!canWrite() || !LIVE.has(job.job_state)) return [];
  const out = [h("button", { class: "danger cancel", onclick: () => act("cancel", job, after) }, "Cancel")];
  if (job.job_state === "PAUSED") out.push(h("button", { class: "resume", onclick: () => act("resume", job, after) }, "Resume"));
  else out.push(h("button", { class: "pause", onclick: () => act("pause", job, after) }, "Pause"));
  return out;
}

export function jobsPage(main, rest) {
  if (rest[0]) return jobPage(main, decodeURIComponent(rest[0]));
  const filter = h("select", { id: "job-state", "aria-label": "State" },
    STATES.map((s) => h("option", { value: s }, s ? s.toLowerCase().replace("_", " ") : "all states")));
  const body = h("tbody");
  const status = h("div", { "aria-live": "polite" });
  clear(main, h("h1", {}, "Jobs"),
    h("div", { class: "row" }, h("label", {}, "Show", filter), h("span", { class: "muted" }, "refreshed every second")),
    status,
    h("div", { class: "scroll" }, h("table", { class: "grid", id: "jobs" },
      h("thead", {}, h("tr", {}, ["Job", "Type", "Table", "State", "Progress", "", "Started", ""].map((c) => h("th", {}, c)))),
      body)));
  let timer = null;
  let alive = true;
  const load = async () => {
    clearTimeout(timer);
    try {
      const q = new URLSearchParams({ limit: "200" });
      if (filter.value) q.set("job_state", filter.value);
      const page = await api.call(`/v1/jobs/list?${q}`, {});
      if (!alive) return;
      clear(status);
      const jobs = (page.jobs || []).sort((a, b) => b.creation_ms - a.creation_ms);
      clear(body, jobs.length ? jobs.map((j) => h("tr", { dataset: { job: j.job_id, state: j.job_state } },
        h("td", {}, h("a", { href: `#/jobs/${encodeURIComponent(j.job_id)}` }, j.job_id)),
        h("td", {}, j.job_type),
        h("td", {}, tableId(j).join(".")),
        h("td", {}, stateBadge(j.job_state)),
        h("td", {}, progress(fraction(j), `progress of ${j.job_id}`)),
        h("td", { class: "muted" }, progressText(j)),
        h("td", {}, time(j.creation_ms)),
        h("td", {}, h("div", { class: "row", style: "margin:0" }, actions(j, load)))))
        : h("tr", {}, h("td", { colspan: "8", class: "muted" }, "No jobs.")));
    } catch (err) {
      if (alive) clear(status, errorBox(err));
    }
    if (alive) timer = setTimeout(load, REFRESH_MS);
  };
  filter.addEventListener("change", load);
  load();
  return () => { alive = false; clearTimeout(timer); };
}

function jobPage(main, jobId) {
  const head = h("div");
  const events = h("ol", { class: "timeline", id: "events" });
  const errors = h("div", { id: "row-errors" });
  const details = h("pre", { id: "job-details" });
  clear(main, h("p", {}, h("a", { href: "#/jobs" }, "← All jobs")), h("h1", {}, jobId), head,
    h("h2", {}, "Timeline"), events, h("h2", {}, "Row errors"), errors, h("h2", {}, "Spec and result"), details);
  let timer = null;
  let alive = true;
  let errorsShown = false;
  const load = async () => {
    clearTimeout(timer);
    try {
      const job = await api.call("/v1/jobs/describe", { job_id: jobId });
      if (!alive) return;
      clear(head,
        h("div", { class: "row" }, stateBadge(job.job_state), h("span", {}, job.job_type), h("span", { class: "muted" }, tableId(job).join(".")),
          actions(job, load)),
        h("div", { class: "row" }, h("div", { class: "grow" }, progress(fraction(job), "job progress")), h("span", {}, progressText(job))),
        job.failure ? errorBox({ message: job.failure.message || JSON.stringify(job.failure) }) : null);
      details.textContent = JSON.stringify({ spec: job.spec, result: job.result, progress: job.progress }, null, 2);
      const ev = await api.call("/v1/jobs/query_events", { job_id: jobId, limit: 200 });
      clear(events, ev.rows.length ? ev.rows.map((e) => h("li", {},
        h("strong", {}, e.state), " ", h("span", { class: "muted" }, `${String(e.timestamp).replace("T", " ")} · ${e.emitted_by || ""}`),
        e.rows_processed !== null ? ` · ${num(e.rows_processed)} rows` : null,
        e.message ? h("div", {}, e.message) : null)) : h("li", { class: "muted" }, "No events yet."));
      if (!errorsShown && job.job_type === "backfill" && job.table) {
        const rec = await api.call(api.table(tableId(job), "errors"), { job_id: jobId, limit: 100 });
        const records = rec.records || [];
        const text = (v) => (typeof v === "object" && v !== null ? JSON.stringify(v) : String(v));
        const grid = () => h("div", { class: "scroll" }, h("table", { class: "grid" },
          h("thead", {}, h("tr", {}, Object.keys(records[0]).map((k) => h("th", {}, k)))),
          h("tbody", {}, records.map((r) => h("tr", {}, Object.values(r).map((v) => h("td", {}, text(v))))))));
        clear(errors, records.length ? grid() : h("p", { class: "muted" }, "No row errors."));
        errorsShown = !LIVE.has(job.job_state);
      } else if (job.job_type !== "backfill") {
        clear(errors, h("p", { class: "muted" }, "Only backfills record row errors."));
      }
      if (alive && LIVE.has(job.job_state)) timer = setTimeout(load, REFRESH_MS);
    } catch (err) {
      if (alive) clear(head, errorBox(err));
    }
  };
  load();
  return () => { alive = false; clearTimeout(timer); };
}
