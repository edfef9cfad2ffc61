//! [`ClusterClient`]: proposes commands to a group from outside (tests,
//! benchmarks, `seatfence ctl`, and nodes forwarding to the directory).
//! Follows leader hints, backs off when no leader is known, gives up at a
//! deadline.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seatfence_core::{Command, GroupId, Response};
use seatfence_proto::v1::node_service_client::NodeServiceClient;
use seatfence_proto::v1::{
    write_reply, ReadReply, ReadRequest, StatusReply, StatusRequest, WriteRequest,
};
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};

use crate::network::MAX_MESSAGE_BYTES;
use crate::storage;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no leader for group {group} within {waited:?}: {last}")]
    NoLeader {
        group: GroupId,
        waited: Duration,
        last: String,
    },
    #[error("rejected by node: {0}")]
    Rejected(tonic::Status),
    #[error("reply did not decode: {0}")]
    BadReply(String),
}

impl ClientError {
    pub fn code(&self) -> &'static str {
        match self {
            ClientError::NoLeader { .. } => "no_leader",
            ClientError::Rejected(_) => "rejected",
            ClientError::BadReply(_) => "bad_reply",
        }
    }
}

/// A committed write.
#[derive(Debug, Clone)]
pub struct WriteOutcome {
    pub response: Response,
    pub log_index: u64,
    pub term: u64,
}

/// Shared by many tasks; clones share channels and the leader cache.
#[derive(Clone)]
pub struct ClusterClient {
    seeds: Arc<Vec<String>>,
    channels: Arc<Mutex<HashMap<String, Channel>>>,
    leaders: Arc<Mutex<HashMap<GroupId, String>>>,
    deadline: Duration,
}

impl ClusterClient {
    /// `seeds`: gRPC addresses of any nodes of the cluster.
    pub fn new(seeds: Vec<String>) -> ClusterClient {
        ClusterClient {
            seeds: Arc::new(seeds),
            channels: Default::default(),
            leaders: Default::default(),
            deadline: Duration::from_secs(15),
        }
    }

    pub fn with_deadline(mut self, d: Duration) -> ClusterClient {
        self.deadline = d;
        self
    }

    /// A client to the node at `addr` (one cached channel per address).
    pub fn node(&self, addr: &str) -> Result<NodeServiceClient<Channel>, ClientError> {
        let mut channels = self.channels.lock().expect("channel lock poisoned");
        let ch = match channels.get(addr) {
            Some(ch) => ch.clone(),
            None => {
                let ch = Endpoint::from_shared(format!("http://{addr}"))
                    .map_err(|e| ClientError::BadReply(format!("bad address {addr}: {e}")))?
                    .connect_timeout(Duration::from_millis(500))
                    .tcp_nodelay(true)
                    .connect_lazy();
                channels.insert(addr.to_string(), ch.clone());
                ch
            }
        };
        Ok(NodeServiceClient::new(ch)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    /// Propose `cmd` to `group` and wait until it is committed and applied.
    pub async fn write(&self, group: GroupId, cmd: &Command) -> Result<WriteOutcome, ClientError> {
        let bytes = storage::encode(cmd).map_err(|e| ClientError::BadReply(e.to_string()))?;
        let start = Instant::now();
        let mut seed = 0usize;
        let mut last = String::from("no attempt");
        let mut pause = Duration::from_millis(20);
        while start.elapsed() < self.deadline {
            let cached = self
                .leaders
                .lock()
                .expect("leader lock poisoned")
                .get(&group)
                .cloned();
            let addr = cached.unwrap_or_else(|| {
                seed += 1;
                self.seeds[seed % self.seeds.len()].clone()
            });
            let mut c = self.node(&addr)?;
            let req = WriteRequest {
                group_id: group.0,
                command: bytes.clone(),
                expected_term: None,
            };
            let mut req = tonic::Request::new(req);
            req.set_timeout(Duration::from_secs(5));
            match c.write(req).await {
                Ok(reply) => match reply.into_inner().result {
                    Some(write_reply::Result::Committed(c)) => {
                        self.leaders
                            .lock()
                            .expect("leader lock poisoned")
                            .insert(group, addr);
                        let response = storage::decode(&c.response)
                            .map_err(|e| ClientError::BadReply(e.to_string()))?;
                        return Ok(WriteOutcome {
                            response,
                            log_index: c.log_index,
                            term: c.term,
                        });
                    }
                    Some(write_reply::Result::NotLeader(nl)) => {
                        let mut leaders = self.leaders.lock().expect("leader lock poisoned");
                        match nl.leader {
                            Some(h) if h.grpc_addr != addr => {
                                last = format!("{addr}: not leader, try {}", h.grpc_addr);
                                leaders.insert(group, h.grpc_addr);
                                continue;
                            }
                            _ => {
                                last = format!("{addr}: not leader, no leader known");
                                leaders.remove(&group);
                            }
                        }
                    }
                    None => return Err(ClientError::BadReply("empty write reply".into())),
                },
                Err(s) => match s.code() {
                    tonic::Code::InvalidArgument
                    | tonic::Code::FailedPrecondition
                    | tonic::Code::Aborted => return Err(ClientError::Rejected(s)),
                    _ => {
                        last = format!("{addr}: {}: {}", s.code(), s.message());
                        self.leaders
                            .lock()
                            .expect("leader lock poisoned")
                            .remove(&group);
                    }
                },
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(300));
        }
        Err(ClientError::NoLeader {
            group,
            waited: start.elapsed(),
            last,
        })
    }

    /// Read `key` from the replica of `group` on the node at `addr`.
    pub async fn read_at(
        &self,
        addr: &str,
        group: GroupId,
        key: &str,
    ) -> Result<ReadReply, ClientError> {
        let req = ReadRequest {
            group_id: group.0,
            key: key.to_string(),
            linearizable: false,
        };
        Ok(self
            .node(addr)?
            .read(req)
            .await
            .map_err(ClientError::Rejected)?
            .into_inner())
    }

    /// The status of the node at `addr`.
    pub async fn status_at(&self, addr: &str) -> Result<StatusReply, ClientError> {
        let mut req = tonic::Request::new(StatusRequest {});
        req.set_timeout(Duration::from_secs(5));
        Ok(self
            .node(addr)?
            .status(req)
            .await
            .map_err(ClientError::Rejected)?
            .into_inner())
    }
}
