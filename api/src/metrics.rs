//! The edge's Prometheus metrics: counters and latency histograms kept in
//! atomics, rendered as text by `GET /metrics` together with the consensus
//! layer's counters (`seatfence_raft::metrics::METRICS`).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use seatfence_raft::metrics::{RaftMetrics, METRICS};

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0,
];

#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                self.buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels},le=\"{b}\"}} {}",
                self.buckets[i].load(Ordering::Relaxed)
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {count}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{labels}}} {count}");
    }
}

/// The routes whose latency is tracked separately.
pub const LABELS: [&str; 6] = [
    "holds",
    "events",
    "availability",
    "bookings",
    "admin",
    "other",
];

#[derive(Debug, Default)]
pub struct EdgeMetrics {
    pub latency: [Histogram; LABELS.len()],
    pub responses_2xx: AtomicU64,
    pub responses_4xx: AtomicU64,
    pub responses_5xx: AtomicU64,
    pub holds_created: AtomicU64,
    pub hold_conflicts: AtomicU64,
    pub stale_epoch_edge: AtomicU64,
    pub rejected_inflight: AtomicU64,
    pub rejected_rate: AtomicU64,
    pub no_leader: AtomicU64,
    pub bookings_created: AtomicU64,
    pub confirmed_callback: AtomicU64,
    pub confirmed_webhook: AtomicU64,
    pub confirmed_reconciler: AtomicU64,
    pub late_success: AtomicU64,
    pub released_failed: AtomicU64,
    pub released_unpaid: AtomicU64,
    pub extensions: AtomicU64,
    pub reconcile_alerts: AtomicU64,
    pub callbacks_rejected: AtomicU64,
    pub webhooks_rejected: AtomicU64,
    pub webhooks_duplicate: AtomicU64,
    pub gateway_errors: AtomicU64,
    pub token_grants: AtomicU64,
    pub token_grant_failures: AtomicU64,
    pub emails_sent: AtomicU64,
    pub refunds_done: AtomicU64,
    /// Gauges, set by the last reconciler sweep / outbox scan.
    pub reconcile_backlog: AtomicU64,
    pub outbox_backlog: AtomicU64,
    /// Age (ms) of the oldest hold the last sweep could not decide.
    pub unknown_payment_age_ms: AtomicU64,
    /// Age (ms) of the oldest undelivered refund at the last outbox scan.
    pub refund_pending_age_ms: AtomicU64,
}

fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl EdgeMetrics {
    pub fn inc(&self, f: impl Fn(&EdgeMetrics) -> &AtomicU64) {
        inc(f(self));
    }

    pub fn observe(&self, route: &str, status: u16, d: Duration) {
        let i = LABELS
            .iter()
            .position(|r| *r == route)
            .unwrap_or(LABELS.len() - 1);
        self.latency[i].observe(d);
        match status {
            200..=299 => inc(&self.responses_2xx),
            400..=499 => inc(&self.responses_4xx),
            _ => inc(&self.responses_5xx),
        }
    }

    /// Prometheus text exposition.
    pub fn render(&self, redirects: u64) -> String {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut out = String::new();
        let mut counter = |name: &str, help: &str, rows: &[(&str, u64)]| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (labels, v) in rows {
                if labels.is_empty() {
                    let _ = writeln!(out, "{name} {v}");
                } else {
                    let _ = writeln!(out, "{name}{{{labels}}} {v}");
                }
            }
        };
        counter(
            "seatfence_http_responses_total",
            "HTTP responses by status class.",
            &[
                ("class=\"2xx\"", g(&self.responses_2xx)),
                ("class=\"4xx\"", g(&self.responses_4xx)),
                ("class=\"5xx\"", g(&self.responses_5xx)),
            ],
        );
        counter(
            "seatfence_holds_created_total",
            "Holds granted.",
            &[("", g(&self.holds_created))],
        );
        counter(
            "seatfence_hold_conflicts_total",
            "Hold requests refused because seats were taken (409 seats_unavailable).",
            &[("", g(&self.hold_conflicts))],
        );
        counter(
            "seatfence_stale_epoch_rejections_total",
            "Stale fences refused, by layer: edge = replies below the highest fence seen (discarded, re-routed); propose = leader check; apply = state machine.",
            &[
                ("layer=\"edge\"", g(&self.stale_epoch_edge)),
                ("layer=\"propose\"", RaftMetrics::get(&METRICS.stale_epoch_propose)),
                ("layer=\"apply\"", RaftMetrics::get(&METRICS.stale_epoch_apply)),
            ],
        );
        counter(
            "seatfence_not_leader_redirects_total",
            "not_leader answers: followed by this edge, and given by this node.",
            &[
                ("side=\"edge\"", redirects),
                (
                    "side=\"node\"",
                    RaftMetrics::get(&METRICS.not_leader_answers),
                ),
            ],
        );
        counter(
            "seatfence_admission_rejections_total",
            "Requests answered 429, by reason.",
            &[
                ("reason=\"inflight\"", g(&self.rejected_inflight)),
                ("reason=\"rate\"", g(&self.rejected_rate)),
            ],
        );
        counter(
            "seatfence_no_leader_total",
            "Requests answered 503 because no leader was found in time.",
            &[("", g(&self.no_leader))],
        );
        counter(
            "seatfence_leader_changes_total",
            "Times a group on this node became leader.",
            &[("", RaftMetrics::get(&METRICS.leader_changes))],
        );
        let by_group: Vec<(String, u64)> = METRICS
            .leader_changes_by_group()
            .into_iter()
            .map(|(g, n)| (format!("group=\"{g}\""), n))
            .collect();
        counter(
            "seatfence_group_leader_changes_total",
            "Times each group became leader on this node, by group id.",
            &by_group
                .iter()
                .map(|(l, n)| (l.as_str(), *n))
                .collect::<Vec<_>>(),
        );
        counter(
            "seatfence_bookings_created_total",
            "Bookings created (payment created at the gateway and recorded).",
            &[("", g(&self.bookings_created))],
        );
        counter(
            "seatfence_payments_confirmed_total",
            "Bookings confirmed (HELD -> PAID), by the path that confirmed them.",
            &[
                ("path=\"callback\"", g(&self.confirmed_callback)),
                ("path=\"webhook\"", g(&self.confirmed_webhook)),
                ("path=\"reconciler\"", g(&self.confirmed_reconciler)),
            ],
        );
        counter(
            "seatfence_late_success_total",
            "Payments that completed after their seats were released (refund queued).",
            &[("", g(&self.late_success))],
        );
        counter(
            "seatfence_reconciler_releases_total",
            "Holds with a payment released by the reconciler, by reason.",
            &[
                ("reason=\"payment_failed\"", g(&self.released_failed)),
                ("reason=\"unpaid\"", g(&self.released_unpaid)),
            ],
        );
        counter(
            "seatfence_reconciler_extensions_total",
            "Deadlines pushed back because the gateway could not be asked.",
            &[("", g(&self.extensions))],
        );
        counter(
            "seatfence_reconciler_alerts_total",
            "Holds whose payment stayed unknown after every extension (operator attention).",
            &[("", g(&self.reconcile_alerts))],
        );
        counter(
            "seatfence_payment_signals_rejected_total",
            "Callbacks and webhooks refused (bad signature, unknown payment).",
            &[
                ("path=\"callback\"", g(&self.callbacks_rejected)),
                ("path=\"webhook\"", g(&self.webhooks_rejected)),
            ],
        );
        counter(
            "seatfence_webhooks_duplicate_total",
            "Webhooks already in the inbox (ignored).",
            &[("", g(&self.webhooks_duplicate))],
        );
        counter(
            "seatfence_gateway_errors_total",
            "Gateway calls that failed or timed out.",
            &[("", g(&self.gateway_errors))],
        );
        counter(
            "seatfence_gateway_token_grants_total",
            "Gateway token grants by this node, by result.",
            &[
                ("result=\"ok\"", g(&self.token_grants)),
                ("result=\"failed\"", g(&self.token_grant_failures)),
            ],
        );
        counter(
            "seatfence_outbox_delivered_total",
            "Outbox items delivered and recorded, by kind.",
            &[
                ("kind=\"email\"", g(&self.emails_sent)),
                ("kind=\"refund\"", g(&self.refunds_done)),
            ],
        );
        counter(
            "seatfence_moves_total",
            "Ownership moves: started and aborted through this edge, completed by this node's coordinator.",
            &[
                ("result=\"started\"", RaftMetrics::get(&METRICS.moves_started)),
                ("result=\"aborted\"", RaftMetrics::get(&METRICS.moves_aborted)),
                ("result=\"completed\"", RaftMetrics::get(&METRICS.moves_completed)),
            ],
        );
        counter(
            "seatfence_move_duration_ms_sum",
            "Sums over moves completed by this node's coordinator, in ms: start to done (phase=\"total\"), and the write pause, membership change committed (old leader hands over) to epoch bump committed (phase=\"pause\").",
            &[
                ("phase=\"total\"", RaftMetrics::get(&METRICS.move_duration_ms_sum)),
                ("phase=\"pause\"", RaftMetrics::get(&METRICS.move_pause_ms_sum)),
            ],
        );
        for (name, help, v) in [
            (
                "seatfence_move_last_duration_seconds",
                "Start to done of the last move this node's coordinator completed.",
                &METRICS.move_last_duration_ms,
            ),
            (
                "seatfence_move_last_pause_seconds",
                "Write pause (membership change committed to epoch bump committed) of the last move this node's coordinator completed.",
                &METRICS.move_last_pause_ms,
            ),
            (
                "seatfence_reconciliation_backlog",
                "Holds with a payment due for reconciliation at the last sweep.",
                &self.reconcile_backlog,
            ),
            (
                "seatfence_outbox_backlog",
                "Undelivered outbox items at the last scan.",
                &self.outbox_backlog,
            ),
            (
                "seatfence_unknown_payment_age_seconds",
                "How long past its deadline the oldest undecided payment was at the last sweep.",
                &self.unknown_payment_age_ms,
            ),
        ] {
            let mut val = g(v) as f64;
            if name.ends_with("_seconds") {
                val /= 1000.0;
            }
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {val}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP seatfence_http_request_duration_seconds Request latency by route.\n# TYPE seatfence_http_request_duration_seconds histogram"
        );
        for (i, r) in LABELS.iter().enumerate() {
            self.latency[i].render(
                &mut out,
                "seatfence_http_request_duration_seconds",
                &format!("route=\"{r}\""),
            );
        }
        out
    }
}
