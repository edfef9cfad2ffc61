//! The payment side's metrics: handles into the process's recorder
//! (`seatfence_raft::metrics`), listed once in `FAMILIES` (kind, name,
//! help). Every series shows from zero on every node
//! ([`PaymentMetrics::default`] registers them, payments configured or not).

use metrics::{counter, gauge, Counter, Gauge};
use seatfence_raft::metrics::Kind;

/// The payment families: (kind, name, help).
const FAMILIES: &[(Kind, &str, &str)] = &[
    (
        Kind::Counter,
        "seatfence_bookings_created_total",
        "Bookings created (payment created at the gateway and recorded).",
    ),
    (
        Kind::Counter,
        "seatfence_payments_confirmed_total",
        "Bookings confirmed (HELD -> PAID), by the path that confirmed them.",
    ),
    (
        Kind::Counter,
        "seatfence_late_success_total",
        "Payments that completed after their seats were released (refund queued).",
    ),
    (
        Kind::Counter,
        "seatfence_reconciler_releases_total",
        "Holds with a payment released by the reconciler, by reason.",
    ),
    (
        Kind::Counter,
        "seatfence_payments_voided_total",
        "Payments voided at the gateway by the reconciler before their seats went back on sale.",
    ),
    (
        Kind::Counter,
        "seatfence_reconciler_extensions_total",
        "Deadlines pushed back because the gateway could not be asked.",
    ),
    (
        Kind::Counter,
        "seatfence_reconciler_alerts_total",
        "Holds whose payment stayed unknown after every extension (operator attention).",
    ),
    (
        Kind::Counter,
        "seatfence_payment_signals_rejected_total",
        "Callbacks and webhooks refused (bad signature, unknown payment).",
    ),
    (
        Kind::Counter,
        "seatfence_webhooks_duplicate_total",
        "Webhooks already in the inbox (ignored).",
    ),
    (
        Kind::Counter,
        "seatfence_gateway_errors_total",
        "Gateway calls that failed or timed out.",
    ),
    (
        Kind::Counter,
        "seatfence_gateway_token_grants_total",
        "Gateway token grants by this node, by result.",
    ),
    (
        Kind::Counter,
        "seatfence_outbox_delivered_total",
        "Outbox items delivered and recorded, by kind.",
    ),
    (
        Kind::Gauge,
        "seatfence_reconciliation_backlog",
        "Holds with a payment due for reconciliation, and released bookings still unsettled, at the last sweep.",
    ),
    (
        Kind::Gauge,
        "seatfence_outbox_backlog",
        "Undelivered outbox items at the last scan.",
    ),
    (
        Kind::Gauge,
        "seatfence_unknown_payment_age_seconds",
        "How long past its deadline the oldest undecided payment was at the last sweep.",
    ),
    (
        Kind::Counter,
        "seatfence_money_alerts_total",
        "Captured payments still neither booked nor refunded 5 minutes after the capture was recorded (ALERT log line each).",
    ),
    (
        Kind::Counter,
        "seatfence_payment_alerts_total",
        "Gateway answers refused as proof of payment, by kind: amount_mismatch (a completed payment reported with another amount or currency than its booking's, or without them; nothing is confirmed). ALERT log line each.",
    ),
    (
        Kind::Gauge,
        "seatfence_payments_unsettled",
        "Released bookings whose payment the gateway has not yet called terminal (the reconciler keeps asking).",
    ),
    (
        Kind::Gauge,
        "seatfence_money_captured_unbooked",
        "Payments captured whose booking is neither confirmed nor refunded yet (refund pending). Alert while above 0 for minutes.",
    ),
    (
        Kind::Gauge,
        "seatfence_refund_pending_age_seconds",
        "Age of the oldest undelivered refund at the last outbox scan.",
    ),
];

/// Handles to the payment series (cheap to clone: each is a shared handle).
#[derive(Clone)]
pub struct PaymentMetrics {
    /// `seatfence_bookings_created_total`.
    pub bookings_created: Counter,
    /// `seatfence_payments_confirmed_total{path="callback"}`.
    pub confirmed_callback: Counter,
    /// `seatfence_payments_confirmed_total{path="webhook"}`.
    pub confirmed_webhook: Counter,
    /// `seatfence_payments_confirmed_total{path="reconciler"}`.
    pub confirmed_reconciler: Counter,
    /// `seatfence_late_success_total`: captures confirmed after a release (refund queued).
    pub late_success: Counter,
    /// `seatfence_reconciler_releases_total{reason="payment_failed"}`.
    pub released_failed: Counter,
    /// `seatfence_reconciler_releases_total{reason="unpaid"}` (released after a void).
    pub released_unpaid: Counter,
    /// `seatfence_payments_voided_total`.
    pub voided: Counter,
    /// `seatfence_money_alerts_total`.
    pub money_alerts: Counter,
    /// `seatfence_payment_alerts_total{kind="amount_mismatch"}`.
    pub amount_alerts: Counter,
    /// `seatfence_reconciler_extensions_total`.
    pub extensions: Counter,
    /// `seatfence_reconciler_alerts_total`.
    pub reconcile_alerts: Counter,
    /// `seatfence_payment_signals_rejected_total{path="callback"}`.
    pub callbacks_rejected: Counter,
    /// `seatfence_payment_signals_rejected_total{path="webhook"}`.
    pub webhooks_rejected: Counter,
    /// `seatfence_webhooks_duplicate_total`.
    pub webhooks_duplicate: Counter,
    /// `seatfence_gateway_errors_total`.
    pub gateway_errors: Counter,
    /// `seatfence_gateway_token_grants_total{result="ok"}`.
    pub token_grants: Counter,
    /// `seatfence_gateway_token_grants_total{result="failed"}`.
    pub token_grant_failures: Counter,
    /// `seatfence_outbox_delivered_total{kind="email"}`.
    pub emails_sent: Counter,
    /// `seatfence_outbox_delivered_total{kind="refund"}`.
    pub refunds_done: Counter,
    /// Gauges, set by the last reconciler sweep / outbox scan.
    pub reconcile_backlog: Gauge,
    /// `seatfence_outbox_backlog`: undelivered outbox items in the groups this node leads
    /// (last scan).
    pub outbox_backlog: Gauge,
    /// Seconds past its deadline of the oldest hold the last sweep could
    /// not decide.
    pub unknown_payment_age: Gauge,
    /// Seconds since the oldest undelivered refund was queued, at the last
    /// outbox scan.
    pub refund_pending_age: Gauge,
    /// Released bookings not yet known to be terminal at the gateway, in
    /// the groups this node leads (last sweep).
    pub unsettled: Gauge,
    /// Captured payments with neither a confirmed booking nor a refund yet
    /// (refund pending), in the groups this node leads (last sweep).
    pub captured_unbooked: Gauge,
}

impl Default for PaymentMetrics {
    fn default() -> PaymentMetrics {
        seatfence_raft::metrics::install();
        seatfence_raft::metrics::describe(FAMILIES);
        let confirmed =
            |path: &'static str| counter!("seatfence_payments_confirmed_total", "path" => path);
        let released = |reason: &'static str| counter!("seatfence_reconciler_releases_total", "reason" => reason);
        let signals = |path: &'static str| counter!("seatfence_payment_signals_rejected_total", "path" => path);
        let grants = |result: &'static str| counter!("seatfence_gateway_token_grants_total", "result" => result);
        let delivered =
            |kind: &'static str| counter!("seatfence_outbox_delivered_total", "kind" => kind);
        PaymentMetrics {
            bookings_created: counter!("seatfence_bookings_created_total"),
            confirmed_callback: confirmed("callback"),
            confirmed_webhook: confirmed("webhook"),
            confirmed_reconciler: confirmed("reconciler"),
            late_success: counter!("seatfence_late_success_total"),
            released_failed: released("payment_failed"),
            released_unpaid: released("unpaid"),
            voided: counter!("seatfence_payments_voided_total"),
            money_alerts: counter!("seatfence_money_alerts_total"),
            amount_alerts: counter!("seatfence_payment_alerts_total", "kind" => "amount_mismatch"),
            extensions: counter!("seatfence_reconciler_extensions_total"),
            reconcile_alerts: counter!("seatfence_reconciler_alerts_total"),
            callbacks_rejected: signals("callback"),
            webhooks_rejected: signals("webhook"),
            webhooks_duplicate: counter!("seatfence_webhooks_duplicate_total"),
            gateway_errors: counter!("seatfence_gateway_errors_total"),
            token_grants: grants("ok"),
            token_grant_failures: grants("failed"),
            emails_sent: delivered("email"),
            refunds_done: delivered("refund"),
            reconcile_backlog: gauge!("seatfence_reconciliation_backlog"),
            outbox_backlog: gauge!("seatfence_outbox_backlog"),
            unknown_payment_age: gauge!("seatfence_unknown_payment_age_seconds"),
            refund_pending_age: gauge!("seatfence_refund_pending_age_seconds"),
            unsettled: gauge!("seatfence_payments_unsettled"),
            captured_unbooked: gauge!("seatfence_money_captured_unbooked"),
        }
    }
}

impl PaymentMetrics {
    /// Add 1 to the counter `f` picks, e.g. `metrics.inc(|m| &m.voided)`.
    pub fn inc(&self, f: impl Fn(&PaymentMetrics) -> &Counter) {
        f(self).increment(1);
    }
}
