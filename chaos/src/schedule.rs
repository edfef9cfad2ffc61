//! The nemesis's plan: which faults, when, for how long, all drawn from
//! the drill's seed so a failing run can be replayed with the same plan.
//! Targets that depend on the cluster at the time (the leader of the
//! hottest group, say) are chosen when the fault starts and recorded then.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// One kind of fault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Fault {
    /// Cut one node off from every other node.
    IsolateNode,
    /// Cut the leader of the hottest event's group off from every node.
    IsolateLeader,
    /// Cut one region off from the others; `leader_inside`: the region
    /// chosen is the one whose node leads the directory (the leader ends
    /// up in the minority) or one whose node does not (majority).
    PartitionRegion { leader_inside: bool },
    /// Two sides that cannot reach each other, and one node (a follower of
    /// the hottest group) that reaches both.
    Bridge,
    /// The hottest group's leader can no longer send to its followers;
    /// they can still send to it.
    OneWayLoss,
    /// SIGSTOP the hottest group's leader for longer than an election
    /// timeout, then SIGCONT it: the zombie leader.
    PauseLeader,
    /// SIGKILL a minority (one voter of the hottest group and one directory
    /// voter), restart them at heal.
    KillMinority,
    /// Cut a node whose edge clients keep using off from the rest, so its
    /// route cache goes stale.
    CutEdge,
    /// Skew the hottest group's leader clock by `ms`.
    ClockSkew { ms: i64 },
    /// The hottest group's leader's timers (elections, heartbeats, its
    /// lease, hold expiry ticks, payment sweeps) run at `permille` / 1000
    /// of the wall clock's speed.
    TimerSkew { permille: u32 },
    /// The hottest group's leader acts as if its disk were full: it
    /// refuses writes `storage_full` and takes no entries, until healed.
    DiskFull,
    /// The hottest group's leader's next flush fails (the storage fault
    /// hook, in builds with `fault-injection`, as the tests' are): the node
    /// acknowledges nothing it covered and exits; restarted at heal.
    FsyncFail,
    /// Every link delays each chunk by `ms` (the proxy mechanism only).
    SlowNetwork { ms: u64 },
    /// SIGKILL a follower of the hottest group, delete its data dir (a
    /// wiped or replaced disk) and start it again at heal with
    /// `--rejoin-empty`: it rejoins every group it was a voter of as a
    /// learner and votes again only once a caught-up majority made it a
    /// voter again. Never a directory voter (nodes 1–3): group 0's rejoin
    /// is not fenced like the event groups' yet. One at a time: it waits
    /// for the last wiped node to have rejoined every group (two voters of
    /// a group wiped together is a majority's log lost). Only when
    /// `--faults` names it (not yet in the default schedule).
    WipeDisk,
    /// SIGKILL a node for good and delete its data (a dead disk): the
    /// directory's leader declares it dead and repairs every group it was
    /// a voter of onto its region's spare node. At most once per drill,
    /// only with four or more nodes per region; never healed.
    LoseNode,
    /// Gateway switches: `execute-timeout`, `webhook-drop`,
    /// `webhook-duplicate`, `query-error`, `capture-held` (captures held
    /// past the deadline, webhooks lost, released at heal).
    Gateway { mode: String },
}

impl Fault {
    pub fn name(&self) -> &'static str {
        match self {
            Fault::IsolateNode => "isolate-node",
            Fault::IsolateLeader => "isolate-leader",
            Fault::PartitionRegion {
                leader_inside: true,
            } => "partition-region-leader-minority",
            Fault::PartitionRegion {
                leader_inside: false,
            } => "partition-region-leader-majority",
            Fault::Bridge => "bridge",
            Fault::OneWayLoss => "one-way-loss",
            Fault::PauseLeader => "pause-leader",
            Fault::KillMinority => "kill-minority",
            Fault::LoseNode => "lose-node",
            Fault::WipeDisk => "wipe-disk",
            Fault::CutEdge => "cut-edge",
            Fault::ClockSkew { .. } => "clock-skew",
            Fault::TimerSkew { .. } => "timer-skew",
            Fault::DiskFull => "disk-full",
            Fault::FsyncFail => "fsync-fail",
            Fault::SlowNetwork { .. } => "slow-network",
            Fault::Gateway { .. } => "gateway",
        }
    }

    /// What coverage counts as one kind: the name, and for a gateway
    /// fault its mode (`gateway-capture-held`), for every mode is its
    /// own path through payments.
    pub fn kind(&self) -> String {
        match self {
            Fault::Gateway { mode } => format!("gateway-{mode}"),
            other => other.name().to_string(),
        }
    }

    /// Whether it runs alongside the next fault (gateway switches, clock
    /// and timer skews) rather than before a calm. A full disk does not:
    /// its leader flushes nothing while full, so an `fsync-fail` landing on
    /// it next would have no effect to see.
    fn side(&self) -> bool {
        !self.needs_network()
            && !matches!(
                self,
                Fault::KillMinority
                    | Fault::PauseLeader
                    | Fault::LoseNode
                    | Fault::WipeDisk
                    | Fault::FsyncFail
                    | Fault::DiskFull
            )
    }

    /// Its duration, drawn; in a tight round the shortest it may run.
    fn draw_duration(&self, rng: &mut StdRng, tight: bool) -> u64 {
        match self {
            // Held captures must outlast a hold's deadline (4 s) and a
            // reconciler sweep for the void path to run.
            Fault::Gateway { mode } if mode == "capture-held" => {
                if tight {
                    12_000
                } else {
                    rng.gen_range(12_000..=15_000)
                }
            }
            // Calm enough for the death to be noticed and repaired before
            // the next network fault.
            Fault::LoseNode => 12_000,
            _ if tight => 2_500,
            _ => rng.gen_range(2_500..=5_000),
        }
    }

    /// The time from its start to the next fault's.
    fn draw_step(&self, rng: &mut StdRng, duration_ms: u64, tight: bool) -> u64 {
        match (self.side(), tight) {
            (true, true) => 500,
            (true, false) => rng.gen_range(500..=1_500),
            (false, true) => duration_ms + 1_000,
            (false, false) => duration_ms + rng.gen_range(1_000..=2_500),
        }
    }

    /// Whether the fault cuts network links (needs a partition mechanism).
    pub fn needs_network(&self) -> bool {
        matches!(
            self,
            Fault::IsolateNode
                | Fault::IsolateLeader
                | Fault::PartitionRegion { .. }
                | Fault::Bridge
                | Fault::OneWayLoss
                | Fault::CutEdge
                | Fault::SlowNetwork { .. }
        )
    }
}

/// A fault at a time, for a while.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduledFault {
    pub id: u32,
    /// Milliseconds after the drill started.
    pub at_ms: u64,
    pub duration_ms: u64,
    pub fault: Fault,
}

/// The largest clock skew the schedule uses.
pub const MAX_SKEW_MS: u64 = 1_500;

/// The timer rates the schedule uses, per mille: slow and fast. One node
/// at a time, so timer clocks differ by a ratio of 0.8 at worst, inside
/// the share of the leader lease lease reads rely on
/// (`seatfence_raft::propose::LEASE_SHARE`, 0.75).
pub const TIMER_RATES: [u32; 2] = [800, 1_250];

/// Every kind of fault, each variant once: `SlowNetwork` only when the
/// partition mechanism can delay (`with_delay`), `FsyncFail` only when the
/// nodes' build reads the storage fault hook (`with_fsync`,
/// `seatfence_raft::storage::health::FSYNC_FAULT_HOOK`).
pub fn all_kinds(with_delay: bool, with_fsync: bool) -> Vec<Fault> {
    let mut v = vec![
        Fault::IsolateNode,
        Fault::IsolateLeader,
        Fault::PartitionRegion {
            leader_inside: true,
        },
        Fault::PartitionRegion {
            leader_inside: false,
        },
        Fault::Bridge,
        Fault::OneWayLoss,
        Fault::PauseLeader,
        Fault::KillMinority,
        Fault::CutEdge,
        Fault::ClockSkew {
            ms: MAX_SKEW_MS as i64,
        },
        Fault::TimerSkew {
            permille: TIMER_RATES[1],
        },
        Fault::DiskFull,
    ];
    if with_fsync {
        v.push(Fault::FsyncFail);
    }
    for mode in [
        "execute-timeout",
        "webhook-drop",
        "webhook-duplicate",
        "query-error",
        "capture-held",
    ] {
        v.push(Fault::Gateway { mode: mode.into() });
    }
    if with_delay {
        v.push(Fault::SlowNetwork { ms: 40 });
    }
    v
}

/// The plan for a drill of `duration_ms`: a quiet start (`warmup_ms`) and
/// a quiet end (`cooldown_ms`) around back-to-back rounds; each round is
/// every fault of `kinds` once in a seeded order (with `lose_node`, the
/// first round also loses a node for good), each for 2.5–5 s (held
/// captures 12–15 s) with 1–2.5 s of calm after it. Network faults never
/// overlap each other; gateway faults and clock and timer skews run
/// alongside the next fault (so moves and payments see both at once).
///
/// The first round is always whole when the run is at least
/// [`full_round_ms`] long: when its drawn lengths do not fit, it is laid
/// out again at the shortest lengths (2.5 s faults, 1 s calms), held
/// captures first.
pub fn plan(
    seed: u64,
    duration_ms: u64,
    warmup_ms: u64,
    cooldown_ms: u64,
    kinds: &[Fault],
    lose_node: bool,
) -> Vec<ScheduledFault> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut lose_node = lose_node;
    let mut out: Vec<ScheduledFault> = Vec::new();
    let end = duration_ms.saturating_sub(cooldown_ms);
    let mut t = warmup_ms;
    let mut first = true;
    loop {
        let mut round = kinds.to_vec();
        // One node lost for good, in the first round only.
        if std::mem::take(&mut lose_node) {
            round.push(Fault::LoseNode);
        }
        if round.is_empty() {
            break;
        }
        round.shuffle(&mut rng);
        // Clock skew goes either way; timers run slow or fast.
        for k in &mut round {
            match k {
                Fault::ClockSkew { ms } => {
                    let mag = rng.gen_range(500..=MAX_SKEW_MS as i64);
                    *ms = if rng.gen_bool(0.5) { mag } else { -mag };
                }
                Fault::TimerSkew { permille } => {
                    *permille = *TIMER_RATES.choose(&mut rng).expect("rates");
                }
                _ => {}
            }
        }
        let before = rng.clone();
        let mut laid = lay_round(&mut rng, &round, t, end, false);
        if first && !laid.whole {
            rng = before;
            laid = lay_round(&mut rng, &tight_order(round), t, end, true);
        }
        first = false;
        for (at_ms, duration_ms, fault) in laid.faults {
            out.push(ScheduledFault {
                id: out.len() as u32,
                at_ms,
                duration_ms,
                fault,
            });
        }
        if !laid.whole {
            break;
        }
        t = laid.next_ms;
    }
    out
}

/// How long a drill must run (warm-up and cool-down included) for its
/// first round to hold every fault of `kinds` once, each at its shortest.
pub fn full_round_ms(kinds: &[Fault], lose_node: bool, warmup_ms: u64, cooldown_ms: u64) -> u64 {
    let mut round = kinds.to_vec();
    if lose_node {
        round.push(Fault::LoseNode);
    }
    let round = tight_order(round);
    let mut rng = StdRng::seed_from_u64(0);
    let laid = lay_round(&mut rng, &round, warmup_ms, u64::MAX, true);
    // The seed's order decides which fault is last, and so how far past
    // the last step the round reaches: take the worst.
    let tail = round
        .iter()
        .filter(|f| !is_held_capture(f))
        .map(|f| {
            let d = f.draw_duration(&mut rng, true);
            d as i64 - f.draw_step(&mut rng, d, true) as i64
        })
        .max()
        .unwrap_or(0);
    let by_steps = laid.next_ms.saturating_add_signed(tail);
    let by_ends = laid.faults.iter().map(|(at, d, _)| at + d).max();
    by_ends.unwrap_or(warmup_ms).max(by_steps) + cooldown_ms
}

/// One round laid out from `t`: each fault's start, duration and the fault.
struct Laid {
    faults: Vec<(u64, u64, Fault)>,
    /// Every fault of the round fitted before `end`.
    whole: bool,
    /// When the next round may start.
    next_ms: u64,
}

fn lay_round(rng: &mut StdRng, round: &[Fault], t: u64, end: u64, tight: bool) -> Laid {
    let mut t = t;
    let mut faults = Vec::with_capacity(round.len());
    for fault in round {
        let duration_ms = fault.draw_duration(rng, tight);
        if t + duration_ms > end {
            return Laid {
                faults,
                whole: false,
                next_ms: t,
            };
        }
        faults.push((t, duration_ms, fault.clone()));
        t += fault.draw_step(rng, duration_ms, tight);
    }
    Laid {
        faults,
        whole: true,
        next_ms: t,
    }
}

/// A tight round's order: the long side faults (held captures) first, so
/// they run alongside the others instead of past the end; otherwise the
/// seed's order.
fn tight_order(mut round: Vec<Fault>) -> Vec<Fault> {
    round.sort_by_key(|f| !is_held_capture(f));
    round
}

fn is_held_capture(f: &Fault) -> bool {
    matches!(f, Fault::Gateway { mode } if mode == "capture-held")
}

/// The plan for a soak of `duration_ms`: after `warmup_ms`, a leader kill
/// (`kill-minority`: the hottest group's leader and a directory voter,
/// SIGKILLed, restarted 5 s later) every `every_ms`, each drawn up to a
/// quarter of the interval late, none in the last `cooldown_ms`.
pub fn plan_soak(
    seed: u64,
    duration_ms: u64,
    warmup_ms: u64,
    cooldown_ms: u64,
    every_ms: u64,
) -> Vec<ScheduledFault> {
    let mut rng = StdRng::seed_from_u64(seed);
    let every_ms = every_ms.max(10_000);
    let end = duration_ms.saturating_sub(cooldown_ms);
    let mut out = Vec::new();
    let mut slot = warmup_ms;
    while slot < end {
        let at_ms = slot + rng.gen_range(0..=every_ms / 4);
        let duration_ms = 5_000;
        if at_ms + duration_ms > end {
            break;
        }
        out.push(ScheduledFault {
            id: out.len() as u32,
            at_ms,
            duration_ms,
            fault: Fault::KillMinority,
        });
        slot += every_ms;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_plan_and_faults_fit() {
        let kinds = all_kinds(true, true);
        let a = plan(7, 120_000, 8_000, 15_000, &kinds, false);
        assert_eq!(a, plan(7, 120_000, 8_000, 15_000, &kinds, false));
        assert_ne!(a, plan(8, 120_000, 8_000, 15_000, &kinds, false));
        assert!(
            a.len() >= kinds.len(),
            "a 2-minute plan holds one full round: {}",
            a.len()
        );
        for f in &a {
            assert!(
                f.at_ms >= 8_000 && f.at_ms + f.duration_ms <= 105_000,
                "{f:?}"
            );
        }
        assert!(!a.iter().any(|f| f.fault == Fault::LoseNode));
        let lost = plan(7, 120_000, 8_000, 15_000, &kinds, true);
        let n = lost.iter().filter(|f| f.fault == Fault::LoseNode).count();
        assert_eq!(n, 1, "one node lost, once");
        // Network faults never overlap one another.
        let net: Vec<_> = a.iter().filter(|f| f.fault.needs_network()).collect();
        for w in net.windows(2) {
            assert!(w[0].at_ms + w[0].duration_ms <= w[1].at_ms, "{:?}", w);
        }
    }

    /// The kinds a plan reaches.
    fn reached(p: &[ScheduledFault]) -> std::collections::BTreeSet<String> {
        p.iter().map(|f| f.fault.kind()).collect()
    }

    #[test]
    fn a_run_as_long_as_a_full_round_reaches_every_kind_whatever_the_seed() {
        for (delay, fsync, lose) in [
            (true, true, false),
            (false, false, false),
            (true, true, true),
        ] {
            let kinds = all_kinds(delay, fsync);
            let want: std::collections::BTreeSet<String> = kinds
                .iter()
                .map(Fault::kind)
                .chain(lose.then(|| "lose-node".to_string()))
                .collect();
            let full = full_round_ms(&kinds, lose, 8_000, 10_000);
            for seed in 0..200 {
                let p = plan(seed, full, 8_000, 10_000, &kinds, lose);
                assert_eq!(reached(&p), want, "seed {seed}, {full} ms");
                for f in &p {
                    assert!(f.at_ms >= 8_000 && f.at_ms + f.duration_ms <= full - 10_000);
                }
                // The drills' default length reaches every kind too.
                let p = plan(seed, 120_000, 8_000, 10_000, &kinds, lose);
                assert_eq!(reached(&p), want, "seed {seed}, 120 s");
            }
            // Five seconds shorter (more than the seed's order can save):
            // not every kind.
            let p = plan(1, full - 5_000, 8_000, 10_000, &kinds, lose);
            assert!(reached(&p).len() < want.len(), "{full}");
        }
        // Without the storage hook, no fsync fault is ever planned.
        let p = plan(3, 600_000, 8_000, 10_000, &all_kinds(true, false), false);
        assert!(p.iter().all(|f| f.fault != Fault::FsyncFail));
    }

    #[test]
    fn a_soak_kills_a_leader_at_every_interval() {
        let a = plan_soak(3, 3_600_000, 60_000, 30_000, 180_000);
        assert_eq!(a, plan_soak(3, 3_600_000, 60_000, 30_000, 180_000));
        assert!(a.len() >= 18, "{} kills in an hour", a.len());
        assert!(a.iter().all(|f| f.fault == Fault::KillMinority));
        for w in a.windows(2) {
            assert!(w[0].at_ms + w[0].duration_ms < w[1].at_ms, "{w:?}");
        }
        assert!(a.last().unwrap().at_ms + 5_000 <= 3_570_000);
    }
}
