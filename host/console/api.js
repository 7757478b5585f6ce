// Every call the console makes goes through the public REST API with the user's key, sent
// as a header (never in a URL). The key lives in sessionStorage, or in localStorage when the
// user asked to be remembered on this device.

const KEY = "lancet.key";

/** Who the key belongs to: {tenant, role, scope, principal, database}; null when signed out. */
export const session = { me: null };
/** Whether to offer writes: a read-only key sees no write buttons. */
export const canWrite = () => !!session.me && session.me.role !== "read";

export class ApiError extends Error {
  constructor(status, body) {
    const detail = (body && (body.detail || body.error)) || `HTTP ${status}`;
    super(detail);
    this.status = status;
    this.code = body && body.code;
    this.title = body && body.title;
  }
}

export function key() {
  return sessionStorage.getItem(KEY) || localStorage.getItem(KEY);
}

export function setKey(value, remember) {
  forgetKey();
  (remember ? localStorage : sessionStorage).setItem(KEY, value);
}

export function forgetKey() {
  sessionStorage.removeItem(KEY);
  localStorage.removeItem(KEY);
}

function headers(extra) {
  const h = { ...extra };
  const k = key();
  if (k) h["x-api-key"] = k;
  return h;
}

async function failure(response, signOutOn401 = true) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  const err = new ApiError(response.status, body);
  if (response.status === 401 && signOutOn401) {
    // The app asks for a key again.
    window.dispatchEvent(new CustomEvent("lancet:unauthorized", { detail: err.message }));
  }
  return err;
}

/** POST (or GET) a JSON call; answers the JSON body, throws ApiError. */
export async function call(path, body = {}, { method = "POST", signal } = {}) {
  const init = {
    method,
    signal,
    headers: headers({ accept: "application/vnd.lancet.rows+json, application/json" }),
  };
  if (method !== "GET") {
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (!response.ok) throw await failure(response);
  return response.json();
}

/** Plain text (for /metrics, which takes no API key: a 401 there is not about the key). */
export async function text(path) {
  const response = await fetch(path);
  if (!response.ok) throw await failure(response, false);
  return response.text();
}

/** Bytes as a Blob (blob columns, shown as images). */
export async function bytes(path) {
  const response = await fetch(path, { headers: headers({}) });
  if (!response.ok) throw await failure(response);
  return response.blob();
}

/** A table or namespace id in a path: parts joined by the `$` delimiter. */
export function pathId(parts) {
  return parts.length ? parts.map(encodeURIComponent).join("$") : "$";
}

export const table = (id, op) => `/v1/table/${pathId(id)}/${op}`;
export const namespace = (id, op) => `/v1/namespace/${pathId(id)}/${op}`;

/** Every page of a paged GET listing, joined (names only: cheap even for thousands). */
export async function all(path, field) {
  const out = [];
  let token = null;
  for (;;) {
    const q = new URLSearchParams({ limit: "1000" });
    if (token) q.set("page_token", token);
    const page = await call(`${path}?${q}`, {}, { method: "GET" });
    out.push(...(page[field] || []));
    token = page.page_token;
    if (!token) return out;
  }
}
