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
//   - the chart and the totals above the table: the metrics the console
//     polls (console.js; metrics.js), normally the whole fleet's: holds
//     and conflicts per second summed over every node's edge
//     (seatfence_holds_created_total, seatfence_hold_conflicts_total, all
//     events together), payments due and unsettled summed over the nodes
//     (each counts the groups it leads), the oldest unknown payment the
//     oldest on any node. When the edge has no fleet view they are this
//     node's only, and the page says so.
//
// Test hooks: each row `[data-event="<id>"]`, its owner region in `.owner`,
// its holds/s in `td.rate-holds`; the totals #holds-rate (holds granted a
// second over the last minute), #holds-total (since each node started) and
// #totals-scope (whose totals they are).

import { badge, counted, h, num, rate, render, renderIfChanged, table, utc, duration } from "./ui.js";
import { setWaitingRoom } from "./api.js";
import { chartWidth, lineChart, nodeName } from "./metrics.js";

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

/** The pending payments: how many (and unsettled or refunds due when any), and how late the oldest is (the reconciler's to settle). */
function paymentsCell(p) {
  if (!p) return h("td", { class: "muted", text: "–" });
  const extra = [];
  if (p.unsettled) extra.push(`${num(p.unsettled)} unsettled`);
  if (p.refunds_pending) extra.push(`${counted(p.refunds_pending, "refund")} due`);
  let oldest = null;
  if (p.pending_payments && p.oldest_pending_overdue_secs) {
    oldest = h("div", { class: "small" }, badge("overdue", "warn"), ` oldest ${duration(p.oldest_pending_overdue_secs * 1000)} past its deadline`);
  } else if (p.pending_payments) {
    oldest = h("div", { class: "muted small", text: `oldest due ${utc(p.oldest_pending_deadline)}` });
  }
  return h(
    "td",
    { class: "payments" },
    h("span", { class: "nowrap", text: `${num(p.pending_payments)} pending` }),
    extra.length ? h("div", { class: "small", text: extra.join(", ") }) : null,
    oldest,
  );
}

/** Ask for a new admission rate and set it; the answer (or error) in an alert. */
async function changeRate(id, room) {
  const text = window.prompt(`Buyers admitted a second for ${id} (now ${room.admit_per_sec})`, String(room.admit_per_sec));
  if (text === null) return;
  const perSec = Number(text);
  if (!Number.isInteger(perSec) || perSec < 1) {
    window.alert("The rate is a whole number of buyers a second, at least 1.");
    return;
  }
  try {
    await setWaitingRoom(id, { admit_per_sec: perSec, ticket_ttl_secs: room.ticket_ttl_secs, enabled: room.enabled });
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

// Twelve columns that fit 1024 px: related facts share a cell (the name
// under the id, the epoch under the owner, the route under the group, the
// window and survival under open/closed), headers wrap, and long ids break
// (console.css `table.events`).
function buildTable(rows) {
  return table(
    null,
    ["Event", "Owner", "Group", "Sale", "Waiting room", "Available", "Held", "Sold", "Holds/s", "Conflicts/s", "Payments", ""],
    rows.map((r) =>
      h(
        "tr",
        { data: { event: r.id } },
        h("th", { scope: "row" }, h("span", { class: "mono", text: r.id }), r.name ? h("div", { class: "muted small", text: r.name }) : null),
        h(
          "td",
          { class: "owner" },
          h("span", { class: "nowrap", text: r.owner ?? "–" }),
          h("div", { class: "muted small", text: `epoch ${r.epoch ?? "–"}`, title: r.dirEpoch !== r.epoch ? `the directory says epoch ${r.dirEpoch}` : null }),
        ),
        h("td", {}, h("span", { class: "nowrap", text: `group ${r.group} ` }), badge(r.route || "?", r.route === "moving" ? "warn" : "muted"), r.move ? h("div", { class: "small", text: r.move }) : null),
        h(
          "td",
          {},
          r.open === null ? "–" : r.open ? badge("open", "ok") : badge("closed", "muted"),
          h("div", { class: "muted small", text: r.window }),
          r.survival ? h("div", { class: "muted small", text: `survives a ${r.survival} outage` }) : null,
        ),
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
        paymentsCell(r.pay),
        h("td", {}, r.error ? badge(r.error, "crit") : !r.polled ? badge("not polled", "muted") : null),
      ),
    ),
    { class: "grid events" },
  );
}

/** Whose figures the chart and the totals show, in words. */
function scopeWords(ctx) {
  const s = ctx.sampler;
  const fleet = s.fleet();
  if (fleet) {
    const total = fleet.up.length + fleet.down.length;
    return fleet.down.length ? `the fleet (${fleet.up.length} of ${counted(total, "node")} reporting)` : `the whole fleet (${counted(total, "node")})`;
  }
  return s.latest ? "this edge's node only" : "loading…";
}

function totalsModel(ctx) {
  const s = ctx.sampler;
  const age = s.peak("seatfence_unknown_payment_age_seconds");
  return {
    scope: scopeWords(ctx),
    fleet: s.scope === "fleet",
    fleetError: s.scope === "node" && ctx.fleetError ? `${ctx.fleetError.status || "no answer"} ${ctx.fleetError.code}` : null,
    holdsRate: s.rate("seatfence_holds_created_total", {}, 60000),
    conflictsRate: s.rate("seatfence_hold_conflicts_total", {}, 60000),
    holdsTotal: s.gauge("seatfence_holds_created_total"),
    backlog: s.gauge("seatfence_reconciliation_backlog"),
    unknownAge: age?.value ?? null,
    unknownAgeAt: age && s.scope === "fleet" ? nodeName(age.labels) : null,
    unsettled: s.gauge("seatfence_payments_unsettled"),
  };
}

function buildTotals(t) {
  const stat = (label, dd) => h("div", { class: "stat" }, h("dt", { text: label }), dd);
  const where = t.fleet ? "the nodes" : "this node";
  return [
    h("h2", { id: "totals-scope", text: `Totals: ${t.scope}` }),
    h(
      "dl",
      { class: "stats" },
      stat("Holds granted a second (last minute, all events)", h("dd", { id: "holds-rate", text: rate(t.holdsRate) })),
      stat("Hold conflicts a second (last minute)", h("dd", { id: "conflicts-rate", text: rate(t.conflictsRate) })),
      stat(`Holds granted since ${t.fleet ? "each node" : "the node"} started`, h("dd", { id: "holds-total", text: num(t.holdsTotal) })),
      stat("Payments due for reconciliation", h("dd", { text: num(t.backlog) })),
      stat(
        "Oldest unknown payment, past its deadline",
        h("dd", {}, t.unknownAge ? badge(duration(t.unknownAge * 1000), "warn") : badge("none", "ok"), t.unknownAgeAt ? ` at ${t.unknownAgeAt}` : null),
      ),
      stat("Released bookings unsettled", h("dd", { text: num(t.unsettled) })),
    ),
    h(
      "p",
      { class: "muted small" },
      `Holds are counted by the edge that answered them; payments by the node that leads the event's group. Counts and rates are summed over ${where}` +
        (t.fleet ? "; the oldest payment is the oldest on any node. A node that does not answer is left out (the line at the top says which)." : ".") +
        (t.fleetError ? ` The edge gave no fleet view (${t.fleetError}): these are its own node's figures.` : ""),
    ),
  ];
}

function drawChart(ctx) {
  const s = ctx.sampler;
  render(
    els.chart,
    lineChart({
      title: `Holds and conflicts per second, ${scopeWords(ctx)}, all events`,
      width: chartWidth(els.chart),
      series: [
        { label: "holds/s", cls: "series-a", points: s.rateSeries("seatfence_holds_created_total") },
        { label: "conflicts/s", cls: "series-b", points: s.rateSeries("seatfence_hold_conflicts_total") },
      ],
    }),
  );
}

function draw(ctx) {
  drawChart(ctx);
  renderIfChanged(els.totals, totalsModel(ctx), buildTotals);
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
      totals: h("section", { "aria-labelledby": "totals-scope" }),
      filter: h("input", { id: "event-filter", type: "search", placeholder: "event id or region", spellcheck: "false" }),
      table: h("div", { class: "scroll-x" }),
    };
    els.filter.addEventListener("input", () => draw(ctx));
    root.append(
      els.chart,
      els.totals,
      h("h2", { text: "Events" }),
      h("p", { class: "filter" }, h("label", { for: "event-filter", text: "Filter events " }), els.filter),
      els.table,
      h(
        "p",
        { class: "muted small" },
        "Counts come from each event's group (availability, at most 250 ms old at the edge); payments are read at the group's leader every 10 s. ",
        "A payment pending past its deadline is the reconciler's to settle: it never releases the seats while the gateway's answer is unknown.",
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
