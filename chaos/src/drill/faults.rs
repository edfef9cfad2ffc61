//! What a drill sets out to inject: the kinds of fault this binary and
//! partition mechanism can inject (said at start, with those it cannot),
//! or those `--faults` names, and the seed's schedule of them.

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

/// The kinds of fault the run sets out to cover: a soak's leader kills;
/// else every kind this binary and the partition mechanism can inject
/// (said at start, with those it cannot and why), or those `--faults`
/// names. Warns when `--duration` is too short for one full round.
pub(super) fn fault_kinds(
    args: &DrillArgs,
    soak: Option<&SoakInfo>,
    net: &dyn Partitioner,
    nodes: usize,
) -> anyhow::Result<Vec<Fault>> {
    if soak.is_some() {
        return Ok(vec![Fault::KillMinority]);
    }
    let fsync = seatfence_raft::storage::health::FSYNC_FAULT_HOOK;
    let mut kinds = all_kinds(net.supports_delay(), fsync);
    let mut cannot = Vec::new();
    if !fsync {
        cannot.push("fsync-fail (this build has no storage fault hook: build with `--features fault-injection`)".to_string());
    }
    if !net.supports_delay() {
        cannot.push(format!(
            "slow-network ({} cannot delay links: --net proxy can)",
            net.name()
        ));
    }
    if !args.faults.is_empty() {
        let mut known: Vec<String> = kinds.iter().map(Fault::kind).collect();
        if loses_node(args, nodes) {
            known.push(Fault::LoseNode.kind());
        }
        for f in &args.faults {
            anyhow::ensure!(
                known.contains(f),
                "--faults: {f:?} is not a kind this drill can inject here (it can: {})",
                known.join(", ")
            );
        }
        kinds.retain(|k| args.faults.contains(&k.kind()));
    }
    let lose = (args.faults.is_empty() || args.faults.iter().any(|f| f == "lose-node"))
        && loses_node(args, nodes);
    let names: Vec<String> = kinds
        .iter()
        .map(Fault::kind)
        .chain(lose.then(|| Fault::LoseNode.kind()))
        .collect();
    eprintln!(
        "chaos drill: faults to cover ({}): {}",
        names.len(),
        names.join(", ")
    );
    for c in &cannot {
        eprintln!("  cannot inject {c}");
    }
    let full = full_round_ms(&kinds, lose, WARMUP_MS, COOLDOWN_MS).div_ceil(1_000);
    if args.duration < full {
        eprintln!(
            "chaos drill: WARNING: --duration {} is shorter than one full round of these faults \
             ({full} s): coverage will fail on the kinds not reached",
            args.duration
        );
    }
    if lose {
        kinds.push(Fault::LoseNode);
    }
    Ok(kinds)
}

/// The seed's fault schedule over `--duration`: a soak's steady kills, else
/// a drill's rounds of `kinds` (a node lost for good, if among them, in the
/// first round only).
pub(super) fn plan_faults(
    seed: u64,
    args: &DrillArgs,
    soak: Option<&SoakInfo>,
    kinds: &[Fault],
) -> Vec<ScheduledFault> {
    let lose = kinds.contains(&Fault::LoseNode);
    let kinds: Vec<Fault> = kinds
        .iter()
        .filter(|k| **k != Fault::LoseNode)
        .cloned()
        .collect();
    match soak {
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
    }
}
