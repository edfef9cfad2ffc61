//! `seatfence ctl`: operator commands. Cluster-level commands talk gRPC to
//! a node (`--addr`, [`node`]); event commands talk HTTP to an edge
//! ([`events`]), with the edges and tokens of `demo.json` (`--demo`) unless
//! `--edge`/`--token` are given.

use std::path::PathBuf;

use clap::{Args, Subcommand};

mod admin;
mod events;
mod node;
mod show;

pub use events::{EdgeTarget, EventCmd};

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
    /// HTTP edge URL (default: the first edge in demo.json).
    #[arg(long, global = true, help_heading = "Where to connect")]
    pub edge: Option<String>,
    /// Bearer token (default: demo.json's operator token).
    #[arg(long, global = true, help_heading = "Where to connect")]
    pub token: Option<String>,
    #[command(subcommand)]
    pub cmd: CtlCmd,
}

#[derive(Subcommand)]
pub enum CtlCmd {
    /// Groups hosted by the node at --addr: role, term, leader, indexes.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Create a group placed by the directory.
    CreateGroup {
        /// How many voters.
        #[arg(long, default_value_t = 3)]
        replicas: u8,
        /// Place all voters in this region ("zone survival").
        #[arg(long)]
        region: Option<String>,
    },
    /// Write a key in a group.
    Put {
        /// The group id.
        #[arg(long)]
        group: u64,
        /// The key.
        key: String,
        /// The value (UTF-8).
        value: String,
    },
    /// Read a key from the replica on the node at --addr.
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
    let demo = args
        .demo
        .or_else(|| std::env::var_os("SEATFENCE_DEMO").map(PathBuf::from))
        .unwrap_or_else(|| crate::demo::default_dir().join("demo.json"));
    match args.cmd {
        CtlCmd::Events(cmd) => {
            let target = EdgeTarget {
                demo,
                edge: args.edge,
                token: args.token,
            };
            events::run(target, cmd).await
        }
        cmd => {
            let addr = match args.addr {
                Some(a) => a,
                None => crate::demo::DemoFile::load(&demo)?
                    .nodes
                    .first()
                    .cloned()
                    .ok_or_else(|| anyhow::anyhow!("{} lists no nodes", demo.display()))?,
            };
            node::run(addr, cmd).await
        }
    }
}
