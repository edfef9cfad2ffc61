// seatfence console: #/moves and #/moves/<move id>. Start an ownership move
// (with a confirmation step), watch one step by step, abort it while it is
// abortable, and the list of moves with their history.
//
//   POST /v1/admin/events/{id}/move {to_region}   Idempotency-Key: console-…
//   GET  /v1/admin/moves/{id}                       the watched move, every round
//   POST /v1/admin/moves/{id}/abort                 Idempotency-Key: console-…
//   GET  /v1/admin/moves?limit=50                   the list, newest first
//
// A keyed request that got no final answer (network failure, 429, 503) is
// retried with the same Idempotency-Key, so pressing "Start" again after a
// lost answer finds the move it started instead of starting another.
//
// Step times are shown to the millisecond, with each step's offset from
// the move's start ("+68 ms"): a whole move can take less than a second.
//
// Test hooks: #move-event, #move-target, #move-start, then the dialog's
// #confirm; each listed move `[data-move="<id>"]` with its state in `.state`;
// the watched move in #move-watch (each step `li.step[data-step]`, its
// offset in `.step-at`), its abort button #move-abort, present only while
// the move can be aborted (#move-abort-note says why not, while it runs).

import { badge, clockMs, confirmAction, counted, duration, fillDatalist, h, ids, offsetMs, render, renderIfChanged, runAction, table, utc, utcMs } from "./ui.js";
import { newIdempotencyKey } from "./api.js";
import { nodeName } from "./metrics.js";

const LIST_LIMIT = 50;

/** The steps as the API names them (Move.step), with what each does (DESIGN §6). */
const STEPS = [
  ["add_learners", "Target nodes join as learners and catch up (abortable)"],
  ["change_membership", "Joint membership change to the target voters (write pause starts at its commit)"],
  ["transfer_leader", "Leadership into the target region"],
  ["bump_epoch", "The new leader commits the epoch bump (write pause ends)"],
  ["update_directory", "The directory records the new epoch and owner"],
  ["done", "Done: the old replicas drop their data after the grace period"],
];

const EVENT_ID = /^[A-Za-z0-9_-]{1,64}$/;
const REGION = /^[a-z0-9-]{1,64}$/;

let els = null;
let watched = null; // the watched move (GET answer), or null
let watchError = null;
let list = null;
let listError = null;
/** A keyed action still without a final answer: {what, key}. */
let pendingStart = null;
let pendingAbort = null;
/** Rows whose history <details> the operator opened (kept across refreshes). */
const openHistory = new Set();

// ---------------------------------------------------------------- helpers

function stateKind(state) {
  return { running: "warn", done: "ok", aborted: "muted", failed: "crit" }[state] || "info";
}

/** Whether the edge would still abort `m`: only while its learners catch up (DESIGN §6). */
function abortable(m) {
  return !!m && m.state === "running" && m.step === "add_learners";
}

/** The write pause: measured, running, or not started. */
function pauseText(m) {
  if (m.pause_ms !== null && m.pause_ms !== undefined) return duration(m.pause_ms);
  const entered = (m.history || []).find((e) => e.step === "transfer_leader");
  if (m.state === "running" && entered && ["transfer_leader", "bump_epoch"].includes(m.step)) {
    return `in progress since ${utcMs(entered.at_ms)}`;
  }
  return "–";
}

function errorLine(e, what) {
  return h("p", { class: "error", text: `${what}: ${e.status || "no answer"} ${e.code}: ${e.message}` });
}

// ---------------------------------------------------------------- start

function ownerOf(ctx, eventId) {
  const g = (ctx.cluster?.groups || []).find((x) => x.event_id === eventId);
  return g ? { owner: g.owner_region, epoch: g.epoch, state: g.state } : null;
}

function showHint(ctx) {
  const id = els.event.value.trim();
  const o = ownerOf(ctx, id);
  els.hint.textContent = !id ? "" : o ? `Owned by ${o.owner} at epoch ${o.epoch}${o.state === "moving" ? " (a move is running)" : ""}.` : "Not in the directory's event list.";
}

async function onStart(ev, ctx) {
  ev.preventDefault();
  const { start, answer } = els; // the view may be left while the edge works
  const eventId = els.event.value.trim();
  const target = els.target.value.trim();
  if (!EVENT_ID.test(eventId)) return formError("Event ids are 1-64 characters of A-Z a-z 0-9 _ -.", els.event);
  if (!REGION.test(target)) return formError("Region names are 1-64 characters of a-z 0-9 -.", els.target);
  formError("");

  const o = ownerOf(ctx, eventId);
  // Each node's coordinator records the pause of the last move it
  // completed; across the fleet, the longest of those.
  const lastPause = ctx.sampler.peak("seatfence_move_last_pause_seconds");
  const pauseNote =
    lastPause && lastPause.value > 0
      ? ctx.sampler.scope === "fleet"
        ? ` (the last moves the nodes completed paused up to ${duration(lastPause.value * 1000)}, at ${nodeName(lastPause.labels)}).`
        : ` (the last move this node coordinated paused ${duration(lastPause.value * 1000)}).`
      : ".";
  const ok = await confirmAction({
    title: `Move ${eventId} to ${target}?`,
    lines: [
      `Event ${eventId} is owned by ${o ? `${o.owner} at epoch ${o.epoch}` : "an unknown region"}; it will be owned by ${target} at the next epoch.`,
      "Sales go on during the move, except for a write pause from the membership change to the epoch bump" + pauseNote,
      "The move can be aborted only while its learners catch up (the first step).",
    ],
    confirmLabel: "Start the move",
  });
  if (!ok) return;

  const what = `${eventId}→${target}`;
  if (!pendingStart || pendingStart.what !== what) pendingStart = { what, key: newIdempotencyKey() };
  const label = `POST /v1/admin/events/${eventId}/move {"to_region":"${target}"}`;
  const result = await runAction(start, answer, label, () => ctx.api.startMove(eventId, target, pendingStart.key));
  if (!(result instanceof Error) || !result.retriable) pendingStart = null; // a final answer
  if (!(result instanceof Error)) ctx.navigate(`#/moves/${result.body.move_id}`);
  else if (result.body?.error?.move?.move_id !== undefined) {
    // move_in_progress names the running move: offer to watch it.
    const id = result.body.error.move.move_id;
    answer.append(h("p", {}, h("a", { href: `#/moves/${id}`, text: `Watch move ${id}` })));
  }
  ctx.kick();
}

function formError(text, field) {
  els.formError.textContent = text;
  els.formError.hidden = !text;
  if (field) field.focus();
}

// ---------------------------------------------------------------- watch

function buildWatch({ arg, m }) {
  if (!m) {
    const text = arg === null ? "Pick a move in the list (Watch) or start one." : `Loading move ${arg}…`;
    return h("p", { class: "muted", text });
  }
  const reached = new Map((m.history || []).map((e) => [e.step, e.at_ms]));
  const stepIndex = STEPS.findIndex(([s]) => s === m.step);
  return h(
    "div",
    {},
    h(
      "p",
      { class: "watch-head" },
      h("strong", { text: `Move ${m.move_id}: ${m.event_id} ` }),
      `${m.from_region} → ${m.to_region} `,
      badge(m.state, stateKind(m.state)),
      ` step ${m.step_number ?? stepIndex + 1} of ${m.steps ?? STEPS.length}`,
    ),
    h("progress", { max: m.steps ?? STEPS.length, value: m.step_number ?? stepIndex + 1, "aria-label": "move progress" }),
    h(
      "ol",
      { class: "steps" },
      STEPS.map(([step, what], i) => {
        const at = reached.get(step);
        let status = i < stepIndex || m.step === "done" ? "done" : i === stepIndex ? "current" : "todo";
        if (m.state !== "running" && m.state !== "done" && i >= stepIndex) status = i === stepIndex ? m.state : "skipped";
        return h(
          "li",
          { class: `step ${status}`, data: { step } },
          h("span", { class: "step-name mono", text: step }),
          ` ${what} `,
          badge(status, { done: "ok", current: "warn", todo: "muted", skipped: "muted", failed: "crit" }[status] || "muted"),
          at ? h("span", { class: "muted step-at", title: utcMs(at), text: ` entered ${clockMs(at)} (${offsetMs(at - m.started_ms)})` }) : null,
        );
      }),
    ),
    h(
      "dl",
      { class: "stats" },
      stat("Write pause", pauseText(m)),
      stat("Duration", duration(m.duration_ms)),
      stat("Epoch", `${m.from_epoch} → ${m.state === "done" ? m.from_epoch + 1 : "…"}`),
      stat("Voters", `${ids(m.from_members)} → ${ids(m.to_members)}`),
      stat("Group", String(m.group_id)),
      stat("Started", `${utcMs(m.started_ms)} by ${m.actor}`),
      m.reason ? stat("Reason", m.reason) : null,
    ),
  );
}

function stat(label, value) {
  return h("div", { class: "stat" }, h("dt", { text: label }), h("dd", { text: value }));
}

async function onAbort(ctx) {
  const m = watched;
  if (!abortable(m)) return;
  const { abort, answer } = els;
  const ok = await confirmAction({
    title: `Abort move ${m.move_id}?`,
    lines: [
      `Move ${m.move_id} of ${m.event_id} (${m.from_region} → ${m.to_region}) is at ${m.step}.`,
      `The learners it added are removed; ${m.event_id} stays owned by ${m.from_region}.`,
      "If the membership change commits first, the edge answers 409 move_not_abortable and the move goes on.",
    ],
    confirmLabel: "Abort the move",
  });
  if (!ok) return;
  if (!pendingAbort || pendingAbort.what !== m.move_id) pendingAbort = { what: m.move_id, key: newIdempotencyKey() };
  const result = await runAction(abort, answer, `POST /v1/admin/moves/${m.move_id}/abort`, () => ctx.api.abortMove(m.move_id, pendingAbort.key));
  if (!(result instanceof Error) || !result.retriable) pendingAbort = null;
  ctx.kick();
}

// ---------------------------------------------------------------- list

function buildList(moves) {
  return table(
    null,
    ["Move", "Event", "From → to", "Step", "State", "Started", "Duration", "Write pause", "Actor", "Reason", "History", ""],
    moves.map((m) => {
      const details = h(
        "details",
        { open: openHistory.has(m.move_id), on: { toggle: (e) => (e.target.open ? openHistory.add(m.move_id) : openHistory.delete(m.move_id)) } },
        h("summary", { text: counted((m.history || []).length, "step"), key: `hist-${m.move_id}` }),
        h(
          "ol",
          { class: "plain" },
          (m.history || []).map((e) => h("li", { title: utcMs(e.at_ms) }, h("span", { class: "mono", text: e.step }), ` ${offsetMs(e.at_ms - m.started_ms)}`)),
        ),
      );
      return h(
        "tr",
        { data: { move: m.move_id } },
        h("th", { scope: "row", text: m.move_id }),
        h("td", { class: "mono", text: m.event_id }),
        h("td", { text: `${m.from_region} → ${m.to_region}` }),
        h("td", { text: `${m.step} (${m.step_number}/${m.steps})` }),
        h("td", { class: "state", data: { state: m.state } }, m.state),
        h("td", { text: utc(m.started_ms) }),
        h("td", { class: "num", text: duration(m.duration_ms) }),
        h("td", { text: pauseText(m) }),
        h("td", { text: m.actor }),
        h("td", { class: "small", text: m.reason ?? "" }),
        h("td", {}, details),
        h("td", {}, h("a", { href: `#/moves/${m.move_id}`, key: `watch-${m.move_id}`, text: "Watch" })),
      );
    }),
    { class: "grid moves" },
  );
}

// ---------------------------------------------------------------- view

function draw(ctx) {
  if (ctx.cluster) {
    fillDatalist(els.eventList, (ctx.cluster.groups || []).filter((g) => g.event_id).map((g) => g.event_id).sort());
    fillDatalist(els.regionList, (ctx.cluster.regions || []).map((r) => r.region));
  }
  if (ctx.arg !== null && watchError) render(els.watch, errorLine(watchError, `GET /v1/admin/moves/${ctx.arg}`));
  else renderIfChanged(els.watch, { arg: ctx.arg, m: ctx.arg === null ? null : watched }, buildWatch);
  // The abort button exists only while the edge would still abort the
  // move; a running move past add_learners says why it has none.
  const shown = ctx.arg !== null && abortable(watched);
  els.abort.hidden = !shown;
  const note = ctx.arg !== null && watched && watched.state === "running" && !shown ? `At ${watched.step}: past add_learners, the move can no longer be aborted.` : "";
  els.abortNote.textContent = note;
  els.abortNote.hidden = !note;
  if (listError) render(els.list, errorLine(listError, "GET /v1/admin/moves"));
  else if (list) renderIfChanged(els.list, list, buildList);
}

export default {
  id: "moves",
  title: "Moves",
  needsCluster: true,

  mount(root, ctx) {
    watched = null;
    watchError = null;
    els = {
      event: h("input", { id: "move-event", name: "event", list: "move-events", required: true, spellcheck: "false", autocomplete: "off" }),
      eventList: h("datalist", { id: "move-events" }),
      target: h("input", { id: "move-target", name: "target", list: "move-regions", required: true, spellcheck: "false", autocomplete: "off" }),
      regionList: h("datalist", { id: "move-regions" }),
      start: h("button", { type: "submit", id: "move-start", text: "Start move…" }),
      hint: h("p", { class: "muted small", id: "move-hint", "aria-live": "polite" }),
      formError: h("p", { class: "error", role: "alert", hidden: true }),
      answer: h("div", { id: "move-answer", role: "status" }),
      watch: h("div", { id: "move-watch" }),
      abort: h("button", { type: "button", id: "move-abort", class: "danger", text: "Abort move…", hidden: true }),
      abortNote: h("p", { id: "move-abort-note", class: "muted small", hidden: true }),
      list: h("div", { class: "scroll-x", id: "move-list" }),
    };
    const form = h(
      "form",
      { class: "inline-form", autocomplete: "off", on: { submit: (e) => onStart(e, ctx) } },
      h("label", { for: "move-event", text: "Event" }),
      els.event,
      els.eventList,
      h("label", { for: "move-target", text: "Target region" }),
      els.target,
      els.regionList,
      els.start,
    );
    els.event.addEventListener("input", () => showHint(ctx));
    els.abort.addEventListener("click", () => onAbort(ctx));
    root.append(
      h("h2", { text: "Start a move" }),
      form,
      els.hint,
      els.formError,
      els.answer,
      h("h2", { text: "Watched move" }),
      els.watch,
      els.abort,
      els.abortNote,
      h("h2", { text: `Moves (newest ${LIST_LIMIT})` }),
      els.list,
    );
    draw(ctx);
  },

  /** #/moves/<id> changed while the view is mounted. */
  onArg() {
    watched = null;
    watchError = null;
  },

  async refresh(ctx) {
    const jobs = [
      ctx.api.moves(LIST_LIMIT).then(
        (r) => ((list = r.moves || []), (listError = null)),
        (e) => (listError = e),
      ),
    ];
    if (ctx.arg !== null) {
      const id = ctx.arg;
      jobs.push(
        ctx.api.move(id).then(
          (m) => id === ctx.arg && ((watched = m), (watchError = null)),
          (e) => id === ctx.arg && ((watched = null), (watchError = e)),
        ),
      );
    } else {
      watched = null;
      watchError = null;
    }
    await Promise.all(jobs);
    if (els) {
      showHint(ctx);
      draw(ctx);
    }
  },

  unmount() {
    els = null;
  },
};
