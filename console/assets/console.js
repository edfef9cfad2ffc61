// seatfence console: the entry module. Sign-in, the hash router, and the
// one poll loop that refreshes the page every 2 s.
//
//   #/cluster  #/events  #/moves[/<move id>]  #/nodes  #/audit  #/alerts
//   #token=<jwt>             sign-in link (`seatfence ctl console`): the
//                            token is taken into sessionStorage and erased,
//                            the page opens on #/cluster
//   #/events&token=<jwt>     the same, opening that page (any route; the
//                            token part may come first too)
//
// Each view module exports {id, title, needsCluster, mount(root, ctx),
// refresh(ctx), unmount()}. The loop fetches what is shared (the fleet's
// metrics, and the cluster when the view needs it), then lets the view
// fetch the rest and update itself. A request never overlaps the previous
// round: the next round is scheduled 2 s after the last one finished, and
// nothing is polled while the tab is hidden.
//
// Metrics come from GET /v1/admin/fleet/metrics (every node's, labelled
// with its node; see metrics.js). When the edge answers that with an error
// (an older edge: 404), the round reads this edge's own GET /metrics
// instead and the page says "this node only"; after a 404 or 405 the fleet
// route is asked again only every FLEET_RETRY_MS.

import * as api from "./api.js";
import { counted, h, render, setStatus, utc } from "./ui.js";
import { ElectionTracker, parsePrometheus, Sampler } from "./metrics.js";
import clusterView from "./view-cluster.js";
import eventsView from "./view-events.js";
import movesView from "./view-moves.js";
import nodesView from "./view-nodes.js";
import auditView from "./view-audit.js";
import alertsView from "./view-alerts.js";

const POLL_MS = 2000;
/** After the edge said it has no fleet route (404/405), read /metrics alone this long before asking again. */
const FLEET_RETRY_MS = 5 * 60 * 1000;

const VIEWS = [clusterView, eventsView, movesView, nodesView, auditView, alertsView];
const DEFAULT_ROUTE = "#/cluster";

const $ = (id) => document.getElementById(id);

/** What the whole console knows; handed to the views as `ctx`. */
const ctx = {
  api,
  sampler: new Sampler(),
  elections: new ElectionTracker(),
  /** The last GET /v1/admin/cluster answer, when it came, and the last error. */
  cluster: null,
  clusterAt: null,
  clusterError: null,
  /** The last metrics failure (the round got no sample), or null; metricsPath: the route that failed. */
  metricsError: null,
  metricsPath: null,
  /** Why the last sample is this node's only (the fleet route's error), or null. */
  fleetError: null,
  /** The route's argument (`#/moves/12` → "12"), or null. */
  arg: null,
  /** Refresh now (after an action), instead of at the next tick. */
  kick: () => kick(),
  navigate: (hash) => {
    window.location.hash = hash;
  },
};

let current = null; // the mounted view
let signedIn = false;
let forbidden = false;
let timer = null;
let running = false;
let again = false;
/** Before this time (ms) the fleet route is not asked (it answered 404/405). */
let fleetRetryAt = 0;

// ---------------------------------------------------------------- screens

/** Show one of: the sign-in form, the "operators only" notice, the console. */
function show(screen, message = "") {
  signedIn = screen === "console";
  forbidden = screen === "forbidden";
  $("signin").hidden = screen !== "signin";
  $("forbidden").hidden = screen !== "forbidden";
  $("nav").hidden = screen !== "console";
  $("view").hidden = screen !== "console";
  $("sign-out").hidden = screen === "signin";
  $("who").hidden = screen === "signin";

  const err = $("signin-error");
  err.hidden = !(screen === "signin" && message);
  err.textContent = screen === "signin" ? message : "";
  $("forbidden-detail").textContent = screen === "forbidden" ? message : "";

  if (screen === "signin") {
    unmountView();
    $("token").value = "";
    $("token").focus();
    setStatus("");
  } else if (screen === "forbidden") {
    unmountView();
    setStatus("");
    $("forbidden-reset").focus();
  }
  showWho();
}

/** "Signed in as NAME (operator) · token expires …", from the token's claims (display only). */
function showWho() {
  const claims = api.readClaims(api.getToken());
  if (!claims) {
    $("who").textContent = "";
    return;
  }
  const exp = typeof claims.exp === "number" ? claims.exp * 1000 : null;
  const role = claims.role === "operator" ? "operator" : "no operator role";
  const expiry = exp === null ? "" : exp < Date.now() ? " · token expired" : ` · token expires ${utc(exp)}`;
  $("who").textContent = `Signed in as ${claims.sub ?? "?"} (${role})${expiry}`;
}

/**
 * Check the stored token against the edge (an operator read) before showing
 * anything: 401 → back to sign-in, 403 → "operators only", else the console.
 */
async function verifyAndEnter() {
  setStatus("Checking the token with the edge…");
  try {
    await api.moves(1);
  } catch (e) {
    if (e.status === 401) {
      api.clearToken();
      show("signin", `The edge refused this token: ${e.message} (401 ${e.code}).`);
    } else if (e.status === 403) {
      show("forbidden", `${e.message} (403 ${e.code}).`);
    } else {
      // The edge is unreachable or has no directory leader: the token may
      // be fine. Enter anyway; the status line shows every failed refresh.
      enterConsole();
      setStatus(`The edge did not answer the check: ${e.message} (${e.status || "no answer"} ${e.code}).`, "crit");
    }
    return;
  }
  enterConsole();
}

function enterConsole() {
  show("console");
  // The hash is a route by now: a sign-in link's token part was taken out
  // (api.takeTokenFromFragment), keeping the route it named.
  if (!window.location.hash.startsWith("#/")) history.replaceState(null, "", DEFAULT_ROUTE);
  route();
}

// ---------------------------------------------------------------- router

function parseHash() {
  const parts = window.location.hash.replace(/^#\/?/, "").split("/");
  const view = VIEWS.find((v) => v.id === parts[0]);
  let arg = null;
  try {
    arg = parts[1] ? decodeURIComponent(parts[1]) : null;
  } catch {
    arg = null; // malformed percent-encoding: ignore the argument
  }
  return { view, arg };
}

function route() {
  if (!signedIn) return;
  const { view, arg } = parseHash();
  if (!view) {
    history.replaceState(null, "", DEFAULT_ROUTE);
    return route();
  }
  ctx.arg = arg;
  for (const v of VIEWS) {
    const link = $(`nav-${v.id}`);
    if (v === view) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (current !== view) {
    unmountView();
    current = view;
    const main = $("view");
    render(main, h("h1", { id: "view-title", text: view.title }));
    view.mount(main, ctx);
    document.title = `${view.title} · seatfence console`;
    // Move focus into the new page so keyboard and screen-reader users
    // land on it, not on the link they left.
    main.focus({ preventScroll: false });
  } else if (view.onArg) {
    view.onArg(ctx);
  }
  kick();
}

function unmountView() {
  if (current && current.unmount) current.unmount();
  current = null;
}

// ---------------------------------------------------------------- polling

/** Run a round now (or right after the one running). */
function kick() {
  if (running) {
    again = true;
    return;
  }
  clearTimeout(timer);
  tick();
}

async function tick() {
  if (!signedIn || forbidden || document.hidden || !current) return;
  running = true;
  const view = current;
  try {
    await Promise.all([refreshMetrics(), view.needsCluster ? refreshCluster() : null]);
    if (view === current && signedIn && !forbidden) await view.refresh(ctx);
    reportRound();
  } catch (e) {
    // A view's own failures are shown inside the view; this is a bug.
    setStatus(`Refresh failed: ${e.message}`, "crit");
    console.error(e);
  } finally {
    running = false;
    clearTimeout(timer);
    if (again) {
      again = false;
      tick();
    } else {
      timer = setTimeout(tick, POLL_MS);
    }
  }
}

/**
 * One sample for the sampler: the fleet's metrics, else (the edge answered
 * the fleet route with an error, or has none) this edge's own /metrics.
 */
async function refreshMetrics() {
  if (Date.now() >= fleetRetryAt) {
    try {
      const text = await api.fleetMetricsText();
      ctx.sampler.push(parsePrometheus(text), Date.now(), "fleet");
      ctx.fleetError = null;
      ctx.metricsError = null;
      return;
    } catch (e) {
      // 401 and 403 are the token's: the auth listeners sign out or show
      // "operators only", and /metrics would not change that.
      if (e.status === 401 || e.status === 403) {
        ctx.metricsError = e;
        ctx.metricsPath = "/v1/admin/fleet/metrics";
        return;
      }
      ctx.fleetError = e;
      // An edge without the route: do not ask it every round.
      if (e.status === 404 || e.status === 405) fleetRetryAt = Date.now() + FLEET_RETRY_MS;
    }
  }
  try {
    ctx.sampler.push(parsePrometheus(await api.metricsText()), Date.now(), "node");
    ctx.metricsError = null;
  } catch (e) {
    ctx.metricsError = e;
    ctx.metricsPath = "/metrics";
  }
}

async function refreshCluster() {
  try {
    ctx.cluster = await api.cluster();
    ctx.clusterAt = Date.now();
    ctx.clusterError = null;
    ctx.elections.observe(ctx.cluster, ctx.clusterAt);
  } catch (e) {
    ctx.clusterError = e;
  }
}

/**
 * The nav bar's metrics line (#fleet, on every page): "fleet: 9 of 9 nodes
 * reporting", the nodes that did not answer by name, or "metrics: this
 * node only" and why. `data-scope` is fleet | node, `data-level` ok |
 * warn | crit.
 */
function showFleet() {
  const el = $("fleet");
  const s = ctx.sampler;
  let text;
  let level;
  let scope = s.scope || "";
  const fleet = s.fleet();
  if (!s.latest) {
    const e = ctx.metricsError;
    text = e ? `metrics: no answer (${e.status || "no answer"} ${e.code})` : "metrics: loading…";
    level = e ? "crit" : "info";
  } else if (fleet) {
    const total = fleet.up.length + fleet.down.length;
    text = `fleet: ${fleet.up.length} of ${counted(total, "node")} reporting`;
    if (fleet.down.length) {
      text += ` · not answering: ${fleet.down.map((n) => `node ${n.node}${n.region ? ` (${n.region})` : ""}`).join(", ")}`;
    }
    level = fleet.down.length ? "crit" : "ok";
  } else {
    const e = ctx.fleetError;
    text = "metrics: this node only" + (e ? ` (the edge's fleet view answered ${e.status || "no answer"} ${e.code})` : "");
    level = "warn";
    scope = "node";
  }
  if (el.textContent !== text) el.textContent = text;
  el.dataset.scope = scope;
  el.dataset.level = level;
  el.className = `fleet ${level}`;
}

/** The footer: when the data is from, or what failed. */
function reportRound() {
  showFleet();
  const failures = [];
  if (current?.needsCluster && ctx.clusterError) {
    const e = ctx.clusterError;
    const from = ctx.clusterAt ? ` (showing the cluster as of ${utc(ctx.clusterAt)})` : "";
    failures.push(`cluster: ${e.status || "no answer"} ${e.code}${from}`);
  }
  if (ctx.metricsError) failures.push(`${ctx.metricsPath}: ${ctx.metricsError.status || "no answer"} ${ctx.metricsError.code}`);
  if (failures.length) setStatus(`Refresh at ${utc(Date.now())} failed for ${failures.join("; ")}.`, "crit");
  else setStatus(`Updated ${utc(Date.now())}.`);
}

// ---------------------------------------------------------------- wiring

function boot() {
  api.onAuthFailure("unauthorized", (e) => {
    if (!signedIn && !forbidden) return; // the sign-in check reports it itself
    api.clearToken();
    show("signin", `Signed out: the edge no longer accepts this token (401 ${e.code}: ${e.message}).`);
  });
  api.onAuthFailure("forbidden", (e) => {
    if (e.code === "forbidden") show("forbidden", `${e.message} (403 ${e.code}).`);
  });

  $("signin-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const token = $("token").value.trim().replace(/^Bearer\s+/i, "");
    if (!token) return;
    api.setToken(token);
    $("token").value = "";
    verifyAndEnter();
  });
  $("sign-out").addEventListener("click", () => {
    api.clearToken();
    show("signin");
  });
  $("forbidden-reset").addEventListener("click", () => {
    api.clearToken();
    show("signin");
  });
  window.addEventListener("hashchange", () => {
    // A sign-in link opened in a tab that is already running the console
    // (or on its sign-in form): take the token, keep the route it names.
    if (api.takeTokenFromFragment(DEFAULT_ROUTE)) verifyAndEnter();
    else route();
  });
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) kick();
  });

  api.takeTokenFromFragment(DEFAULT_ROUTE);
  if (api.getToken()) verifyAndEnter();
  else show("signin");
}

boot();
