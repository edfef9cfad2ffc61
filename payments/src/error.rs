//! [`PaymentError`]: why a payment step failed. The HTTP edge maps each to
//! its answer (`seatfence_api::error`); the workers log it and try again at
//! their next pass.

use seatfence_core::inventory::Outcome;
use seatfence_core::{BookingId, EventId};
use seatfence_regions::CommandError;

/// Why a payment step failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PaymentError {
    /// The command could not be routed or run (`no_leader`, ...).
    #[error(transparent)]
    Command(#[from] CommandError),
    /// The booking (or its hold) does not exist (`booking_not_found`).
    #[error("booking not found")]
    BookingNotFound,
    /// The gateway's answer names another amount or currency, or none
    /// (`amount_mismatch`): nothing was committed, an operator is alerted.
    #[error("the gateway reports another amount or currency for booking {booking}")]
    AmountMismatch {
        /// The booking whose payment the gateway reported.
        booking: BookingId,
    },
    /// The event's group refused the step.
    #[error("{event_id}: {outcome:?}")]
    Refused {
        /// What the group answered instead of the expected outcome.
        outcome: Outcome,
        /// The event whose group refused.
        event_id: EventId,
    },
}
