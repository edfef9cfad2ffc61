//! What an operator's certificate may do on the node plane beyond reading
//! a node's status: dump a group (a backup) and run the steps of a restore.
//! Both are checked here and recorded in the directory's audit trail before
//! they run; an audit record that cannot be written fails the call.
//!
//! ```text
//!  operator ─Write/WriteBatch of Restore steps─▶ NodeApi
//!    restore_steps: Begin → BeginBy{operator: the caller's certificate}
//!      directory steps: the running restore is the step's, begun by this certificate
//!                       (an Abort from any operator's)
//!      event group steps: Records/Seal only, into a group the running restore created
//!    Auditor::record ─▶ Command::Audit in the directory (at its leader) ── fails? the step fails
//!    ─▶ propose
//!  operator ─Dump{group}─▶ Auditor::record(backup) ─▶ the dump
//! ```
//!
//! The checks read this node's replica of the directory. A replica that
//! hosts an event group has applied the `Group` step that created it (a
//! node opens a group only once its directory replica places it there), so
//! "created by this restore" is never missed; the restore's end can lag by
//! a replication round, after which the group's own seal refuses more.

use seatfence_core::restore::{keys, RestoreOp};
use seatfence_core::{AuditEntry, Command, GroupId, State};
use tonic::Status;

use crate::client::ClusterClient;
use crate::network::gate::denied;
use crate::registry::Registry;

/// Check an operator's restore steps for `group` and return them as they
/// are proposed (an operator's `Begin` becomes `BeginBy` naming the
/// certificate). `cmds` are all `Command::Restore`.
pub(crate) fn restore_steps(
    registry: &Registry,
    operator: &str,
    group: GroupId,
    cmds: Vec<Command>,
) -> Result<Vec<Command>, Status> {
    let refuse = |reason: String| denied("restore_refused", reason);
    let dir = registry
        .get(GroupId::DIRECTORY)
        .ok_or_else(|| Status::unavailable("group_unavailable: this node hosts no directory"))?;
    dir.read(|s| {
        let State::Directory(d) = &s.state else {
            return Err(refuse("the directory's replica is not a directory".into()));
        };
        let began_by =
            d.kv.get(keys::OPERATOR)
                .map(|v| String::from_utf8_lossy(v).into_owned());
        let same_operator = |backup: &str| match &began_by {
            Some(by) if by != operator => Err(refuse(format!(
                "the restore of backup {backup} was begun by certificate {by}, not {operator}"
            ))),
            _ => Ok(()),
        };
        cmds.into_iter()
            .map(|cmd| {
                let Command::Restore(op) = cmd else {
                    return Err(refuse("an operator writes restore steps only".into()));
                };
                let backup = op.backup().to_string();
                let op = match (group.is_directory(), op) {
                    (true, RestoreOp::Begin { backup }) => RestoreOp::BeginBy {
                        backup,
                        operator: operator.to_string(),
                    },
                    (_, RestoreOp::BeginBy { .. }) => {
                        return Err(refuse("BeginBy is written by a node, not sent".into()))
                    }
                    (true, op @ RestoreOp::Abort { .. }) => op,
                    (true, op) => {
                        same_operator(&backup)?;
                        op
                    }
                    (false, op @ (RestoreOp::Records { .. } | RestoreOp::Seal { .. })) => {
                        same_operator(&backup)?;
                        if d.restore_running() != Some(backup.as_str()) {
                            return Err(refuse(format!(
                                "no restore of backup {backup} runs in this cluster"
                            )));
                        }
                        if !d.restored_by(group, &backup) {
                            return Err(refuse(format!(
                                "group {group} was not created by the restore of backup {backup}"
                            )));
                        }
                        op
                    }
                    (false, op) => {
                        return Err(refuse(format!(
                            "{} is a directory step, not an event group's",
                            op.name()
                        )))
                    }
                };
                Ok(Command::Restore(op))
            })
            .collect()
    })
}

/// What a restore step is about, for its audit entry.
pub(crate) fn restore_target(group: GroupId, cmds: &[Command]) -> String {
    let mut records = 0usize;
    let mut backup = "";
    for c in cmds {
        if let Command::Restore(op) = c {
            backup = op.backup();
            if let RestoreOp::Records { records: r, .. } = op {
                records += r.len();
            }
        }
    }
    match (group.is_directory(), records) {
        (true, 0) => format!("backup {backup}"),
        (true, n) => format!("backup {backup}: {n} directory records"),
        (false, 0) => format!("backup {backup} group {group}"),
        (false, n) => format!("backup {backup} group {group} ({n} records)"),
    }
}

/// Records operator actions in the directory's audit trail, from any
/// node (through the cluster client, to the directory's leader).
#[derive(Clone, Default)]
pub struct Auditor {
    client: Option<ClusterClient>,
}

impl Auditor {
    /// Record through `client` (the node's own).
    pub fn new(client: ClusterClient) -> Auditor {
        Auditor {
            client: Some(client),
        }
    }

    /// Record that certificate `operator` asked for `action` on `target`;
    /// `Err` (the call is refused) when the record cannot be written.
    pub async fn record(&self, operator: &str, action: &str, target: String) -> Result<(), Status> {
        let Some(client) = &self.client else {
            return Err(Status::unavailable(
                "audit_unavailable: this node cannot write the audit trail",
            ));
        };
        let at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let entry = AuditEntry {
            seq: 0,
            at_ms,
            actor: format!("certificate:{operator}"),
            action: action.into(),
            target,
            result: "requested".into(),
            id: format!("{:032x}", rand::random::<u128>()),
        };
        match client
            .write(GroupId::DIRECTORY, &Command::Audit(entry))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => {
                tracing::warn!(operator, action, "audit record failed: {e}: refused");
                Err(Status::unavailable(format!(
                    "audit_unavailable: the audit trail could not record {action}: {e}"
                )))
            }
        }
    }
}
