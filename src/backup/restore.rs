//! `seatfence restore --from DIR`: the backup is verified first, then
//! loaded into a new, empty cluster through the restore steps of
//! `seatfence_core::restore` (refused by the directory when the cluster
//! routes any event). Each event group is created under its backed-up id
//! (hold and booking ids name it), placed by this cluster's rules, loaded
//! chunk by chunk, sealed (its epoch raised past any the old cluster could
//! reach) and routed; then the directory's audit trail, keyed answers and
//! finished moves. Every step is idempotent: a restore cut short is run
//! again with the same backup.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context};
use seatfence_core::restore::{RestoreDone, RestoreOp};
use seatfence_core::{Command, EventRoute, GroupId, RecordKey, Response};
use seatfence_raft::ClusterClient;
use serde_json::json;

use super::file::{GroupEntry, RecordsReader};
use super::verify::{load_group, verify};

/// Record bytes one `Records` step carries at most.
const CHUNK_BYTES: usize = 512 << 10;

/// Run one restore step in `group`; its outcome, or the refusal as an error.
async fn step(
    client: &ClusterClient,
    group: GroupId,
    op: RestoreOp,
) -> anyhow::Result<RestoreDone> {
    let what = format!("{:?}", std::mem::discriminant(&op));
    let c = client
        .write(group, &Command::Restore(op))
        .await
        .with_context(|| format!("restore step in group {group}"))?;
    match c.response {
        Response::Restore(Ok(done)) => Ok(done),
        Response::Restore(Err(reason)) => bail!("group {group} refused the restore: {reason}"),
        other => bail!("group {group} answered {other:?} to {what}"),
    }
}

/// Send `records` to `group` in chunks; `keep` filters them.
async fn load(
    client: &ClusterClient,
    group: GroupId,
    backup: &str,
    mut records: impl FnMut() -> anyhow::Result<Option<(Vec<u8>, Vec<u8>)>>,
) -> anyhow::Result<u64> {
    let (mut chunk, mut bytes, mut sent) = (Vec::new(), 0usize, 0u64);
    loop {
        let next = records()?;
        let done = next.is_none();
        if let Some((k, v)) = next {
            bytes += k.len() + v.len();
            chunk.push((k, v));
        }
        if (done && !chunk.is_empty()) || bytes >= CHUNK_BYTES {
            sent += chunk.len() as u64;
            let op = RestoreOp::Records {
                backup: backup.to_string(),
                records: std::mem::take(&mut chunk),
            };
            step(client, group, op).await?;
            bytes = 0;
        }
        if done {
            return Ok(sent);
        }
    }
}

/// Restore one event group; its sealed route.
async fn restore_event(
    client: &ClusterClient,
    dir: &Path,
    backup: &str,
    entry: &GroupEntry,
    route: &EventRoute,
) -> anyhow::Result<EventRoute> {
    let group = GroupId(entry.group_id);
    let placement = EventRoute::placement(&route.owner_region, route.survival);
    let op = RestoreOp::Group {
        backup: backup.to_string(),
        group_id: group,
        placement,
    };
    step(client, GroupId::DIRECTORY, op).await?;
    let mut reader = RecordsReader::open(&dir.join(&entry.file))?;
    let loaded = load(client, group, backup, || reader.next_record()).await;
    match loaded {
        Ok(_) => {}
        // Run again after a cut-short restore: this group was done.
        Err(e) if format!("{e:#}").contains("is sealed") => {}
        Err(e) => return Err(e),
    }
    let RestoreDone::Sealed { epoch } = step(
        client,
        group,
        RestoreOp::Seal {
            backup: backup.to_string(),
        },
    )
    .await?
    else {
        bail!("group {group} did not say its epoch when sealed");
    };
    let route = EventRoute {
        epoch,
        ..route.clone()
    };
    let op = RestoreOp::Route {
        backup: backup.to_string(),
        route: route.clone(),
    };
    step(client, GroupId::DIRECTORY, op).await?;
    Ok(route)
}

/// `seatfence restore --from DIR`.
pub async fn run(client: &ClusterClient, dir: &Path, json: bool) -> anyhow::Result<()> {
    let clock = Instant::now();
    let m = verify(dir)?;
    let directory = load_group(dir, &m.groups[0])?;
    let backup = m.backup_id.clone();
    step(
        client,
        GroupId::DIRECTORY,
        RestoreOp::Begin {
            backup: backup.clone(),
        },
    )
    .await?;
    let pb = super::bar(m.groups.len() as u64, "restore", json);
    let mut events = Vec::new();
    for entry in &m.groups[1..] {
        let route = directory
            .directory()
            .events
            .values()
            .find(|r| r.group.0 == entry.group_id)
            .with_context(|| {
                format!(
                    "the backup's directory routes no event to group {}",
                    entry.group_id
                )
            })?;
        let sealed = restore_event(client, dir, &backup, entry, route).await?;
        events.push(json!({"event_id": sealed.event_id.0, "group_id": sealed.group.0, "epoch": sealed.epoch.0,
                           "owner_region": sealed.owner_region.0, "records": entry.records}));
        pb.inc(1);
    }
    // The directory's history: the audit trail, keyed answers, finished moves.
    let mut reader = RecordsReader::open(&dir.join(&m.groups[0].file))?;
    let finished_move = |v: &[u8]| {
        seatfence_core::format::decode::<seatfence_core::MoveRecord>(v)
            .is_ok_and(|mv| mv.state != seatfence_core::MoveState::Running)
    };
    let history = load(client, GroupId::DIRECTORY, &backup, || loop {
        let Some((k, v)) = reader.next_record()? else {
            return Ok(None);
        };
        match RecordKey::decode(&k) {
            Some(RecordKey::Audit(_) | RecordKey::Answer(..)) => return Ok(Some((k, v))),
            Some(RecordKey::Move(_)) if finished_move(&v) => return Ok(Some((k, v))),
            _ => {}
        }
    })
    .await?;
    step(
        client,
        GroupId::DIRECTORY,
        RestoreOp::Finish {
            backup: backup.clone(),
        },
    )
    .await?;
    pb.finish_and_clear();
    let secs = clock.elapsed().as_secs_f64();
    if json {
        println!(
            "{}",
            json!({"backup_id": backup, "from_cluster": m.cluster_id, "events": events,
                   "directory_records": history, "records": m.records, "seconds": secs})
        );
    } else {
        println!(
            "restored backup {backup} (cluster {}): {} events, {} records, {history} directory records, in {secs:.1} s; \
             every event's epoch raised by 2^32",
            m.cluster_id,
            events.len(),
            m.records
        );
    }
    Ok(())
}
