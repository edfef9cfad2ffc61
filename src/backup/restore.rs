//! `seatfence restore --from DIR`: the backup is verified first, then
//! loaded into a new, empty cluster through the restore steps of
//! `seatfence_core::restore` (refused by the directory when the cluster
//! routes any event). Each event group is created under its backed-up id
//! (hold and booking ids name it), placed by this cluster's rules, loaded
//! chunk by chunk, sealed (its epoch raised past any the old cluster could
//! reach) and routed; then the directory's audit trail, keyed answers and
//! finished moves. Every step is idempotent: a restore cut short is run
//! again with the same backup, from the same operator certificate (the
//! directory names the one that began it), or given up with `--abort`.
//! Each file is hashed again as it is sent: what reaches the cluster is
//! what was verified, or the restore stops before that group's seal.

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

/// Send the records of `entry`'s file that `keep` takes to `group`, in
/// chunks, hashing the file's bytes as they are read: at its end, what was
/// read must be what the manifest (and so the verify) names, or the last
/// chunk is not sent and the restore stops. An event group whose file was
/// swapped after the verify is then left unsealed, and an unsealed group
/// sells nothing and is routed nowhere. `buffer`: hold every record until
/// the check passed (the directory's history, which applies as it lands).
async fn load(
    (dir, entry): (&Path, &GroupEntry),
    buffer: bool,
    keep: impl Fn(&[u8], &[u8]) -> bool,
    mut send: impl AsyncFnMut(Vec<(Vec<u8>, Vec<u8>)>) -> anyhow::Result<()>,
) -> anyhow::Result<u64> {
    let mut reader = RecordsReader::open(&dir.join(&entry.file))?;
    let (mut chunk, mut bytes, mut read, mut sent) = (Vec::new(), 0usize, 0u64, 0u64);
    let mut held: Vec<Vec<(Vec<u8>, Vec<u8>)>> = Vec::new();
    loop {
        let next = reader.next_record()?;
        let done = next.is_none();
        if let Some((k, v)) = next {
            read += 1;
            if keep(&k, &v) {
                bytes += k.len() + v.len();
                chunk.push((k, v));
            }
        }
        if done {
            reader
                .check(entry, read)
                .context("the backup changed after it was verified")?;
            break;
        }
        if bytes >= CHUNK_BYTES {
            bytes = 0;
            held.push(std::mem::take(&mut chunk));
            // Streaming, one chunk stays held until the next is full, so
            // the file's last records wait for its check.
            if !buffer && held.len() > 1 {
                let part = held.remove(0);
                sent += part.len() as u64;
                send(part).await?;
            }
        }
    }
    held.push(chunk);
    for part in held.into_iter().filter(|c| !c.is_empty()) {
        sent += part.len() as u64;
        send(part).await?;
    }
    Ok(sent)
}

async fn send(
    client: &ClusterClient,
    group: GroupId,
    backup: &str,
    records: Vec<(Vec<u8>, Vec<u8>)>,
) -> anyhow::Result<()> {
    let op = RestoreOp::Records {
        backup: backup.to_string(),
        records,
    };
    step(client, group, op).await.map(|_| ())
}

/// Restore one event group; its sealed route. Owner, home and survival
/// come from the group's own event record (verified with its file), not
/// from the directory's route, which a move finishing between the two
/// dumps leaves behind.
async fn restore_event(
    client: &ClusterClient,
    dir: &Path,
    backup: &str,
    entry: &GroupEntry,
    route: &EventRoute,
) -> anyhow::Result<EventRoute> {
    let group = GroupId(entry.group_id);
    let state = load_group(dir, entry)?;
    let event = state
        .inventory()
        .event()
        .with_context(|| format!("group {group} of the backup holds no event record"))?;
    if event.event_id != route.event_id {
        bail!(
            "group {group} holds event {}, the backup's directory routes {} to it",
            event.event_id,
            route.event_id
        );
    }
    let route = EventRoute {
        home_region: event.home_region.clone(),
        owner_region: event.owner.clone(),
        survival: event.survival,
        ..route.clone()
    };
    drop(state);
    let placement = EventRoute::placement(&route.owner_region, route.survival);
    let op = RestoreOp::Group {
        backup: backup.to_string(),
        group_id: group,
        placement,
    };
    step(client, GroupId::DIRECTORY, op).await?;
    let loaded = load(
        (dir, entry),
        false,
        |_, _| true,
        async |part| send(client, group, backup, part).await,
    )
    .await;
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
    let route = EventRoute { epoch, ..route };
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
    let finished_move = |v: &[u8]| {
        seatfence_core::format::decode::<seatfence_core::MoveRecord>(v)
            .is_ok_and(|mv| mv.state != seatfence_core::MoveState::Running)
    };
    let keep = |k: &[u8], v: &[u8]| match RecordKey::decode(k) {
        Some(RecordKey::Audit(_) | RecordKey::Answer(..)) => true,
        Some(RecordKey::Move(_)) => finished_move(v),
        _ => false,
    };
    let history = load((dir, &m.groups[0]), true, keep, async |part| {
        send(client, GroupId::DIRECTORY, &backup, part).await
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

/// `seatfence restore --from DIR --abort`: end the backup's restore
/// unfinished.
pub async fn abort(client: &ClusterClient, dir: &Path, json: bool) -> anyhow::Result<()> {
    let m = super::file::read_manifest(dir)?;
    let backup = m.backup_id;
    step(
        client,
        GroupId::DIRECTORY,
        RestoreOp::Abort {
            backup: backup.clone(),
        },
    )
    .await?;
    if json {
        println!("{}", json!({"backup_id": backup, "aborted": true}));
    } else {
        println!("the restore of backup {backup} was aborted: nothing of it applies from now on");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::file::{group_file, RecordsWriter};

    /// A group's file of `n` records of 64 KiB, and its manifest entry.
    fn file(dir: &Path, n: usize) -> GroupEntry {
        std::fs::create_dir_all(dir.join("groups")).unwrap();
        let name = group_file(7);
        let mut w = RecordsWriter::create(&dir.join(&name)).unwrap();
        for i in 0..n {
            w.record(format!("k{i:04}").as_bytes(), &vec![b'a'; 64 << 10])
                .unwrap();
        }
        let (sha256, records, bytes, _) = w.finish().unwrap();
        GroupEntry {
            group_id: 7,
            kind: "event".into(),
            event_id: None,
            file: name,
            applied_index: 1,
            term: 1,
            records,
            bytes,
            sha256,
        }
    }

    #[tokio::test]
    async fn a_file_changed_after_the_verify_is_not_sent_to_its_end() {
        let dir = tempfile::tempdir().unwrap();
        // 48 records of 64 KiB: six chunks, past the reader's 1 MiB buffer.
        let entry = file(dir.path(), 48);
        let path = dir.path().join(&entry.file);
        let mut chunks = 0usize;
        let r = load(
            (dir.path(), &entry),
            false,
            |_, _| true,
            async |_part| {
                chunks += 1;
                if chunks == 1 {
                    // Swapped under the restore: same size, other bytes.
                    let mut b = std::fs::read(&path).unwrap();
                    let end = b.len() - 10;
                    b[end] ^= 0x01;
                    std::fs::write(&path, b).unwrap();
                }
                Ok(())
            },
        )
        .await;
        let e = format!("{:#}", r.unwrap_err());
        assert!(e.contains("changed after it was verified"), "{e}");
        assert!(chunks < 6, "the last chunk was sent: {chunks}");
    }

    #[tokio::test]
    async fn an_unchanged_file_is_sent_whole() {
        let dir = tempfile::tempdir().unwrap();
        let entry = file(dir.path(), 48);
        let mut records = 0usize;
        let sent = load(
            (dir.path(), &entry),
            false,
            |_, _| true,
            async |part| {
                records += part.len();
                Ok(())
            },
        )
        .await
        .unwrap();
        assert_eq!((sent, records), (48, 48));
    }
}
