//! The HTTP handlers of the payment resources (DESIGN.md §8): bookings,
//! the buyer's callback, the gateway's signed webhook, refunds. Each
//! checks its request, then goes through the node's payment side
//! (`seatfence_payments::Payments`): one confirm path, one amount check.

pub mod bookings;
pub mod callback;
pub mod refunds;
pub mod webhook;

use seatfence_payments::Loaded;

use crate::message::Reply;

/// `reply` with the event's fence headers (`X-Seatfence-Epoch`,
/// `X-Seatfence-Owner-Region`), when `l` read them.
pub fn fenced(l: &Loaded, reply: Reply) -> Reply {
    match &l.fence {
        Some((epoch, owner)) => reply
            .header("x-seatfence-epoch", epoch.0)
            .header("x-seatfence-owner-region", &owner.0),
        None => reply,
    }
}
