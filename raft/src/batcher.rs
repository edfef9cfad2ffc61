//! [`Batcher`]: packs proposals that arrive at a leader together into one
//! log entry (`Command::Batch`), so 256 writers in flight cost a few entries
//! per round trip instead of 256. Each caller still gets its own response.
//!
//! The batcher never waits for a batch to commit before taking the next one:
//! each batch is proposed from its own task, so batches pipeline.

use seatfence_core::{Command, Response};
use seatfence_proto::v1::{write_reply, Committed, WriteReply};
use tokio::sync::{mpsc, oneshot};
use tonic::Status;

use crate::api::propose;
use crate::storage;
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
    tx: oneshot::Sender<Result<WriteReply, Status>>,
}

/// The cloneable front of a group's batching task.
#[derive(Clone)]
pub struct Batcher {
    tx: mpsc::UnboundedSender<Proposal>,
}

impl Batcher {
    /// Start the batching task for `raft`; it ends when every `Batcher`
    /// clone is dropped.
    pub fn spawn(raft: Raft) -> Batcher {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(raft, rx));
        Batcher { tx }
    }

    /// Propose `cmd`, possibly together with others, and wait for its own
    /// outcome.
    pub async fn propose(
        &self,
        cmd: Command,
        expected_term: Option<u64>,
    ) -> Result<WriteReply, Status> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Proposal {
                cmd,
                expected_term,
                tx,
            })
            .map_err(|_| Status::unavailable("group_unavailable: group is shutting down"))?;
        rx.await
            .map_err(|_| Status::unavailable("group_unavailable: group is shutting down"))?
    }
}

async fn run(raft: Raft, mut rx: mpsc::UnboundedReceiver<Proposal>) {
    let inflight = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_INFLIGHT_BATCHES));
    let mut buf = Vec::with_capacity(MAX_BATCH);
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
                propose_batch(raft, term, same).await;
                drop(permit);
            });
        }
    }
}

async fn propose_batch(raft: Raft, expected_term: Option<u64>, mut batch: Vec<Proposal>) {
    if batch.len() == 1 {
        let p = batch.pop().expect("one proposal");
        let _ = p.tx.send(propose(&raft, p.cmd, p.expected_term).await);
        return;
    }
    let (cmds, txs): (Vec<_>, Vec<_>) = batch.into_iter().map(|p| (p.cmd, p.tx)).unzip();
    let result = propose(&raft, Command::Batch(cmds), expected_term).await;
    match split(result, txs.len()) {
        Ok(replies) => {
            for (tx, r) in txs.into_iter().zip(replies) {
                let _ = tx.send(r);
            }
        }
        Err(shared) => {
            for tx in txs {
                let _ = tx.send(shared.clone());
            }
        }
    }
}

/// One reply per command of a committed batch; anything else is the same
/// outcome for every command.
fn split(
    result: Result<WriteReply, Status>,
    n: usize,
) -> Result<Vec<Result<WriteReply, Status>>, Result<WriteReply, Status>> {
    let Ok(WriteReply {
        result: Some(write_reply::Result::Committed(c)),
    }) = &result
    else {
        return Err(result);
    };
    let responses = match storage::decode::<Response>(&c.response) {
        Ok(Response::Batch(rs)) if rs.len() == n => rs,
        other => {
            return Err(Err(Status::internal(format!(
                "batch of {n} answered with {other:?}"
            ))))
        }
    };
    Ok(responses
        .into_iter()
        .map(|r| {
            let response = storage::encode(&r).map_err(|e| Status::internal(e.to_string()))?;
            Ok(WriteReply {
                result: Some(write_reply::Result::Committed(Committed {
                    response,
                    log_index: c.log_index,
                    term: c.term,
                })),
            })
        })
        .collect())
}
