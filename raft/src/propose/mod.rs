//! The typed propose path at a group's leader: a [`Command`] in,
//! `Result<Committed, ProposeError>` out. No wire format crosses it.
//!
//! ```text
//!  edge / workers / coordinator ──(this node leads)──▶ Proposer::write
//!  peer ──gRPC NodeService.Write──▶ api.rs (decode) ──▶ Proposer::write
//!     removed leader? NotLeader · prepare (clock, fence check 2) · fence term
//!     ──▶ Batcher (one entry for many) ──▶ propose ──▶ openraft write().with_leader(term)
//! ```
//!
//! [`ProposeError`] is the one error of this path; `status.rs` turns it
//! into a tonic `Status` for the gRPC adapters and back into a
//! `ProposeError` for `ClusterClient`, with [`ProposeError::code`] as the
//! stable code.

use std::sync::Arc;

use openraft::error::{ClientWriteError, LinearizableReadError, RaftError};
use openraft::impls::ProgressResponder;
use openraft::{LinearizerOption, ReadPolicy};
use seatfence_core::inventory::{EventAction, EventReply, Outcome};
use seatfence_core::{Command, GroupId, Query, Response, State};

use crate::clock::Clock;
use crate::membership::{self, MembershipError, MembershipOp, MembershipStatus};
use crate::metrics::{RaftMetrics, METRICS};
use crate::registry::{GroupHandle, HandOverError, Registry};
use crate::types::{Raft, TypeConfig};

mod answer;
pub mod origins;
pub use answer::{Answer, Committed, CommittedBatch, LeaderHint, ProposeError};

/// How fresh a query's answer must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// This replica's applied state, however far behind.
    Replica,
    /// The leader's, with leadership confirmed by its lease when a quorum
    /// acknowledged it within [`LEASE_SHARE`] of the lease (no round trip;
    /// assumes timer clocks drift apart by less than that share), else by
    /// a read-index round.
    /// For reads whose decision a later commit checks again; never for
    /// one that decides an epoch.
    Lease,
    /// The leader's, after a read-index round (a quorum confirms it still
    /// leads).
    ReadIndex,
}

impl Read {
    /// [`Read::ReadIndex`] when `linearizable`, else [`Read::Replica`].
    pub fn linearizable(linearizable: bool) -> Read {
        if linearizable {
            Read::ReadIndex
        } else {
            Read::Replica
        }
    }
}

/// Confirm this node leads `group` as `read` asks (not for
/// [`Read::Replica`]), then wait until its state machine applied every
/// entry committed before the read.
pub async fn confirm_leadership(
    raft: &Raft,
    group: GroupId,
    read: Read,
) -> Result<(), ProposeError> {
    let refused = |e: RaftError<TypeConfig, LinearizableReadError<TypeConfig>>| match e {
        RaftError::APIError(LinearizableReadError::ForwardToLeader(f)) => {
            ProposeError::not_leader(group, f)
        }
        other => ProposeError::unavailable(other),
    };
    let option = match read {
        // A recent enough quorum acknowledgement answers at once; an older
        // one makes the leader heartbeat and wait for a fresh one (a
        // read-index round).
        Read::Lease => LinearizerOption::new(Some(lease_for_reads(raft)), true),
        Read::Replica | Read::ReadIndex => ReadPolicy::ReadIndex.into(),
    };
    raft.ensure_linearizable(option)
        .await
        .map(|_| ())
        .map_err(refused)
}

/// The part of openraft's leader lease (`election_timeout_max`) a lease
/// read may rely on. Followers refuse other candidates for a whole lease
/// after the leader's message, timed by their own timer clocks; a leader
/// that relies on only this share of it stays right while its timer clock
/// runs at least this share as fast as any follower's (a drill's timer
/// skew of ×0.8 or ×1.25 on one node: ratio 0.8).
pub const LEASE_SHARE: f64 = 0.75;

fn lease_for_reads(raft: &Raft) -> std::time::Duration {
    std::time::Duration::from_millis(raft.config().election_timeout_max).mul_f64(LEASE_SHARE)
}
/// Bugs a drill can plant (`seatfence chaos drill --plant-bug NAME`).
/// Only a build with the `planted-bugs` feature acts on one
/// ([`PLANTED_BUGS`]); the type exists in every build so a config naming
/// one parses, and is refused, everywhere else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlantedBug {
    /// The leader stamps the event's current epoch on a command carrying
    /// an older one instead of refusing it (fence checks 2 and 3 skipped).
    AcceptStaleEpoch,
}

/// Whether this build can plant a [`PlantedBug`] (the `planted-bugs`
/// feature: test builds, and drill builds that ask for it).
pub const PLANTED_BUGS: bool = cfg!(feature = "planted-bugs");

/// Propose `cmd` as one entry of `raft`'s log; `expected_term` fences it
/// to one leader term (a deposed leader cannot commit it).
pub async fn propose(
    group: GroupId,
    raft: &Raft,
    cmd: Command,
    expected_term: Option<u64>,
) -> Result<Committed, ProposeError> {
    let result = match expected_term {
        None => raft.client_write(cmd).await.map_err(|e| match e {
            RaftError::APIError(e) => Ok(e),
            RaftError::Fatal(f) => Err(ProposeError::unavailable(f)),
        }),
        Some(term) => {
            let (responder, rx) = ProgressResponder::complete_only();
            raft.write(cmd)
                .with_leader(term)
                .responder(responder)
                .await
                .map_err(ProposeError::unavailable)?;
            rx.await
                .map_err(|_| ProposeError::unavailable("write dropped"))?
                .map_err(Ok)
        }
    };
    match result {
        Ok(resp) => Ok(Committed {
            response: resp.data,
            log_index: resp.log_id.index,
            term: resp.log_id.leader_id.term,
        }),
        Err(Err(e)) => Err(e),
        Err(Ok(ClientWriteError::ForwardToLeader(f))) => Err(ProposeError::not_leader(group, f)),
        Err(Ok(ClientWriteError::LogEntryDiscarded(f))) => Err(ProposeError::OutcomeUnknown(
            format!("entry discarded on leader change ({f}); retry with the same operation key"),
        )),
        Err(Ok(e)) => Err(ProposeError::Refused(e.to_string())),
    }
}

/// The leader side of this node's groups: what the gRPC `NodeService` and
/// the in-process callers (through `ClusterClient::with_local`) both use.
pub struct Proposer {
    registry: Arc<Registry>,
    clock: Arc<dyn Clock>,
    /// Chaos drills only: a bug planted on purpose (see [`PlantedBug`]).
    #[cfg_attr(not(feature = "planted-bugs"), allow(dead_code))]
    planted: Option<PlantedBug>,
    /// The public URL of this node's HTTP edge, once it serves (see
    /// [`Proposer::edge_url`]).
    edge_url: std::sync::OnceLock<Arc<str>>,
    /// Where the holds this node's leaders took came from.
    origins: origins::Origins,
}

impl Proposer {
    /// A proposer for the groups hosted in `registry`; event commands get `clock`'s time.
    pub fn new(registry: Arc<Registry>, clock: Arc<dyn Clock>) -> Proposer {
        Proposer {
            registry,
            clock,
            planted: None,
            edge_url: std::sync::OnceLock::new(),
            origins: Default::default(),
        }
    }

    /// Where the holds this node's leaders took came from (see
    /// [`origins`]).
    pub fn origins(&self) -> &origins::Origins {
        &self.origins
    }

    /// This node's id.
    pub fn node_id(&self) -> u64 {
        self.registry.node_id()
    }

    /// Say where this node's HTTP edge is reached (its public URL), once:
    /// answers led here name it, so edges can send their buyers' clients
    /// straight to the leader's edge.
    pub fn set_edge_url(&self, url: &str) {
        let _ = self.edge_url.set(Arc::from(url.trim_end_matches('/')));
    }

    /// The public URL of this node's HTTP edge (`None`: it has none, or
    /// it does not serve yet).
    pub fn edge_url(&self) -> Option<&Arc<str>> {
        self.edge_url.get()
    }

    /// Plant `bug` (drills prove they catch it; never in production). A
    /// build without the `planted-bugs` feature ignores it (the node's
    /// config refuses one first).
    pub fn with_planted_bug(mut self, bug: Option<PlantedBug>) -> Proposer {
        if let Some(b) = bug.filter(|_| PLANTED_BUGS) {
            tracing::warn!(bug = ?b, "PLANTED BUG active: this node is deliberately wrong");
        }
        self.planted = bug;
        self
    }

    /// The replicas hosted on this node.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The hosted replica of `group` (reopened if dormant).
    pub async fn group(&self, group: GroupId) -> Result<Arc<GroupHandle>, ProposeError> {
        self.registry
            .hosted(group)
            .await
            .ok_or(ProposeError::UnknownGroup(group))
    }

    /// Wait, at most one election timeout, until the replica of `group`
    /// here knows a leader: an election is under way when an awake replica
    /// knows none, and a caller told the winner goes there at once instead
    /// of backing off and asking again. `None`: not in memory here, asleep
    /// (it learns no leader until something wakes it), or no leader in
    /// time.
    pub async fn await_leader(&self, group: GroupId) -> Option<LeaderHint> {
        use openraft::async_runtime::watch::WatchReceiver;
        let g = self.registry.get(group).filter(|g| !g.is_asleep())?;
        let within = std::time::Duration::from_millis(g.raft.config().election_timeout_max);
        let mut rx = g.raft.server_metrics();
        let wait = async {
            loop {
                let hint = {
                    let m = rx.borrow_watched();
                    m.current_leader.map(|id| {
                        let addr = m.membership_config.membership().get_node(&id);
                        (id, addr.map(|n| n.addr.clone()))
                    })
                };
                match hint {
                    Some((node_id, Some(addr))) => return Some(LeaderHint { node_id, addr }),
                    Some((_, None)) => return None,
                    None if rx.changed().await.is_err() => return None,
                    None => {}
                }
            }
        };
        tokio::time::timeout(within, wait).await.ok().flatten()
    }

    /// Whether this node leads `group` as one of its voters.
    pub fn leads(&self, group: GroupId) -> bool {
        self.registry.get(group).is_some_and(|g| g.leads())
    }

    /// Propose `cmd` to `group` (batched with other proposals) and wait
    /// until it is committed and applied.
    pub async fn write(
        &self,
        group: GroupId,
        cmd: Command,
        expected_term: Option<u64>,
    ) -> Result<Committed, ProposeError> {
        refuse_batches(std::slice::from_ref(&cmd))?;
        let g = self.writable(group).await?;
        g.wake_for_use().await;
        let cmd = match self.prepare(&g, cmd) {
            Ok(cmd) => cmd,
            Err(answer) => {
                return Ok(Committed {
                    response: *answer,
                    log_index: 0,
                    term: g.term(),
                })
            }
        };
        let term = fence_term(&g, expected_term, std::slice::from_ref(&cmd));
        g.batcher.propose(cmd, term).await
    }

    /// Propose `cmds` to `group` as one entry; commands refused before
    /// proposing keep their answer, in order with the others.
    pub async fn write_batch(
        &self,
        group: GroupId,
        cmds: Vec<Command>,
        expected_term: Option<u64>,
    ) -> Result<CommittedBatch, ProposeError> {
        if cmds.is_empty() {
            return Err(ProposeError::Malformed {
                code: "malformed_command",
                reason: "empty batch".into(),
            });
        }
        refuse_batches(&cmds)?;
        let g = self.writable(group).await?;
        g.wake_for_use().await;
        let mut answers: Vec<Option<Response>> = Vec::with_capacity(cmds.len());
        let mut to_propose = Vec::with_capacity(cmds.len());
        for cmd in cmds {
            match self.prepare(&g, cmd) {
                Ok(c) => {
                    answers.push(None);
                    to_propose.push(c);
                }
                Err(a) => answers.push(Some(*a)),
            }
        }
        if to_propose.is_empty() {
            return Ok(CommittedBatch {
                responses: answers.into_iter().flatten().collect(),
                log_index: 0,
                term: g.term(),
            });
        }
        let n = to_propose.len();
        let term = fence_term(&g, expected_term, &to_propose);
        let c = g.batcher.propose(Command::Batch(to_propose), term).await?;
        let Response::Batch(rs) = c.response else {
            return Err(ProposeError::Internal(format!(
                "batch of {n} answered with {:?}",
                c.response
            )));
        };
        if rs.len() != n {
            return Err(ProposeError::Internal(format!(
                "batch of {n} answered {} times",
                rs.len()
            )));
        }
        let mut rs = rs.into_iter();
        let responses = answers
            .into_iter()
            .map(|a| a.or_else(|| rs.next()).expect("one answer per proposal"))
            .collect();
        Ok(CommittedBatch {
            responses,
            log_index: c.log_index,
            term: c.term,
        })
    }

    /// Answer `q` from this replica of `group`; `linearizable` confirms
    /// leadership first (read index), so only the leader answers.
    pub async fn query(
        &self,
        group: GroupId,
        q: &Query,
        linearizable: bool,
    ) -> Result<Answer, ProposeError> {
        self.query_with(group, q, Read::linearizable(linearizable))
            .await
    }

    /// Answer `q` from this replica of `group` as fresh as `read` asks.
    pub async fn query_with(
        &self,
        group: GroupId,
        q: &Query,
        read: Read,
    ) -> Result<Answer, ProposeError> {
        let g = self.group(group).await?;
        if read != Read::Replica {
            if removed_leader(&g) {
                return Err(removed(group));
            }
            g.wake_for_use().await;
            confirm_leadership(&g.raft, group, read).await?;
        }
        let term = g.term();
        Ok(g.sm.read(|s| Answer {
            result: s.state.query(q),
            applied_index: s.last_applied.map(|l| l.index).unwrap_or(0),
            term,
        }))
    }

    /// A copy of `group`'s state at its leader, read after a read-index
    /// round, with the applied index and the term (a backup's dump). The
    /// copy shares the state's persistent maps: it costs little memory and
    /// never holds up applies while it is read.
    pub async fn dump(&self, group: GroupId) -> Result<(State, u64, u64), ProposeError> {
        let g = self.group(group).await?;
        if removed_leader(&g) {
            return Err(removed(group));
        }
        g.wake_for_use().await;
        confirm_leadership(&g.raft, group, Read::ReadIndex).await?;
        let term = g.term();
        Ok(g.sm.read(|s| {
            let applied = s.last_applied.map(|l| l.index).unwrap_or(0);
            (s.state.clone(), applied, term)
        }))
    }

    /// Run a membership operation at this node, which must lead `group`.
    pub async fn membership(
        &self,
        group: GroupId,
        op: MembershipOp,
    ) -> Result<MembershipStatus, ProposeError> {
        let g = self.group(group).await?;
        g.wake_for_use().await;
        membership::apply(&g, op).await.map_err(|e| match e {
            MembershipError::NotLeader(hint) => ProposeError::NotLeader {
                group,
                leader: hint.map(|(node_id, addr)| LeaderHint { node_id, addr }),
            },
            MembershipError::Failed(e) => ProposeError::MembershipFailed(e),
        })
    }

    /// Ask `group`'s replica here to hand leadership to the voter `to`.
    pub async fn transfer_leader(&self, group: GroupId, to: u64) -> Result<(), ProposeError> {
        let g = self.group(group).await?;
        if !g.leads() {
            return Err(removed(group));
        }
        g.hand_over(to).await.map_err(|e| match e {
            HandOverError::NotLeading => removed(group),
            HandOverError::NotAVoter => ProposeError::NotAVoter { group, to },
            HandOverError::Failed(e) => ProposeError::unavailable(e),
        })
    }

    /// The replica of `group`, unless it is a leader a move removed or
    /// this node's disk is full.
    async fn writable(&self, group: GroupId) -> Result<Arc<GroupHandle>, ProposeError> {
        let g = self.group(group).await?;
        if self.registry.db().is_full() && g.leads() {
            return Err(ProposeError::StorageFull(format!(
                "the leader of group {group} is out of disk space (below its reserve): no new writes until space returns"
            )));
        }
        if removed_leader(&g) {
            return Err(removed(group));
        }
        Ok(g)
    }

    /// Leader-side preparation of event commands, before proposing: stamp
    /// `now_ms` from this node's clock, and refuse a command whose epoch is
    /// older than the event's (fence check 2 of DESIGN §5; `apply` checks
    /// again). Returns the command to propose, or the answer to give now.
    fn prepare(&self, g: &GroupHandle, mut cmd: Command) -> Result<Command, Box<Response>> {
        let Command::Event(c) = &mut cmd else {
            return Ok(cmd);
        };
        c.now_ms = self.clock.now_ms();
        // A create carries no epoch yet: nothing to fence.
        if matches!(c.action, EventAction::Create(_)) {
            return Ok(cmd);
        }
        let current = g.sm.read(|s| {
            s.state
                .inventory()
                .event()
                .as_ref()
                .map(|e| (e.epoch, e.owner.clone()))
        });
        // Only a strictly older epoch is refused here: a newer one may be
        // ahead of this replica's applies, and `apply` decides.
        if let Some((epoch, owner)) = current {
            #[cfg(feature = "planted-bugs")]
            if c.epoch < epoch && self.planted == Some(PlantedBug::AcceptStaleEpoch) {
                c.epoch = epoch;
            }
            if c.epoch < epoch {
                RaftMetrics::inc(&METRICS.stale_epoch_propose);
                return Err(Box::new(Response::Event(EventReply {
                    replayed: false,
                    epoch,
                    owner: owner.clone(),
                    outcome: Outcome::StaleEpoch {
                        current: epoch,
                        owner,
                    },
                })));
            }
        }
        Ok(cmd)
    }
}

/// A caller never sends a batch: the leader makes batches of commands it
/// prepared (epoch checked, its own time stamped, its term fenced), so a
/// batch from outside would skip all three for the commands inside it.
/// Commands that break a bound `apply` checks ([`Command::check_bounds`])
/// are refused here too, so they never reach the log.
fn refuse_batches(cmds: &[Command]) -> Result<(), ProposeError> {
    if cmds.iter().any(|c| matches!(c, Command::Batch(_))) {
        return Err(ProposeError::Malformed {
            code: "malformed_command",
            reason: "a batch is made by the group's leader; send its commands one by one \
                     or in a WriteBatch"
                .into(),
        });
    }
    cmds.iter()
        .try_for_each(Command::check_bounds)
        .map_err(|reason| ProposeError::Malformed {
            code: "malformed_command",
            reason,
        })
}

/// The term event commands are fenced to: the caller's, or this leader's
/// own, so a deposed leader can never commit them.
fn fence_term(g: &GroupHandle, asked: Option<u64>, cmds: &[Command]) -> Option<u64> {
    asked.or_else(|| {
        cmds.iter()
            .any(|c| matches!(c, Command::Event(_)))
            .then(|| g.term())
    })
}

/// A replica that believes it leads but is no longer a voter (removed by a
/// move): it can commit nothing, so it answers `not_leader` at once.
fn removed_leader(g: &GroupHandle) -> bool {
    g.raft.is_leader() && !g.leads()
}

fn removed(group: GroupId) -> ProposeError {
    RaftMetrics::inc(&METRICS.not_leader_answers);
    ProposeError::NotLeader {
        group,
        leader: None,
    }
}
