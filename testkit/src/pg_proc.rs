//! A throwaway PostgreSQL server for tests: its own data directory, on a
//! free port of 127.0.0.1, trust authentication, stopped when dropped.
//!
//! It needs the server's binaries (Debian's `postgresql` package, which
//! `.ci/run` installs): `initdb`, `pg_ctl` from the newest
//! `/usr/lib/postgresql/*/bin` (or `$SEATFENCE_PG_BIN`). PostgreSQL refuses
//! to run as root, so as root it runs as the `postgres` user the package
//! creates, in a directory that user owns.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context};

use crate::procs::free_ports;

pub struct PgProc {
    bin: PathBuf,
    data: PathBuf,
    pub port: u16,
    as_postgres: bool,
}

impl PgProc {
    /// Start a fresh server under `dir` (created if needed).
    pub fn start(dir: &Path) -> anyhow::Result<PgProc> {
        let bin = pg_bin()?;
        let as_postgres = is_root();
        let data = dir.join("pg");
        std::fs::create_dir_all(&data)?;
        if as_postgres {
            // The parents must let `postgres` reach its directory.
            let mut p = data.clone();
            while let Some(parent) = p.parent() {
                if parent.as_os_str().is_empty() || parent == Path::new("/") {
                    break;
                }
                run(Command::new("chmod").arg("o+x").arg(parent))?;
                p = parent.to_path_buf();
            }
            run(Command::new("chown").arg("postgres").arg(&data))?;
        }
        let port = free_ports(1)?[0];
        let pg = PgProc {
            bin,
            data,
            port,
            as_postgres,
        };
        run(pg
            .command("initdb")
            .arg("-D")
            .arg(&pg.data)
            .args(["-U", "postgres", "--auth=trust", "--no-sync"])
            .args(["--no-locale", "-E", "UTF8"]))
        .context("initdb")?;
        let opts = format!(
            "-c port={port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c fsync=on",
            pg.data.display()
        );
        run(pg
            .command("pg_ctl")
            .arg("-D")
            .arg(&pg.data)
            .args(["-w", "-t", "60", "-l"])
            .arg(pg.data.join("server.log"))
            .args(["-o", &opts, "start"]))
        .context("pg_ctl start")?;
        Ok(pg)
    }

    /// A libpq connection string for the `postgres` database.
    pub fn url(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }

    fn command(&self, tool: &str) -> Command {
        let exe = self.bin.join(tool);
        let mut c = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        };
        c.stdout(Stdio::null())
            .stderr(Stdio::piped())
            .current_dir(&self.data);
        c
    }
}

impl Drop for PgProc {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "stop"])
            .status();
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// The newest installed server's binaries.
fn pg_bin() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("SEATFENCE_PG_BIN") {
        return Ok(PathBuf::from(p));
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    let v = e.file_name().to_str()?.parse().ok()?;
                    let bin = e.path().join("bin");
                    bin.join("initdb").exists().then_some((v, bin))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    match found.pop() {
        Some((_, bin)) => Ok(bin),
        None => bail!(
            "no PostgreSQL server found under /usr/lib/postgresql: install Debian's postgresql package (.ci/run does) or set SEATFENCE_PG_BIN"
        ),
    }
}

fn run(c: &mut Command) -> anyhow::Result<()> {
    let out = c.output().with_context(|| format!("run {c:?}"))?;
    if !out.status.success() {
        bail!(
            "{c:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}
