//! seatfence-regions: the ownership and routing control plane (DESIGN.md
//! §2, §5, §6): where an event's commands go, which node hosts which
//! replica, who leads a group, and how an event moves between regions.
//!
//! ```text
//!  edge ──resolve(event)──▶ RouteCache ──miss──▶ directory (group 0) leader
//!                              │ event → (group, epoch, owner region)
//!                              │ highest fence (epoch, term) seen per event
//!  reply (epoch, term) ──check_fence──▶ lower than seen? discard, re-route
//!  directory apply ──follow_directory──▶ re-learn cached routes (moves land everywhere)
//!  directory apply ──place_groups──▶ open groups placed here, retire the rest
//!  operator / move / repair / drained node ──transfer──▶ a caught-up voter leads
//! ```
//!
//! - [`routes`]: the edge's cache of the directory, its refresh loop
//!   (`follow_directory`) and the fence check at the edge (check 1 of
//!   DESIGN §5).
//! - [`commands`]: the fenced command path every in-node caller uses
//!   (route, stamp the epoch, check the reply's fence, retry).
//! - [`placement`]: hosting follows the directory (`place_groups`).
//! - [`transfer`]: the one leadership transfer (moves, operator transfer,
//!   drain, a drained node's hand-off) and its one definition of caught up.
//! - [`ops`]: proposing a move's or a node's operation to the directory
//!   (operators' handlers and the directory's duties).
//! - [`config`]: the `[moves]` section of a node's config.
//!
//! The directory leader's duties that drive moves, node lifecycle and
//! leader balance are `seatfence-duties`' (`directory`).
//!
//! The directory's state machine and placement decisions live in
//! `seatfence-core` (`Directory`, `EventRoute`, `Placement`, `MoveRecord`)
//! and run inside group 0. This crate never decides an outcome: it says
//! where to send a command, whether a reply is older than one already
//! seen, and drives membership and leadership through the groups' leaders;
//! it never writes to a group except through a committed command.

#![warn(missing_docs)]
pub mod commands;
pub mod config;
pub mod follow;
pub mod hint;
pub mod local_reads;
pub mod ops;
pub mod placement;
pub mod routes;
pub mod transfer;

pub use commands::{CommandError, Commands};
pub use routes::{FenceCheck, RouteCache, RouteError};
