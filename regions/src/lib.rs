//! seatfence-regions: topology and routing across regions (DESIGN.md §2, §5).
//!
//! ```text
//!  edge ──resolve(event)──▶ RouteCache ──miss──▶ directory (group 0) leader
//!                              │ event → (group, epoch, owner region)
//!                              │ highest fence (epoch, term) seen per event
//!  reply (epoch, term) ──check_fence──▶ lower than seen? discard, re-route
//! ```
//!
//! - [`routes`]: the edge's cache of the directory and the fence check at
//!   the edge (check 1 of DESIGN §5).
//! - [`moves`]: the ownership-move coordinator, run by whichever node leads
//!   the directory; every step idempotent, progress only in the directory.
//!
//! The directory's state machine and placement live in `seatfence-core`
//! (`Directory`, `EventRoute`, `Placement`, `MoveRecord`) and run inside
//! group 0. This crate never decides an
//! outcome: it only says where to send a command and whether a reply is
//! older than one already seen.

pub mod config;
pub mod moves;
pub mod placement;
pub mod routes;
pub mod transfer;

pub use routes::{FenceCheck, RouteCache, RouteError};
