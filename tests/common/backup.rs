//! The backup and restore tests' tools (`t44_backup`, `t44_restore_fences`):
//! the `seatfence` CLI with the operator's certificate, `backup verify`, a
//! damaged copy, a confirmed booking.

use std::path::Path;
use std::process::Command as Proc;

use seatfence_raft::network::tls::TlsConfig;
use seatfence_testkit::cluster::OPERATOR_CERT;
use seatfence_testkit::LocalCluster;

use super::payments::Env;

/// `seatfence ARGS… --addr … --ca … --cert … --key …` against `cluster`
/// with its operator certificate: (success, stdout, stderr).
pub fn operator_cli(cluster: &LocalCluster, args: &[&str]) -> (bool, String, String) {
    let certs = cluster.certs_dir().expect("a TLS cluster");
    let mut cmd = Proc::new(env!("CARGO_BIN_EXE_seatfence"));
    cmd.args(args);
    for a in cluster.addrs() {
        cmd.arg("--addr").arg(a);
    }
    let tls = TlsConfig::in_dir(&certs, &format!("operator-{OPERATOR_CERT}"));
    for (flag, path) in [("--ca", tls.ca), ("--cert", tls.cert), ("--key", tls.key)] {
        cmd.arg(flag).arg(path.expect("all three"));
    }
    cli(cmd)
}

pub fn cli(mut cmd: Proc) -> (bool, String, String) {
    let out = cmd.output().expect("run seatfence");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

pub fn verify(dir: &Path) -> (bool, String, String) {
    let mut cmd = Proc::new(env!("CARGO_BIN_EXE_seatfence"));
    cmd.args(["backup", "verify"]).arg(dir);
    cli(cmd)
}

/// A copy of the backup in `from` with one byte of `file` flipped.
pub fn damaged_copy(from: &Path, to: &Path, file: &str) {
    std::fs::create_dir_all(to.join("groups")).unwrap();
    std::fs::copy(from.join("manifest.json"), to.join("manifest.json")).unwrap();
    for e in std::fs::read_dir(from.join("groups")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join("groups").join(e.file_name())).unwrap();
    }
    let path = to.join(file);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(&path, bytes).unwrap();
}

/// A confirmed booking of `seat` by `user`: hold, book, approve, callback.
pub async fn confirmed(env: &Env, user: &str, seat: &str) -> String {
    let h = env.hold(user, "bk", &[seat]).await;
    let b = env.book(user, h["hold_id"].as_str().unwrap()).await;
    let redirect = env.browser(b["approve_url"].as_str().unwrap(), true).await;
    let a = env.get(&redirect).await;
    assert_eq!(a.body["status"], "confirmed", "{}", a.body);
    b["booking_id"].as_str().unwrap().to_string()
}
