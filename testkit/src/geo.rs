//! [`Geo`]: the world's geography on one machine, a round-trip time
//! between every two regions (plus jitter) that the link proxies
//! ([`crate::links`]) apply to every node-to-node and edge-to-leader
//! connection, and the Raft timings derived from it so elections and
//! leases stay calm across the slowest link.

use std::collections::BTreeMap;
use std::fmt;

use seatfence_raft::RaftTuning;

use crate::layout::REGIONS;

/// Round trips between regions. A pair not named is 0 ms apart; a node
/// and its neighbours in the same region are always 0 ms apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Geo {
    /// Round trip (ms) of each unordered region pair, the smaller name first.
    rtt_ms: BTreeMap<(String, String), u64>,
    /// Up to this much (ms) is added to each one-way trip, at random.
    pub jitter_ms: u64,
}

impl Default for Geo {
    /// us-east↔eu-west 80 ms, us-east↔ap-south 200 ms, eu-west↔ap-south
    /// 150 ms round trip, each way up to 5 ms of jitter.
    fn default() -> Geo {
        let mut g = Geo {
            rtt_ms: BTreeMap::new(),
            jitter_ms: 5,
        };
        g.set(REGIONS[0], REGIONS[1], 80);
        g.set(REGIONS[0], REGIONS[2], 200);
        g.set(REGIONS[1], REGIONS[2], 150);
        g
    }
}

fn key(a: &str, b: &str) -> (String, String) {
    if a <= b {
        (a.to_string(), b.to_string())
    } else {
        (b.to_string(), a.to_string())
    }
}

impl Geo {
    /// Set the round trip between `a` and `b`.
    pub fn set(&mut self, a: &str, b: &str, rtt_ms: u64) {
        if a != b {
            self.rtt_ms.insert(key(a, b), rtt_ms);
        }
    }

    /// The round trip (ms) between two regions, without jitter.
    pub fn rtt(&self, a: &str, b: &str) -> u64 {
        if a == b {
            return 0;
        }
        self.rtt_ms.get(&key(a, b)).copied().unwrap_or(0)
    }

    /// One way from `a` to `b` (half the round trip).
    pub fn one_way(&self, a: &str, b: &str) -> u64 {
        self.rtt(a, b) / 2
    }

    /// The longest round trip with its jitter both ways.
    pub fn worst_rtt(&self) -> u64 {
        self.rtt_ms.values().max().copied().unwrap_or(0) + 2 * self.jitter_ms
    }

    /// `base` with its timings stretched for the slowest link. openraft
    /// gives every heartbeat and append RPC `heartbeat_ms` to answer, so
    /// a heartbeat interval under a round trip makes every far heartbeat
    /// time out and leaders lose their quorum (found by `bench failover
    /// --global`: groups that never resumed). So heartbeats every two worst
    /// round trips, elections no sooner than four heartbeats, the longest
    /// election timeout (which bounds the leader's read lease) twice the
    /// shortest, and groups sleep no sooner than that (a sleeping group
    /// must outlast an election). A timing `base` already sets longer is
    /// kept.
    pub fn tuning(&self, base: RaftTuning) -> RaftTuning {
        let rtt = self.worst_rtt();
        let heartbeat_ms = base.heartbeat_ms.max(2 * rtt);
        let election_timeout_min_ms = base.election_timeout_min_ms.max(4 * heartbeat_ms);
        let election_timeout_max_ms = base
            .election_timeout_max_ms
            .max(2 * election_timeout_min_ms);
        let sleep_after_ms = match base.sleep_after_ms {
            0 => 0,
            s => s.max(election_timeout_max_ms),
        };
        RaftTuning {
            heartbeat_ms,
            election_timeout_min_ms,
            election_timeout_max_ms,
            sleep_after_ms,
            ..base
        }
    }

    /// Parse `A/B=MS` (a round trip) into this matrix.
    pub fn parse_pair(&mut self, text: &str) -> Result<(), String> {
        let (pair, ms) = text
            .split_once('=')
            .ok_or_else(|| format!("{text:?}: expected REGION/REGION=MS"))?;
        let (a, b) = pair
            .split_once('/')
            .ok_or_else(|| format!("{text:?}: expected REGION/REGION=MS"))?;
        let ms: u64 = ms
            .trim()
            .parse()
            .map_err(|_| format!("{text:?}: {ms:?} is not a number of milliseconds"))?;
        if ms > 5_000 {
            return Err(format!(
                "{text:?}: a round trip over 5000 ms is not a planet"
            ));
        }
        let (a, b) = (a.trim(), b.trim());
        if a.is_empty() || b.is_empty() || a == b {
            return Err(format!("{text:?}: name two different regions"));
        }
        self.set(a, b, ms);
        Ok(())
    }

    /// The matrix as JSON: `{"rtt_ms": {"a/b": 80, ...}, "jitter_ms": 5}`.
    pub fn to_json(&self) -> serde_json::Value {
        let rtt: serde_json::Map<String, serde_json::Value> = self
            .rtt_ms
            .iter()
            .map(|((a, b), ms)| (format!("{a}/{b}"), serde_json::json!(ms)))
            .collect();
        serde_json::json!({"rtt_ms": rtt, "jitter_ms": self.jitter_ms})
    }
}

impl fmt::Display for Geo {
    /// `us-east/eu-west 80 ms, ... (jitter ≤5 ms each way)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pairs: Vec<String> = self
            .rtt_ms
            .iter()
            .map(|((a, b), ms)| format!("{a}↔{b} {ms} ms"))
            .collect();
        write!(
            f,
            "{} round trip (jitter ≤{} ms each way)",
            pairs.join(", "),
            self.jitter_ms
        )
    }
}

/// `--global`, `--rtt A/B=MS` and `--jitter MS`, shared by the demo, the
/// benchmarks and the drills.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct GeoArgs {
    /// Put the regions far apart: every link between two regions gets the
    /// matrix's latency (us-east↔eu-west 80 ms, us-east↔ap-south 200 ms,
    /// eu-west↔ap-south 150 ms round trip unless `--rtt` says otherwise).
    #[arg(long)]
    pub global: bool,
    /// A round trip between two regions, `REGION/REGION=MS` (repeatable;
    /// implies `--global`).
    #[arg(long = "rtt", value_name = "A/B=MS")]
    pub rtt: Vec<String>,
    /// Up to this much random delay (ms) on each one-way trip (with
    /// `--global`; default 5).
    #[arg(long, value_name = "MS")]
    pub jitter: Option<u64>,
}

impl GeoArgs {
    /// The matrix asked for, or `None` when the regions stay together.
    pub fn geo(&self) -> anyhow::Result<Option<Geo>> {
        if !self.global && self.rtt.is_empty() {
            anyhow::ensure!(self.jitter.is_none(), "--jitter needs --global");
            return Ok(None);
        }
        let mut g = Geo::default();
        for pair in &self.rtt {
            g.parse_pair(pair).map_err(anyhow::Error::msg)?;
        }
        if let Some(j) = self.jitter {
            anyhow::ensure!(j <= 1_000, "--jitter {j}: at most 1000 ms");
            g.jitter_ms = j;
        }
        Ok(Some(g))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_world_and_its_timings() {
        let g = Geo::default();
        assert_eq!(g.rtt("us-east", "ap-south"), 200);
        assert_eq!(g.rtt("ap-south", "us-east"), 200);
        assert_eq!(g.rtt("eu-west", "eu-west"), 0);
        assert_eq!(g.one_way("eu-west", "ap-south"), 75);
        let t = g.tuning(RaftTuning::default());
        assert_eq!(t.heartbeat_ms, 420);
        assert_eq!(t.election_timeout_min_ms, 1680);
        assert_eq!(t.election_timeout_max_ms, 3360);
        assert_eq!(t.sleep_after_ms, 3360);
        t.check().unwrap();
        // A slower base is kept.
        let slow = RaftTuning {
            election_timeout_min_ms: 3000,
            election_timeout_max_ms: 9000,
            ..RaftTuning::default()
        };
        assert_eq!(g.tuning(slow).election_timeout_max_ms, 9000);
    }

    #[test]
    fn pairs_parse_and_refuse() {
        let mut g = Geo::default();
        g.parse_pair("eu-west/us-east=120").unwrap();
        assert_eq!(g.rtt("us-east", "eu-west"), 120);
        for bad in ["x", "a/b", "a/a=3", "a/b=soon", "/b=3", "a/b=99999"] {
            assert!(g.parse_pair(bad).is_err(), "{bad} refused");
        }
        let args = GeoArgs {
            global: false,
            rtt: vec![],
            jitter: Some(3),
        };
        assert!(args.geo().is_err(), "--jitter alone");
    }
}
