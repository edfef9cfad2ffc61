//! Processes this harness started (so none outlives a failed run) and free
//! ports for new ones.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};

/// Pids of every process this process started (nodes, gateways), so a
/// harness that gives up half-way can still stop them all ([`reap_all`]).
/// A std mutex: held only to push or drain, never across an `.await`.
static STARTED: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

pub(crate) fn started(child: &Child) {
    STARTED
        .lock()
        .expect("started lock poisoned")
        .push(child.id());
}

/// SIGKILL every process this process started that may still run (a drill
/// that failed half-way leaves no nodes behind). Pids of processes already
/// reaped are skipped by `kill` failing harmlessly.
pub fn reap_all() {
    let pids: Vec<u32> = std::mem::take(&mut *STARTED.lock().expect("started lock poisoned"));
    for pid in pids {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .stderr(Stdio::null())
            .status();
    }
}

/// `n` distinct free ports on 127.0.0.1: all bound to `:0` at once (so the
/// OS cannot hand one out twice), then released for the nodes.
pub(crate) fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<_, _>>()?)
}
