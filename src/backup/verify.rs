//! `seatfence backup verify DIR`: every file the manifest names has its
//! SHA-256, size and record count, and every record decodes into its
//! group's state (one group in memory at a time). The first damage found
//! is an error naming the file.

use std::path::Path;

use anyhow::{bail, Context};
use seatfence_core::{GroupId, State};
use serde_json::json;

use super::file::{read_manifest, GroupEntry, Manifest, RecordsReader};

/// Read one group's file back into its state, checking it against its
/// manifest entry.
pub fn load_group(dir: &Path, g: &GroupEntry) -> anyhow::Result<State> {
    let path = dir.join(&g.file);
    let mut r = RecordsReader::open(&path)?;
    let mut state = State::new(GroupId(g.group_id));
    let mut n = 0u64;
    while let Some((k, v)) = r.next_record()? {
        state
            .load_record(&k, &v)
            .map_err(|e| anyhow::anyhow!("{}: record {n}: {}", path.display(), e.reason))?;
        n += 1;
    }
    r.check(g, n)?;
    state.rebuild_indexes();
    Ok(state)
}

/// Check the whole backup; its manifest.
pub fn verify(dir: &Path) -> anyhow::Result<Manifest> {
    let m = read_manifest(dir)?;
    seatfence_core::format::check(m.data_format).with_context(|| {
        format!(
            "the backup in {} holds records this binary cannot read",
            dir.display()
        )
    })?;
    match m.groups.first() {
        Some(g) if g.group_id == 0 => {}
        _ => bail!("{}: the manifest lists no directory", dir.display()),
    }
    for g in &m.groups {
        let state = load_group(dir, g)?;
        if let (Some(event), State::Event(e)) = (&g.event_id, &state) {
            let found = e.inventory.event().map(|ev| ev.event_id.0.as_str());
            if found != Some(event.as_str()) {
                bail!(
                    "{}: holds event {found:?}, the manifest says {event}",
                    dir.join(&g.file).display()
                );
            }
        }
    }
    Ok(m)
}

/// `seatfence backup verify DIR [--json]`.
pub fn run(dir: &Path, json: bool) -> anyhow::Result<()> {
    let m = verify(dir)?;
    if json {
        println!(
            "{}",
            json!({"ok": true, "backup_id": m.backup_id, "groups": m.groups.len(), "records": m.records, "bytes": m.bytes})
        );
    } else {
        println!(
            "backup {} in {}: ok ({} groups, {} records, {} bytes, every checksum and record checked)",
            m.backup_id,
            dir.display(),
            m.groups.len(),
            m.records,
            m.bytes
        );
    }
    Ok(())
}
