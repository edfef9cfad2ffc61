//! [`IptablesNet`]: DROP rules between per-node loopback addresses.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use super::{is_root, run_cmd, Partitioner, IPTABLES_IN_USE, OWN_CONNECTIONS_DROP};

/// The root mechanism: each node has its own loopback address; a blocked
/// link is an `iptables -A SEATFENCE-CHAOS -s FROM -d TO -j DROP` rule in a
/// chain of its own, jumped to from INPUT, flushed at heal and removed at
/// the end. The rules name addresses only, so one iptables drill runs on a
/// machine at a time; a chain left by a drill that was killed is flushed
/// when the next one starts.
pub struct IptablesNet {
    ips: BTreeMap<u64, String>,
}

const CHAIN: &str = "SEATFENCE-CHAOS";

impl IptablesNet {
    /// Whether this machine can run it, and if not, why.
    pub fn probe() -> Result<(), String> {
        is_root().map_err(|e| format!("{e} (iptables rules)"))?;
        let out = std::process::Command::new("iptables")
            .args(["-w", "-L", "INPUT", "-n"])
            .output()
            .map_err(|e| format!("iptables not found: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "iptables does not work here: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(())
    }

    /// The loopback address of node `id`.
    pub fn ip_of(id: u64) -> String {
        format!("127.0.0.{}", id + 1)
    }

    pub fn start(ids: &[u64]) -> anyhow::Result<IptablesNet> {
        let net = IptablesNet {
            ips: ids.iter().map(|i| (*i, Self::ip_of(*i))).collect(),
        };
        let _ = net.run(&["-N", CHAIN]);
        net.run(&["-F", CHAIN])?;
        if net.run(&["-C", "INPUT", "-j", CHAIN]).is_err() {
            net.run(&["-I", "INPUT", "-j", CHAIN])?;
        }
        IPTABLES_IN_USE.store(true, Ordering::SeqCst);
        Ok(net)
    }

    fn run(&self, args: &[&str]) -> anyhow::Result<()> {
        run_cmd("iptables", &[&["-w"][..], args].concat())
    }

    /// Remove the chain and its jump.
    pub(super) fn remove_chain() {
        let _ = run_cmd("iptables", &["-w", "-D", "INPUT", "-j", CHAIN]);
        let _ = run_cmd("iptables", &["-w", "-F", CHAIN]);
        let _ = run_cmd("iptables", &["-w", "-X", CHAIN]);
    }
}

impl Drop for IptablesNet {
    fn drop(&mut self) {
        Self::remove_chain();
        IPTABLES_IN_USE.store(false, Ordering::SeqCst);
    }
}

impl Partitioner for IptablesNet {
    fn name(&self) -> &'static str {
        "iptables"
    }

    fn block(&self, from: u64, to: u64) -> anyhow::Result<()> {
        let (Some(a), Some(b)) = (self.ips.get(&from), self.ips.get(&to)) else {
            anyhow::bail!("no address for link {from} → {to}");
        };
        // What `from` sends to `to`: its connections' packets, and its
        // answers on `to`'s connections would need a reverse rule; like
        // the proxy, block only the connections `from` opens (dport side)
        // by dropping packets from a to b that are not replies.
        self.run(&[&["-A", CHAIN, "-s", a, "-d", b][..], &OWN_CONNECTIONS_DROP].concat())
    }

    fn delay_all(&self, _ms: u64) -> anyhow::Result<()> {
        anyhow::bail!("iptables cannot delay packets (that needs tc netem)")
    }

    fn heal(&self) -> anyhow::Result<()> {
        self.run(&["-F", CHAIN])
    }

    fn supports_delay(&self) -> bool {
        false
    }
}
