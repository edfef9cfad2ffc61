//! `NodeService.Dump`: a group's every record, as stored, for a backup.
//!
//! ```text
//!  Dump{group} ─▶ this node leads it? no ─▶ one chunk: not_leader (with a hint)
//!              ─▶ read index confirmed, then a copy of the state at its applied index
//!  ◀── header {group, applied_index, term, kind}
//!  ◀── records {keys, values} …   (≤ CHUNK_BYTES each, as `State::records` yields them)
//!  ◀── trailer {records}
//! ```
//!
//! The copy shares the state's persistent maps, so the dump costs the node
//! little memory and applies go on meanwhile; the records stream out
//! through a channel of two chunks, at the reader's pace. An operator's
//! dump of any group is recorded in the audit trail before it starts
//! (`crate::operator::Auditor`; no record, no dump), and no dump carries
//! a secret the directory keeps (`seatfence_core::directory::is_secret`).

use std::sync::Arc;

use seatfence_core::directory::is_secret;
use seatfence_core::{GroupId, RecordKey, State};
use seatfence_proto::v1::{dump_chunk, DumpChunk, DumpHeader, DumpRecords, DumpTrailer};
use tonic::Status;

use crate::network::gate::Caller;
use crate::propose::{ProposeError, Proposer};
use crate::status::to_status;

/// The most record bytes one chunk carries (well under the gRPC limit).
pub const CHUNK_BYTES: usize = 1 << 20;

/// The chunks of a dump, as the RPC streams them.
pub type DumpStream = tokio_stream::wrappers::ReceiverStream<Result<DumpChunk, Status>>;

fn chunk(part: dump_chunk::Part) -> Result<DumpChunk, Status> {
    Ok(DumpChunk { part: Some(part) })
}

/// Serve one dump of `group` to `caller`.
pub(crate) async fn serve(
    proposer: Arc<Proposer>,
    caller: Caller,
    group: GroupId,
    auditor: &crate::operator::Auditor,
) -> Result<DumpStream, Status> {
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    let (state, applied_index, term) = match proposer.dump(group).await {
        Ok(d) => d,
        Err(e @ ProposeError::NotLeader { .. }) => {
            let nl = crate::api::not_leader_or_status(e)?;
            let _ = tx.send(chunk(dump_chunk::Part::NotLeader(nl))).await;
            return Ok(DumpStream::new(rx));
        }
        Err(e) => return Err(to_status(&e)),
    };
    // This node leads the group and holds its copy: record the dump
    // before a record of it leaves.
    if let Caller::Operator(name) = &caller {
        auditor
            .record(
                name,
                "backup",
                format!("dump of group {group} at index {applied_index}"),
            )
            .await?;
    }
    let kind = match state {
        State::Directory(_) => "directory",
        State::Event(_) => "event",
    };
    tracing::info!(
        group = group.0,
        applied_index,
        term,
        ?caller,
        "dump for a backup"
    );
    // `State::records` borrows the copy and is not `Send`: the records are
    // encoded on a blocking thread, which waits while the channel is full.
    tokio::task::spawn_blocking(move || {
        let header = DumpHeader {
            group_id: group.0,
            applied_index,
            term,
            kind: kind.into(),
        };
        if tx
            .blocking_send(chunk(dump_chunk::Part::Header(header)))
            .is_err()
        {
            return;
        }
        let (mut keys, mut values, mut bytes, mut count) = (Vec::new(), Vec::new(), 0usize, 0u64);
        let secret = |k: &[u8]| matches!(RecordKey::decode(k), Some(RecordKey::Kv(name)) if is_secret(&name));
        for (k, v) in state.records().filter(|(k, _)| !secret(k)) {
            bytes += k.len() + v.len();
            keys.push(k);
            values.push(v);
            count += 1;
            if bytes >= CHUNK_BYTES {
                let part = dump_chunk::Part::Records(DumpRecords {
                    keys: std::mem::take(&mut keys),
                    values: std::mem::take(&mut values),
                });
                bytes = 0;
                if tx.blocking_send(chunk(part)).is_err() {
                    return;
                }
            }
        }
        if !keys.is_empty() {
            let part = dump_chunk::Part::Records(DumpRecords { keys, values });
            if tx.blocking_send(chunk(part)).is_err() {
                return;
            }
        }
        let _ = tx.blocking_send(chunk(dump_chunk::Part::Trailer(DumpTrailer {
            records: count,
        })));
    });
    Ok(DumpStream::new(rx))
}
