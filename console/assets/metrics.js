// seatfence console: the numbers behind the live views.
//
//  - parsePrometheus: Prometheus text format 0.0.4 (`name{label="v",...}
//    value [timestamp]`, `#` comments), as the edge's
//    GET /v1/admin/fleet/metrics or GET /metrics give it.
//  - Sampler: keeps the last minutes of the series the console shows and
//    turns counters into rates, series by series (counter resets handled
//    as Prometheus does), then sums them.
//  - ElectionTracker: leader elections seen across the whole cluster, from
//    successive GET /v1/admin/cluster answers (term increases per group).
//  - lineChart: an inline SVG line chart, built element by element.
//
// The fleet view. The console polls GET /v1/admin/fleet/metrics: the edge
// asks every node for its own /metrics and merges them, each sample
// labelled `node="<id>",region="<region>"` first, plus one
// `seatfence_fleet_node_up{node,region}` per node (1 answered, 0 did not:
// its samples are then absent). So every series here is one node's, keyed
// by its full label set, node included, and
//  - a counter's increase or rate is taken per series (a node's restart
//    resets only its own series) and then summed over series and nodes;
//  - a count gauge (backlog, unsettled, captured unbooked) is summed over
//    the nodes (Sampler.gauge);
//  - an age gauge (…_age_seconds, the last move's pause) is the largest
//    over the nodes (Sampler.peak), with the node that has it.
// A node that did not answer is left out of every figure, and the console
// says so ("fleet: 8 of 9 nodes reporting", Sampler.fleet).
//
// An edge without the fleet route (an older one answers 404), or one whose
// fleet answer failed, is read through its own GET /metrics instead: one
// process, its series unlabelled, and the page says "this node only"
// (Sampler.scope). Samples of the two kinds never share a series, so a
// switch between them is a gap, never a false rate.

import { h, svg } from "./ui.js";

/** How much history the console keeps (and charts). */
export const WINDOW_MS = 10 * 60 * 1000;

/** Two samples further apart than this are not joined into a rate (the tab
 * was hidden, or the edge did not answer): the chart shows a gap. */
const MAX_GAP_MS = 15000;

/** A chart point needs samples at least this far apart: two rounds run back
 * to back (an action's refresh) would otherwise make a spike of one hold. */
const MIN_RATE_SPAN_MS = 1000;

/** The families the console reads; everything else in the scrape is skipped. */
const KEPT = new Set([
  "seatfence_fleet_node_up",
  "seatfence_holds_created_total",
  "seatfence_hold_conflicts_total",
  "seatfence_stale_epoch_rejections_total",
  "seatfence_leader_changes_total",
  "seatfence_group_leader_changes_total",
  "seatfence_reconciler_alerts_total",
  "seatfence_reconciler_extensions_total",
  "seatfence_reconciliation_backlog",
  "seatfence_unknown_payment_age_seconds",
  "seatfence_payments_unsettled",
  "seatfence_money_captured_unbooked",
  "seatfence_money_alerts_total",
  "seatfence_refund_pending_age_seconds",
  "seatfence_outbox_backlog",
  "seatfence_gateway_errors_total",
  "seatfence_no_leader_total",
  "seatfence_storage_full",
  "seatfence_groups_under_replicated",
  "seatfence_move_step",
  "seatfence_move_last_pause_seconds",
]);

// ---------------------------------------------------------------- parsing

function parseNumber(s) {
  if (s === "+Inf" || s === "Inf") return Infinity;
  if (s === "-Inf") return -Infinity;
  return Number(s); // "NaN" → NaN; garbage → NaN
}

/** A series' identity within its family: its labels, sorted, as one string. */
function seriesKey(labels) {
  return Object.keys(labels)
    .sort()
    .map((k) => `${k}=${JSON.stringify(labels[k])}`)
    .join(",");
}

/**
 * Parse Prometheus text into `Map(name → [{labels, key, value}])`, keeping
 * only the families in KEPT; `key` identifies the series (seriesKey). Label
 * values are unescaped (`\\`, `\"`, `\n`).
 */
export function parsePrometheus(text) {
  const out = new Map();
  for (const raw of String(text).split("\n")) {
    const line = raw.trim();
    if (!line || line.startsWith("#")) continue;
    let i = 0;
    while (i < line.length && /[A-Za-z0-9_:]/.test(line[i])) i++;
    const name = line.slice(0, i);
    if (!KEPT.has(name)) continue;
    const labels = {};
    if (line[i] === "{") {
      i++;
      while (i < line.length && line[i] !== "}") {
        const eq = line.indexOf("=", i);
        if (eq < 0) break;
        const label = line.slice(i, eq).trim();
        i = eq + 1;
        if (line[i] !== '"') break;
        i++;
        let value = "";
        while (i < line.length && line[i] !== '"') {
          if (line[i] === "\\" && i + 1 < line.length) {
            const next = line[i + 1];
            value += next === "n" ? "\n" : next;
            i += 2;
          } else {
            value += line[i++];
          }
        }
        labels[label] = value;
        i++; // the closing quote
        while (line[i] === "," || line[i] === " ") i++;
      }
      i++; // the closing brace
    }
    const value = parseNumber(line.slice(i).trim().split(/\s+/)[0]);
    if (!out.has(name)) out.set(name, []);
    out.get(name).push({ labels, key: seriesKey(labels), value });
  }
  return out;
}

/** The last element of an array, or undefined. */
function lastOf(arr) {
  return arr[arr.length - 1];
}

/** Whether `labels` has every pair of `filter`. */
function matches(labels, filter) {
  return Object.entries(filter).every(([k, v]) => labels[k] === v);
}

/** The series of `name` matching `filter` in one parsed scrape ([] when absent). */
export function seriesOf(parsed, name, filter = {}) {
  return (parsed?.get(name) || []).filter((s) => matches(s.labels, filter));
}

/** The sum of `name`'s series matching `filter` in one parsed scrape (null when absent). */
export function sumOf(parsed, name, filter = {}) {
  const hits = seriesOf(parsed, name, filter);
  return hits.length ? hits.reduce((a, s) => a + s.value, 0) : null;
}

/**
 * How much a counter rose between two scrapes, summed over its series:
 * each series (one node's, in the fleet view) is compared with itself
 * only, and a series that dropped restarted from zero (its process did),
 * so the new value is its increase. A series missing from either scrape
 * (a node that did not answer, a label value seen for the first time)
 * adds nothing. Null when no series is in both.
 */
function deltaOf(before, after, name, filter) {
  const base = new Map(seriesOf(before, name, filter).map((s) => [s.key, s.value]));
  let sum = 0;
  let matched = false;
  for (const s of seriesOf(after, name, filter)) {
    const prev = base.get(s.key);
    if (prev === undefined || !Number.isFinite(prev) || !Number.isFinite(s.value)) continue;
    sum += s.value >= prev ? s.value - prev : s.value;
    matched = true;
  }
  return matched ? sum : null;
}

/** "node 4 (us-east)" for a fleet series' labels, "this node" for an unlabelled one. */
export function nodeName(labels) {
  if (!labels || labels.node === undefined) return "this node";
  return labels.region ? `node ${labels.node} (${labels.region})` : `node ${labels.node}`;
}

// ---------------------------------------------------------------- sampler

/**
 * The last WINDOW_MS of metric scrapes. Each sample is `{t, parsed,
 * scope}`: `t` is this browser's clock at the answer, `scope` is "fleet"
 * (GET /v1/admin/fleet/metrics, every series labelled with its node) or
 * "node" (this edge's own GET /metrics).
 */
export class Sampler {
  constructor() {
    this.samples = [];
  }

  push(parsed, t = Date.now(), scope = "node") {
    this.samples.push({ t, parsed, scope });
    while (this.samples.length && this.samples[0].t < t - WINDOW_MS) this.samples.shift();
  }

  get latest() {
    return lastOf(this.samples)?.parsed ?? null;
  }

  /** "fleet" or "node": what the latest sample covers (null before the first). */
  get scope() {
    return lastOf(this.samples)?.scope ?? null;
  }

  /** When the retained history starts (ms), or null. */
  get since() {
    return this.samples[0]?.t ?? null;
  }

  /**
   * The nodes of the latest fleet sample, from seatfence_fleet_node_up:
   * `{up: [{node, region}], down: [{node, region}]}`, by node id; null for
   * a sample of this node only.
   */
  fleet() {
    if (this.scope !== "fleet") return null;
    const nodes = seriesOf(this.latest, "seatfence_fleet_node_up")
      .map((s) => ({ node: s.labels.node, region: s.labels.region ?? "", up: s.value > 0 }))
      .sort((a, b) => Number(a.node) - Number(b.node) || String(a.node).localeCompare(String(b.node)));
    return {
      up: nodes.filter((n) => n.up).map(({ node, region }) => ({ node, region })),
      down: nodes.filter((n) => !n.up).map(({ node, region }) => ({ node, region })),
    };
  }

  /** The latest matching series of `name`: [{labels, key, value}]. */
  series(name, filter = {}) {
    return seriesOf(this.latest, name, filter);
  }

  /** The latest value of a count gauge, summed over matching series (over the nodes, in the fleet view). */
  gauge(name, filter = {}) {
    return sumOf(this.latest, name, filter);
  }

  /**
   * The largest latest value among the matching series, `{value, labels}`
   * (labels name the node that has it), or null when absent. For ages: the
   * fleet's oldest is the largest of the nodes' oldest.
   */
  peak(name, filter = {}) {
    let best = null;
    for (const s of this.series(name, filter)) {
      if (Number.isFinite(s.value) && (best === null || s.value > best.value)) best = { value: s.value, labels: s.labels };
    }
    return best;
  }

  /** The samples of the last `windowMs`, oldest first. */
  windowOf(windowMs) {
    const now = lastOf(this.samples)?.t;
    return now === undefined ? [] : this.samples.filter((s) => s.t >= now - windowMs);
  }

  /**
   * The increase of a counter over the last `windowMs`, per series and
   * summed (deltaOf). Null when fewer than two samples cover the window,
   * or no two consecutive ones share a series.
   */
  increase(name, filter = {}, windowMs = WINDOW_MS) {
    const inWindow = this.windowOf(windowMs);
    if (inWindow.length < 2) return null;
    let total = 0;
    let seen = false;
    for (let i = 1; i < inWindow.length; i++) {
      const d = deltaOf(inWindow[i - 1].parsed, inWindow[i].parsed, name, filter);
      if (d === null) continue;
      total += d;
      seen = true;
    }
    return seen ? total : null;
  }

  /** Per-second rate of a counter over the last `windowMs` (summed over series). */
  rate(name, filter = {}, windowMs = 60000) {
    const inWindow = this.windowOf(windowMs);
    const inc = this.increase(name, filter, windowMs);
    if (inc === null) return null;
    const secs = (lastOf(inWindow).t - inWindow[0].t) / 1000;
    return secs > 0 ? inc / secs : null;
  }

  /**
   * Points `{t, v}` of a counter's per-second rate between successive
   * samples at least MIN_RATE_SPAN_MS apart (summed over series); `v` is
   * null across a gap (the chart breaks the line there).
   */
  rateSeries(name, filter = {}) {
    const points = [];
    let prev = this.samples[0];
    for (let i = 1; i < this.samples.length; i++) {
      const cur = this.samples[i];
      if (cur.t - prev.t < MIN_RATE_SPAN_MS) continue; // too close: measure from `prev` at the next one
      const d = deltaOf(prev.parsed, cur.parsed, name, filter);
      const span = cur.t - prev.t;
      prev = cur;
      points.push({ t: cur.t, v: d === null || span > MAX_GAP_MS ? null : d / (span / 1000) });
    }
    return points;
  }
}

// ---------------------------------------------------------------- elections

/**
 * Elections and leader changes seen across the cluster, from successive
 * cluster answers: a group whose leader's term rose by n had n elections
 * since the previous answer; a different leader node is a leader change.
 * Only what happens while the console polls is seen (a restart of the
 * console starts from zero).
 */
export class ElectionTracker {
  constructor() {
    this.last = new Map(); // group id → {term, leader}
    this.elections = []; // {t, group, n}
    this.changes = []; // {t, group, from, to}
    this.first = null;
  }

  observe(cluster, t = Date.now()) {
    if (this.first === null) this.first = t;
    for (const g of cluster.groups || []) {
      if (g.term === null || g.term === undefined) continue; // no leader reported
      const prev = this.last.get(g.group_id);
      if (prev) {
        if (g.term > prev.term) this.elections.push({ t, group: g.group_id, n: g.term - prev.term });
        if (prev.leader !== null && g.leader !== null && g.leader !== prev.leader) {
          this.changes.push({ t, group: g.group_id, from: prev.leader, to: g.leader });
        }
      }
      this.last.set(g.group_id, { term: g.term, leader: g.leader });
    }
    const cutoff = t - WINDOW_MS;
    while (this.elections.length && this.elections[0].t < cutoff) this.elections.shift();
    while (this.changes.length && this.changes[0].t < cutoff) this.changes.shift();
  }

  /** Elections per minute over the last `windowMs` (or the time observed, if shorter). */
  electionsPerMinute(windowMs = 5 * 60000, now = Date.now()) {
    return this.perMinuteOf(this.elections.filter((e) => e.t >= now - windowMs).reduce((a, e) => a + e.n, 0), windowMs, now);
  }

  leaderChangesPerMinute(windowMs = 5 * 60000, now = Date.now()) {
    return this.perMinuteOf(this.changes.filter((e) => e.t >= now - windowMs).length, windowMs, now);
  }

  /** The groups that changed leader most often in the window, most first. */
  busiest(limit = 5) {
    const counts = new Map();
    for (const c of this.changes) counts.set(c.group, (counts.get(c.group) || 0) + 1);
    return [...counts.entries()].sort((a, b) => b[1] - a[1]).slice(0, limit);
  }

  /** `count` events over `windowMs` (or the time observed), per minute. */
  perMinuteOf(count, windowMs, now) {
    if (this.first === null) return null;
    const observed = Math.min(windowMs, now - this.first);
    return observed >= 10000 ? (count * 60000) / observed : null;
  }
}

// ---------------------------------------------------------------- chart

/** The smallest of 1, 2, 5 × 10^k at or above `v` (at least 1). */
function niceCeil(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

/** The chart's drawing width when nothing better is known, and the least it is drawn at. */
const DEFAULT_CHART_W = 760;
const MIN_CHART_W = 320;
/** The figure's horizontal padding and borders around the SVG (console.css `.chart-box`: 0.8rem + 1px each side). */
const CHART_BOX_CHROME_PX = 28;

/**
 * How wide to draw a chart that goes into `container`, in CSS pixels: the
 * width the chart already there is laid out at (the SVG is `width: 100%`
 * of its card), else the container's width less the card's padding. A
 * chart drawn at its real width fills the card at 1:1, so its text keeps
 * its size on any screen (re-measured every refresh, so a resized window
 * is followed within a round).
 */
export function chartWidth(container) {
  const drawn = container?.querySelector("svg.chart");
  const w = drawn ? drawn.getBoundingClientRect().width : (container?.clientWidth ?? 0) - CHART_BOX_CHROME_PX;
  return w > 0 ? Math.max(MIN_CHART_W, Math.round(w)) : DEFAULT_CHART_W;
}

/**
 * An SVG line chart of `series` ([{label, cls, points: [{t, v}]}]) over the
 * last WINDOW_MS, `width` CSS pixels wide (chartWidth) and 200 high.
 * Colours come from the classes (console.css `.series-*`); the chart is
 * labelled for screen readers and followed by a legend that states the
 * current values in text.
 */
export function lineChart({ title, series, unit = "/s", now = Date.now(), width = DEFAULT_CHART_W }) {
  const W = Math.max(MIN_CHART_W, Math.round(width));
  const H = 200;
  const m = { l: 52, r: 12, t: 12, b: 26 };
  const from = now - WINDOW_MS;
  const values = series.flatMap((s) => s.points.map((p) => p.v)).filter((v) => v !== null && Number.isFinite(v));
  const yMax = niceCeil(Math.max(0, ...values));
  const x = (t) => m.l + ((t - from) / WINDOW_MS) * (W - m.l - m.r);
  const y = (v) => H - m.b - (v / yMax) * (H - m.t - m.b);
  const titleId = `chart-${title.replace(/[^a-z0-9]+/gi, "-").toLowerCase()}`;

  const grid = [0, 0.5, 1].map((f) =>
    svg(
      "g",
      { class: "gridline" },
      svg("line", { x1: m.l, x2: W - m.r, y1: y(f * yMax), y2: y(f * yMax) }),
      svg("text", { x: m.l - 6, y: y(f * yMax) + 4, class: "axis-label", "text-anchor": "end", text: `${+(f * yMax).toPrecision(3)}` }),
    ),
  );
  const ticks = [10, 5, 0].map((minAgo) =>
    svg("text", {
      x: x(now - minAgo * 60000),
      y: H - 6,
      class: "axis-label",
      "text-anchor": minAgo === 0 ? "end" : minAgo === 10 ? "start" : "middle",
      text: minAgo === 0 ? "now" : `−${minAgo} min`,
    }),
  );
  const lines = series.map((s) => {
    // One path; a null value starts a new segment (a gap in the data).
    let d = "";
    let pen = false;
    for (const p of s.points) {
      if (p.t < from || p.v === null || !Number.isFinite(p.v)) {
        pen = false;
        continue;
      }
      d += `${pen ? "L" : "M"}${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`;
      pen = true;
    }
    return svg("path", { d: d || "M0,0", class: `series ${s.cls}` });
  });

  const chart = svg(
    "svg",
    { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-labelledby": titleId },
    svg("title", { id: titleId, text: title }),
    grid,
    ticks,
    lines,
  );
  const legend = h(
    "ul",
    { class: "legend" },
    series.map((s) => {
      const last = [...s.points].reverse().find((p) => p.v !== null);
      return h(
        "li",
        {},
        h("span", { class: `swatch ${s.cls}`, "aria-hidden": "true" }),
        `${s.label}: `,
        h("strong", { text: last ? `${last.v.toFixed(1)}${unit}` : "–" }),
      );
    }),
  );
  return h("figure", { class: "chart-box" }, h("figcaption", { text: title }), chart, legend);
}
