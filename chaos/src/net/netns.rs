//! [`NetnsNet`]: every node in a network namespace of its own.

use std::sync::atomic::Ordering;

use super::{is_root, run_cmd, Partitioner, NETNS_IN_USE, OWN_CONNECTIONS_DROP};

/// The namespace mechanism. Node `i` runs (through `ip netns exec`) in
/// namespace `sfchaos-n{i}` whose only link, `eth0` with address
/// `10.231.0.{i+1}/16`, is one end of a veth pair; the other end is on
/// the host's bridge `sfchaos0` (`10.231.0.1`), where the harness and the
/// mock gateway live. Blocking `a → b` is an `iptables -A OUTPUT -d b`
/// DROP rule inside `a`'s namespace for the connections `a` opens; heal
/// flushes every namespace's OUTPUT chain. Namespaces and bridge are
/// removed at the end; those a killed drill left are removed when the
/// next one starts, so one namespace drill runs on a machine at a time.
pub struct NetnsNet {
    ids: Vec<u64>,
}

const BRIDGE: &str = "sfchaos0";
const NS_PREFIX: &str = "sfchaos-n";

impl NetnsNet {
    /// The host's address on the bridge: where nodes reach the harness
    /// and the mock gateway.
    pub const HOST_IP: &'static str = "10.231.0.1";

    /// Whether this machine can run it, and if not, why: creates and
    /// removes a namespace with a veth pair and lists its iptables.
    pub fn probe() -> Result<(), String> {
        is_root().map_err(|e| format!("{e} (ip netns, iptables)"))?;
        let ns = "sfchaos-probe";
        let _ = run_cmd("ip", &["netns", "del", ns]);
        let tried = (|| -> anyhow::Result<()> {
            run_cmd("ip", &["netns", "add", ns])?;
            run_cmd(
                "ip",
                &[
                    "link",
                    "add",
                    "sfchaosp0",
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "sfchaosp1",
                ],
            )?;
            run_cmd("ip", &["link", "set", "sfchaosp1", "netns", ns])?;
            run_cmd(
                "ip",
                &["netns", "exec", ns, "iptables", "-w", "-L", "OUTPUT", "-n"],
            )?;
            Ok(())
        })();
        let _ = run_cmd("ip", &["link", "del", "sfchaosp0"]);
        let _ = run_cmd("ip", &["netns", "del", ns]);
        tried.map_err(|e| format!("namespaces do not work here: {e:#}"))
    }

    /// The address of node `id` in its namespace.
    pub fn ip_of(id: u64) -> String {
        format!("10.231.0.{}", id + 1)
    }

    /// The namespace node `id` runs in.
    pub fn ns_of(id: u64) -> String {
        format!("{NS_PREFIX}{id}")
    }

    /// Create the bridge and one namespace per node.
    pub fn start(ids: &[u64]) -> anyhow::Result<NetnsNet> {
        anyhow::ensure!(
            ids.iter().all(|i| (1..=250).contains(i)),
            "node ids 1 to 250 only"
        );
        Self::remove_all();
        let net = NetnsNet { ids: ids.to_vec() };
        NETNS_IN_USE.store(true, Ordering::SeqCst);
        run_cmd("ip", &["link", "add", BRIDGE, "type", "bridge"])?;
        run_cmd(
            "ip",
            &[
                "addr",
                "add",
                &format!("{}/16", Self::HOST_IP),
                "dev",
                BRIDGE,
            ],
        )?;
        run_cmd("ip", &["link", "set", BRIDGE, "up"])?;
        // With br_netfilter the host's FORWARD chain sees bridged frames; a
        // host whose policy is DROP (docker's) must still pass ours.
        let forward = ["FORWARD", "-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT"];
        if run_cmd("iptables", &[&["-w", "-C"][..], &forward].concat()).is_err() {
            run_cmd("iptables", &[&["-w", "-I"][..], &forward].concat())?;
        }
        for id in ids {
            let (ns, host_end, ns_end) = (
                Self::ns_of(*id),
                format!("sfchaos{id}h"),
                format!("sfchaos{id}p"),
            );
            let addr = format!("{}/16", Self::ip_of(*id));
            run_cmd("ip", &["netns", "add", &ns])?;
            run_cmd(
                "ip",
                &[
                    "link", "add", &host_end, "type", "veth", "peer", "name", &ns_end,
                ],
            )?;
            run_cmd("ip", &["link", "set", &ns_end, "netns", &ns])?;
            run_cmd("ip", &["-n", &ns, "link", "set", &ns_end, "name", "eth0"])?;
            run_cmd("ip", &["-n", &ns, "addr", "add", &addr, "dev", "eth0"])?;
            run_cmd("ip", &["-n", &ns, "link", "set", "eth0", "up"])?;
            run_cmd("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
            run_cmd("ip", &["link", "set", &host_end, "master", BRIDGE])?;
            run_cmd("ip", &["link", "set", &host_end, "up"])?;
        }
        Ok(net)
    }

    /// Remove every namespace, veth pair and the bridge this mechanism
    /// creates. The host ends are deleted first and explicitly: a deleted
    /// namespace takes its veth pairs with it only asynchronously.
    pub(super) fn remove_all() {
        if let Ok(out) = std::process::Command::new("ip")
            .args(["-o", "link", "show"])
            .output()
        {
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                // "12: sfchaos3h@if11: <...>"
                let name = line.split(':').nth(1).unwrap_or("").trim();
                let name = name.split('@').next().unwrap_or("");
                if name.starts_with("sfchaos") && name.ends_with('h') {
                    let _ = run_cmd("ip", &["link", "del", name]);
                }
            }
        }
        if let Ok(out) = std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
        {
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let name = line.split_whitespace().next().unwrap_or("");
                if name.starts_with(NS_PREFIX) {
                    let _ = run_cmd("ip", &["netns", "del", name]);
                }
            }
        }
        let _ = run_cmd("ip", &["link", "del", BRIDGE]);
        let _ = run_cmd(
            "iptables",
            &[
                "-w", "-D", "FORWARD", "-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT",
            ],
        );
    }

    fn iptables_in(&self, id: u64, args: &[&str]) -> anyhow::Result<()> {
        let ns = Self::ns_of(id);
        run_cmd(
            "ip",
            &[&["netns", "exec", &ns, "iptables", "-w"][..], args].concat(),
        )
    }
}

impl Drop for NetnsNet {
    fn drop(&mut self) {
        Self::remove_all();
        NETNS_IN_USE.store(false, Ordering::SeqCst);
    }
}

impl Partitioner for NetnsNet {
    fn name(&self) -> &'static str {
        "netns"
    }

    fn block(&self, from: u64, to: u64) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.ids.contains(&from) && self.ids.contains(&to),
            "no namespace for link {from} → {to}"
        );
        // As with the loopback rules: `from`'s packets on the connections
        // it opens to `to`; its answers on `to`'s connections still go.
        let to_ip = Self::ip_of(to);
        self.iptables_in(
            from,
            &[&["-A", "OUTPUT", "-d", &to_ip][..], &OWN_CONNECTIONS_DROP].concat(),
        )
    }

    fn delay_all(&self, _ms: u64) -> anyhow::Result<()> {
        anyhow::bail!("netns cannot delay packets here (that needs tc netem)")
    }

    fn heal(&self) -> anyhow::Result<()> {
        for id in &self.ids {
            self.iptables_in(*id, &["-F", "OUTPUT"])?;
        }
        Ok(())
    }

    fn supports_delay(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Run `f` on a thread that has entered node `id`'s namespace; the
    /// sockets it creates stay in that namespace wherever they are used.
    fn in_ns<T: Send + 'static>(id: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
        use std::os::fd::AsRawFd;
        std::thread::spawn(move || {
            let ns = std::fs::File::open(format!("/var/run/netns/{}", NetnsNet::ns_of(id)))
                .expect("open the namespace");
            // SAFETY: setns on a valid namespace fd changes only this
            // (short-lived) thread's network namespace.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .expect("namespace thread")
    }

    /// An echo server listening in node `id`'s namespace on its address.
    fn ns_echo(id: u64) -> std::net::SocketAddr {
        use std::io::{Read, Write};
        let listener = in_ns(id, move || {
            std::net::TcpListener::bind((NetnsNet::ip_of(id).as_str(), 0)).expect("bind")
        });
        let addr = listener.local_addr().expect("addr");
        std::thread::spawn(move || {
            for mut c in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut b = [0u8; 1];
                    if c.read_exact(&mut b).is_ok() {
                        let _ = c.write_all(&b);
                    }
                });
            }
        });
        addr
    }

    /// From inside node `from`'s namespace: connect, send a byte, read it back.
    fn ns_ping(from: u64, to: std::net::SocketAddr) -> bool {
        use std::io::{Read, Write};
        in_ns(from, move || {
            let t = Duration::from_millis(800);
            let Ok(mut c) = std::net::TcpStream::connect_timeout(&to, t) else {
                return false;
            };
            let _ = c.set_read_timeout(Some(t));
            let mut b = [7u8; 1];
            c.write_all(&b).is_ok() && c.read_exact(&mut b).is_ok()
        })
    }

    /// Needs root and namespaces (skipped otherwise, saying why). It
    /// removes the namespaces of a namespace drill running on this machine.
    #[test]
    fn netns_blocks_one_way_and_heals() {
        if let Err(why) = NetnsNet::probe() {
            eprintln!("skipped: {why}");
            return;
        }
        let net = NetnsNet::start(&[1, 2]).expect("namespaces");
        let (at1, at2) = (ns_echo(1), ns_echo(2));
        assert!(ns_ping(1, at2) && ns_ping(2, at1), "the bridge joins them");
        net.block(1, 2).unwrap();
        assert!(!ns_ping(1, at2), "1 → 2 is cut");
        assert!(ns_ping(2, at1), "2 → 1 still works");
        let host = std::net::TcpStream::connect_timeout(&at2, Duration::from_secs(1));
        assert!(host.is_ok(), "the host still reaches node 2");
        net.heal().unwrap();
        assert!(ns_ping(1, at2), "healed");
        drop(net);
        let left = std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap();
        assert!(
            !String::from_utf8_lossy(&left.stdout).contains(NS_PREFIX),
            "namespaces removed at the end"
        );
    }
}
