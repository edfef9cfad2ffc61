//! Membership changes of one group, performed at its leader (the steps of an
//! ownership move that touch Raft). Each operation is idempotent: asking for
//! a membership the group already has changes nothing and answers its
//! status, so a coordinator that resumes after a crash simply repeats the
//! step it was at.

use std::collections::{BTreeMap, BTreeSet};

use openraft::async_runtime::watch::WatchReceiver;
use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers};
use serde::{Deserialize, Serialize};

use crate::registry::GroupHandle;
use crate::types::TypeConfig;

/// A membership operation to run at a group's leader ([`apply`]); each is idempotent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MembershipOp {
    /// Only report the status.
    Status,
    /// Add these nodes (`id`, gRPC address) as learners, unless present.
    AddLearners(Vec<(u64, String)>),
    /// Make exactly these nodes the voters (joint consensus, then the final
    /// config); the others leave the group. A leader that is not among them
    /// then hands leadership to the first of them at once, so writes pause
    /// only for that hand-over.
    SetVoters(Vec<u64>),
    /// Remove these nodes if they are learners (undoing an aborted move).
    RemoveLearners(Vec<u64>),
    /// `SetVoters(to)` only if the voters are `from` now (or already `to`,
    /// or half-way between the two): a compare-and-set, so a late caller
    /// working from an old view cannot undo a newer change.
    ReplaceVoters {
        /// The voters the caller expects now.
        from: Vec<u64>,
        /// The voters wanted.
        to: Vec<u64>,
    },
    /// Replace voter `remove` with `add` (already a learner), keeping every
    /// learner and `remove` as one: the directory's voters, whose learners
    /// are every other node.
    ReplaceVoter {
        /// The voter to demote to learner.
        remove: u64,
        /// The learner to promote in its place.
        add: u64,
    },
    /// Make voter `id` a learner (nothing if it is not a voter); every
    /// learner stays.
    DemoteVoter(u64),
    /// Make learner `id` a voter (nothing if it is one already).
    PromoteLearner(u64),
}

/// A group's membership as its leader sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipStatus {
    /// The leader's node id (the node that answered).
    pub leader: u64,
    /// The leader's current term.
    pub term: u64,
    /// Node ids of the voters (both configs' voters while `joint`).
    pub voters: Vec<u64>,
    /// Node ids of the learners.
    pub learners: Vec<u64>,
    /// A joint configuration is in effect (a change is half-way).
    pub joint: bool,
    /// The leader's last log index (0 while its log is empty).
    pub last_log_index: u64,
    /// The highest log index known replicated to each follower/learner.
    pub matched: BTreeMap<u64, u64>,
}

impl MembershipStatus {
    /// Whether `node` is within `slack` entries of the leader's log.
    pub fn caught_up(&self, node: u64, slack: u64) -> bool {
        node == self.leader
            || self
                .matched
                .get(&node)
                .is_some_and(|m| m + slack >= self.last_log_index)
    }
}

/// Why an operation did not run.
#[derive(Debug)]
pub enum MembershipError {
    /// This replica does not lead the group: ask the one it names
    /// (`(id, gRPC address)`), if it knows one.
    NotLeader(Option<(u64, String)>),
    /// The change failed (leadership moved meanwhile, a node is missing...).
    Failed(String),
}

fn status(g: &GroupHandle) -> Result<MembershipStatus, MembershipError> {
    let m = g.raft.metrics().borrow_watched().clone();
    if !g.leads() {
        // A removed leader still names itself: no hint then.
        let m_leader = m.current_leader.filter(|l| *l != m.id);
        let hint = m_leader.and_then(|l| {
            let node = m.membership_config.membership().get_node(&l)?;
            Some((l, node.addr.clone()))
        });
        return Err(MembershipError::NotLeader(hint));
    }
    let membership = m.membership_config.membership();
    let voters: Vec<u64> = membership.voter_ids().collect();
    let learners: Vec<u64> = membership.learner_ids().collect();
    let matched = m
        .replication
        .as_ref()
        .map(|r| {
            r.iter()
                .map(|(id, log)| (*id, log.as_ref().map_or(0, |l| l.index)))
                .collect()
        })
        .unwrap_or_default();
    Ok(MembershipStatus {
        leader: m.id,
        term: m.current_term,
        voters,
        learners,
        joint: membership.get_joint_config().len() > 1,
        last_log_index: m.last_log_index.unwrap_or(0),
        matched,
    })
}

fn change_error(e: RaftError<TypeConfig, ClientWriteError<TypeConfig>>) -> MembershipError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
            MembershipError::NotLeader(f.leader_id.zip(f.leader_node.map(|n| n.addr)))
        }
        other => MembershipError::Failed(other.to_string()),
    }
}

/// Run `op` on this node's replica of the group; it must lead the group.
pub async fn apply(g: &GroupHandle, op: MembershipOp) -> Result<MembershipStatus, MembershipError> {
    let now = status(g)?;
    match op {
        MembershipOp::Status => {}
        MembershipOp::AddLearners(nodes) => {
            for (id, addr) in nodes {
                if now.voters.contains(&id) || now.learners.contains(&id) {
                    continue;
                }
                g.raft
                    .add_learner(id, BasicNode::new(&addr), false)
                    .await
                    .map_err(change_error)?;
                tracing::info!(group = g.id.0, node = id, "added learner");
            }
        }
        MembershipOp::ReplaceVoters { from, to } => {
            let set = |v: &[u64]| v.iter().copied().collect::<BTreeSet<u64>>();
            let (have, from_set, to_set) = (set(&now.voters), set(&from), set(&to));
            let between = now.joint && have == &from_set | &to_set;
            if have != to_set && have != from_set && !between {
                return Err(MembershipError::Failed(format!(
                    "group {}: voters are {have:?}, not {from_set:?} (joint: {})",
                    g.id, now.joint
                )));
            }
            return Box::pin(apply(g, MembershipOp::SetVoters(to))).await;
        }
        MembershipOp::SetVoters(ids) => {
            let first = ids.first().copied();
            let want: BTreeSet<u64> = ids.into_iter().collect();
            let have: BTreeSet<u64> = now.voters.iter().copied().collect();
            if now.joint || want != have || !now.learners.is_empty() {
                g.raft
                    .change_membership(want.clone(), false)
                    .await
                    .map_err(change_error)?;
                // Drop learners left over (nodes of an older, aborted move).
                let left: BTreeSet<u64> = g.raft.learner_ids().collect();
                if !left.is_empty() {
                    g.raft
                        .change_membership(ChangeMembers::RemoveNodes(left), false)
                        .await
                        .map_err(change_error)?;
                }
                tracing::info!(group = g.id.0, voters = ?want, "membership changed");
            }
            let me = g.raft.metrics().borrow_watched().id;
            if let Some(to) = first.filter(|_| !want.contains(&me) && g.raft.is_leader()) {
                if let Err(e) = g.hand_over(to).await {
                    tracing::warn!(group = g.id.0, to, "hand-over after the change: {e}");
                }
            }
        }
        MembershipOp::ReplaceVoter { remove, add } => {
            if now.voters.contains(&remove) || !now.voters.contains(&add) || now.joint {
                let mut want: BTreeSet<u64> = now.voters.iter().copied().collect();
                want.remove(&remove);
                want.insert(add);
                g.raft
                    .change_membership(ChangeMembers::ReplaceAllVoters(want.clone()), true)
                    .await
                    .map_err(change_error)?;
                tracing::info!(group = g.id.0, remove, add, voters = ?want, "voter replaced");
            }
        }
        MembershipOp::DemoteVoter(id) => {
            if now.voters.contains(&id) || now.joint {
                let gone = BTreeSet::from([id]);
                g.raft
                    .change_membership(ChangeMembers::RemoveVoters(gone), true)
                    .await
                    .map_err(change_error)?;
                tracing::info!(group = g.id.0, node = id, "voter demoted to learner");
            }
        }
        MembershipOp::PromoteLearner(id) => {
            if !now.voters.contains(&id) || now.joint {
                let add = BTreeSet::from([id]);
                g.raft
                    .change_membership(ChangeMembers::AddVoterIds(add), true)
                    .await
                    .map_err(change_error)?;
                tracing::info!(group = g.id.0, node = id, "learner promoted to voter");
            }
        }
        MembershipOp::RemoveLearners(ids) => {
            let gone: BTreeSet<u64> = ids
                .into_iter()
                .filter(|id| now.learners.contains(id))
                .collect();
            if !gone.is_empty() {
                g.raft
                    .change_membership(ChangeMembers::RemoveNodes(gone.clone()), false)
                    .await
                    .map_err(change_error)?;
                tracing::info!(group = g.id.0, nodes = ?gone, "removed learners");
            }
        }
    }
    status(g)
}
