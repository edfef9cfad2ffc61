// seatfence console: the numbers behind the live views.
//
//  - parsePrometheus: the edge's GET /metrics (Prometheus text format
//    0.0.4: `name{label="v",...} value [timestamp]`, `#` comments).
//  - Sampler: keeps the last minutes of the series the console shows and
//    turns counters into rates (counter resets handled as Prometheus does).
//  - ElectionTracker: leader elections seen across the whole cluster, from
//    successive GET /v1/admin/cluster answers (term increases per group).
//  - lineChart: an inline SVG line chart, built element by element.
//
// /metrics describes ONE process: the node behind this edge. Counters such
// as holds created or reconciler alerts are that node's, not the fleet's
// (README-console.md, "Gaps").

import { h, svg } from "./ui.js";

/** How much history the console keeps (and charts). */
export const WINDOW_MS = 10 * 60 * 1000;

/** Two samples further apart than this are not joined into a rate (the tab
 * was hidden, or the edge did not answer): the chart shows a gap. */
const MAX_GAP_MS = 15000;

/** The families the console reads; everything else in /metrics is skipped. */
const KEPT = new Set([
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

/**
 * Parse Prometheus text into `Map(name → [{labels, value}])`, keeping only
 * the families in KEPT. Label values are unescaped (`\\`, `\"`, `\n`).
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
    out.get(name).push({ labels, value });
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

/** The sum of `name`'s series matching `filter` in one parsed scrape (null when absent). */
export function sumOf(parsed, name, filter = {}) {
  const series = parsed?.get(name);
  if (!series) return null;
  const hits = series.filter((s) => matches(s.labels, filter));
  return hits.length ? hits.reduce((a, s) => a + s.value, 0) : null;
}

// ---------------------------------------------------------------- sampler

/**
 * The last WINDOW_MS of scrapes of this edge's /metrics. Each sample is
 * `{t, parsed}`; `t` is this browser's clock at the answer.
 */
export class Sampler {
  constructor() {
    this.samples = [];
  }

  push(parsed, t = Date.now()) {
    this.samples.push({ t, parsed });
    while (this.samples.length && this.samples[0].t < t - WINDOW_MS) this.samples.shift();
  }

  get latest() {
    return lastOf(this.samples)?.parsed ?? null;
  }

  /** When the retained history starts (ms), or null. */
  get since() {
    return this.samples[0]?.t ?? null;
  }

  /** The latest value of a gauge (summed over matching series). */
  gauge(name, filter = {}) {
    return sumOf(this.latest, name, filter);
  }

  /**
   * The increase of a counter over the last `windowMs` (a drop between
   * two samples is a restart: the new value counts from zero). Null when
   * fewer than two samples cover the window.
   */
  increase(name, filter = {}, windowMs = WINDOW_MS) {
    const now = lastOf(this.samples)?.t;
    if (now === undefined) return null;
    const inWindow = this.samples.filter((s) => s.t >= now - windowMs);
    if (inWindow.length < 2) return null;
    let total = 0;
    for (let i = 1; i < inWindow.length; i++) {
      const a = sumOf(inWindow[i - 1].parsed, name, filter);
      const b = sumOf(inWindow[i].parsed, name, filter);
      if (a === null || b === null) continue;
      total += b >= a ? b - a : b;
    }
    return total;
  }

  /** Per-second rate of a counter over the last `windowMs`. */
  rate(name, filter = {}, windowMs = 60000) {
    const now = lastOf(this.samples)?.t;
    const inc = this.increase(name, filter, windowMs);
    if (inc === null) return null;
    const first = this.samples.find((s) => s.t >= now - windowMs);
    const secs = (now - first.t) / 1000;
    return secs > 0 ? inc / secs : null;
  }

  /**
   * Points `{t, v}` of a counter's per-second rate between consecutive
   * samples; `v` is null across a gap (chart breaks the line there).
   */
  rateSeries(name, filter = {}) {
    const points = [];
    for (let i = 1; i < this.samples.length; i++) {
      const prev = this.samples[i - 1];
      const cur = this.samples[i];
      const a = sumOf(prev.parsed, name, filter);
      const b = sumOf(cur.parsed, name, filter);
      const dt = (cur.t - prev.t) / 1000;
      if (a === null || b === null || dt <= 0 || cur.t - prev.t > MAX_GAP_MS) {
        points.push({ t: cur.t, v: null });
        continue;
      }
      points.push({ t: cur.t, v: (b >= a ? b - a : b) / dt });
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

/**
 * An SVG line chart of `series` ([{label, cls, points: [{t, v}]}]) over the
 * last WINDOW_MS. Colours come from the classes (console.css `.series-*`);
 * the chart is labelled for screen readers and followed by a legend that
 * states the current values in text.
 */
export function lineChart({ title, series, unit = "/s", now = Date.now() }) {
  const W = 760;
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
