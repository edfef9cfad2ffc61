//! [`Batcher`]: packs proposals that arrive at a leader together into one
//! log entry (`Command::Batch`), so 256 writers in flight cost a few entries
//! per round trip instead of 256. Each caller still gets its own response.
//!
//! The batcher never waits for a batch to commit before taking the next one:
//! each batch is proposed from its own task, so batches pipeline.

use seatfence_core::{Command, GroupId, Response};
use tokio::sync::{mpsc, oneshot};

use crate::propose::{propose, Committed, ProposeError};
use crate::types::Raft;

/// Most commands packed into one entry.
pub const MAX_BATCH: usize = 512;

/// Batches of one group proposed and not yet answered. While this many are
/// in flight, new proposals wait in the queue and leave together: batches
/// grow with load instead of every proposal becoming its own entry.
pub const MAX_INFLIGHT_BATCHES: usize = 4;

struct Proposal {
    cmd: Command,
    expected_term: Option<u64>,
    tx: oneshot::Sender<Result<Committed, ProposeError>>,
}

/// The cloneable front of a group's batching task.
#[derive(Clone)]
pub struct Batcher {
    tx: mpsc::UnboundedSender<Proposal>,
}

impl Batcher {
    /// Start the batching task for `raft`; it ends when every `Batcher`
    /// clone is dropped.
    pub fn spawn(group: GroupId, raft: Raft) -> Batcher {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(group, raft, rx));
        Batcher { tx }
    }

    /// Propose `cmd`, possibly together with others, and wait for its own
    /// outcome.
    pub async fn propose(
        &self,
        cmd: Command,
        expected_term: Option<u64>,
    ) -> Result<Committed, ProposeError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Proposal {
                cmd,
                expected_term,
                tx,
            })
            .map_err(|_| shutting_down())?;
        rx.await.map_err(|_| shutting_down())?
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
        let _ =
            p.tx.send(propose(group, &raft, p.cmd, p.expected_term).await);
        return;
    }
    let (cmds, txs): (Vec<_>, Vec<_>) = batch.into_iter().map(|p| (p.cmd, p.tx)).unzip();
    let result = propose(group, &raft, Command::Batch(cmds), expected_term).await;
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
