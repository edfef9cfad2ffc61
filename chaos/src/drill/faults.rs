//! What a drill sets out to inject: the kinds of fault this binary and
//! partition mechanism can inject (said at start, with those it cannot),
//! or those `--faults` names, and the seed's schedule of them.
//!
//! The schedule is drawn from every kind (or the `--faults` chosen), then
//! the kinds this binary or mechanism cannot inject are taken out, their
//! slots left quiet: a seed gives the same faults at the same times on a
//! test build with the storage hook and on a release build without it,
//! over the proxy and in namespaces, so a failure replays anywhere.

use crate::net::Partitioner;
use crate::run::SoakInfo;
use crate::schedule::{all_kinds, full_round_ms, plan, plan_soak, Fault, ScheduledFault};

use super::runner::{COOLDOWN_MS, WARMUP_MS};
use super::DrillArgs;

/// Say how links are cut, and why not by the mechanisms passed over (an
/// `auto` drill that fell back to the proxy says so here, not only in
/// its report).
pub(super) fn say_mechanism(net: &dyn Partitioner, unavailable: &[(String, String)]) {
    eprintln!("chaos drill: links cut with {}", net.name());
    for (name, why) in unavailable {
        eprintln!("  not {name}: {why}");
    }
}

/// Whether a lost-for-good node fits the layout: its region has a spare to
/// repair onto and it has no buyer of its own (`nodes_per_region` >= 4).
fn loses_node(args: &DrillArgs, nodes: usize) -> bool {
    args.nodes_per_region >= 4 && args.clients < nodes
}

/// Every kind name `--faults` may give (whether this drill can inject it
/// here is checked once the mechanism is known).
pub(super) fn check_fault_names(names: &[String]) -> anyhow::Result<()> {
    let known: Vec<String> = all_kinds(true, true)
        .iter()
        .chain([&Fault::LoseNode, &Fault::WipeDisk])
        .map(Fault::kind)
        .collect();
    for f in names {
        anyhow::ensure!(
            known.contains(f),
            "--faults: {f:?} is not a kind of fault (kinds: {})",
            known.join(", ")
        );
    }
    Ok(())
}

/// The kinds a run draws its schedule from and those it sets out to cover.
pub(super) struct Cover {
    /// Drawn from (a node lost for good among them, in the first round).
    drawn: Vec<Fault>,
    /// Covered: `drawn` less what this binary or mechanism cannot inject.
    pub claimed: Vec<Fault>,
    /// The kinds left out, and why.
    pub cannot: Vec<(String, String)>,
}

/// The kinds of fault the run sets out to cover: a soak's leader kills;
/// else every kind this binary and the partition mechanism can inject
/// (said at start, with those it cannot and why), or those `--faults`
/// names. Warns when `--duration` is too short for one full round.
pub(super) fn fault_kinds(
    args: &DrillArgs,
    soak: Option<&SoakInfo>,
    net: &dyn Partitioner,
    nodes: usize,
) -> anyhow::Result<Cover> {
    if soak.is_some() {
        return Ok(Cover {
            drawn: vec![Fault::KillMinority],
            claimed: vec![Fault::KillMinority],
            cannot: Vec::new(),
        });
    }
    let mut drawn = all_kinds(true, true);
    if !args.faults.is_empty() {
        drawn.retain(|k| args.faults.contains(&k.kind()));
    }
    // A wiped disk only when named (not yet in the default schedule).
    if args.faults.iter().any(|f| f == "wipe-disk") {
        drawn.push(Fault::WipeDisk);
    }
    let lose = (args.faults.is_empty() || args.faults.iter().any(|f| f == "lose-node"))
        && loses_node(args, nodes);
    let mut cannot = Vec::new();
    let fsync = seatfence_raft::storage::health::FSYNC_FAULT_HOOK;
    for k in &drawn {
        match k {
            Fault::FsyncFail if !fsync => cannot.push((
                k.kind(),
                "this build has no storage fault hook: build with `--features fault-injection`"
                    .to_string(),
            )),
            Fault::SlowNetwork { .. } if !net.supports_delay() => cannot.push((
                k.kind(),
                format!("{} cannot delay links: --net proxy can", net.name()),
            )),
            _ => {}
        }
    }
    let full = full_round_ms(&drawn, lose, WARMUP_MS, COOLDOWN_MS).div_ceil(1_000);
    if lose {
        drawn.push(Fault::LoseNode);
    }
    let claimed: Vec<Fault> = drawn
        .iter()
        .filter(|k| !cannot.iter().any(|(c, _)| *c == k.kind()))
        .cloned()
        .collect();
    anyhow::ensure!(
        !claimed.is_empty(),
        "--faults: none of them can be injected here ({})",
        cannot
            .iter()
            .map(|(k, why)| format!("{k}: {why}"))
            .chain(
                (!lose && args.faults.iter().any(|f| f == "lose-node"))
                    .then(|| "lose-node: needs --nodes-per-region 4 or more".to_string())
            )
            .collect::<Vec<_>>()
            .join("; ")
    );
    let names: Vec<String> = claimed.iter().map(Fault::kind).collect();
    eprintln!(
        "chaos drill: faults to cover ({}): {}",
        names.len(),
        names.join(", ")
    );
    for (kind, why) in &cannot {
        eprintln!("  cannot inject {kind} ({why}): its slots in the schedule stay quiet");
    }
    if args.duration < full {
        eprintln!(
            "chaos drill: WARNING: --duration {} is shorter than one full round of these faults \
             ({full} s): coverage will fail on the kinds not reached",
            args.duration
        );
    }
    Ok(Cover {
        drawn,
        claimed,
        cannot,
    })
}

/// The seed's fault schedule over `--duration`: a soak's steady kills, else
/// a drill's rounds of the kinds `cover` draws from (a node lost for good,
/// if among them, in the first round only), less those it cannot inject.
pub(super) fn plan_faults(
    seed: u64,
    args: &DrillArgs,
    soak: Option<&SoakInfo>,
    cover: &Cover,
) -> Vec<ScheduledFault> {
    let lose = cover.drawn.contains(&Fault::LoseNode);
    let kinds: Vec<Fault> = cover
        .drawn
        .iter()
        .filter(|k| **k != Fault::LoseNode)
        .cloned()
        .collect();
    let planned = match soak {
        Some(s) => plan_soak(
            seed,
            args.duration * 1_000,
            WARMUP_MS,
            COOLDOWN_MS,
            s.kill_every_ms,
        ),
        None => plan(
            seed,
            args.duration * 1_000,
            WARMUP_MS,
            COOLDOWN_MS,
            &kinds,
            lose,
        ),
    };
    let mut schedule: Vec<ScheduledFault> = planned
        .into_iter()
        .filter(|f| !cover.cannot.iter().any(|(c, _)| *c == f.fault.kind()))
        .collect();
    // Ids are indexes into the schedule.
    for (i, f) in schedule.iter_mut().enumerate() {
        f.id = i as u32;
    }
    schedule
}
