// Server: a small live dashboard read from /metrics (Prometheus text): requests per second,
// latency by route, 5xx answers, requests in flight, datasets cached.

import * as api from "../api.js";
import { h, clear, num, card, errorBox } from "../ui.js";

const REFRESH_MS = 2000;
const HISTORY = 60;

/** Prometheus text as [{name, labels, value}]. */
export function parse(text) {
  const out = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = line.match(/^([a-zA-Z_:][\w:]*)(\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    for (const l of (m[3] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    out.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return out;
}

const sum = (samples, name, pred = () => true) =>
  samples.filter((s) => s.name === name && pred(s.labels)).reduce((a, s) => a + s.value, 0);

/** Quantile q from cumulative histogram buckets [{le, count}] (upper bound of the bucket). */
function quantile(buckets, q) {
  const total = buckets.length ? buckets[buckets.length - 1].count : 0;
  if (!total) return null;
  const want = q * total;
  for (const b of buckets) if (b.count >= want) return b.le;
  return Infinity;
}

function latencyByRoute(samples) {
  const routes = new Map();
  for (const s of samples) {
    if (s.name !== "lancet_http_request_duration_seconds_bucket") continue;
    const key = `${s.labels.method} ${s.labels.route}`;
    const le = s.labels.le === "+Inf" ? Infinity : Number(s.labels.le);
    const m = routes.get(key) || new Map();
    m.set(le, (m.get(le) || 0) + s.value);
    routes.set(key, m);
  }
  return [...routes].map(([route, m]) => {
    const buckets = [...m].sort((a, b) => a[0] - b[0]).map(([le, count]) => ({ le, count }));
    return { route, count: buckets.length ? buckets[buckets.length - 1].count : 0, p50: quantile(buckets, 0.5), p99: quantile(buckets, 0.99) };
  }).sort((a, b) => b.count - a.count);
}

const ms = (s) => (s === null ? "–" : s === Infinity ? "> max" : s < 1 ? `≤ ${Math.round(s * 1000 * 10) / 10} ms` : `≤ ${s} s`);

function spark(values) {
  const max = Math.max(1, ...values);
  const pts = values.map((v, i) => `${(i / Math.max(1, HISTORY - 1)) * 300},${58 - (v / max) * 56}`).join(" ");
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", "0 0 300 60");
  svg.setAttribute("class", "spark");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `requests per second, last ${values.length} samples`);
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", pts);
  svg.append(line);
  return svg;
}

export function serverPage(main) {
  const cards = h("div", { class: "cards", id: "server-cards" });
  const chart = h("div", { class: "panel" });
  const routes = h("tbody");
  const status = h("div", { "aria-live": "polite" });
  clear(main, h("h1", {}, "Server"), status, cards, h("h2", {}, "Requests per second"), chart,
    h("h2", {}, "Latency by route (since start)"),
    h("div", { class: "scroll" }, h("table", { class: "grid", id: "routes" },
      h("thead", {}, h("tr", {}, ["Route", "Requests", "p50", "p99"].map((c) => h("th", {}, c)))), routes)));
  let alive = true;
  let timer = null;
  let last = null;
  const rates = [];
  const load = async () => {
    try {
      const samples = parse(await api.text("/metrics"));
      if (!alive) return;
      clear(status);
      const total = sum(samples, "lancet_http_requests_total");
      const errors5xx = sum(samples, "lancet_http_requests_total", (l) => (l.status || "").startsWith("5"));
      const now = performance.now();
      if (last) rates.push(Math.max(0, (total - last.total) / ((now - last.at) / 1000)));
      while (rates.length > HISTORY) rates.shift();
      last = { total, at: now };
      clear(cards,
        card("Requests/s", rates.length ? rates[rates.length - 1].toFixed(1) : "…"),
        card("Requests", num(total)),
        card("5xx answers", num(errors5xx), errors5xx > 0),
        card("In flight", num(sum(samples, "lancet_http_requests_in_flight"))),
        card("Datasets cached", num(sum(samples, "lancet_datasets_cached"))),
        card("Jobs running", num(sum(samples, "lancet_jobs", (l) => l.state === "IN_PROGRESS"))),
        card("Panics", num(sum(samples, "lancet_panics_total")), sum(samples, "lancet_panics_total") > 0));
      clear(chart, spark(rates));
      clear(routes, latencyByRoute(samples).map((r) => h("tr", {},
        h("td", {}, h("code", {}, r.route)), h("td", { class: "num" }, num(r.count)),
        h("td", { class: "num" }, ms(r.p50)), h("td", { class: "num" }, ms(r.p99)))));
    } catch (err) {
      if (alive) clear(status, errorBox(err.status === 401
        ? { message: "/metrics is open to loopback clients only, or with the metrics token (--metrics-token): this browser is neither." }
        : err));
    }
    if (alive) timer = setTimeout(load, REFRESH_MS);
  };
  load();
  return () => { alive = false; clearTimeout(timer); };
}
