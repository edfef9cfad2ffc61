//! The one amount check every confirm path makes (the callback's execute,
//! the signed webhook, the reconciler's query): a gateway answer confirms
//! a booking only if it names the booking's own amount and currency.
//!
//! ```text
//!  gateway answer (completed) ─▶ check: amount_cents == booking's, currency == booking's
//!     both given and equal ─▶ Confirm
//!     another amount, another currency, or either missing ─▶ amount_mismatch:
//!        ALERT log line + seatfence_payment_alerts_total{kind="amount_mismatch"}; nothing committed
//! ```
//!
//! A payment taken for another sum is not proof of this booking, and an
//! answer that does not say what was taken proves nothing either. The
//! seats stay held (the reconciler never releases a captured payment), so
//! an operator decides: refund at the gateway, or book by hand.

use seatfence_core::inventory::{Booking, ConfirmPath};

use crate::gateway::PaymentState;
use crate::{Loaded, Payments};

/// What a gateway answer said about the money, against what the booking
/// expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmountMismatch {
    /// The booking's amount, in cents.
    pub expected_cents: u64,
    /// The booking's currency (ISO 4217 code).
    pub expected_currency: String,
    /// The amount the gateway reported, in cents (`None` when it named none).
    pub got_cents: Option<u64>,
    /// The currency the gateway reported (`None` when it named none).
    pub got_currency: Option<String>,
}

/// `Ok` if `state` reports exactly `booking`'s amount and currency; an
/// answer without either is a mismatch.
pub fn check(booking: &Booking, state: &PaymentState) -> Result<(), AmountMismatch> {
    let (cents, currency) = (booking.payment.amount_cents, &booking.payment.currency);
    // ISO 4217 codes: a gateway answering "eur" for "EUR" names the same.
    let same_currency = state
        .currency
        .as_ref()
        .is_some_and(|c| c.eq_ignore_ascii_case(currency));
    if state.amount_cents == Some(cents) && same_currency {
        return Ok(());
    }
    Err(AmountMismatch {
        expected_cents: cents,
        expected_currency: currency.clone(),
        got_cents: state.amount_cents,
        got_currency: state.currency.clone(),
    })
}

impl Payments {
    /// Raise the alert for a refused answer: an `ALERT` log line and
    /// `seatfence_payment_alerts_total{kind="amount_mismatch"}`.
    pub fn amount_alert(&self, l: &Loaded, via: ConfirmPath, m: &AmountMismatch) {
        self.metrics.inc(|m| &m.amount_alerts);
        let payment = l.booking.as_ref().map(|b| b.payment.payment_id.as_str());
        tracing::error!(
            booking = %l.id, event = %l.event_id, payment, via = via.as_str(),
            expected_cents = m.expected_cents, expected_currency = m.expected_currency,
            gateway_cents = ?m.got_cents, gateway_currency = ?m.got_currency,
            "ALERT: the gateway reports a completed payment with another amount or currency than the booking's (or none): not confirmed, seats kept held; operator attention needed"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::PaymentStatus;
    use seatfence_core::inventory::{BookingStatus, PaymentAttempt};
    use seatfence_core::UserId;

    fn booking() -> Booking {
        Booking {
            seq: 1,
            owner: UserId("u".into()),
            payment: PaymentAttempt {
                payment_id: "P1".into(),
                provider_key: "k".into(),
                signature: "s".into(),
                approve_url: "u".into(),
                amount_cents: 5_000,
                currency: "EUR".into(),
            },
            status: BookingStatus::Pending,
            created_ms: 0,
            updated_ms: 0,
            intents: 0,
            txn_id: None,
            confirmed_via: None,
            refund_id: None,
            intent_by: None,
            voiding: false,
            settled: false,
            refund: None,
        }
    }

    fn answer(cents: Option<u64>, currency: Option<&str>) -> PaymentState {
        PaymentState {
            status: PaymentStatus::Completed,
            txn_id: Some("T".into()),
            invoice: None,
            amount_cents: cents,
            currency: currency.map(str::to_string),
        }
    }

    #[test]
    fn the_bookings_own_amount_and_currency_pass() {
        assert_eq!(check(&booking(), &answer(Some(5_000), Some("EUR"))), Ok(()));
    }

    #[test]
    fn another_amount_or_currency_is_refused() {
        let m = check(&booking(), &answer(Some(1), Some("EUR"))).unwrap_err();
        assert_eq!((m.expected_cents, m.got_cents), (5_000, Some(1)));
        assert!(check(&booking(), &answer(Some(5_000), Some("USD"))).is_err());
    }

    #[test]
    fn a_currency_code_in_lower_case_is_the_same_currency() {
        // Some gateways answer ISO 4217 codes in lower case ("eur").
        assert_eq!(check(&booking(), &answer(Some(5_000), Some("eur"))), Ok(()));
    }

    #[test]
    fn an_answer_that_omits_the_amount_or_the_currency_is_refused() {
        assert!(check(&booking(), &answer(None, Some("EUR"))).is_err());
        assert!(check(&booking(), &answer(Some(5_000), None)).is_err());
        assert!(check(&booking(), &answer(None, None)).is_err());
    }
}
