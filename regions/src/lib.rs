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
//!
//! The directory's state machine and placement live in `seatfence-core`
//! (`Directory`, `EventRoute`, `Placement`) and run inside group 0. Ownership
//! moves arrive with the ownership issue. This crate never decides an
//! outcome: it only says where to send a command and whether a reply is
//! older than one already seen.

pub mod routes;

pub use routes::{FenceCheck, RouteCache, RouteError};
