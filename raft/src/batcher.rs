//! [`Batcher`]: packs proposals that arrive at a leader together into one
//! log entry (`Command::Batch`), so 256 writers in flight cost a few entries
//! per round trip instead of 256. Each caller still gets its own response.
//!
//! The batcher never waits for a batch to commit before taking the next one:
//! each batch is proposed from its own task, so batches pipeline.
//!
//! It also admits what it takes ([`WriteLimits`]): commands admitted and not
//! yet answered are bounded per group and per node, and a proposal beyond
//! either bound is refused at once (`overloaded`, retry later) instead of
//! queueing behind work the node cannot finish in time.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use seatfence_core::{Command, GroupId, Response};
use tokio::sync::{mpsc, oneshot};

use crate::metrics::{RaftMetrics, METRICS};
use crate::propose::{propose, Committed, ProposeError};
use crate::types::Raft;

/// Most commands packed into one entry.
pub const MAX_BATCH: usize = 512;

/// Batches of one group proposed and not yet answered. While this many are
/// in flight, new proposals wait in the queue and leave together: batches
/// grow with load instead of every proposal becoming its own entry.
pub const MAX_INFLIGHT_BATCHES: usize = 4;

/// How many commands a node's event-group leaders hold at once: admitted
/// (queued in a batcher, or in an entry proposed and not yet answered) and
/// not yet answered. Shared by every batcher of a node. The directory
/// group is not counted: its writes are operators' and the node's own.
#[derive(Debug)]
pub struct WriteLimits {
    /// Most commands pending on the whole node.
    node_limit: usize,
    /// Most commands pending in one group.
    group_limit: usize,
    /// Commands pending on the node now.
    node: AtomicUsize,
}

impl WriteLimits {
    /// Bounds of `node_limit` commands pending on the node and
    /// `group_limit` in one group (0: no bound).
    pub fn new(node_limit: usize, group_limit: usize) -> Arc<WriteLimits> {
        let bound = |n: usize| if n == 0 { usize::MAX } else { n };
        Arc::new(WriteLimits {
            node_limit: bound(node_limit),
            group_limit: bound(group_limit),
            node: AtomicUsize::new(0),
        })
    }

    /// No bound at all.
    pub fn unbounded() -> Arc<WriteLimits> {
        WriteLimits::new(0, 0)
    }

    /// Commands pending on the node now.
    pub fn pending(&self) -> usize {
        self.node.load(Relaxed)
    }
}

/// One group's admission: its own count and the node's bounds.
struct Admission {
    limits: Arc<WriteLimits>,
    group: AtomicUsize,
}

/// Commands admitted; given back when dropped (answered or refused).
struct Admitted {
    admission: Arc<Admission>,
    n: usize,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.admission.group.fetch_sub(self.n, Relaxed);
        self.admission.limits.node.fetch_sub(self.n, Relaxed);
    }
}

/// Add `n` to `count` unless that passes `limit` while something is
/// pending (a batch larger than a bound still passes alone); the count
/// found, and whether `n` was added. Nothing is added by a refusal, so a
/// refused batch never makes others look over the bound.
fn take(count: &AtomicUsize, n: usize, limit: usize) -> Result<usize, usize> {
    count.fetch_update(Relaxed, Relaxed, |pending| {
        (pending == 0 || pending + n <= limit).then_some(pending + n)
    })
}

impl Admission {
    /// Admit `n` commands, or refuse them beyond a bound (see [`take`]).
    fn admit(self: &Arc<Self>, group: GroupId, n: usize) -> Result<Admitted, ProposeError> {
        if let Err(in_group) = take(&self.group, n, self.limits.group_limit) {
            RaftMetrics::inc(&METRICS.overloaded_group);
            return Err(ProposeError::Overloaded(format!(
                "group {group} has {in_group} writes pending (at most {}): retry shortly",
                self.limits.group_limit
            )));
        }
        if let Err(on_node) = take(&self.limits.node, n, self.limits.node_limit) {
            self.group.fetch_sub(n, Relaxed);
            RaftMetrics::inc(&METRICS.overloaded_node);
            return Err(ProposeError::Overloaded(format!(
                "this node has {on_node} writes pending (at most {}): retry shortly",
                self.limits.node_limit
            )));
        }
        Ok(Admitted {
            admission: self.clone(),
            n,
        })
    }
}

struct Proposal {
    cmd: Command,
    expected_term: Option<u64>,
    tx: oneshot::Sender<Result<Committed, ProposeError>>,
    /// Given back when the proposal is answered (or dropped unanswered),
    /// not when its caller stops waiting: a caller that gave up (an RPC
    /// deadline) leaves work the leader still does.
    admitted: Option<Admitted>,
}

/// The cloneable front of a group's batching task.
#[derive(Clone)]
pub struct Batcher {
    group: GroupId,
    raft: Raft,
    tx: mpsc::UnboundedSender<Proposal>,
    /// `None` for the directory group (never refused).
    admission: Option<Arc<Admission>>,
}

impl Batcher {
    /// Start the batching task for `raft`, admitting within `limits`; it
    /// ends when every `Batcher` clone is dropped.
    pub fn spawn(group: GroupId, raft: Raft, limits: Arc<WriteLimits>) -> Batcher {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(group, raft.clone(), rx));
        let admission = (!group.is_directory()).then(|| {
            Arc::new(Admission {
                limits,
                group: AtomicUsize::new(0),
            })
        });
        Batcher {
            group,
            raft,
            tx,
            admission,
        }
    }

    /// Propose `cmd`, possibly together with others, and wait for its own
    /// outcome; refused at once (`overloaded`) when the group or the node
    /// has as many commands pending as [`WriteLimits`] allows.
    pub async fn propose(
        &self,
        cmd: Command,
        expected_term: Option<u64>,
    ) -> Result<Committed, ProposeError> {
        let n = match &cmd {
            Command::Batch(cmds) => cmds.len(),
            _ => 1,
        };
        let admitted = match &self.admission {
            Some(a) => Some(
                a.admit(self.group, n)
                    .map_err(|e| self.unless_quorum_lost(e))?,
            ),
            None => None,
        };
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Proposal {
                cmd,
                expected_term,
                tx,
                admitted,
            })
            .map_err(|_| shutting_down())?;
        rx.await.map_err(|_| shutting_down())?
    }
}

impl Batcher {
    /// A refusal from a leader that has heard from no quorum for an
    /// election timeout is `group_unavailable` instead (not final): it may
    /// have been replaced, its pending writes may never be answered, and a
    /// client told `overloaded` would keep asking it rather than look for
    /// the new leader.
    fn unless_quorum_lost(&self, refused: ProposeError) -> ProposeError {
        use openraft::async_runtime::watch::WatchReceiver;
        use openraft::Instant as _;
        let lost_for = {
            let metrics = self.raft.metrics();
            let m = metrics.borrow_watched();
            m.last_quorum_acked.as_ref().map(|at| at.elapsed())
        };
        let timeout = Duration::from_millis(self.raft.config().election_timeout_max);
        match lost_for {
            Some(d) if d > timeout => ProposeError::Unavailable(format!(
                "this leader of group {} has heard from no quorum for longer than {timeout:?}",
                self.group
            )),
            _ => refused,
        }
    }
}

fn shutting_down() -> ProposeError {
    ProposeError::Unavailable("group is shutting down".into())
}

async fn run(group: GroupId, raft: Raft, mut rx: mpsc::UnboundedReceiver<Proposal>) {
    let inflight = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_INFLIGHT_BATCHES));
    // Grown on first use: a follower's batcher never takes a proposal, and
    // thousands of groups each holding room for MAX_BATCH would cost MBs.
    let mut buf = Vec::new();
    loop {
        let Ok(permit) = inflight.clone().acquire_owned().await else {
            return;
        };
        if rx.recv_many(&mut buf, MAX_BATCH).await == 0 {
            return;
        }
        // Released when every batch taken in this round is answered.
        let permit = std::sync::Arc::new(permit);
        // Commands fenced to different terms cannot share an entry.
        while !buf.is_empty() {
            let term = buf[0].expected_term;
            let (same, rest): (Vec<_>, Vec<_>) =
                buf.drain(..).partition(|p| p.expected_term == term);
            buf = rest;
            let raft = raft.clone();
            let permit = permit.clone();
            tokio::spawn(async move {
                propose_batch(group, raft, term, same).await;
                drop(permit);
            });
        }
    }
}

async fn propose_batch(
    group: GroupId,
    raft: Raft,
    expected_term: Option<u64>,
    mut batch: Vec<Proposal>,
) {
    if batch.len() == 1 {
        let p = batch.pop().expect("one proposal");
        let result = propose(group, &raft, p.cmd, p.expected_term).await;
        // Given back before the answer: a caller that writes again at once
        // finds its room free.
        drop(p.admitted);
        let _ = p.tx.send(result);
        return;
    }
    let (mut cmds, mut txs, mut admitted) = (Vec::new(), Vec::new(), Vec::new());
    for p in batch {
        cmds.push(p.cmd);
        txs.push(p.tx);
        admitted.push(p.admitted);
    }
    let result = propose(group, &raft, Command::Batch(cmds), expected_term).await;
    drop(admitted);
    match split(result, txs.len()) {
        Ok(replies) => {
            for (tx, r) in txs.into_iter().zip(replies) {
                let _ = tx.send(Ok(r));
            }
        }
        Err(shared) => {
            for tx in txs {
                let _ = tx.send(Err(shared.clone()));
            }
        }
    }
}

/// One answer per command of a committed batch; anything else is the same
/// error for every command.
fn split(
    result: Result<Committed, ProposeError>,
    n: usize,
) -> Result<Vec<Committed>, ProposeError> {
    let c = result?;
    let responses = match c.response {
        Response::Batch(rs) if rs.len() == n => rs,
        other => {
            return Err(ProposeError::Internal(format!(
                "batch of {n} answered with {other:?}"
            )))
        }
    };
    Ok(responses
        .into_iter()
        .map(|response| Committed {
            response,
            log_index: c.log_index,
            term: c.term,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(limits: &Arc<WriteLimits>) -> Arc<Admission> {
        Arc::new(Admission {
            limits: limits.clone(),
            group: AtomicUsize::new(0),
        })
    }

    #[test]
    fn a_group_takes_up_to_its_bound_and_again_once_answered() {
        let limits = WriteLimits::new(0, 4);
        let a = admission(&limits);
        let held: Vec<_> = (0..4).map(|_| a.admit(GroupId(9), 1).unwrap()).collect();
        let e = a.admit(GroupId(9), 1).err().expect("a fifth is refused");
        assert_eq!(e.code(), "overloaded");
        assert_eq!(limits.pending(), 4, "a refusal adds nothing");
        drop(held);
        assert_eq!(limits.pending(), 0);
        let _again = a.admit(GroupId(9), 3).expect("free again");
    }

    #[test]
    fn the_node_bound_spans_groups_and_a_big_batch_passes_alone() {
        let limits = WriteLimits::new(10, 0);
        let (a, b) = (admission(&limits), admission(&limits));
        let big = a
            .admit(GroupId(1), 50)
            .expect("nothing pending: passes alone");
        assert!(
            b.admit(GroupId(2), 1).is_err(),
            "the node is over its bound"
        );
        drop(big);
        let _six = a.admit(GroupId(1), 6).unwrap();
        let _four = b.admit(GroupId(2), 4).unwrap();
        assert!(b.admit(GroupId(2), 1).is_err(), "10 pending on the node");
    }
}
