// seatfence console: #/events. Every event the directory knows, with its
// owner region, epoch, group, survival, sale window and seat counts, and a
// live chart of holds/s and conflicts/s.
//
// Where the data comes from (no endpoint lists events with their state, so
// the list is assembled; see README-console.md, "Gaps"):
//   - the event ids, groups, directory epoch/owner and route state: the
//     `groups` of GET /v1/admin/cluster (polled by console.js);
//   - counts, owner and epoch as the event's group has them:
//     GET /v1/events/{id}/availability?limit=0, every round;
//   - pending payments, the oldest one's lateness, unsettled releases and
//     refunds due: GET /v1/admin/events/{id}/payments, with the settings;
//   - settings (name, survival, sale window, open/closed, waiting room):
//     GET /v1/events/{id}, every DETAIL_EVERY rounds, and at once when the
//     directory's epoch or owner differs from what it last said; an
//     event's room rate is changed with POST
//     /v1/admin/events/{id}/waiting-room (the row's "Rate…" button);
//   - per event, holds/s and conflicts/s over the last minute: the
//     `holds_applied` / `conflicts_applied` counters of each group's leader
//     in the cluster answer (they restart with the leader: a drop or a new
//     leader starts the window again);
//   - the chart: this edge's /metrics counters
//     (seatfence_holds_created_total, seatfence_hold_conflicts_total), so
//     it covers the holds that came through THIS edge, all events together.
//
// Test hooks: each row `[data-event="<id>"]`, its owner region in `.owner`.

import { badge, h, num, render, renderIfChanged, table, utc, duration } from "./ui.js";
import { setWaitingRoom } from "./api.js";
import { lineChart } from "./metrics.js";

/** Settings change rarely: re-read them every this many rounds (2 s each). */
const DETAIL_EVERY = 5;
/** Requests in flight at once for the per-event reads. */
const PARALLEL = 6;
/** Events polled per round; more are listed from the directory only. */
const MAX_POLLED = 100;

let els = null;
let round = 0;
/** event id → {detail, detailAt, detailError, avail, availError} */
const cache = new Map();
/** Seconds of samples a per-event rate is taken over. */
const RATE_WINDOW_MS = 60_000;
/** event id → [{t, holds, conflicts, leader, term}], oldest first, one leader's. */
const counters = new Map();

/** Record each event's leader counters from a cluster answer taken at `t`. */
function sampleCounters(events, t) {
  for (const ev of events) {
    if (ev.holds === null || ev.holds === undefined) continue;
    const s = { t, holds: ev.holds, conflicts: ev.conflicts, leader: ev.leader, term: ev.term };
    let list = counters.get(ev.id) || [];
    const last = list[list.length - 1];
    if (last && last.t === t) continue;
    if (last && (last.leader !== s.leader || last.term !== s.term || s.holds < last.holds || s.conflicts < last.conflicts)) list = [];
    list.push(s);
    while (list.length > 2 && t - list[0].t > RATE_WINDOW_MS) list.shift();
    counters.set(ev.id, list);
  }
  const known = new Set(events.map((e) => e.id));
  for (const id of counters.keys()) if (!known.has(id)) counters.delete(id);
}

/** {holds, conflicts} per second over the event's window, or null until there are 4 s of it. */
function rates(id) {
  const list = counters.get(id);
  if (!list || list.length < 2) return null;
  const a = list[0];
  const b = list[list.length - 1];
  const secs = (b.t - a.t) / 1000;
  if (secs < 4) return null;
  return { holds: (b.holds - a.holds) / secs, conflicts: (b.conflicts - a.conflicts) / secs, secs };
}

/** Run `jobs` (functions returning promises) at most `n` at a time. */
async function pool(jobs, n) {
  let next = 0;
  const worker = async () => {
    while (next < jobs.length) await jobs[next++]();
  };
  await Promise.all(Array.from({ length: Math.min(n, jobs.length) }, worker));
}

/** The events of the cluster answer: one per event group. */
function directoryEvents(cluster) {
  return (cluster?.groups || [])
    .filter((g) => g.event_id)
    .map((g) => ({
      id: g.event_id,
      group: g.group_id,
      owner: g.owner_region,
      epoch: g.epoch,
      state: g.state,
      leader: g.leader,
      term: g.term,
      holds: g.holds_applied,
      conflicts: g.conflicts_applied,
    }))
    .sort((a, b) => a.id.localeCompare(b.id));
}

/** Fetch what each polled event needs this round. */
async function fetchEvents(ctx, events) {
  const jobs = [];
  for (const ev of events.slice(0, MAX_POLLED)) {
    const entry = cache.get(ev.id) || {};
    cache.set(ev.id, entry);
    jobs.push(async () => {
      try {
        entry.avail = await ctx.api.availability(ev.id);
        entry.availError = null;
      } catch (e) {
        entry.availError = e;
      }
    });
    const d = entry.detail;
    const stale = !d || round % DETAIL_EVERY === 0 || d.epoch !== ev.epoch || d.owner_region !== ev.owner || ev.state === "moving";
    if (stale) {
      jobs.push(async () => {
        try {
          entry.detail = await ctx.api.event(ev.id);
          entry.detailAt = Date.now();
          entry.detailError = null;
        } catch (e) {
          entry.detailError = e;
        }
      });
      jobs.push(async () => {
        try {
          entry.pay = await ctx.api.eventPayments(ev.id);
          entry.payError = null;
        } catch (e) {
          entry.payError = e;
        }
      });
    }
  }
  await pool(jobs, PARALLEL);
  // Forget events the directory no longer lists.
  const known = new Set(events.map((e) => e.id));
  for (const id of cache.keys()) if (!known.has(id)) cache.delete(id);
}

function saleWindow(d) {
  if (!d) return "–";
  if (!d.opens_at && !d.closes_at) return "no window";
  return `${d.opens_at ? utc(d.opens_at) : "…"} → ${d.closes_at ? utc(d.closes_at) : "…"}`;
}

function errText(e) {
  return e ? `${e.status || "no answer"} ${e.code}` : null;
}

function rowsModel(ctx, events) {
  const moving = new Map((ctx.cluster?.moves || []).map((m) => [m.event_id, m]));
  return events.map((ev) => {
    const c = cache.get(ev.id) || {};
    const a = c.avail;
    const d = c.detail;
    const mv = moving.get(ev.id);
    return {
      id: ev.id,
      polled: cache.has(ev.id),
      name: d?.name ?? null,
      // The group's own view first (it flips at the epoch bump), then the directory's.
      owner: a?.owner_region ?? d?.owner_region ?? ev.owner,
      epoch: a?.epoch ?? d?.epoch ?? ev.epoch,
      dirEpoch: ev.epoch,
      group: ev.group,
      route: ev.state,
      move: mv ? `→ ${mv.to_region} (${mv.step}, ${mv.step_number}/${mv.steps})` : null,
      survival: d?.survival ?? null,
      window: saleWindow(d),
      open: d ? d.sale_open : null,
      room: d?.waiting_room ?? null,
      capacity: a?.capacity ?? d?.capacity ?? null,
      available: a?.available ?? null,
      held: a?.held ?? null,
      sold: a?.sold ?? null,
      pay: c.pay ?? null,
      rates: rates(ev.id),
      error: errText(c.availError) || errText(c.detailError) || errText(c.payError),
    };
  });
}

/** A per-event rate over the last minute at the group's leader. */
function rateCell(r, key) {
  if (!r) return h("td", { class: "num muted", text: "–", title: "needs a few seconds of one leader's counters" });
  return h("td", { class: `num rate-${key}`, text: r[key].toFixed(1), title: `over the last ${Math.round(r.secs)} s, at the group's leader` });
}

/** The pending-payments cell: how many, and unsettled or refunds due when any. */
function pendingCell(p) {
  if (!p) return h("td", { class: "num muted", text: "–" });
  const extra = [];
  if (p.unsettled) extra.push(`${num(p.unsettled)} unsettled`);
  if (p.refunds_pending) extra.push(`${num(p.refunds_pending)} refunds due`);
  return h("td", { class: "num", text: num(p.pending_payments) + (extra.length ? ` (${extra.join(", ")})` : "") });
}

/** The oldest pending payment: how long past its deadline (the reconciler's to settle). */
function overdueCell(p) {
  if (!p || !p.pending_payments) return h("td", {}, p ? badge("none", "ok") : "–");
  if (!p.oldest_pending_overdue_secs) return h("td", { class: "small", text: `due ${utc(p.oldest_pending_deadline)}` });
  return h("td", {}, badge(`${duration(p.oldest_pending_overdue_secs * 1000)} past deadline`, "warn"));
}

/** Ask for a new admission rate and set it; the answer (or error) in an alert. */
async function changeRate(id, room) {
  const text = window.prompt(`Buyers admitted a second for ${id} (now ${room.admit_per_sec})`, String(room.admit_per_sec));
  if (text === null) return;
  const rate = Number(text);
  if (!Number.isInteger(rate) || rate < 1) {
    window.alert("The rate is a whole number of buyers a second, at least 1.");
    return;
  }
  try {
    await setWaitingRoom(id, { admit_per_sec: rate, ticket_ttl_secs: room.ticket_ttl_secs, enabled: room.enabled });
  } catch (e) {
    window.alert(`Not changed: ${e.status || "no answer"} ${e.code || ""} ${e.message || ""}`);
  }
}

/** The waiting room cell: rate and queue, and the rate action. */
function roomCell(r) {
  const w = r.room;
  if (!w) return h("td", { class: "muted", text: "–" });
  const text = w.enabled ? `${num(w.admit_per_sec)}/s · ${num(w.queue_length)} waiting` : "off";
  return h(
    "td",
    { class: "small room" },
    text,
    " ",
    h("button", { type: "button", class: "small", on: { click: () => changeRate(r.id, w) }, text: "Rate…" }),
  );
}

function buildTable(rows) {
  return table(
    null,
    ["Event", "Name", "Owner", "Epoch", "Group", "Route", "Survival", "Sale window", "Sale", "Waiting room", "Available", "Held", "Sold", "Holds/s", "Conflicts/s", "Pending payments", "Oldest pending payment", ""],
    rows.map((r) =>
      h(
        "tr",
        { data: { event: r.id } },
        h("th", { scope: "row", class: "mono", text: r.id }),
        h("td", { text: r.name ?? "–" }),
        h("td", { class: "owner", text: r.owner ?? "–" }),
        h("td", { class: "num", text: r.epoch ?? "–", title: r.dirEpoch !== r.epoch ? `directory says ${r.dirEpoch}` : null }),
        h("td", { class: "num", text: r.group }),
        h("td", {}, badge(r.route || "?", r.route === "moving" ? "warn" : "muted"), r.move ? ` ${r.move}` : null),
        h("td", { text: r.survival ?? "–" }),
        h("td", { class: "small", text: r.window }),
        h("td", {}, r.open === null ? "–" : r.open ? badge("open", "ok") : badge("closed", "muted")),
        roomCell(r),
        h(
          "td",
          { class: "num" },
          r.capacity ? h("meter", { min: 0, max: r.capacity, value: r.available ?? 0, "aria-label": "available of capacity" }) : null,
          ` ${num(r.available)}`,
        ),
        h("td", { class: "num", text: num(r.held) }),
        h("td", { class: "num", text: num(r.sold) }),
        rateCell(r.rates, "holds"),
        rateCell(r.rates, "conflicts"),
        pendingCell(r.pay),
        overdueCell(r.pay),
        h("td", {}, r.error ? badge(r.error, "crit") : !r.polled ? badge("not polled", "muted") : null),
      ),
    ),
    { class: "grid events" },
  );
}

function nodeTotals(ctx) {
  const s = ctx.sampler;
  const age = s.gauge("seatfence_unknown_payment_age_seconds");
  return {
    backlog: s.gauge("seatfence_reconciliation_backlog"),
    unknownAge: age,
    unsettled: s.gauge("seatfence_payments_unsettled"),
  };
}

function buildTotals(t) {
  return h(
    "dl",
    { class: "stats" },
    h("div", { class: "stat" }, h("dt", { text: "Payments due for reconciliation (this node's groups)" }), h("dd", { text: num(t.backlog) })),
    h(
      "div",
      { class: "stat" },
      h("dt", { text: "Oldest unknown payment, past its deadline (this node's groups)" }),
      h("dd", {}, t.unknownAge ? badge(duration(t.unknownAge * 1000), "warn") : badge("none", "ok")),
    ),
    h("div", { class: "stat" }, h("dt", { text: "Released bookings unsettled (this node's groups)" }), h("dd", { text: num(t.unsettled) })),
  );
}

function drawChart(ctx) {
  const s = ctx.sampler;
  render(
    els.chart,
    lineChart({
      title: "Holds and conflicts per second, through this edge (all events)",
      series: [
        { label: "holds/s", cls: "series-a", points: s.rateSeries("seatfence_holds_created_total") },
        { label: "conflicts/s", cls: "series-b", points: s.rateSeries("seatfence_hold_conflicts_total") },
      ],
    }),
  );
}

function draw(ctx) {
  drawChart(ctx);
  renderIfChanged(els.totals, nodeTotals(ctx), buildTotals);
  if (!ctx.cluster) {
    const e = ctx.clusterError;
    render(els.table, h("p", { class: e ? "error" : "muted", text: e ? `The event list comes from GET /v1/admin/cluster: ${errText(e)}` : "Loading…" }));
    return;
  }
  renderIfChanged(els.table, rowsModel(ctx, visibleEvents(ctx)), buildTable);
}

/** The directory's events that pass the filter (the first MAX_POLLED are polled). */
function visibleEvents(ctx) {
  const filter = els.filter.value.trim().toLowerCase();
  return directoryEvents(ctx.cluster).filter(
    (e) => !filter || e.id.toLowerCase().includes(filter) || (e.owner || "").toLowerCase().includes(filter),
  );
}

export default {
  id: "events",
  title: "Events",
  needsCluster: true,

  mount(root, ctx) {
    round = 0;
    els = {
      chart: h("div", {}),
      totals: h("section", { "aria-label": "Payment totals of this edge's node" }),
      filter: h("input", { id: "event-filter", type: "search", placeholder: "event id or region", spellcheck: "false" }),
      table: h("div", { class: "scroll-x" }),
    };
    els.filter.addEventListener("input", () => draw(ctx));
    root.append(
      els.chart,
      h("h2", { text: "Payments (this edge's node only)" }),
      els.totals,
      h("h2", { text: "Events" }),
      h("p", { class: "filter" }, h("label", { for: "event-filter", text: "Filter events " }), els.filter),
      els.table,
      h(
        "p",
        { class: "muted small" },
        "Counts come from each event's group (availability, at most 250 ms old at the edge); payments are read at the group's leader every 10 s. ",
        "A payment pending past its deadline is the reconciler's to settle: it never releases the seats while the gateway's answer is unknown. ",
        "The totals above are those of the groups led by the node behind this edge.",
      ),
    );
    draw(ctx);
  },

  async refresh(ctx) {
    round += 1;
    if (ctx.cluster) sampleCounters(directoryEvents(ctx.cluster), ctx.clusterAt);
    if (ctx.cluster && els) await fetchEvents(ctx, visibleEvents(ctx));
    if (els) draw(ctx);
  },

  unmount() {
    els = null;
  },
};
