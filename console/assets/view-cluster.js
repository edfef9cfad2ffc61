// seatfence console: #/cluster. Regions → nodes → groups, from
// GET /v1/admin/cluster (the directory at its leader, plus every node's
// Status, each asked with a 2 s deadline: a node that did not answer is
// `reachable: false` and its replicas are missing from `groups[].replicas`).
//
// Test hooks: each region is `[data-region="<name>"]`, each node row
// `[data-node="<id>"]`, each group row `[data-group="<id>"]`.

import { badge, counted, h, ids, num, render, renderIfChanged, table, yesNo } from "./ui.js";

/** At most this many group rows are drawn (the filter narrows them down). */
const MAX_GROUP_ROWS = 200;

let els = null;

/** Per node: the groups its own Status reported hosting (replicas), from the groups list. */
function hostedByNode(cluster) {
  const hosted = new Map();
  for (const g of cluster.groups || []) {
    for (const r of g.replicas || []) {
      if (!hosted.has(r.node_id)) hosted.set(r.node_id, []);
      hosted.get(r.node_id).push(g.group_id);
    }
  }
  return hosted;
}

/** A list of group ids, the first few spelled out; group 0 is named "directory". */
function groupList(list, max = 10) {
  if (!list || !list.length) return "";
  const shown = list
    .slice(0, max)
    .map((g) => (g === 0 ? "directory" : String(g)))
    .join(", ");
  return list.length > max ? `${shown} … (+${list.length - max})` : shown;
}

/** "2 groups: directory, 5" (or "none"). */
function countedGroups(list) {
  return list.length ? `${counted(list.length, "group")}: ${groupList(list)}` : "none";
}

function stateBadge(state) {
  const kind = { live: "ok", suspect: "warn", dead: "crit", decommissioning: "warn", decommissioned: "muted" }[state] || "info";
  return badge(state || "?", kind);
}

// ---------------------------------------------------------------- summary

function summaryModel(c) {
  const nodes = c.nodes || [];
  const dir = (c.groups || []).find((g) => g.group_id === 0);
  return {
    regions: (c.regions || []).length,
    nodes: nodes.length,
    unreachable: nodes.filter((n) => !n.reachable).map((n) => n.node_id),
    notLive: nodes.filter((n) => n.state && n.state !== "live").map((n) => `${n.node_id} ${n.state}`),
    drained: nodes.filter((n) => n.drained).map((n) => n.node_id),
    groups: (c.groups || []).length,
    leaderless: (c.groups || []).filter((g) => g.leader === null).map((g) => g.group_id),
    dirLeader: dir ? dir.leader : null,
    dirTerm: dir ? dir.term : null,
    under: c.under_replicated || [],
    repairs: (c.repairs || []).map((r) => `group ${r.group_id}: ${r.remove} → ${r.add} (${r.reason}, ${r.step})`),
    moves: (c.moves || []).map((m) => `move ${m.move_id}: ${m.event_id} ${m.from_region} → ${m.to_region} (${m.step})`),
  };
}

function buildSummary(s) {
  const item = (label, value, kind) => h("div", { class: "stat" }, h("dt", { text: label }), h("dd", {}, kind ? badge(value, kind) : value));
  return h(
    "dl",
    { class: "stats" },
    item("Regions", num(s.regions)),
    item("Nodes", num(s.nodes)),
    item("Unreachable", s.unreachable.length ? ids(s.unreachable) : "none", s.unreachable.length ? "crit" : "ok"),
    item("Not live", s.notLive.length ? s.notLive.join(", ") : "none", s.notLive.length ? "warn" : "ok"),
    item("Drained", ids(s.drained)),
    item("Groups", num(s.groups)),
    item("Without leader", s.leaderless.length ? ids(s.leaderless) : "none", s.leaderless.length ? "crit" : "ok"),
    item("Directory leader", s.dirLeader === null ? "none" : `node ${s.dirLeader} (term ${s.dirTerm})`, s.dirLeader === null ? "crit" : null),
    item("Under-replicated", s.under.length ? ids(s.under) : "none", s.under.length ? "crit" : "ok"),
    item("Repairs running", s.repairs.length ? s.repairs.join("; ") : "none"),
    item("Moves running", s.moves.length ? s.moves.join("; ") : "none"),
  );
}

// ---------------------------------------------------------------- regions

// Per node, two sources that used to sit side by side unexplained: the
// groups whose replicas the node's own Status reports (the directory's
// group 0 among them), and the directory's count of the EVENT groups it
// places there (`nodes[].replicas`: members, plus targets of running moves
// and repairs). They differ while a replica is being created or an old
// one waits out a move's grace period, and a node that does not answer
// reports nothing; the cell shows the report and says when the directory
// expects another number.
function regionsModel(c) {
  const hosted = hostedByNode(c);
  const nodes = c.nodes || [];
  const maxLeads = Math.max(1, ...nodes.map((n) => (n.leader_of || []).length));
  return {
    maxLeads,
    regions: (c.regions || []).map((r) => ({
      region: r.region,
      nodes: nodes
        .filter((n) => n.region === r.region)
        .map((n) => ({
          id: n.node_id,
          addr: n.grpc_addr,
          state: n.state,
          reachable: n.reachable,
          drained: n.drained,
          placed: n.replicas ?? null,
          hosted: (hosted.get(n.node_id) || []).sort((a, b) => a - b),
          leads: (n.leader_of || []).slice().sort((a, b) => a - b),
        })),
    })),
  };
}

function buildRegions(m) {
  return h(
    "ul",
    { class: "regions", id: "regions" },
    m.regions.map((r) => {
      const leads = r.nodes.reduce((a, n) => a + n.leads.length, 0);
      return h(
        "li",
        { class: "region", data: { region: r.region } },
        h("h3", {}, r.region, " ", h("span", { class: "muted", text: `${counted(r.nodes.length, "node")} · leading ${counted(leads, "group")}` })),
        table(
          null,
          ["Node", "Address (gRPC)", "State", "Reachable", "Drained", "Replicas hosted (as the node reports them)", "Leader of"],
          r.nodes.map((n) => {
            const events = n.hosted.filter((g) => g !== 0).length;
            const differs = n.reachable && n.placed !== null && n.placed !== events;
            return h(
              "tr",
              { data: { node: n.id } },
              h("th", { scope: "row", text: n.id }),
              h("td", { class: "mono", text: n.addr }),
              h("td", {}, stateBadge(n.state)),
              h("td", {}, yesNo(n.reachable)),
              h("td", {}, n.drained ? badge("drained", "warn") : badge("no", "muted")),
              h(
                "td",
                { class: "hosted" },
                n.reachable ? countedGroups(n.hosted) : h("span", { class: "muted", text: "no report (not answering)" }),
                differs
                  ? h(
                      "div",
                      { class: "small", title: "A replica being created, or an old one kept for the grace period after a move, makes the two differ for a while." },
                      badge("differs", "warn"),
                      ` the directory places ${counted(n.placed, "event group")} here`,
                    )
                  : null,
              ),
              h(
                "td",
                { class: "leads" },
                h("meter", { min: 0, max: m.maxLeads, value: n.leads.length, "aria-label": `leader of ${counted(n.leads.length, "group")}` }),
                ` ${countedGroups(n.leads)}`,
              ),
            );
          }),
          { class: "grid nodes" },
        ),
      );
    }),
  );
}

// ---------------------------------------------------------------- groups

function groupMatches(g, filter) {
  if (!filter) return true;
  const f = filter.toLowerCase();
  const nodeHit = f.startsWith("n") && /^n\d+$/.test(f) && (g.replicas || []).some((r) => `n${r.node_id}` === f);
  return (
    nodeHit ||
    String(g.group_id) === f ||
    (g.event_id || "").toLowerCase().includes(f) ||
    (g.owner_region || "").toLowerCase().includes(f)
  );
}

function groupsModel(c, filter) {
  const all = (c.groups || []).filter((g) => groupMatches(g, filter));
  return {
    total: (c.groups || []).length,
    matching: all.length,
    rows: all.slice(0, MAX_GROUP_ROWS).map((g) => ({
      id: g.group_id,
      event: g.group_id === 0 ? "(directory)" : g.event_id,
      owner: g.owner_region,
      epoch: g.epoch,
      state: g.state,
      leader: g.leader,
      term: g.term,
      commit: g.committed_index ?? null,
      voters: g.voters || g.members || [],
      learners: g.learners || [],
      replicas: (g.replicas || []).map((r) => ({ node: r.node_id, role: r.role, term: r.term, committed: r.committed_index, applied: r.applied_index, lag: r.lag })),
      under: g.under_replicated,
      repair: g.repair ? `${g.repair.remove} → ${g.repair.add} (${g.repair.reason}, ${g.repair.step})` : null,
    })),
  };
}

/** One replica's line; its parts wrap as wholes ("committed 1,234"), never inside. */
function replicaLine(r) {
  const lagKind = r.lag === null ? "muted" : r.lag === 0 ? "ok" : r.lag < 100 ? "warn" : "crit";
  const part = (...children) => h("span", { class: "nowrap" }, children);
  return h(
    "li",
    {},
    part(h("span", { class: "mono", text: `n${r.node} ` }), badge(r.role, r.role === "leader" ? "ok" : r.role === "learner" ? "info" : "muted"), ` term ${r.term}`),
    " · ",
    part(`committed ${r.committed === undefined ? "?" : num(r.committed)}`),
    " · ",
    part(`applied ${num(r.applied)}`),
    " · ",
    part("lag ", badge(r.lag === null ? "?" : num(r.lag), lagKind)),
  );
}

function buildGroups(m) {
  const note =
    m.matching > m.rows.length
      ? `Showing ${m.rows.length} of ${m.matching} matching groups (${m.total} in all): narrow the filter.`
      : `${m.matching} of ${counted(m.total, "group")}.`;
  return h(
    "div",
    {},
    h("p", { class: "muted", text: note }),
    table(
      null,
      ["Group", "Event", "Owner", "Epoch", "Route", "Leader", "Term", "Commit index", "Voters", "Learners", "Replicas: role, committed and applied index, lag behind the leader's log", "Health"],
      m.rows.map((g) =>
        h(
          "tr",
          { data: { group: g.id } },
          h("th", { scope: "row", text: g.id }),
          h("td", { class: g.id === 0 ? null : "mono", text: g.event ?? "–" }),
          h("td", { text: g.owner ?? "–" }),
          h("td", { class: "num", text: g.epoch ?? "–" }),
          h("td", {}, g.state ? badge(g.state, g.state === "moving" ? "warn" : "muted") : "–"),
          h("td", {}, g.leader === null ? badge("none", "crit") : `n${g.leader}`),
          h("td", { class: "num", text: g.term ?? "–" }),
          h("td", { class: "num", text: g.commit === null ? "–" : num(g.commit) }),
          h("td", { class: "mono", text: ids(g.voters) }),
          h("td", { class: "mono", text: ids(g.learners) }),
          h("td", {}, h("ul", { class: "plain" }, g.replicas.map(replicaLine))),
          h(
            "td",
            {},
            g.under ? badge("under-replicated", "crit") : null,
            g.repair ? badge(`repair ${g.repair}`, "warn") : null,
            !g.under && !g.repair ? badge("ok", "ok") : null,
          ),
        ),
      ),
      { class: "grid groups" },
    ),
  );
}

// ---------------------------------------------------------------- view

function draw(ctx) {
  const c = ctx.cluster;
  if (!c) {
    const e = ctx.clusterError;
    render(els.summary, h("p", { class: e ? "error" : "muted", text: e ? `GET /v1/admin/cluster: ${e.status || "no answer"} ${e.code}: ${e.message}` : "Loading…" }));
    return;
  }
  renderIfChanged(els.summary, summaryModel(c), buildSummary);
  renderIfChanged(els.regions, regionsModel(c), buildRegions);
  renderIfChanged(els.groups, groupsModel(c, els.filter.value.trim()), buildGroups);
}

export default {
  id: "cluster",
  title: "Cluster",
  needsCluster: true,

  mount(root, ctx) {
    els = {
      summary: h("section", { class: "summary", "aria-label": "Cluster summary" }),
      regions: h("div", {}),
      filter: h("input", { id: "group-filter", type: "search", placeholder: "group id, event, region or n<node>", spellcheck: "false" }),
      groups: h("div", {}),
    };
    els.filter.addEventListener("input", () => draw(ctx));
    root.append(
      els.summary,
      h("h2", { text: "Regions and nodes" }),
      els.regions,
      h("h2", { text: "Groups" }),
      h("p", { class: "filter" }, h("label", { for: "group-filter", text: "Filter groups " }), els.filter),
      els.groups,
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
