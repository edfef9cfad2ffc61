//! Taking a backup: the directory first (its dump says which event groups
//! exist), then every event group, `parallel` at a time; each group read
//! at its leader at a committed index (a read index first) and streamed to
//! its file as it arrives; the manifest last.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context};
use futures::stream::{self, StreamExt, TryStreamExt};
use seatfence_core::{GroupId, State};
use seatfence_proto::v1::dump_chunk;
use seatfence_raft::ClusterClient;
use serde_json::json;

use super::file::{self, GroupEntry, Manifest, RecordsWriter};

/// Dump `group` into its file under `dir`; with `keep`, also load its
/// records into a state (the directory's, to list the events).
async fn dump_group(
    client: &ClusterClient,
    dir: &Path,
    group: GroupId,
    keep: bool,
) -> anyhow::Result<(GroupEntry, u8, Option<State>)> {
    let (header, mut stream) = client
        .dump(group)
        .await
        .with_context(|| format!("dump group {group}"))?;
    let name = file::group_file(group.0);
    let mut w = RecordsWriter::create(&dir.join(&name))?;
    let mut state = keep.then(|| State::new(group));
    let mut trailer = None;
    while let Some(chunk) = stream
        .message()
        .await
        .with_context(|| format!("dump group {group}"))?
    {
        match chunk.part {
            Some(dump_chunk::Part::Records(r)) => {
                anyhow::ensure!(
                    r.keys.len() == r.values.len(),
                    "group {group}: a malformed chunk"
                );
                for (k, v) in r.keys.iter().zip(&r.values) {
                    w.record(k, v)?;
                    if let Some(s) = &mut state {
                        s.load_record(k, v)
                            .map_err(|e| anyhow::anyhow!("group {group}: {}", e.reason))?;
                    }
                }
            }
            Some(dump_chunk::Part::Trailer(t)) => {
                trailer = Some(t.records);
                break;
            }
            other => bail!("group {group}: unexpected {other:?} in its dump"),
        }
    }
    let (sha256, records, bytes, data_format) = w.finish()?;
    match trailer {
        Some(n) if n == records => {}
        Some(n) => bail!("group {group}: the node sent {records} records and counted {n}"),
        None => bail!("group {group}: its dump ended early (after {records} records)"),
    }
    let entry = GroupEntry {
        group_id: group.0,
        kind: header.kind,
        event_id: None,
        file: name,
        applied_index: header.applied_index,
        term: header.term,
        records,
        bytes,
        sha256,
    };
    Ok((entry, data_format, state))
}

/// `seatfence backup --to DIR`.
pub async fn run(
    client: &ClusterClient,
    dir: &Path,
    parallel: usize,
    json: bool,
) -> anyhow::Result<()> {
    let clock = Instant::now();
    let m = take(client, dir, parallel, json).await?;
    let secs = clock.elapsed().as_secs_f64();
    if json {
        println!(
            "{}",
            json!({"dir": dir.display().to_string(), "backup_id": m.backup_id, "cluster_id": m.cluster_id,
                   "groups": m.groups.len(), "records": m.records, "bytes": m.bytes,
                   "data_format": m.data_format, "seconds": secs})
        );
    } else {
        println!(
            "backup {} of cluster {}: {} groups, {} records, {} bytes in {secs:.1} s, in {}",
            m.backup_id,
            m.cluster_id,
            m.groups.len(),
            m.records,
            m.bytes,
            dir.display()
        );
    }
    Ok(())
}

/// Take the backup; its manifest.
pub async fn take(
    client: &ClusterClient,
    dir: &Path,
    parallel: usize,
    quiet: bool,
) -> anyhow::Result<Manifest> {
    if dir.exists() && std::fs::read_dir(dir)?.next().is_some() {
        bail!(
            "{} is not empty: back up into a new directory",
            dir.display()
        );
    }
    std::fs::create_dir_all(dir.join("groups"))?;
    // The backup holds every secret the directory keeps: owner only.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    let started_ms = super::now_ms();
    let (dir_entry, mut data_format, state) =
        dump_group(client, dir, GroupId::DIRECTORY, true).await?;
    let state = state.expect("kept");
    let d = state.directory();
    let cluster_id = state
        .kv()
        .get(seatfence_core::directory::CLUSTER_ID_KEY)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .unwrap_or_default();
    let routes: Vec<_> = d.events.values().cloned().collect();
    let pb = super::bar(routes.len() as u64 + 1, "backup", quiet);
    pb.inc(1);
    let dumped: Vec<(GroupEntry, u8)> = stream::iter(routes)
        .map(|route| {
            let pb = pb.clone();
            async move {
                let (mut e, f, _) = dump_group(client, dir, route.group, false).await?;
                e.event_id = Some(route.event_id.0.clone());
                pb.inc(1);
                pb.set_message(format!("{} records in the last", e.records));
                anyhow::Ok((e, f))
            }
        })
        .buffer_unordered(parallel.max(1))
        .try_collect()
        .await?;
    pb.finish_and_clear();
    let mut groups = vec![dir_entry];
    for (e, f) in dumped {
        data_format = data_format.max(f);
        groups.push(e);
    }
    groups[1..].sort_by_key(|g| g.group_id);
    let m = Manifest {
        format: file::MANIFEST_FORMAT.into(),
        version: file::MANIFEST_VERSION,
        backup_id: format!("b-{:016x}", rand::random::<u64>()),
        cluster_id,
        release: env!("CARGO_PKG_VERSION").into(),
        data_format: data_format.max(seatfence_core::format::V1),
        started_ms,
        finished_ms: super::now_ms(),
        records: groups.iter().map(|g| g.records).sum(),
        bytes: groups.iter().map(|g| g.bytes).sum(),
        groups,
    };
    file::write_manifest(dir, &m)?;
    Ok(m)
}
