//! Handing a group's leadership to a caught-up voter: one place for the
//! moves coordinator (step 4), the operators' transfer and drain (`api`),
//! and a drained node's own hand-off. "Caught up" has one definition,
//! [`MembershipStatus::caught_up`]: within `slack` entries of the leader's
//! log, as the leader sees it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use seatfence_core::{GroupId, NodeId};
use seatfence_raft::membership::{self, MembershipOp, MembershipStatus};
use seatfence_raft::registry::Registry;
use seatfence_raft::{ClientError, ClusterClient};
use tokio::sync::watch;
use tokio::time::Instant;

/// The default `slack` (entries) for operator transfers and drains.
pub const CATCH_UP_SLACK: u64 = 100;

/// A transfer done: who led before, who leads now, at which term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transferred {
    /// The node that led when the transfer was asked.
    pub previous: u64,
    /// The target that leads now.
    pub leader: u64,
    /// The term `leader` leads in.
    pub term: u64,
}

/// Why [`transfer_leader`] did not end with a target leading.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// No target that is not avoided is a voter of the group.
    #[error("none of nodes {targets:?} is a voter of group {group}")]
    NotAVoter {
        /// The group asked.
        group: GroupId,
        /// The targets asked, avoided ones included.
        targets: Vec<u64>,
        /// The group's voters, as its leader sees them.
        voters: Vec<u64>,
    },
    /// `lag`: how far the first target voter is behind the leader's log.
    #[error("no target voter of group {group} is caught up (lag {lag:?})")]
    NotCaughtUp {
        /// The group asked.
        group: GroupId,
        /// Entries the first target voter is behind; `None` if the leader tracks no match for it.
        lag: Option<u64>,
    },
    /// Another node won a newer term meanwhile (an election, or a drained
    /// node's own hand-off): the targets will not lead now.
    #[error("node {leader} became leader of group {group} (term {term}) instead")]
    LeaderChanged {
        /// The group asked.
        group: GroupId,
        /// The node that leads now.
        leader: u64,
        /// The term it leads in.
        term: u64,
    },
    /// Every target is one to avoid (drained) and none leads already.
    #[error("every target for group {group} is drained")]
    Avoided {
        /// The group asked.
        group: GroupId,
    },
    /// The transfer was asked, but no target led before `wait` ran out.
    #[error("no target became leader of group {group} within {waited:?}")]
    TimedOut {
        /// The group asked.
        group: GroupId,
        /// How long it waited for a target to lead.
        waited: Duration,
    },
    /// Asking the group's leader failed.
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// Which of `st`'s voters, in the order of `targets`, is caught up.
pub fn first_caught_up(st: &MembershipStatus, targets: &[u64], slack: u64) -> Option<u64> {
    targets
        .iter()
        .copied()
        .find(|t| st.voters.contains(t) && st.caught_up(*t, slack))
}

/// Hand `group`'s leadership to the first of `targets` (in preference
/// order) that is a caught-up voter and not in `avoid` (drained nodes),
/// through the group's leader, and wait up to `wait` until one of
/// `targets` leads. A target that already leads is success, avoided or not.
pub async fn transfer_leader(
    client: &ClusterClient,
    group: GroupId,
    targets: &[u64],
    avoid: &[u64],
    slack: u64,
    wait: Duration,
) -> Result<Transferred, TransferError> {
    let st = client.membership(group, &MembershipOp::Status).await?;
    if targets.contains(&st.leader) {
        return Ok(Transferred {
            previous: st.leader,
            leader: st.leader,
            term: st.term,
        });
    }
    let candidates: Vec<u64> = targets
        .iter()
        .copied()
        .filter(|t| !avoid.contains(t))
        .collect();
    if candidates.is_empty() {
        return Err(TransferError::Avoided { group });
    }
    let Some(to) = first_caught_up(&st, &candidates, slack) else {
        let Some(first) = candidates.iter().find(|t| st.voters.contains(t)) else {
            return Err(TransferError::NotAVoter {
                group,
                targets: targets.to_vec(),
                voters: st.voters,
            });
        };
        let lag = st
            .matched
            .get(first)
            .map(|m| st.last_log_index.saturating_sub(*m));
        return Err(TransferError::NotCaughtUp { group, lag });
    };
    client.transfer_leader(group, to).await?;
    let start = Instant::now();
    while start.elapsed() < wait {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let Ok(now) = client.membership(group, &MembershipOp::Status).await else {
            continue;
        };
        if targets.contains(&now.leader) {
            return Ok(Transferred {
                previous: st.leader,
                leader: now.leader,
                term: now.term,
            });
        }
        if now.leader != st.leader && now.term > st.term {
            return Err(TransferError::LeaderChanged {
                group,
                leader: now.leader,
                term: now.term,
            });
        }
    }
    Err(TransferError::TimedOut {
        group,
        waited: start.elapsed(),
    })
}

/// While the directory marks this node drained, hand every leadership it
/// gains (an election can still pick it) to the most caught-up other voter
/// that is not drained and is caught up. Checked every second.
pub async fn hand_off_when_drained(
    registry: Arc<Registry>,
    slack: u64,
    mut rx_stop: watch::Receiver<bool>,
) {
    let me = registry.node_id();
    loop {
        tokio::select! {
            biased;
            _ = rx_stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        let Some(dir) = registry.get(GroupId::DIRECTORY) else {
            continue;
        };
        let drained: BTreeSet<NodeId> = dir.read(|s| s.state.directory().not_leading());
        if !drained.contains(&NodeId(me)) {
            continue;
        }
        for (gid, g) in registry.all() {
            if !g.leads() {
                continue;
            }
            let Ok(st) = membership::apply(&g, MembershipOp::Status).await else {
                continue;
            };
            let mut others: Vec<u64> = st
                .voters
                .iter()
                .copied()
                .filter(|v| *v != me && !drained.contains(&NodeId(*v)))
                .collect();
            // The most caught up first.
            others.sort_by_key(|v| std::cmp::Reverse(st.matched.get(v).copied().unwrap_or(0)));
            let Some(to) = first_caught_up(&st, &others, slack) else {
                tracing::warn!(
                    group = gid.0,
                    "drained, but no other caught-up voter can lead"
                );
                continue;
            };
            tracing::info!(group = gid.0, to, "drained node hands off leadership");
            g.wake_for_use().await;
            if let Err(e) = g.hand_over(to).await {
                tracing::warn!(group = gid.0, to, "hand-off failed: {e}");
            }
        }
    }
}
