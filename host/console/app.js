// The console's shell: sign-in, the section navigation, and a hash router
// (#/tables, #/table/<ns$...$name>/<tab>, #/view/<ns$...$name>, #/jobs, #/server).

import * as api from "./api.js";
import { session } from "./api.js";
import { h, clear, errorBox, loading } from "./ui.js";
import { tablesPage, viewPage } from "./pages/tables.js";
import { tablePage } from "./pages/table.js";
import { jobsPage } from "./pages/jobs.js";
import { serverPage } from "./pages/server.js";
import { tenantsPage, usagePage, auditPage } from "./pages/operator.js";

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const who = document.getElementById("who");

let stopPage = null;

function signIn(reason) {
  if (stopPage) stopPage();
  stopPage = null;
  session.me = null;
  nav.hidden = true;
  who.hidden = true;
  const input = h("input", { id: "api-key", type: "password", autocomplete: "off", required: true });
  const remember = h("input", { id: "remember", type: "checkbox" });
  const status = h("div", { "aria-live": "polite" }, reason ? errorBox(reason) : null);
  const form = h("form", { class: "form panel", id: "sign-in" },
    h("h1", {}, "Sign in"),
    h("p", { class: "muted" }, "Your API key is sent as a header with every call and kept only in this browser."),
    h("label", { for: "api-key" }, "API key", input),
    h("label", { for: "remember" }, remember, "Remember on this device"),
    h("button", { class: "primary", type: "submit" }, "Sign in"),
    status);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    api.setKey(input.value.trim(), remember.checked);
    try {
      await start();
    } catch (err) {
      api.forgetKey();
      clear(status, errorBox(err));
      input.select();
    }
  });
  clear(main, h("div", { class: "login" }, form));
  input.focus();
}

/** Who the key is: a tenant's (whoami), else the operator's (admin/whoami). */
async function whoami() {
  try {
    return await api.call("/v1/whoami", {}, { method: "GET" });
  } catch (err) {
    if (err.status !== 403) throw err;
    const me = await api.call("/v1/admin/whoami", {}, { method: "GET" });
    return { ...me, role: "operator" };
  }
}

async function start() {
  session.me = await whoami();
  const { tenant, role, scope, operator } = session.me;
  // The operator sees the operator's sections; a tenant's key sees its tenant's.
  for (const a of nav.querySelectorAll("a")) a.hidden = !!operator !== a.hasAttribute("data-operator");
  clear(who,
    operator ? h("span", { id: "tenant" }, "Operator") : h("span", { id: "tenant" }, "Tenant ", h("strong", {}, tenant)),
    h("span", { class: "badge accent", id: "role" }, role),
    scope && scope.length ? h("span", { class: "badge" }, `scope ${scope.join(".")}`) : null,
    h("button", { id: "sign-out", onclick: () => { api.forgetKey(); signIn(); } }, "Sign out"));
  nav.hidden = false;
  who.hidden = false;
  route();
}

function route() {
  if (!session.me) return;
  if (stopPage) stopPage();
  stopPage = null;
  const home = session.me.operator ? "tenants" : "tables";
  const [section, ...rest] = (location.hash.replace(/^#\/?/, "") || home).split("/");
  for (const a of nav.querySelectorAll("a")) {
    a.toggleAttribute("aria-current", false);
    if (a.dataset.section === section || ((section === "table" || section === "view") && a.dataset.section === "tables")) {
      a.setAttribute("aria-current", "page");
    }
  }
  clear(main, loading());
  const pages = {
    tables: () => tablesPage(main, rest),
    table: () => tablePage(main, decodeURIComponent(rest[0] || "").split("$").filter(Boolean), rest[1], rest[2]),
    view: () => viewPage(main, decodeURIComponent(rest[0] || "").split("$").filter(Boolean)),
    jobs: () => jobsPage(main, rest),
    server: () => serverPage(main),
  };
  const operatorPages = {
    tenants: () => tenantsPage(main, rest),
    usage: () => usagePage(main),
    audit: () => auditPage(main),
  };
  const mine = session.me.operator ? operatorPages : pages;
  const page = mine[section] || mine[home];
  try {
    stopPage = page() || null;
  } catch (err) {
    clear(main, errorBox(err));
  }
  main.focus({ preventScroll: true });
}

window.addEventListener("hashchange", route);
window.addEventListener("lancet:unauthorized", (e) => {
  if (session.me) {
    api.forgetKey();
    signIn(`Your key was refused (${e.detail}): sign in again.`);
  }
});

if (api.key()) {
  start().catch((err) => {
    api.forgetKey();
    signIn(err.message);
  });
} else {
  signIn();
}
