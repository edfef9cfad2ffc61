//! `seatfence ctl`: operator commands. Cluster-level commands talk gRPC to
//! a node (`--addr`, [`node`]); event commands talk HTTP to an edge
//! ([`events`], [`edge`]), with the edges and tokens of `demo.json`
//! (`--demo`) unless `--edge`/`--token` are given. An edge's error answer
//! is printed as `error: CODE (STATUS): MESSAGE` (and as its JSON on stdout
//! with `--json`), and ctl exits 1.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use seatfence_raft::network::tls::TlsConfig;

mod admin;
mod create;
mod edge;
mod events;
mod node;
mod show;
mod target;
mod version;

use edge::HttpError;
pub use events::{EdgeTarget, EventCmd};
pub use version::binary_line;

/// `seatfence ctl`'s flags (global to its subcommands) and subcommand.
#[derive(Args)]
pub struct CtlArgs {
    /// gRPC address of a node (status, put, get, create-group; default:
    /// the first node in demo.json).
    #[arg(long, global = true, help_heading = "Where to connect")]
    pub addr: Option<String>,
    /// demo.json with edges, tokens and node addresses (default:
    /// $SEATFENCE_DEMO, else the default demo's, under /tmp or $TMPDIR).
    #[arg(long, global = true, help_heading = "Where to connect")]
    pub demo: Option<PathBuf>,
    /// HTTP edge URL (default: demo.json's edges, the next tried whenever
    /// one refuses the connection; an event's own region's first where
    /// known).
    #[arg(long, global = true, help_heading = "Where to connect")]
    pub edge: Option<String>,
    /// Bearer token (default: demo.json's operator token).
    #[arg(long, global = true, help_heading = "Where to connect")]
    pub token: Option<String>,
    /// The cluster CA (PEM) for --addr (default: demo.json's `tls`).
    #[arg(long = "ca", global = true, help_heading = "Where to connect")]
    pub tls_ca: Option<PathBuf>,
    /// Your operator certificate (PEM; `seatfence cert operator`).
    #[arg(long = "cert", global = true, help_heading = "Where to connect")]
    pub tls_cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[arg(long = "key", global = true, help_heading = "Where to connect")]
    pub tls_key: Option<PathBuf>,
    /// Talk plaintext gRPC to a node run with `[tls] insecure = true`.
    #[arg(long, global = true, help_heading = "Where to connect")]
    pub insecure: bool,
    #[command(subcommand)]
    pub cmd: CtlCmd,
}

// `seatfence ctl`'s subcommands: `status` and the raw group commands
// (`create-group`, `put`, `get`: debugging, hidden from --help) over gRPC,
// the rest over HTTP (`EventCmd`). Not a doc comment: clap would make it
// the about text of `ctl` itself.
#[derive(Subcommand)]
// Parsed once per run: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum CtlCmd {
    /// Groups hosted by the node at --addr: role, term, leader, indexes.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Create a group placed by the directory (debugging).
    #[command(hide = true)]
    CreateGroup {
        /// How many voters.
        #[arg(long, default_value_t = 3)]
        replicas: u8,
        /// Place all voters in this region ("zone survival").
        #[arg(long)]
        region: Option<String>,
    },
    /// Write a key in a group (debugging).
    #[command(hide = true)]
    Put {
        /// The group id.
        #[arg(long)]
        group: u64,
        /// The key.
        key: String,
        /// The value (UTF-8).
        value: String,
    },
    /// Read a key from the replica on the node at --addr (debugging).
    #[command(hide = true)]
    Get {
        /// The group id.
        #[arg(long)]
        group: u64,
        /// The key.
        key: String,
    },
    #[command(flatten)]
    Events(EventCmd),
}

/// Run one `seatfence ctl` command.
pub async fn run(args: CtlArgs) -> anyhow::Result<()> {
    let demo = crate::demo::file_path(args.demo);
    match args.cmd {
        CtlCmd::Events(cmd) => {
            let as_json = cmd.json();
            let target = EdgeTarget {
                demo,
                edge: args.edge,
                token: args.token,
            };
            let outcome = events::run(target, cmd).await;
            if let Err(e) = &outcome {
                if let Some(answer) = e.downcast_ref::<HttpError>() {
                    exit_with(answer, as_json);
                }
                if as_json {
                    // No edge answer to print (none answered, a bad flag,
                    // no demo.json): a JSON line all the same, so a script
                    // reading stdout never parses prose.
                    let body = serde_json::json!({"error": {"code": "ctl_failed", "message": format!("{e:#}")}});
                    println!("{body}");
                }
            }
            outcome
        }
        cmd => {
            let file = match (&args.addr, args.tls_ca.is_some() || args.insecure) {
                (Some(_), true) => None,
                _ => Some(crate::demo::DemoFile::load(&demo)?),
            };
            let addr = match (args.addr, &file) {
                (Some(a), _) => a,
                (None, Some(f)) => f
                    .nodes
                    .first()
                    .cloned()
                    .ok_or_else(|| anyhow::anyhow!("{} lists no nodes", demo.display()))?,
                (None, None) => unreachable!("demo.json is read when --addr is missing"),
            };
            let tls = if args.insecure {
                TlsConfig {
                    insecure: true,
                    ..TlsConfig::default()
                }
            } else if args.tls_ca.is_some() || args.tls_cert.is_some() || args.tls_key.is_some() {
                TlsConfig {
                    insecure: false,
                    ca: args.tls_ca,
                    cert: args.tls_cert,
                    key: args.tls_key,
                }
            } else {
                file.and_then(|f| f.tls).ok_or_else(|| {
                    anyhow::anyhow!(
                        "no certificate: pass --ca, --cert and --key (or --insecure for a \
                         plaintext node)"
                    )
                })?
            };
            let tls = tls.load()?;
            let dialer = seatfence_raft::network::Dialer::new(tls.as_ref());
            node::run(addr, dialer, cmd).await
        }
    }
}

/// An edge's error answer, then exit 1: `error: CODE (STATUS): MESSAGE` on
/// stderr, and with `--json` the edge's error body on stdout (one line).
fn exit_with(answer: &HttpError, as_json: bool) -> ! {
    if as_json {
        println!("{}", answer.json_line());
    }
    eprintln!("error: {answer}");
    let _ = std::io::Write::flush(&mut std::io::stdout());
    std::process::exit(1)
}
