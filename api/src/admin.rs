//! Operator endpoints (DESIGN.md §7): the cluster as every node reports it,
//! leader transfer, and drain.
//!
//! ```text
//!  GET  /v1/admin/cluster                    directory (nodes, groups, events) + Status of every node
//!  POST /v1/admin/groups/{id}/transfer-leader {"to": node}   caught-up voters only; waits for the change
//!  POST /v1/admin/nodes/{id}/drain           marks it drained, moves every leader off; reports what moved
//!  POST /v1/admin/nodes/{id}/undrain         back in service
//! ```
//!
//! The edge asks each node for its view (`NodeService.Status`) in parallel,
//! with a short deadline: an unreachable node is reported, never waited for.
//! Leadership moves go through `seatfence_regions::transfer` (the group's
//! leader hands over to a caught-up voter), and the answer comes only once
//! the group's leader is the target.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hyper::StatusCode;
use seatfence_core::{Directory, GroupId};
use seatfence_proto::v1::{GroupStatus, StatusReply, StatusRequest};
use seatfence_raft::ClientError;
use seatfence_regions::transfer::{self, TransferError, Transferred};
use seatfence_regions::Commands;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::message::{Reply, Req};
use crate::Edge;

/// How long a leader transfer may take before the edge gives up waiting.
const TRANSFER_WAIT: Duration = Duration::from_secs(10);

/// Every node's report, as gathered by one fan-out.
pub struct ClusterView {
    /// The directory as its group's leader has it.
    pub directory: Directory,
    /// node id → its status, `None` when it did not answer in time.
    pub status: BTreeMap<u64, Option<StatusReply>>,
}

/// One replica of a group as its node reports it.
struct Replica<'a> {
    node: u64,
    s: &'a GroupStatus,
}

impl ClusterView {
    fn replicas(&self, group: GroupId) -> Vec<Replica<'_>> {
        self.status
            .iter()
            .filter_map(|(node, s)| {
                let s = s.as_ref()?.groups.iter().find(|g| g.group_id == group.0)?;
                Some(Replica { node: *node, s })
            })
            .collect()
    }

    /// The leader with the highest term any replica reports.
    fn leader(&self, group: GroupId) -> Option<(u64, &GroupStatus)> {
        self.replicas(group)
            .into_iter()
            .filter(|r| r.s.role == "leader")
            .max_by_key(|r| r.s.term)
            .map(|r| (r.node, r.s))
    }

    /// Groups the directory knows, the directory itself first.
    fn groups(&self) -> Vec<GroupId> {
        std::iter::once(GroupId::DIRECTORY)
            .chain(self.directory.groups.keys().copied())
            .collect()
    }

    /// How far `node`'s replica of `group` is behind the leader's log, as
    /// the operators' view shows it (transfers decide "caught up" at the
    /// leader, in `seatfence_regions::transfer`).
    fn lag(&self, group: GroupId, node: u64) -> Option<u64> {
        let (_, leader) = self.leader(group)?;
        let r = self.replicas(group).into_iter().find(|r| r.node == node)?;
        Some(leader.last_log_index.saturating_sub(r.s.applied_index))
    }

    /// The body of `GET /v1/admin/cluster`: regions, nodes, groups (with each
    /// replica's lag), running moves and repairs, under-replicated groups.
    pub fn to_json(&self) -> Value {
        let mut regions: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for n in self.directory.nodes.values() {
            regions.entry(n.region.0.clone()).or_default().push(n.id.0);
        }
        let leads = |node: u64| -> Vec<u64> {
            self.groups()
                .into_iter()
                .filter(|g| self.leader(*g).is_some_and(|(l, _)| l == node))
                .map(|g| g.0)
                .collect()
        };
        let nodes: Vec<Value> = self
            .directory
            .nodes
            .values()
            .map(|n| {
                json!({
                    "node_id": n.id.0,
                    "region": n.region.0,
                    "grpc_addr": n.grpc_addr,
                    "reachable": self.status.get(&n.id.0).is_some_and(|s| s.is_some()),
                    "drained": self.directory.drained.contains(&n.id),
                    "state": self.directory.node_state(n.id).name(),
                    "replicas": self.directory.replica_count(n.id),
                    "leader_of": leads(n.id.0),
                    // A restart with `--rejoin-empty` (null: never):
                    // the groups (0: the directory) that have not taken the
                    // node back yet; its replicas there do not vote.
                    "rejoin": self.directory.rejoins.get(&n.id).map(|r| json!({
                        "pending": r.pending.iter().map(|g| g.0).collect::<Vec<_>>(),
                        "started_ms": r.started_ms,
                    })),
                })
            })
            .collect();
        let events: BTreeMap<u64, &seatfence_core::EventRoute> = self
            .directory
            .events
            .values()
            .map(|r| (r.group.0, r))
            .collect();
        let under = self.directory.under_replicated();
        let groups: Vec<Value> = self
            .groups()
            .into_iter()
            .map(|g| {
                let leader = self.leader(g);
                let replicas: Vec<Value> = self
                    .replicas(g)
                    .iter()
                    .map(|r| {
                        json!({
                            "node_id": r.node,
                            "role": r.s.role,
                            "term": r.s.term,
                            "committed_index": r.s.committed_index,
                            "applied_index": r.s.applied_index,
                            "lag": self.lag(g, r.node),
                        })
                    })
                    .collect();
                let members: Vec<u64> = match self.directory.groups.get(&g) {
                    Some(info) => info.members.iter().map(|m| m.0).collect(),
                    None => leader.map(|(_, s)| s.voters.clone()).unwrap_or_default(),
                };
                let event = events.get(&g.0);
                json!({
                    "group_id": g.0,
                    "event_id": event.map(|r| r.event_id.0.clone()),
                    "owner_region": event.map(|r| r.owner_region.0.clone()),
                    "epoch": event.map(|r| r.epoch.0),
                    "state": event.map(|r| r.state.name()),
                    "leader": leader.map(|(n, _)| n),
                    "term": leader.map(|(_, s)| s.term),
                    "committed_index": leader.map(|(_, s)| s.committed_index),
                    "holds_applied": leader.map(|(_, s)| s.holds_applied),
                    "conflicts_applied": leader.map(|(_, s)| s.conflicts_applied),
                    "members": members,
                    "voters": leader.map(|(_, s)| s.voters.clone()),
                    "learners": leader.map(|(_, s)| s.learners.clone()),
                    "replicas": replicas,
                    "repair": self.directory.repairs.get(&g).map(repair_json),
                    "under_replicated": under.contains(&g),
                })
            })
            .collect();
        json!({
            "regions": regions.into_iter().map(|(r, n)| json!({"region": r, "nodes": n})).collect::<Vec<_>>(),
            "nodes": nodes,
            "groups": groups,
            "moves": self
                .directory
                .moves
                .values()
                .filter(|m| m.is_running())
                .map(crate::moves::move_json)
                .collect::<Vec<_>>(),
            "repairs": self.directory.repairs.values().map(repair_json).collect::<Vec<_>>(),
            "under_replicated": under.iter().map(|g| g.0).collect::<Vec<_>>(),
        })
    }
}

/// A running repair as `GET /v1/admin/cluster` shows it.
fn repair_json(r: &seatfence_core::Repair) -> Value {
    json!({
        "group_id": r.group.0,
        "remove": r.remove.0,
        "add": r.add.0,
        "reason": r.reason.name(),
        "step": r.step.name(),
        "started_ms": r.started_ms,
    })
}

/// The operators' services behind the admin routes: the cluster view, the
/// one leadership transfer, and the audit trail. Reached as
/// `Edge::operators`.
pub struct Operators {
    commands: Arc<Commands>,
    clock: Arc<dyn seatfence_raft::clock::Clock>,
    /// A voter within this many entries of the leader's log may take its
    /// leadership (operator transfers, drain): the node's `[moves]
    /// catch_up_slack`, as the move coordinator uses.
    catch_up_slack: u64,
}

impl Operators {
    /// Services running commands through `commands`, stamped by `clock`;
    /// transfers to voters within `catch_up_slack` entries of the leader.
    pub fn new(
        commands: Arc<Commands>,
        clock: Arc<dyn seatfence_raft::clock::Clock>,
        catch_up_slack: u64,
    ) -> Operators {
        Operators {
            commands,
            clock,
            catch_up_slack,
        }
    }

    /// The directory (leader's copy) and every registered node's status.
    pub async fn cluster_view(&self) -> Result<ClusterView, ApiError> {
        self.cluster_view_with(false).await
    }

    /// [`Operators::cluster_view`], each status with the node's metrics
    /// when `with_metrics` (the fleet view).
    pub async fn cluster_view_with(&self, with_metrics: bool) -> Result<ClusterView, ApiError> {
        let directory = self.commands.directory_at_leader().await?;
        let asks = directory.nodes.values().map(|n| {
            let client = self.commands.client.clone();
            let (id, addr) = (n.id.0, n.grpc_addr.clone());
            async move {
                let status = async {
                    let mut req = tonic::Request::new(StatusRequest {
                        with_digest: false,
                        with_metrics,
                    });
                    req.set_timeout(Duration::from_secs(2));
                    client.node(&addr).ok()?.status(req).await.ok()
                };
                let status = tokio::time::timeout(Duration::from_secs(2), status)
                    .await
                    .ok()
                    .flatten();
                (id, status.map(|r| r.into_inner()))
            }
        });
        let status = futures::future::join_all(asks).await.into_iter().collect();
        Ok(ClusterView { directory, status })
    }

    /// Hand `group`'s leadership to `to`, a caught-up voter, and wait until
    /// it leads. Returns `(previous leader, new term)`.
    pub async fn transfer_leader(&self, group: GroupId, to: u64) -> Result<(u64, u64), ApiError> {
        let directory = self.commands.directory_at_leader().await?;
        if !group.is_directory() && !directory.groups.contains_key(&group) {
            return Err(ApiError::NotFound {
                code: "group_not_found",
                what: format!("group {}", group.0),
            });
        }
        let drained = directory
            .not_leading()
            .contains(&seatfence_core::NodeId(to));
        let avoid = if drained { vec![to] } else { vec![] };
        let t = self.transfer_to(group, &[to], &avoid).await?;
        Ok((t.previous, t.term))
    }

    /// Hand `group`'s leadership to the first caught-up voter of `targets`
    /// (`seatfence_regions::transfer`), with the answers operators see.
    async fn transfer_to(
        &self,
        group: GroupId,
        targets: &[u64],
        avoid: &[u64],
    ) -> Result<Transferred, ApiError> {
        let r = transfer::transfer_leader(
            &self.commands.client,
            group,
            targets,
            avoid,
            self.catch_up_slack,
            TRANSFER_WAIT,
        )
        .await;
        r.map_err(|e| match e {
            TransferError::Avoided { .. } => ApiError::Conflict {
                code: "node_drained",
                message: format!("node {targets:?} is drained; undrain it first"),
                extra: json!({}),
            },
            TransferError::NotAVoter { voters, .. } => ApiError::Conflict {
                code: "not_a_voter",
                message: format!("node {targets:?} is not a voter of group {}", group.0),
                extra: json!({"voters": voters}),
            },
            TransferError::NotCaughtUp { lag, .. } => ApiError::Conflict {
                code: "not_caught_up",
                message: e.to_string(),
                extra: json!({"lag": lag}),
            },
            TransferError::LeaderChanged { leader, term, .. } => ApiError::Conflict {
                code: "leader_changed",
                message: e.to_string(),
                extra: json!({"leader": leader, "term": term}),
            },
            TransferError::TimedOut { .. } => {
                ApiError::unavailable("transfer_timeout", e.to_string())
            }
            TransferError::Client(ClientError::NoLeader { .. }) => {
                ApiError::unavailable("no_leader", e.to_string())
            }
            TransferError::Client(c) => ApiError::unavailable("transfer_failed", c.to_string()),
        })
    }
}

/// Longest target or result an audit entry keeps.
const AUDIT_FIELD_MAX: usize = 256;

impl Operators {
    /// Append to the operators' audit trail in the directory. A failure is
    /// logged, never turned into the request's answer.
    pub async fn audit(&self, actor: &str, action: &str, target: String, result: String) {
        let entry = seatfence_core::AuditEntry {
            seq: 0,
            at_ms: self.clock.now_ms(),
            actor: actor.to_string(),
            action: action.to_string(),
            // Bounded: a refused request may carry an id of any length,
            // and the trail is replicated.
            target: crate::error::excerpt(&target, AUDIT_FIELD_MAX),
            result: crate::error::excerpt(&result, AUDIT_FIELD_MAX),
            id: format!("{:032x}", rand::random::<u128>()),
        };
        if let Err(e) = self
            .commands
            .write(GroupId::DIRECTORY, seatfence_core::Command::Audit(entry))
            .await
        {
            tracing::warn!(actor, action, "recording an audit entry failed: {e}");
        }
    }
}

/// `GET /v1/admin/audit[?limit=N]`: the newest operator actions first.
pub async fn audit(edge: &Edge, req: &Req) -> Result<Reply, ApiError> {
    req.operator(edge)?;
    let limit = req.limit_param()?;
    let (answer, _) = edge
        .commands
        .client
        .query(
            GroupId::DIRECTORY,
            &seatfence_core::Query::Audit { limit },
            true,
        )
        .await
        .map_err(|e| edge.commands.client_error(e))?;
    let seatfence_core::QueryResult::Audit(entries) = answer else {
        return Err(ApiError::Internal("directory answered oddly".into()));
    };
    let entries: Vec<Value> = entries
        .into_iter()
        .map(|e| {
            json!({"seq": e.seq, "at": crate::events::format_ms(e.at_ms), "actor": e.actor,
                   "action": e.action, "target": e.target, "result": e.result})
        })
        .collect();
    Ok(
        Reply::json(StatusCode::OK, json!({"entries": entries}))
            .header("cache-control", "no-store"),
    )
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TransferBody {
    #[serde(deserialize_with = "crate::whole::de")]
    to: u64,
}

pub(crate) fn parse_id(id: &str, what: &'static str) -> Result<u64, ApiError> {
    id.parse().map_err(|_| ApiError::NotFound {
        code: what,
        what: format!("{id:?}"),
    })
}

/// `GET /v1/admin/cluster`.
pub async fn cluster(edge: &Edge, req: &Req) -> Result<Reply, ApiError> {
    req.operator(edge)?;
    let view = edge.operators.cluster_view().await?;
    Ok(Reply::json(StatusCode::OK, view.to_json()).header("cache-control", "no-store"))
}

/// `POST /v1/admin/groups/{id}/transfer-leader {"to": node}`.
pub async fn transfer(edge: &Edge, req: &Req, id: &str) -> Result<Reply, ApiError> {
    req.operator(edge)?;
    let group = GroupId(parse_id(id, "group_not_found")?);
    let body: TransferBody = req.json()?;
    let (previous, term) = edge.operators.transfer_leader(group, body.to).await?;
    tracing::info!(
        group = group.0,
        from = previous,
        to = body.to,
        term,
        "operator: leader transferred"
    );
    Ok(Reply::json(
        StatusCode::OK,
        json!({"group_id": group.0, "leader": body.to, "previous_leader": previous, "term": term}),
    ))
}

/// Mark `node` drained or back in service in the directory.
async fn set_drained(edge: &Edge, node: u64, drained: bool) -> Result<(), ApiError> {
    let known = edge
        .operators
        .cluster_view()
        .await?
        .directory
        .nodes
        .contains_key(&seatfence_core::NodeId(node));
    if !known {
        return Err(ApiError::NotFound {
            code: "node_not_found",
            what: format!("node {node}"),
        });
    }
    let cmd = seatfence_core::Command::SetDrained {
        node: seatfence_core::NodeId(node),
        drained,
    };
    match edge.commands.write(GroupId::DIRECTORY, cmd).await {
        Ok(w) if matches!(w.response, seatfence_core::Response::DrainedSet { .. }) => Ok(()),
        Ok(w) => Err(ApiError::Internal(format!(
            "directory answered {:?}",
            w.response
        ))),
        Err(e) => Err(edge.commands.client_error(e).into()),
    }
}

/// `POST /v1/admin/nodes/{id}/undrain`: back in service (it may lead again).
pub async fn undrain(edge: &Edge, req: &Req, id: &str) -> Result<Reply, ApiError> {
    req.operator(edge)?;
    let node = parse_id(id, "node_not_found")?;
    set_drained(edge, node, false).await?;
    Ok(Reply::json(
        StatusCode::OK,
        json!({"node_id": node, "drained": false}),
    ))
}

/// `POST /v1/admin/nodes/{id}/drain`: mark the node drained (from then on
/// it hands off any leadership an election gives it) and move every leader
/// off it (for maintenance). Each group's leadership goes to a caught-up
/// voter on another node that is not drained, preferring the drained
/// node's region, then the node leading the fewest groups. Answers when
/// done, or with what remains.
pub async fn drain(edge: &Edge, req: &Req, id: &str) -> Result<Reply, ApiError> {
    req.operator(edge)?;
    let node = parse_id(id, "node_not_found")?;
    set_drained(edge, node, true).await?;
    let mut moved = Vec::new();
    let mut failed = Vec::new();
    for _round in 0..3 {
        let view = edge.operators.cluster_view().await?;
        let Some(info) = view
            .directory
            .nodes
            .get(&seatfence_core::NodeId(node))
            .cloned()
        else {
            return Err(ApiError::NotFound {
                code: "node_not_found",
                what: format!("node {node}"),
            });
        };
        let led: Vec<GroupId> = view
            .groups()
            .into_iter()
            .filter(|g| view.leader(*g).is_some_and(|(l, _)| l == node))
            .collect();
        if led.is_empty() {
            break;
        }
        let mut load: BTreeMap<u64, usize> = BTreeMap::new();
        for g in view.groups() {
            if let Some((l, _)) = view.leader(g) {
                *load.entry(l).or_default() += 1;
            }
        }
        for g in led {
            let Some((_, ls)) = view.leader(g) else {
                continue;
            };
            // Preferred first: the drained node's region, then the node
            // leading the fewest groups; the first caught-up one gets it.
            let mut targets: Vec<u64> = ls
                .voters
                .iter()
                .copied()
                .filter(|v| {
                    *v != node
                        && !view
                            .directory
                            .not_leading()
                            .contains(&seatfence_core::NodeId(*v))
                })
                .collect();
            targets.sort_by_key(|v| {
                let same_region = view
                    .directory
                    .nodes
                    .get(&seatfence_core::NodeId(*v))
                    .is_some_and(|n| n.region == info.region);
                (!same_region, load.get(v).copied().unwrap_or(0), *v)
            });
            match edge.operators.transfer_to(g, &targets, &[]).await {
                Ok(t) => {
                    *load.entry(t.leader).or_default() += 1;
                    moved.push(json!({"group_id": g.0, "to": t.leader}));
                }
                Err(ApiError::Conflict {
                    code: "not_a_voter" | "not_caught_up",
                    ..
                }) => {
                    failed.push(
                        json!({"group_id": g.0, "reason": "no caught-up voter on another node"}),
                    );
                }
                // The node's own hand-off (it is drained now) may win the
                // race to another voter: the leadership is off it all the same.
                Err(ApiError::Conflict {
                    code: "leader_changed",
                    extra,
                    ..
                }) if extra["leader"].as_u64().is_some_and(|l| l != node) => {
                    moved.push(json!({"group_id": g.0, "to": extra["leader"]}));
                }
                Err(e) => failed.push(json!({"group_id": g.0, "reason": e.to_string()})),
            }
        }
    }
    let view = edge.operators.cluster_view().await?;
    let remaining: Vec<u64> = view
        .groups()
        .into_iter()
        .filter(|g| view.leader(*g).is_some_and(|(l, _)| l == node))
        .map(|g| g.0)
        .collect();
    tracing::info!(
        node,
        moved = moved.len(),
        remaining = remaining.len(),
        "operator: drain"
    );
    Ok(Reply::json(
        StatusCode::OK,
        json!({"node_id": node, "drained": true, "done": remaining.is_empty(), "moved": moved,
               "remaining": remaining, "failures": failed}),
    ))
}
