//! [`Coalescer`]: one per peer. Every group's appends, votes, pre-votes and
//! leader transfers to that peer queue here and leave together in one
//! `Batch` RPC (as TiKV batches Raft messages per store), so 100 busy
//! groups cost a few RPCs per round trip instead of 100.
//!
//! ```text
//!  group a ─┐                                   ┌─▶ group a's Raft
//!  group b ─┼─▶ queue ─▶ sender task ──Batch──▶ │   group b's Raft
//!  group c ─┘   (≤ MAX_PACK a call, ≤ IN_FLIGHT) └─▶ NOT_FOUND for c only
//! ```
//!
//! The sender never waits to fill a batch: it takes whatever is queued. At
//! most [`IN_FLIGHT`] batches are on the wire to one peer; while they are,
//! new messages queue and leave together, so batches grow with load.

use std::sync::Arc;
use std::time::{Duration, Instant};

use seatfence_proto::v1::raft_service_client::RaftServiceClient;
use seatfence_proto::v1::{RaftBatch, RaftKind, RaftMessage};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tonic::transport::Channel;

use super::MAX_MESSAGE_BYTES;

/// Most messages packed into one batch.
pub const MAX_PACK: usize = 256;

/// Batches on the wire to one peer at once.
pub const IN_FLIGHT: usize = 4;

/// A message's answer: its encoded reply, or the status it failed with.
pub type Outcome = Result<Vec<u8>, tonic::Status>;

struct Queued {
    msg: RaftMessage,
    /// The latest moment the caller still wants an answer.
    deadline: Instant,
    tx: oneshot::Sender<Outcome>,
}

/// The queue to one peer. Cheap to clone; the sender task ends when every
/// clone is dropped.
#[derive(Clone)]
pub struct Coalescer {
    tx: mpsc::UnboundedSender<Queued>,
}

impl Coalescer {
    /// Start the sender task for the peer behind `channel`.
    pub fn spawn(channel: Channel) -> Coalescer {
        let (tx, rx) = mpsc::unbounded_channel();
        let client = RaftServiceClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        tokio::spawn(run(client, rx));
        Coalescer { tx }
    }

    /// Send one message to group `group_id` on the peer, together with
    /// whatever else is queued; its own answer. `timeout` bounds the call
    /// it travels in.
    pub async fn call(
        &self,
        group_id: u64,
        kind: RaftKind,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Outcome {
        let (tx, rx) = oneshot::channel();
        let queued = Queued {
            msg: RaftMessage {
                group_id,
                kind: kind as i32,
                payload,
            },
            deadline: Instant::now() + timeout,
            tx,
        };
        if self.tx.send(queued).is_err() {
            return Err(tonic::Status::unavailable("peer sender stopped"));
        }
        rx.await
            .unwrap_or_else(|_| Err(tonic::Status::unavailable("peer sender stopped")))
    }
}

async fn run(client: RaftServiceClient<Channel>, mut rx: mpsc::UnboundedReceiver<Queued>) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut pack = Vec::with_capacity(MAX_PACK);
    loop {
        // A slot first, then whatever queued meanwhile: while IN_FLIGHT
        // batches are out, messages pile up and leave as one.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        if rx.recv_many(&mut pack, MAX_PACK).await == 0 {
            return;
        }
        let now = Instant::now();
        // A caller whose deadline passed has given up: do not send its
        // message (openraft resends what it still needs).
        pack.retain(|q| q.deadline > now && !q.tx.is_closed());
        if pack.is_empty() {
            continue;
        }
        let batch = std::mem::replace(&mut pack, Vec::with_capacity(MAX_PACK));
        let mut client = client.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let deadline = batch.iter().map(|q| q.deadline).max().unwrap_or(now);
            let (messages, waiters): (Vec<_>, Vec<_>) =
                batch.into_iter().map(|q| (q.msg, q.tx)).unzip();
            let left = deadline.saturating_duration_since(Instant::now());
            let mut request = tonic::Request::new(RaftBatch { messages });
            request.set_timeout(left);
            let answer = tokio::time::timeout(left, client.batch(request))
                .await
                .unwrap_or_else(|_| Err(tonic::Status::deadline_exceeded("raft batch timed out")));
            match answer {
                Ok(reply) => {
                    let outcomes = reply.into_inner().outcomes;
                    if outcomes.len() != waiters.len() {
                        let lost = tonic::Status::internal(format!(
                            "batch of {} answered {} times",
                            waiters.len(),
                            outcomes.len()
                        ));
                        for tx in waiters {
                            let _ = tx.send(Err(lost.clone()));
                        }
                        return;
                    }
                    for (tx, o) in waiters.into_iter().zip(outcomes) {
                        let _ = tx.send(if o.code == 0 {
                            Ok(o.payload)
                        } else {
                            Err(tonic::Status::new(tonic::Code::from(o.code), o.message))
                        });
                    }
                }
                Err(status) => {
                    for tx in waiters {
                        let _ = tx.send(Err(status.clone()));
                    }
                }
            }
        });
    }
}
