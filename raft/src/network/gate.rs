//! [`Gate`]: who may call what on a node's gRPC port. TLS ([`super::tls`])
//! proves who the caller is; the gate decides what that identity may do:
//!
//! | caller | may call |
//! |---|---|
//! | a member node (in the directory, or an initial member; not retired) | everything |
//! | a node the directory does not list yet | Raft traffic of the directory group (group 0), ping, and registering itself |
//! | a retired node (decommissioned, or declared dead) | nothing |
//! | an operator | the node's status |
//!
//! No operator certificate writes or reads a raw command or key, changes a
//! membership, transfers a leader or speaks Raft: that goes through a node
//! (an edge, which checks the buyer's or operator's JWT, checks and audits
//! operator actions, or a node's own jobs). Raw reads are a node's too: the
//! directory holds shared secrets (the gateway's token). A replica
//! that is behind on the directory cannot know a newer member yet, so the
//! directory's own traffic is accepted from any node certificate that is
//! not retired: it is where the replica learns the members.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use seatfence_core::GroupId;
use tonic::{Request, Status};

use super::tls::Principal;
use crate::registry::Registry;

/// What a call needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Raft traffic (appends, votes, snapshots, sleep) for this group.
    Raft(GroupId),
    /// Node-level liveness.
    Ping,
    /// A write, a batch of writes, a membership change or a leader
    /// transfer.
    Write,
    /// A raw read or a query of a group's state.
    Read,
    /// The node's status: what an operator may call.
    Operate,
    /// A group's every record, for a backup: members and operators.
    Dump,
}

/// Who is calling, as far as the gate is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The server runs without TLS (`insecure = true`): anyone.
    Plaintext,
    /// A node the directory does not list yet.
    Joining(u64),
    /// A member node.
    Member(u64),
    /// An operator, by the name its certificate carries: it may read the
    /// node's status, dump a group (a backup) and restore a backup.
    Operator(String),
}

impl Caller {
    /// The node id the caller's certificate names (none for plaintext or
    /// an operator).
    pub fn node_id(&self) -> Option<u64> {
        match self {
            Caller::Joining(id) | Caller::Member(id) => Some(*id),
            Caller::Plaintext | Caller::Operator(_) => None,
        }
    }
}

/// Largest number of certificates whose identity is remembered.
const CACHE: usize = 1024;

/// Decides who may call what on this node's gRPC port (the module docs' table); caches
/// certificate identities.
pub struct Gate {
    /// Whether the server requires client certificates.
    secure: bool,
    registry: Option<Arc<Registry>>,
    /// The directory's initial members (from the config): members before
    /// the directory lists anyone.
    seeds: BTreeSet<u64>,
    identities: Mutex<HashMap<Vec<u8>, Option<Principal>>>,
}

impl Gate {
    /// A gate for a plaintext server: every caller may call everything.
    pub fn open() -> Arc<Gate> {
        Arc::new(Gate {
            secure: false,
            registry: None,
            seeds: BTreeSet::new(),
            identities: Mutex::default(),
        })
    }

    /// A gate for a TLS server on the node of `registry`.
    pub fn new(registry: Arc<Registry>, seeds: BTreeSet<u64>) -> Arc<Gate> {
        Arc::new(Gate {
            secure: true,
            registry: Some(registry),
            seeds,
            identities: Mutex::default(),
        })
    }

    /// The caller of `req`, if it may make a call that needs `need`;
    /// else UNAUTHENTICATED (no usable certificate) or PERMISSION_DENIED.
    pub fn check<T>(&self, req: &Request<T>, need: Need) -> Result<Caller, Status> {
        let caller = self.caller(req)?;
        self.allows(&caller, need).map(|()| caller)
    }

    /// Whether `caller` may make a call that needs `need`.
    pub fn allows(&self, caller: &Caller, need: Need) -> Result<(), Status> {
        let ok = match (caller, need) {
            (Caller::Plaintext | Caller::Member(_), _) => true,
            (Caller::Joining(_), Need::Ping) => true,
            (Caller::Joining(_), Need::Raft(g)) => g == GroupId::DIRECTORY,
            (Caller::Joining(_), _) => false,
            (Caller::Operator(_), need) => matches!(need, Need::Operate | Need::Dump),
        };
        if ok {
            return Ok(());
        }
        Err(match caller {
            Caller::Operator(name) => denied(
                "node_certificate_required",
                format!(
                    "operator {name:?} may read a node's status, dump a group for a backup \
                     and restore one; {need:?} needs a node"
                ),
            ),
            Caller::Joining(id) => denied(
                "not_a_member",
                format!("node {id} is not a member of this cluster yet: it may only register"),
            ),
            _ => denied("forbidden", format!("{need:?}")),
        })
    }

    /// Who calls `req` (a retired node or an unusable certificate is
    /// refused here already); what it may do is [`Gate::allows`].
    pub fn caller<T>(&self, req: &Request<T>) -> Result<Caller, Status> {
        if !self.secure {
            return Ok(Caller::Plaintext);
        }
        let certs = req.peer_certs().ok_or_else(|| {
            Status::unauthenticated("certificate_required: this node accepts only mutual TLS")
        })?;
        let der = certs.first().ok_or_else(|| {
            Status::unauthenticated("certificate_required: no client certificate")
        })?;
        let principal = {
            let mut cache = self.identities.lock().expect("gate lock poisoned");
            if let Some(p) = cache.get(der.as_ref()) {
                p.clone()
            } else {
                let p = Principal::of_der(der);
                if cache.len() >= CACHE {
                    cache.clear();
                }
                cache.insert(der.to_vec(), p.clone());
                p
            }
        };
        match principal {
            None => Err(Status::unauthenticated(
                "certificate_required: the certificate names no seatfence identity",
            )),
            Some(Principal::Operator(name)) => Ok(Caller::Operator(name)),
            Some(Principal::Node(id)) => self.standing(id),
        }
    }

    /// A node's standing in this node's view of the directory.
    fn standing(&self, id: u64) -> Result<Caller, Status> {
        let listed = self
            .registry
            .as_ref()
            .and_then(|r| r.view(|d| d.retired(id)))
            .flatten();
        match listed {
            Some(true) => Err(denied(
                "retired_node",
                format!("node {id} is retired (decommissioned or declared dead)"),
            )),
            Some(false) => Ok(Caller::Member(id)),
            None if self.seeds.contains(&id) => Ok(Caller::Member(id)),
            None => Ok(Caller::Joining(id)),
        }
    }
}

pub(crate) fn denied(code: &str, reason: String) -> Status {
    Status::permission_denied(format!("{code}: {reason}"))
}
