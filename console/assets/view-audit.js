// seatfence console: #/audit. The operators' audit trail, newest first,
// filterable by operator, action and result.
//
//   GET /v1/admin/audit?limit=N → {entries: [{seq, at, actor, action, target, result}]}
//
// The endpoint has no filter and no cursor: the console fetches the newest
// N entries (N chosen below, 1-10,000) and filters them here. An entry older
// than the newest 10,000 cannot be shown (README-console.md, "Gaps").
//
// Test hooks: #audit-operator, #audit-action, #audit-result, #audit-limit;
// each entry `[data-seq="<seq>"]`.

import { badge, counted, h, num, render, renderIfChanged, table, utc } from "./ui.js";

/** The audited actions of api/src/routes.rs (more are added as they are seen). */
const KNOWN_ACTIONS = [
  "create-event",
  "open-sale",
  "close-sale",
  "transfer-leader",
  "drain",
  "undrain",
  "decommission",
  "recommission",
  "declare-dead",
  "move",
  "abort-move",
];

const LIMITS = [100, 500, 1000, 10000];
const DEFAULT_LIMIT = 500;

let els = null;
let entries = null;
let fetchError = null;

/** Replace a select's options when the set changed, keeping the chosen value. */
function setOptions(select, values, allLabel) {
  const wanted = ["", ...values];
  const have = Array.from(select.options, (o) => o.value);
  if (have.length === wanted.length && have.every((v, i) => v === wanted[i])) return;
  const chosen = select.value;
  select.replaceChildren(...wanted.map((v) => h("option", { value: v, text: v === "" ? allLabel : v })));
  // A value no longer offered (it aged out of the fetched window) stays selectable.
  if (chosen && !wanted.includes(chosen)) select.append(h("option", { value: chosen, text: chosen }));
  select.value = chosen;
}

function isOk(e) {
  return e.result === "ok";
}

function model() {
  const actor = els.actor.value;
  const action = els.action.value;
  const result = els.result.value;
  const shown = (entries || []).filter(
    (e) =>
      (!actor || e.actor === actor) &&
      (!action || e.action === action) &&
      (!result || (result === "ok" ? isOk(e) : !isOk(e))),
  );
  return { total: (entries || []).length, limit: Number(els.limit.value), rows: shown };
}

function build(m) {
  return h(
    "div",
    {},
    h("p", { class: "muted", text: `${num(m.rows.length)} of the newest ${counted(m.total, "entry", "entries")} (fetched up to ${num(m.limit)}).` }),
    table(
      null,
      ["Seq", "At", "Operator", "Action", "Target", "Result"],
      m.rows.map((e) =>
        h(
          "tr",
          { data: { seq: e.seq } },
          h("th", { scope: "row", class: "num", text: e.seq }),
          h("td", { text: utc(e.at) }),
          h("td", { class: "actor", text: e.actor }),
          h("td", { class: "action mono", text: e.action }),
          h("td", { class: "target", text: e.target }),
          h("td", { class: "result" }, isOk(e) ? badge("ok", "ok") : badge("refused", "crit"), isOk(e) ? null : ` ${e.result}`),
        ),
      ),
      { class: "grid audit" },
    ),
  );
}

function draw() {
  if (fetchError) {
    const e = fetchError;
    render(els.table, h("p", { class: "error", text: `GET /v1/admin/audit: ${e.status || "no answer"} ${e.code}: ${e.message}` }));
    return;
  }
  if (!entries) {
    render(els.table, h("p", { class: "muted", text: "Loading…" }));
    return;
  }
  const actors = [...new Set(entries.map((e) => e.actor))].sort();
  const actions = [...new Set([...KNOWN_ACTIONS, ...entries.map((e) => e.action)])].sort();
  setOptions(els.actor, actors, "any operator");
  setOptions(els.action, actions, "any action");
  renderIfChanged(els.table, model(), build);
}

function select(id, label, options) {
  const el = h("select", { id }, options);
  return { el, field: h("span", { class: "field" }, h("label", { for: id, text: label }), el) };
}

export default {
  id: "audit",
  title: "Audit",
  needsCluster: false,

  mount(root, ctx) {
    entries = null;
    fetchError = null;
    const actor = select("audit-operator", "Operator", [h("option", { value: "", text: "any operator" })]);
    const action = select("audit-action", "Action", [h("option", { value: "", text: "any action" })]);
    const result = select("audit-result", "Result", [
      h("option", { value: "", text: "any result" }),
      h("option", { value: "ok", text: "ok" }),
      h("option", { value: "refused", text: "refused" }),
    ]);
    const limit = select(
      "audit-limit",
      "Fetch newest",
      LIMITS.map((n) => h("option", { value: n, text: num(n), selected: n === DEFAULT_LIMIT })),
    );
    els = { actor: actor.el, action: action.el, result: result.el, limit: limit.el, table: h("div", { class: "scroll-x" }) };
    for (const s of [els.actor, els.action, els.result]) s.addEventListener("change", draw);
    els.limit.addEventListener("change", () => ctx.kick());
    root.append(h("div", { class: "filters", role: "group", "aria-label": "Filters" }, actor.field, action.field, result.field, limit.field), els.table);
    draw();
  },

  async refresh(ctx) {
    const limit = els ? Number(els.limit.value) : DEFAULT_LIMIT;
    try {
      entries = (await ctx.api.audit(limit)).entries || [];
      fetchError = null;
    } catch (e) {
      fetchError = e;
    }
    if (els) draw();
  },

  unmount() {
    els = null;
  },
};
