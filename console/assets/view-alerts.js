// seatfence console: #/alerts. What needs an operator's attention, from
// two sources:
//   - the metrics the console polls (console.js, metrics.js): normally
//     GET /v1/admin/fleet/metrics, every node's /metrics labelled with its
//     node (families in api/src/metrics.rs, raft/src/metrics.rs,
//     payments/src/metrics.rs). Counters become rates per node and are
//     summed; counts (backlog, unsettled, captured unbooked) are summed over
//     the nodes; ages are the oldest on any node, named. The payment
//     families count the event groups each node leads, so the sums cover
//     every group whose leader answered. When the edge has no fleet view,
//     this edge's own GET /metrics: one node, and the page says so. The
//     alerts' subjects (which hold, which event) are only in the nodes'
//     ALERT log lines (README-console.md, "Gaps").
//   - GET /v1/admin/cluster (polled by console.js): unreachable or not-live
//     nodes, leaderless and under-replicated groups, and the elections the
//     console saw across the whole cluster (term increases between polls).
//
// Test hooks: each alert `[data-alert="<name>"]` with `data-level` =
// ok | info | warn | crit; #alerts-scope says whose metrics they are.

import { badge, counted, duration, h, ids, num, rate, render, renderIfChanged } from "./ui.js";
import { chartWidth, lineChart, nodeName, WINDOW_MS } from "./metrics.js";

/** The reconciler gives up after 3 extensions of 2 min past the deadline (DESIGN §8). */
const UNKNOWN_PAYMENT_CRIT_S = 6 * 60;
/** A refund still undelivered this long after the capture raises an ALERT (DESIGN §8). */
const REFUND_CRIT_S = 5 * 60;

let els = null;

const LEVEL_ORDER = { crit: 0, warn: 1, info: 2, ok: 3 };

/**
 * One alert: `name` (stable id), `title`, `level`, `value` (text), `detail`
 * (what it means and where it comes from).
 */
function alert(name, title, level, value, detail) {
  return { name, title, level, value, detail };
}

/** A counter's increase over the retained window (null before two samples). */
function inc(s, metric, filter = {}) {
  return s.increase(metric, filter, WINDOW_MS);
}

/** " at node 4 (us-east)" after an age, in the fleet view (where the oldest one is). */
function at(peak, fleet) {
  return peak && fleet ? ` at ${nodeName(peak.labels)}` : "";
}

/** The fleet's metrics: who answered (only when the console reads them). */
function fleetAlert(ctx) {
  const s = ctx.sampler;
  const fleet = s.fleet();
  if (fleet) {
    const total = fleet.up.length + fleet.down.length;
    const down = fleet.down.map((n) => nodeName(n)).join(", ");
    return alert(
      "fleet",
      "Nodes reporting metrics",
      fleet.down.length ? "crit" : "ok",
      `${fleet.up.length} of ${counted(total, "node")} reporting` + (down ? ` · not answering: ${down}` : ""),
      "GET /v1/admin/fleet/metrics: this edge asks every node for its /metrics (seatfence_fleet_node_up). A node that does not answer is left out of every figure below.",
    );
  }
  const e = ctx.fleetError;
  return alert(
    "fleet",
    "Nodes reporting metrics",
    "warn",
    "this node only" + (e ? ` (the fleet view answered ${e.status || "no answer"} ${e.code})` : ""),
    "The edge gave no fleet view, so the figures below are those of the node behind this edge (its GET /metrics).",
  );
}

function metricAlerts(ctx) {
  const s = ctx.sampler;
  if (!s.latest) {
    const e = ctx.metricsError;
    return [alert("metrics", "Metrics", e ? "crit" : "info", e ? `${e.status || "no answer"} ${e.code}` : "loading…", "Every alert below except the cluster's needs them.")];
  }
  const fleet = s.scope === "fleet";
  // Where a figure comes from, for the details: every node's, or one.
  const of = fleet ? "summed over the nodes that answered" : "of this node only";
  const out = [fleetAlert(ctx)];
  const since = `over the last ${duration(Math.min(WINDOW_MS, Date.now() - s.since))}`;

  const alertsNew = inc(s, "seatfence_reconciler_alerts_total");
  const alertsTotal = s.gauge("seatfence_reconciler_alerts_total");
  out.push(
    alert(
      "reconciler-alerts",
      "Reconciler: extensions exhausted",
      alertsNew > 0 ? "crit" : alertsTotal > 0 ? "warn" : "ok",
      `+${num(alertsNew)} ${since} · ${num(alertsTotal)} since ${fleet ? "each node" : "the node"} started`,
      `Holds whose payment stayed unknown after 3 extensions: the seats are kept until the gateway answers (ALERT log line each; seatfence_reconciler_alerts_total, ${of}).`,
    ),
  );

  const age = s.peak("seatfence_unknown_payment_age_seconds");
  const ageS = age?.value ?? 0;
  const ext = inc(s, "seatfence_reconciler_extensions_total");
  out.push(
    alert(
      "payment-unknown",
      "Payment still unknown",
      ageS >= UNKNOWN_PAYMENT_CRIT_S ? "crit" : ageS > 0 ? "warn" : "ok",
      (ageS > 0 ? `oldest ${duration(ageS * 1000)} past its deadline${at(age, fleet)}` : "none past its deadline") + ` · ${counted(ext, "extension")} ${since}`,
      `seatfence_unknown_payment_age_seconds (the oldest ${fleet ? "on any node" : "on this node"}) and seatfence_reconciler_extensions_total (${of}), at each node's last reconciler sweep of the groups it leads.`,
    ),
  );

  const backlog = s.gauge("seatfence_reconciliation_backlog");
  const unsettled = s.gauge("seatfence_payments_unsettled");
  out.push(
    alert(
      "payments-pending",
      "Payments awaiting reconciliation",
      unsettled > 0 ? "warn" : "info",
      `${num(backlog)} due · ${num(unsettled)} released but unsettled`,
      `seatfence_reconciliation_backlog and seatfence_payments_unsettled, ${of} (the reconciler keeps asking the gateway).`,
    ),
  );

  const unbooked = s.gauge("seatfence_money_captured_unbooked");
  const moneyNew = inc(s, "seatfence_money_alerts_total");
  const refund = s.peak("seatfence_refund_pending_age_seconds");
  const refundAge = refund?.value ?? 0;
  out.push(
    alert(
      "money",
      "Money captured, neither booked nor refunded",
      moneyNew > 0 || refundAge >= REFUND_CRIT_S ? "crit" : unbooked > 0 ? "warn" : "ok",
      `${num(unbooked)} now · +${counted(moneyNew, "money alert")} ${since} · oldest undelivered refund ${refundAge ? duration(refundAge * 1000) + at(refund, fleet) : "none"}`,
      `seatfence_money_captured_unbooked and seatfence_money_alerts_total (${of}), seatfence_refund_pending_age_seconds (the oldest ${fleet ? "on any node" : "on this node"}).`,
    ),
  );

  const gw = s.rate("seatfence_gateway_errors_total", {}, 60000);
  out.push(
    alert(
      "gateway",
      "Gateway errors",
      gw > 0 ? "warn" : "ok",
      `${rate(gw === null ? null : gw * 60)}/min`,
      `seatfence_gateway_errors_total: failed or timed-out gateway calls, ${of}.`,
    ),
  );

  const layers = ["edge", "propose", "apply"].map((layer) => ({
    layer,
    perMin: s.rate("seatfence_stale_epoch_rejections_total", { layer }, 60000),
    window: inc(s, "seatfence_stale_epoch_rejections_total", { layer }),
  }));
  const anyStale = layers.some((l) => l.window > 0);
  out.push(
    alert(
      "stale-epoch",
      "Stale-epoch rejections",
      anyStale ? "warn" : "ok",
      layers.map((l) => `${l.layer} ${rate(l.perMin === null ? null : l.perMin * 60)}/min (+${num(l.window)})`).join(" · "),
      `seatfence_stale_epoch_rejections_total{layer}, ${of}: expected around a move; outside one, a sign of a stale route or a deposed leader.`,
    ),
  );

  const lc = s.rate("seatfence_leader_changes_total", {}, 60000);
  out.push(
    alert(
      "leader-changes-node",
      fleet ? "Leaderships won, all nodes" : "Leaderships won by this node",
      lc > 1 ? "warn" : "info",
      `${rate(lc === null ? null : lc * 60)}/min`,
      `seatfence_leader_changes_total: times a group became leader on a node, ${of}.`,
    ),
  );

  const noLeader = inc(s, "seatfence_no_leader_total");
  out.push(
    alert(
      "no-leader",
      "Requests answered 503 no_leader",
      noLeader > 0 ? "warn" : "ok",
      `+${num(noLeader)} ${since}`,
      `seatfence_no_leader_total: requests an edge could not route to a leader in time, ${of}.`,
    ),
  );

  const full = s.series("seatfence_storage_full").filter((x) => x.value > 0);
  out.push(
    alert(
      "storage",
      "Storage below its reserve",
      full.length ? "crit" : "ok",
      full.length ? `${fleet ? full.map((x) => nodeName(x.labels)).join(", ") : "this node"} refuse${full.length === 1 ? "s" : ""} writes (storage_full)` : "no",
      `seatfence_storage_full of ${fleet ? "every node that answered" : "this node"}.`,
    ),
  );
  return out;
}

function clusterAlerts(ctx) {
  const c = ctx.cluster;
  if (!c) {
    const e = ctx.clusterError;
    return [alert("cluster", "GET /v1/admin/cluster", e ? "crit" : "info", e ? `${e.status || "no answer"} ${e.code}` : "loading…", "Needed for the alerts about nodes and groups.")];
  }
  const nodes = c.nodes || [];
  const groups = c.groups || [];
  const unreachable = nodes.filter((n) => !n.reachable).map((n) => n.node_id);
  const notLive = nodes.filter((n) => n.state && n.state !== "live" && n.state !== "decommissioned");
  const leaderless = groups.filter((g) => g.leader === null).map((g) => g.group_id);
  const under = c.under_replicated || [];
  const el = ctx.elections;
  const epm = el.electionsPerMinute();
  const lpm = el.leaderChangesPerMinute();
  const busiest = el.busiest().map(([g, n]) => `group ${g}: ${n}`);
  return [
    alert("unreachable", "Nodes not answering", unreachable.length ? "crit" : "ok", unreachable.length ? `nodes ${ids(unreachable)}` : "none", "Nodes whose Status did not answer the edge within 2 s."),
    alert(
      "node-states",
      "Nodes not live",
      notLive.some((n) => n.state === "dead") ? "crit" : notLive.length ? "warn" : "ok",
      notLive.length ? notLive.map((n) => `${n.node_id} ${n.state}`).join(", ") : "none",
      "Lifecycle states from the directory (suspect, dead, decommissioning).",
    ),
    alert("leaderless", "Groups without a leader", leaderless.length ? "crit" : "ok", leaderless.length ? `groups ${ids(leaderless)}` : "none", "No replica that answered reports itself leader."),
    alert("under-replicated", "Under-replicated groups", under.length ? "crit" : "ok", under.length ? `groups ${ids(under)}` : "none", "A voter on a dead or retiring node and no spare node in its region."),
    alert(
      "elections",
      "Leader changes across the cluster",
      lpm > 5 ? "warn" : "info",
      `${rate(lpm)} leader changes/min · ${rate(epm)} elections/min${busiest.length ? ` · most: ${busiest.join(", ")}` : ""}`,
      "Seen by this console between its polls (term increases and new leaders per group, last 5 min); only while it is open.",
    ),
  ];
}

function build(items) {
  return h(
    "ul",
    { class: "alerts", id: "alerts" },
    items.map((a) =>
      h(
        "li",
        { class: `alert ${a.level}`, data: { alert: a.name, level: a.level } },
        h("div", { class: "alert-head" }, badge(a.level, a.level), " ", h("strong", { text: a.title })),
        h("p", { class: "alert-value", text: a.value }),
        h("p", { class: "muted small", text: a.detail }),
      ),
    ),
  );
}

function draw(ctx) {
  const items = [...clusterAlerts(ctx), ...metricAlerts(ctx)].sort((a, b) => LEVEL_ORDER[a.level] - LEVEL_ORDER[b.level]);
  renderIfChanged(els.list, items, build);
  const s = ctx.sampler;
  const fleet = s.fleet();
  const scope = fleet ? "all nodes" : "this node";
  const scopeText = !s.latest
    ? ""
    : fleet
      ? `Payment, fencing and leadership figures are the whole fleet's: every node's metrics, ${fleet.up.length} of ${counted(fleet.up.length + fleet.down.length, "node")} reporting.`
      : "Payment, fencing and leadership figures are those of the node behind this edge only (the edge gave no fleet view).";
  if (els.scope.textContent !== scopeText) els.scope.textContent = scopeText;
  render(
    els.chart,
    lineChart({
      title: `Stale-epoch rejections and leaderships won per second, ${scope}`,
      width: chartWidth(els.chart),
      series: [
        { label: "stale-epoch rejections/s", cls: "series-b", points: s.rateSeries("seatfence_stale_epoch_rejections_total") },
        { label: "leaderships won/s", cls: "series-a", points: s.rateSeries("seatfence_leader_changes_total") },
      ],
    }),
  );
}

export default {
  id: "alerts",
  title: "Alerts",
  needsCluster: true,

  mount(root, ctx) {
    els = { list: h("div", {}), chart: h("div", {}), scope: h("span", { id: "alerts-scope" }) };
    root.append(
      h("p", { class: "muted" }, "Most severe first. ", els.scope),
      els.list,
      els.chart,
    );
    draw(ctx);
  },

  refresh(ctx) {
    draw(ctx);
  },

  unmount() {
    els = null;
  },
};
