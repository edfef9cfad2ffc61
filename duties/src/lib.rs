//! seatfence-duties: the work a node does as the leader of a group, in one
//! home, whether or not the node serves HTTP:
//! - [`events`]: the event groups' duties (expiry, the waiting room's draw
//!   and retention ticks ([`tick`]), the payment reconciler and the outbox
//!   lanes), scheduled per group by one dispatcher per node
//!   ([`EventDuties`]).
//! - [`directory`]: the directory leader's duties (moves, node lifecycle,
//!   leader balance), moves and repairs driven through one skeleton
//!   (`directory::Drives`), each deciding through pure `plan` functions
//!   (tested on their own) and carrying the actions out.
//! - [`follow`]: ownership that follows the buyers (`follow_buyers`):
//!   the holds per buyer region of the events this node leads, and the
//!   move when one region's buyers lead clearly.
//! - [`rooms`]: the waiting rooms' gauges of the events this node leads.
//!
//! A duty never decides an outcome: it proposes commands the group's state
//! machine judges (fenced by the event's epoch and the leader's term), and
//! acts only for groups this node leads.

#![warn(missing_docs)]
pub mod directory;
pub mod events;
pub mod follow;
pub mod rooms;
pub mod tick;

pub use events::{Duty, EventDuties};
