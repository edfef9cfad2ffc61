// seatfence console: the edge's HTTP API, as the console uses it.
//
// Only endpoints listed in docs/openapi.json (api/src/routes.rs ROUTES)
// are called, all on this page's own origin (CSP connect-src 'self'). The
// operator token lives in sessionStorage and is sent as
// `Authorization: Bearer`; the console never sets a cookie.

const TOKEN_KEY = "seatfence.console.token";

/** Default deadline of a read (the cluster view fans out to every node with
 * a 2 s deadline of its own, so reads get comfortably more than that). */
const READ_TIMEOUT_MS = 10000;

/** Operator actions can take long: a transfer waits up to 10 s, a drain runs
 * up to three rounds of transfers. The edge answers in the end either way. */
const ACTION_TIMEOUT_MS = 120000;

// ---------------------------------------------------------------- token

/** The stored token, or null. */
export function getToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch {
    return null; // storage disabled: the console cannot keep a session
  }
}

export function setToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function clearToken() {
  try {
    sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    /* nothing stored */
  }
}

/**
 * Take a sign-in link's token into sessionStorage and erase it from the
 * address bar and the history entry, so it is neither bookmarked nor shared
 * by copying the URL. The fragment holds the token alone, as
 * `seatfence ctl console` prints it (`/console#token=<jwt>`), or a page
 * route and the token joined by `&`, in either order:
 * `/console#/events&token=<jwt>`, `/console#token=<jwt>&/moves/12`
 * (`#events&token=<jwt>`, without the slash, works too). The route stays
 * in the address bar (`#/events`); a link without one is rewritten to
 * `defaultRoute`. Returns true when the fragment carried a token.
 */
export function takeTokenFromFragment(defaultRoute = "#/cluster") {
  const parts = window.location.hash.replace(/^#/, "").split("&");
  const tokenPart = parts.find((p) => p.startsWith("token="));
  if (tokenPart === undefined) return false;
  const route = parts.find((p) => p && !p.startsWith("token="));
  const hash = route ? "#/" + route.replace(/^\/+/, "") : defaultRoute;
  // Erase first: even a malformed link must not stay in the address bar.
  history.replaceState(null, "", window.location.pathname + window.location.search + hash);
  let token;
  try {
    token = decodeURIComponent(tokenPart.slice("token=".length)).trim();
  } catch {
    return false; // malformed percent-encoding: not a token
  }
  if (!token) return false;
  setToken(token);
  return true;
}

/**
 * The claims of a JWT, decoded for display only (who is signed in, until
 * when). Nothing here is trusted: the edge verifies the signature and the
 * role on every request. Returns null for anything that is not a JWT.
 */
export function readClaims(token) {
  const parts = (token || "").split(".");
  if (parts.length !== 3) return null;
  try {
    const b64 = parts[1].replace(/-/g, "+").replace(/_/g, "/");
    const padded = b64 + "=".repeat((4 - (b64.length % 4)) % 4);
    const bytes = Uint8Array.from(atob(padded), (c) => c.charCodeAt(0));
    const claims = JSON.parse(new TextDecoder().decode(bytes));
    return claims && typeof claims === "object" ? claims : null;
  } catch {
    return null;
  }
}

/**
 * A fresh Idempotency-Key for a keyed operator action (move start, abort).
 * Built from crypto.getRandomValues, which, unlike crypto.randomUUID, also
 * exists on plain-http origins (an edge reached by address). 1-255
 * printable ASCII characters, not starting with `~` (DESIGN §7).
 */
export function newIdempotencyKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return "console-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

// ---------------------------------------------------------------- errors

/**
 * A request that did not succeed. `status` is the HTTP status (0 when no
 * answer arrived), `code` the API's stable error code (`error.code`, or
 * `network` / `timeout` / `bad_answer` for failures of the transport),
 * `body` the parsed JSON answer when there was one.
 */
export class ApiError extends Error {
  constructor(status, code, message, body = null) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.body = body;
  }

  /** Nothing is known to have happened: the same request may be retried. */
  get retriable() {
    return this.status === 0 || this.status === 429 || this.status === 503;
  }
}

// Listeners for the answers that change the whole console's state.
const authListeners = { unauthorized: [], forbidden: [] };

/** Call `fn(error)` on every 401 (`unauthorized`) or 403 (`forbidden`). */
export function onAuthFailure(kind, fn) {
  authListeners[kind].push(fn);
}

// ---------------------------------------------------------------- transport

/**
 * One request to the edge. Resolves `{status, body, headers}` for a 2xx
 * (body: parsed JSON, or text for non-JSON answers); rejects with an
 * ApiError otherwise. `opts`: body (sent as JSON), idempotencyKey,
 * timeoutMs, auth (send the token; default true), accept (the Accept
 * header; default application/json).
 */
export async function request(method, path, opts = {}) {
  const { body, idempotencyKey, timeoutMs = READ_TIMEOUT_MS, auth = true, accept = "application/json" } = opts;
  const headers = { Accept: accept };
  if (auth) {
    const token = getToken();
    if (token) headers.Authorization = "Bearer " + token;
  }
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (idempotencyKey) headers["Idempotency-Key"] = idempotencyKey;

  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), timeoutMs);
  let resp;
  try {
    resp = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: ctrl.signal,
      credentials: "omit", // no cookies, ever
      cache: "no-store",
      redirect: "error",
    });
  } catch (e) {
    const timedOut = ctrl.signal.aborted;
    throw new ApiError(
      0,
      timedOut ? "timeout" : "network",
      timedOut ? `no answer within ${timeoutMs / 1000} s` : `request failed: ${e.message}`,
    );
  } finally {
    clearTimeout(timer);
  }

  const text = await resp.text();
  const isJson = (resp.headers.get("content-type") || "").startsWith("application/json");
  let parsed = text;
  if (isJson && text) {
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new ApiError(resp.status, "bad_answer", "the edge answered malformed JSON");
    }
  }
  if (resp.ok) return { status: resp.status, body: parsed, headers: resp.headers };

  const err = parsed && typeof parsed === "object" && parsed.error ? parsed.error : null;
  const error = new ApiError(
    resp.status,
    err?.code || `http_${resp.status}`,
    err?.message || `${resp.status} ${resp.statusText}`,
    parsed,
  );
  if (resp.status === 401) authListeners.unauthorized.forEach((fn) => fn(error));
  if (resp.status === 403) authListeners.forbidden.forEach((fn) => fn(error));
  throw error;
}

const enc = encodeURIComponent;

// ---------------------------------------------------------------- reads

/** GET /v1/admin/cluster: {regions, nodes, groups, moves, repairs, under_replicated}. */
export async function cluster() {
  return (await request("GET", "/v1/admin/cluster")).body;
}

/** GET /v1/admin/audit?limit=N: {entries: [{seq, at, actor, action, target, result}]}. */
export async function audit(limit = 500) {
  return (await request("GET", `/v1/admin/audit?limit=${limit}`)).body;
}

/** GET /v1/admin/moves?limit=N: {moves: [Move]}, newest first. */
export async function moves(limit = 50) {
  return (await request("GET", `/v1/admin/moves?limit=${limit}`)).body;
}

/** GET /v1/admin/moves/{id}: one Move. */
export async function move(id) {
  return (await request("GET", `/v1/admin/moves/${enc(id)}`)).body;
}

/** GET /v1/events/{id}: the event's settings, epoch, owner, sale state. */
export async function event(id) {
  return (await request("GET", `/v1/events/${enc(id)}`)).body;
}

/** GET /v1/events/{id}/availability?limit=0: the counts only, no seat ids. */
export async function availability(id) {
  return (await request("GET", `/v1/events/${enc(id)}/availability?limit=0`)).body;
}

/** GET /v1/admin/events/{id}/payments: pending payments, the oldest one's lateness, unsettled, refunds due. */
export async function eventPayments(id) {
  return (await request("GET", `/v1/admin/events/${enc(id)}/payments`)).body;
}

/**
 * GET /v1/admin/fleet/metrics: every node's /metrics merged by the edge,
 * Prometheus text; each sample carries `node="<id>",region="<region>"`
 * first, and `seatfence_fleet_node_up{node,region}` says which nodes
 * answered (1) or not (0). Operator token, like every admin route.
 */
export async function fleetMetricsText() {
  return (await request("GET", "/v1/admin/fleet/metrics", { accept: "text/plain" })).body;
}

/** GET /metrics: this edge's own process, Prometheus text (no token needed). */
export async function metricsText() {
  return (await request("GET", "/metrics", { auth: false, accept: "text/plain" })).body;
}

// ---------------------------------------------------------------- actions

// Each action resolves the whole answer ({status, body, headers}) so the
// console can show exactly what the edge said.

/** POST /v1/admin/events/{id}/move {to_region} → 202 Move (keyed). */
export function startMove(eventId, toRegion, idempotencyKey) {
  return request("POST", `/v1/admin/events/${enc(eventId)}/move`, {
    body: { to_region: toRegion },
    idempotencyKey,
    timeoutMs: ACTION_TIMEOUT_MS,
  });
}

/** POST /v1/admin/moves/{id}/abort → 200 Move, `state: aborted` (keyed). */
export function abortMove(moveId, idempotencyKey) {
  return request("POST", `/v1/admin/moves/${enc(moveId)}/abort`, {
    idempotencyKey,
    timeoutMs: ACTION_TIMEOUT_MS,
  });
}

/** POST /v1/admin/events/{id}/waiting-room {admit_per_sec, ticket_ttl_secs, enabled} → {event_id, waiting_room}. */
export function setWaitingRoom(eventId, room) {
  return request("POST", `/v1/admin/events/${enc(eventId)}/waiting-room`, {
    body: room,
    timeoutMs: ACTION_TIMEOUT_MS,
  });
}

/** POST /v1/admin/nodes/{id}/drain → {node_id, drained, done, moved, remaining, failures}. */
export function drain(nodeId) {
  return request("POST", `/v1/admin/nodes/${enc(nodeId)}/drain`, { timeoutMs: ACTION_TIMEOUT_MS });
}

/** POST /v1/admin/nodes/{id}/undrain → {node_id, drained: false}. */
export function undrain(nodeId) {
  return request("POST", `/v1/admin/nodes/${enc(nodeId)}/undrain`, { timeoutMs: ACTION_TIMEOUT_MS });
}

/** POST /v1/admin/groups/{id}/transfer-leader {to} → {group_id, leader, previous_leader, term}. */
export function transferLeader(groupId, toNode) {
  return request("POST", `/v1/admin/groups/${enc(groupId)}/transfer-leader`, {
    body: { to: toNode },
    timeoutMs: ACTION_TIMEOUT_MS,
  });
}
