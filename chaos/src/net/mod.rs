//! Partitions. Three mechanisms behind [`Partitioner`], one file each:
//! - [`ProxyNet`]: a userspace TCP proxy on every directed link between two
//!   nodes (each node dials its peers through the proxy of that link, set
//!   by `[chaos] via` in its config). Needs no privileges; can add delay.
//!   A blocked link keeps its connections open but forwards nothing (like a
//!   dropped packet, not a reset); at heal those connections are closed so
//!   the peers reconnect cleanly.
//! - [`NetnsNet`]: every node in a network namespace of its own
//!   (`ip netns`), joined to the host by a veth pair on one bridge, with
//!   `iptables -j DROP` inside the sending node's namespace. Needs root,
//!   `ip` and `iptables`; cannot add delay (that needs tc netem).
//! - [`IptablesNet`]: `iptables -j DROP` between per-node loopback addresses
//!   (node `i` listens on and dials from `127.0.0.{i+1}`), for machines that
//!   allow iptables but not namespaces. Needs root and a working
//!   `iptables`; cannot add delay.
//!
//! A link is directed: blocking `a → b` drops what `a` sends on the
//! connections it opens to `b`; `b`'s own connections to `a` still work.

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;

mod iptables;
mod netns;
mod proxy;

pub use iptables::IptablesNet;
pub use netns::NetnsNet;
pub use proxy::ProxyNet;

pub trait Partitioner: Send + Sync {
    fn name(&self) -> &'static str;
    /// Drop traffic on the directed link `from → to`.
    fn block(&self, from: u64, to: u64) -> anyhow::Result<()>;
    /// Add `ms` of delay to every chunk on every link (0: none). Errors
    /// when the mechanism cannot delay.
    fn delay_all(&self, ms: u64) -> anyhow::Result<()>;
    /// Undo every block and delay.
    fn heal(&self) -> anyhow::Result<()>;
    fn supports_delay(&self) -> bool;
}

/// Cut every link between the two sides, both ways.
pub fn cut(net: &dyn Partitioner, a: &[u64], b: &[u64]) -> anyhow::Result<()> {
    for x in a {
        for y in b {
            if x != y {
                net.block(*x, *y)?;
                net.block(*y, *x)?;
            }
        }
    }
    Ok(())
}

/// Whether this process has set up namespaces / the iptables chain that
/// are not removed yet, for [`remove_after_interrupt`].
pub(crate) static NETNS_IN_USE: AtomicBool = AtomicBool::new(false);
pub(crate) static IPTABLES_IN_USE: AtomicBool = AtomicBool::new(false);

/// Remove what this process's partition mechanism set up on the machine
/// (namespaces and bridge, or the iptables chain), for a drill stopped by
/// a signal while tasks still hold the mechanism.
pub fn remove_after_interrupt() {
    if NETNS_IN_USE.swap(false, Ordering::SeqCst) {
        NetnsNet::remove_all();
    }
    if IPTABLES_IN_USE.swap(false, Ordering::SeqCst) {
        IptablesNet::remove_chain();
    }
}

/// The tail of a DROP rule for the packets a sender sends on the TCP
/// connections it opened (its answers on the other side's connections,
/// direction REPLY, still pass).
pub(crate) const OWN_CONNECTIONS_DROP: [&str; 12] = [
    "-p",
    "tcp",
    "-m",
    "conntrack",
    "--ctstate",
    "NEW,ESTABLISHED",
    "-m",
    "conntrack",
    "--ctdir",
    "ORIGINAL",
    "-j",
    "DROP",
];

/// Run a command, failing with its stderr.
pub(crate) fn run_cmd(program: &str, args: &[&str]) -> anyhow::Result<()> {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("run {program}"))?;
    anyhow::ensure!(
        out.status.success(),
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

pub(crate) fn is_root() -> Result<(), String> {
    let uid = std::process::Command::new("id")
        .arg("-u")
        .output()
        .map_err(|e| format!("cannot run id: {e}"))?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Err("needs root".into());
    }
    Ok(())
}
