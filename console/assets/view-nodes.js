// seatfence console: #/nodes. Drain and undrain nodes, hand a group's
// leadership to another voter; each behind a confirmation step, each
// answer shown verbatim.
//
//   POST /v1/admin/nodes/{id}/drain                → {node_id, drained, done, moved, remaining, failures}
//   POST /v1/admin/nodes/{id}/undrain              → {node_id, drained: false}
//   POST /v1/admin/groups/{id}/transfer-leader {to} → {group_id, leader, previous_leader, term}
//
// The node list and each group's voters come from GET /v1/admin/cluster
// (polled by console.js). None of these three routes takes an
// Idempotency-Key; all three are idempotent in effect (drain/undrain set a
// flag; a transfer to the node that already leads answers at once).
//
// Test hooks: each node row `[data-node="<id>"]` with a button
// `#drain-<id>` or `#undrain-<id>`; the transfer form #transfer-group,
// #transfer-to, #transfer-start; the dialog's #confirm; the answer #answer.

import { badge, confirmAction, counted, fillDatalist, h, ids, render, renderIfChanged, runAction, table, yesNo } from "./ui.js";

const WHOLE = /^\d{1,19}$/;

let els = null;
let ctxRef = null;
/** Nodes with a drain or undrain in flight: their button stays disabled across re-renders. */
const busy = new Set();

// ---------------------------------------------------------------- nodes

function nodesModel(c) {
  return (c.nodes || [])
    .map((n) => ({
      id: n.node_id,
      region: n.region,
      addr: n.grpc_addr,
      state: n.state,
      reachable: n.reachable,
      drained: n.drained,
      leads: (n.leader_of || []).slice().sort((a, b) => a - b),
      busy: busy.has(n.node_id),
    }))
    .sort((a, b) => a.region.localeCompare(b.region) || a.id - b.id);
}

function buildNodes(nodes) {
  return table(
    null,
    ["Node", "Region", "Address (gRPC)", "State", "Reachable", "Drained", "Leader of", "Action"],
    nodes.map((n) => {
      const action = n.drained ? "undrain" : "drain";
      return h(
        "tr",
        { data: { node: n.id } },
        h("th", { scope: "row", text: n.id }),
        h("td", { text: n.region }),
        h("td", { class: "mono", text: n.addr }),
        h("td", {}, badge(n.state || "?", n.state === "live" ? "ok" : "warn")),
        h("td", {}, yesNo(n.reachable)),
        h("td", {}, n.drained ? badge("drained", "warn") : badge("no", "muted")),
        h("td", { class: "leads", text: n.leads.length ? `${counted(n.leads.length, "group")}: ${n.leads.map((g) => (g === 0 ? "directory" : g)).join(", ")}` : "none" }),
        h(
          "td",
          {},
          h("button", {
            type: "button",
            id: `${action}-${n.id}`,
            key: `${action}-${n.id}`,
            class: n.drained ? "secondary" : "danger",
            data: { action, nodeId: n.id },
            disabled: n.busy,
            "aria-busy": n.busy ? "true" : null,
            text: n.busy ? "Working…" : n.drained ? "Undrain…" : "Drain…",
          }),
        ),
      );
    }),
    { class: "grid nodes" },
  );
}

/** One click handler on the table (rows are re-rendered every refresh). */
async function onNodeAction(ev) {
  const button = ev.target.closest("button[data-action]");
  if (!button || !ctxRef?.cluster) return;
  const id = Number(button.dataset.nodeId);
  const node = (ctxRef.cluster.nodes || []).find((n) => n.node_id === id);
  if (!node || busy.has(id)) return;
  const ctx = ctxRef;
  const answer = els.answer; // the view may be left while the edge works
  const run = async (label, call) => {
    busy.add(id);
    if (els) draw(ctx);
    try {
      await runAction(null, answer, label, call);
    } finally {
      busy.delete(id);
    }
  };

  if (button.dataset.action === "drain") {
    const ok = await confirmAction({
      title: `Drain node ${id}?`,
      lines: [
        `Node ${id} (${node.region}, ${node.grpc_addr}) is marked drained in the directory: from then on it hands off any leadership an election gives it.`,
        node.leader_of?.length
          ? `It leads ${counted(node.leader_of.length, "group")} now (${ids(node.leader_of)}): each goes to a caught-up voter on another node, ${node.region} first. Writes of each group pause briefly during its hand-over.`
          : "It leads no group now.",
        "The edge answers when every leadership has moved, or with what remains after three rounds.",
      ],
      confirmLabel: `Drain node ${id}`,
    });
    if (!ok) return;
    await run(`POST /v1/admin/nodes/${id}/drain`, () => ctx.api.drain(id));
  } else {
    const ok = await confirmAction({
      title: `Undrain node ${id}?`,
      lines: [`Node ${id} (${node.region}) is put back in service: elections and transfers may make it a leader again.`],
      confirmLabel: `Undrain node ${id}`,
    });
    if (!ok) return;
    await run(`POST /v1/admin/nodes/${id}/undrain`, () => ctx.api.undrain(id));
  }
  ctx.kick();
}

// ---------------------------------------------------------------- transfer

function findGroup(c, id) {
  return (c?.groups || []).find((g) => String(g.group_id) === String(id)) || null;
}

/** The chosen group's leader and voters under the form, and the target suggestions. */
function showTransferHint() {
  const c = ctxRef?.cluster;
  const g = findGroup(c, els.group.value.trim());
  const drained = new Set((c?.nodes || []).filter((n) => n.drained).map((n) => n.node_id));
  if (!g) {
    els.hint.textContent = els.group.value.trim() ? "No such group in the cluster answer." : "";
    fillDatalist(els.toList, []);
    return;
  }
  const voters = g.voters || g.members || [];
  const candidates = voters.filter((v) => v !== g.leader && !drained.has(v));
  const label = g.group_id === 0 ? "the directory" : `event ${g.event_id}`;
  els.hint.textContent =
    `Group ${g.group_id} (${label}): leader ${g.leader ?? "none"} at term ${g.term ?? "–"}; voters ${ids(voters)}` +
    (drained.size ? `; drained: ${ids([...drained])}` : "") +
    `. Candidates: ${ids(candidates)}.`;
  fillDatalist(els.toList, candidates);
}

async function onTransfer(ev) {
  ev.preventDefault();
  const ctx = ctxRef;
  const { start, answer } = els;
  const groupText = els.group.value.trim();
  const toText = els.to.value.trim();
  if (!WHOLE.test(groupText)) return formError("The group is a group id (a whole number).", els.group);
  if (!WHOLE.test(toText)) return formError("The target is a node id (a whole number).", els.to);
  formError("");
  const group = Number(groupText);
  const to = Number(toText);
  const g = findGroup(ctx.cluster, group);
  const ok = await confirmAction({
    title: `Transfer group ${group}'s leadership to node ${to}?`,
    lines: [
      g ? `Group ${group} is led by node ${g.leader ?? "none"} at term ${g.term ?? "–"} (voters ${ids(g.voters || g.members)}).` : `Group ${group} is not in the last cluster answer.`,
      `Node ${to} must be a caught-up voter that is not drained (else 409 not_a_voter / not_caught_up / node_drained).`,
      "The group's writes pause briefly during the hand-over; the edge answers once node " + to + " leads (up to 10 s).",
    ],
    confirmLabel: "Transfer leadership",
  });
  if (!ok) return;
  await runAction(start, answer, `POST /v1/admin/groups/${group}/transfer-leader {"to":${to}}`, () => ctx.api.transferLeader(group, to));
  ctx.kick();
}

function formError(text, field) {
  els.formError.textContent = text;
  els.formError.hidden = !text;
  if (field) field.focus();
}

// ---------------------------------------------------------------- view

function draw(ctx) {
  if (!ctx.cluster) {
    const e = ctx.clusterError;
    render(els.nodes, h("p", { class: e ? "error" : "muted", text: e ? `GET /v1/admin/cluster: ${e.status || "no answer"} ${e.code}: ${e.message}` : "Loading…" }));
    return;
  }
  renderIfChanged(els.nodes, nodesModel(ctx.cluster), buildNodes);
  fillDatalist(els.groupList, (ctx.cluster.groups || []).map((g) => g.group_id));
  showTransferHint();
}

export default {
  id: "nodes",
  title: "Nodes",
  needsCluster: true,

  mount(root, ctx) {
    ctxRef = ctx;
    els = {
      nodes: h("div", { class: "scroll-x", on: { click: onNodeAction } }),
      group: h("input", { id: "transfer-group", list: "transfer-groups", inputmode: "numeric", required: true, autocomplete: "off" }),
      groupList: h("datalist", { id: "transfer-groups" }),
      to: h("input", { id: "transfer-to", list: "transfer-targets", inputmode: "numeric", required: true, autocomplete: "off" }),
      toList: h("datalist", { id: "transfer-targets" }),
      start: h("button", { type: "submit", id: "transfer-start", text: "Transfer leadership…" }),
      hint: h("p", { class: "muted small", id: "transfer-hint", "aria-live": "polite" }),
      formError: h("p", { class: "error", role: "alert", hidden: true }),
      answer: h("div", { id: "answer", role: "status" }),
    };
    els.group.addEventListener("input", showTransferHint);
    root.append(
      h("h2", { text: "Nodes" }),
      els.nodes,
      h("h2", { text: "Transfer a group's leadership" }),
      h(
        "form",
        { class: "inline-form", autocomplete: "off", on: { submit: onTransfer } },
        h("label", { for: "transfer-group", text: "Group" }),
        els.group,
        els.groupList,
        h("label", { for: "transfer-to", text: "To node" }),
        els.to,
        els.toList,
        els.start,
      ),
      els.hint,
      els.formError,
      h("h2", { text: "Answer" }),
      els.answer,
    );
    draw(ctx);
  },

  refresh(ctx) {
    draw(ctx);
  },

  unmount() {
    els = null;
    ctxRef = null;
  },
};
