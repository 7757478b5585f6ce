// Small DOM helpers: the pages build elements with `h`, never from HTML strings, so values
// from tables are always text, never markup.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2).toLowerCase(), v);
    else if (k === "class") el.className = v;
    // Through CSSOM: the page's CSP refuses style attributes.
    else if (k === "style") el.style.cssText = v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, v);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function clear(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export const num = (n) => (n === undefined || n === null ? "–" : Number(n).toLocaleString("en"));

export function bytes(n) {
  if (n === undefined || n === null) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = Number(n);
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(i ? 1 : 0)} ${units[i]}`;
}

export function time(ms) {
  if (!ms) return "–";
  const d = new Date(ms);
  return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

export function ago(ms) {
  if (!ms) return "–";
  const s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

export function errorBox(err) {
  return h("div", { class: "error", role: "alert" }, err && err.message ? err.message : String(err));
}

export function loading() {
  return h("p", { class: "muted", "aria-busy": "true" }, "Loading…");
}

export function toast(message, bad = false) {
  const t = h("div", { class: bad ? "toast bad" : "toast" }, message);
  document.getElementById("toasts").append(t);
  setTimeout(() => t.remove(), 5000);
}

export function card(label, value, warn = false) {
  return h("div", { class: warn ? "card warn" : "card" },
    h("div", { class: "label" }, label), h("div", { class: "value" }, value));
}

export function badge(text, kind = "") {
  return h("span", { class: `badge ${kind}` }, text);
}

export function progress(fraction, label) {
  const pct = Math.max(0, Math.min(100, Math.round((fraction || 0) * 100)));
  return h("div", {
    class: "progress", role: "progressbar", "aria-valuemin": "0", "aria-valuemax": "100",
    "aria-valuenow": String(pct), "aria-label": label || "progress", title: `${pct}%`,
  }, h("div", { style: `width: ${pct}%` }));
}

/** Tabs with arrow-key navigation; `render(name, panel)` fills the chosen tab's panel. */
export function tabs(names, current, onSelect) {
  const list = h("div", { class: "tabs", role: "tablist" });
  const buttons = names.map((name) => h("button", {
    role: "tab", "aria-selected": String(name === current), tabindex: name === current ? "0" : "-1",
    id: `tab-${name.toLowerCase()}`, onclick: () => onSelect(name),
  }, name));
  list.addEventListener("keydown", (e) => {
    const i = buttons.indexOf(document.activeElement);
    if (i < 0) return;
    const next = e.key === "ArrowRight" ? i + 1 : e.key === "ArrowLeft" ? i - 1 : null;
    if (next === null) return;
    const b = buttons[(next + buttons.length) % buttons.length];
    b.focus();
    b.click();
  });
  list.append(...buttons);
  return list;
}

/** A modal asking to confirm; with `typed`, the user must type that text first. */
export function confirmDialog(message, typed, action = "Confirm") {
  return new Promise((resolve) => {
    const input = typed ? h("input", { "aria-label": `Type ${typed} to confirm`, autocomplete: "off" }) : null;
    const ok = h("button", { class: "danger", disabled: !!typed, type: "submit" }, action);
    const dialog = h("dialog", {},
      h("form", { method: "dialog", class: "form" },
        h("p", {}, message),
        typed ? h("p", { class: "muted" }, "Type ", h("code", {}, typed), " to confirm.") : null,
        input,
        h("div", { class: "row" }, ok, h("button", { type: "button", onclick: () => dialog.close("cancel") }, "Cancel"))));
    if (input) input.addEventListener("input", () => { ok.disabled = input.value !== typed; });
    ok.addEventListener("click", () => { dialog.returnValue = "ok"; });
    dialog.addEventListener("close", () => { dialog.remove(); resolve(dialog.returnValue === "ok"); });
    document.body.append(dialog);
    dialog.showModal();
    (input || ok).focus();
  });
}

/** A modal asking for one value; resolves to it, or null when cancelled. */
export function promptDialog(message, placeholder = "") {
  return new Promise((resolve) => {
    const input = h("input", { "aria-label": message, placeholder, required: true, autocomplete: "off" });
    const dialog = h("dialog", {},
      h("form", { method: "dialog", class: "form" },
        h("label", {}, message, input),
        h("div", { class: "row" },
          h("button", { class: "primary", type: "submit", value: "ok" }, "OK"),
          h("button", { type: "button", onclick: () => dialog.close("cancel") }, "Cancel"))));
    dialog.addEventListener("close", () => {
      dialog.remove();
      resolve(dialog.returnValue === "ok" && input.value ? input.value : null);
    });
    document.body.append(dialog);
    dialog.showModal();
    input.focus();
  });
}

/** Copies text, falling back to selecting it when the clipboard is not available. */
export async function copy(text, pre) {
  try {
    await navigator.clipboard.writeText(text);
    toast("Copied");
  } catch {
    const range = document.createRange();
    range.selectNodeContents(pre);
    const sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
    toast("Selected: press Ctrl+C to copy");
  }
}
