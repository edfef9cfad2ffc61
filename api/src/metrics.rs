//! The edge's metrics: handles into the process's recorder
//! (`seatfence_raft::metrics`, the `metrics` facade with the Prometheus
//! exporter), rendered by `GET /metrics` together with the consensus
//! layer's series. The names, labels and help texts are listed once, in
//! `seatfence_raft::metrics`; this file only holds the edge's handles.

use std::time::Duration;

use metrics::{counter, gauge, histogram, Counter, Gauge, Histogram};

/// The routes whose latency is tracked separately (`route` label of
/// `seatfence_http_request_duration_seconds`; `routes::ROUTES` names one
/// for every route).
pub const LABELS: [&str; 6] = [
    "holds",
    "events",
    "availability",
    "bookings",
    "admin",
    "other",
];

pub struct EdgeMetrics {
    latency: [Histogram; LABELS.len()],
    pub responses_2xx: Counter,
    pub responses_4xx: Counter,
    pub responses_5xx: Counter,
    pub holds_created: Counter,
    pub hold_conflicts: Counter,
    pub stale_epoch_edge: Counter,
    pub rejected_inflight: Counter,
    pub rejected_rate: Counter,
    pub no_leader: Counter,
    pub bookings_created: Counter,
    pub confirmed_callback: Counter,
    pub confirmed_webhook: Counter,
    pub confirmed_reconciler: Counter,
    pub late_success: Counter,
    pub released_failed: Counter,
    pub released_unpaid: Counter,
    pub extensions: Counter,
    pub reconcile_alerts: Counter,
    pub callbacks_rejected: Counter,
    pub webhooks_rejected: Counter,
    pub webhooks_duplicate: Counter,
    pub gateway_errors: Counter,
    pub token_grants: Counter,
    pub token_grant_failures: Counter,
    pub emails_sent: Counter,
    pub refunds_done: Counter,
    /// Gauges, set by the last reconciler sweep / outbox scan.
    pub reconcile_backlog: Gauge,
    pub outbox_backlog: Gauge,
    /// Seconds past its deadline of the oldest hold the last sweep could
    /// not decide.
    pub unknown_payment_age: Gauge,
    /// Seconds since the oldest undelivered refund was queued, at the last
    /// outbox scan.
    pub refund_pending_age: Gauge,
}

impl Default for EdgeMetrics {
    fn default() -> EdgeMetrics {
        seatfence_raft::metrics::install();
        let responses =
            |class: &'static str| counter!("seatfence_http_responses_total", "class" => class);
        let confirmed =
            |path: &'static str| counter!("seatfence_payments_confirmed_total", "path" => path);
        let released = |reason: &'static str| counter!("seatfence_reconciler_releases_total", "reason" => reason);
        let refused = |reason: &'static str| counter!("seatfence_admission_rejections_total", "reason" => reason);
        let signals = |path: &'static str| counter!("seatfence_payment_signals_rejected_total", "path" => path);
        let grants = |result: &'static str| counter!("seatfence_gateway_token_grants_total", "result" => result);
        let delivered =
            |kind: &'static str| counter!("seatfence_outbox_delivered_total", "kind" => kind);
        EdgeMetrics {
            latency: LABELS.map(
                |route| histogram!("seatfence_http_request_duration_seconds", "route" => route),
            ),
            responses_2xx: responses("2xx"),
            responses_4xx: responses("4xx"),
            responses_5xx: responses("5xx"),
            holds_created: counter!("seatfence_holds_created_total"),
            hold_conflicts: counter!("seatfence_hold_conflicts_total"),
            stale_epoch_edge: counter!("seatfence_stale_epoch_rejections_total", "layer" => "edge"),
            rejected_inflight: refused("inflight"),
            rejected_rate: refused("rate"),
            no_leader: counter!("seatfence_no_leader_total"),
            bookings_created: counter!("seatfence_bookings_created_total"),
            confirmed_callback: confirmed("callback"),
            confirmed_webhook: confirmed("webhook"),
            confirmed_reconciler: confirmed("reconciler"),
            late_success: counter!("seatfence_late_success_total"),
            released_failed: released("payment_failed"),
            released_unpaid: released("unpaid"),
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
        }
    }
}

impl EdgeMetrics {
    pub fn inc(&self, f: impl Fn(&EdgeMetrics) -> &Counter) {
        f(self).increment(1);
    }

    /// Record one answered request: its latency under `route`'s label and
    /// its status class.
    pub fn observe(&self, route: &str, status: u16, d: Duration) {
        let i = LABELS
            .iter()
            .position(|r| *r == route)
            .unwrap_or(LABELS.len() - 1);
        self.latency[i].record(d.as_secs_f64());
        match status {
            200..=299 => self.responses_2xx.increment(1),
            400..=499 => self.responses_4xx.increment(1),
            _ => self.responses_5xx.increment(1),
        }
    }

    /// Prometheus text exposition of this process's series.
    pub fn render(&self) -> String {
        seatfence_raft::metrics::render()
    }
}
