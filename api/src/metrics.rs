//! The edge's metrics: handles into the process's recorder
//! (`seatfence_raft::metrics`, the `metrics` facade with the Prometheus
//! exporter), rendered by `GET /metrics` together with the consensus
//! layer's series. The edge's families are listed once, in `FAMILIES`
//! (name, type, help); the handles below record into them.

use std::time::Duration;

use metrics::{counter, gauge, histogram, Counter, Gauge, Histogram};
use seatfence_raft::metrics::Kind;

/// The routes whose latency is tracked separately (`route` label of
/// `seatfence_http_request_duration_seconds`; `routes::ROUTES` names one
/// for every route).
pub const LABELS: [&str; 7] = [
    "holds",
    "queue",
    "events",
    "availability",
    "bookings",
    "admin",
    "other",
];

/// The edge's families: (kind, name, help).
const FAMILIES: &[(Kind, &str, &str)] = &[
    (
        Kind::Counter,
        "seatfence_http_responses_total",
        "HTTP responses by status class.",
    ),
    (
        Kind::Counter,
        "seatfence_holds_created_total",
        "Holds granted.",
    ),
    (
        Kind::Counter,
        "seatfence_queue_joins_total",
        "Waiting-room joins answered by this edge (a repeated join counts again).",
    ),
    (
        Kind::Counter,
        "seatfence_queue_tickets_refused_total",
        "Holds refused at this edge for an admission ticket that does not verify, is another buyer's or event's, or expired.",
    ),
    (
        Kind::Counter,
        "seatfence_hold_conflicts_total",
        "Hold requests refused because seats were taken (409 seats_unavailable).",
    ),
    (
        Kind::Counter,
        "seatfence_admission_rejections_total",
        "Requests refused at admission, by reason: 429 for inflight, rate and anonymous_rate, 503 edge_overloaded for body_budget.",
    ),
    (
        Kind::Counter,
        "seatfence_no_leader_total",
        "Requests answered 503 because no leader was found in time.",
    ),
    (
        Kind::Counter,
        "seatfence_commands_total",
        "Event commands this node's edge and workers ran, by hop: local (the group is led on this node) or forwarded (sent on to the leader's node).",
    ),
    (
        Kind::Gauge,
        "seatfence_http_connections",
        "HTTP connections open on this edge.",
    ),
    (
        Kind::Gauge,
        "seatfence_http_body_bytes_held",
        "Request body bytes this edge holds now (reserved before each body is read, up to max_body_buffer_mb).",
    ),
    (
        Kind::Counter,
        "seatfence_http_connections_refused_total",
        "HTTP connections closed on accept because max_connections were open.",
    ),
    (
        Kind::Counter,
        "seatfence_http_connections_refused_per_ip_total",
        "HTTP connections closed on accept because their address (an IPv4 address, an IPv6 /64) had max_connections_per_ip open.",
    ),
    (
        Kind::Counter,
        "seatfence_http_tls_handshake_failures_total",
        "HTTPS connections closed because the TLS handshake failed or took longer than header_timeout_ms (plain HTTP to an HTTPS edge, a client that does not trust the certificate).",
    ),
    (
        Kind::Counter,
        "seatfence_http_timeouts_total",
        "HTTP connections closed for slowness, by kind (header, body, idle).",
    ),
    (
        Kind::Histogram,
        "seatfence_http_request_duration_seconds",
        "Request latency by route.",
    ),
];

/// Handles into the edge's series (see `FAMILIES`); every `EdgeMetrics` of a
/// process records into the same series.
pub struct EdgeMetrics {
    latency: [Histogram; LABELS.len()],
    /// Responses with a 2xx status (`seatfence_http_responses_total{class="2xx"}`).
    pub responses_2xx: Counter,
    /// Responses with a 4xx status (`class="4xx"`).
    pub responses_4xx: Counter,
    /// Responses with any other status, 5xx among them (`class="5xx"`).
    pub responses_5xx: Counter,
    /// Holds granted (`seatfence_holds_created_total`).
    pub holds_created: Counter,
    /// Holds refused with 409 `seats_unavailable` (`seatfence_hold_conflicts_total`).
    pub hold_conflicts: Counter,
    /// Waiting-room joins answered, repeats included (`seatfence_queue_joins_total`).
    pub queue_joins: Counter,
    /// Holds refused at the edge for a forged, foreign or expired admission
    /// ticket (`seatfence_queue_tickets_refused_total`).
    pub tickets_refused: Counter,
    /// `seatfence_stale_epoch_rejections_total{layer="edge"}`: replies below the
    /// highest fence seen; `Commands` counts them into the same series.
    pub stale_epoch_edge: Counter,
    /// `not_leader` answers the edge's client followed (set from the
    /// client's own count at each scrape).
    redirects_followed: Counter,
    /// Requests refused 429 for lack of an in-flight slot
    /// (`seatfence_admission_rejections_total{reason="inflight"}`).
    pub rejected_inflight: Counter,
    /// Buyer mutations refused 429 for their user's rate (`reason="rate"`).
    pub rejected_rate: Counter,
    /// Anonymous routes refused for their address's rate.
    pub rejected_anonymous: Counter,
    /// Requests refused 503 `edge_overloaded`: the edge's body budget was
    /// full (`reason="body_budget"`).
    pub rejected_body_budget: Counter,
    /// `seatfence_no_leader_total`: requests answered 503 for want of a leader;
    /// `Commands` counts them into the same series.
    pub no_leader: Counter,
    /// HTTP connections open now (`seatfence_http_connections`).
    pub connections: Gauge,
    /// Body bytes held now (`seatfence_http_body_bytes_held`, set at scrape).
    pub body_bytes: Gauge,
    /// Connections closed on accept at `max_connections`.
    pub connections_refused: Counter,
    /// Connections closed on accept at `max_connections_per_ip` for their address.
    pub connections_refused_per_ip: Counter,
    /// HTTPS connections whose TLS handshake failed or timed out.
    pub tls_handshake_failures: Counter,
    /// Connections closed because a request's headers came too slowly.
    pub header_timeouts: Counter,
    /// Requests whose body did not arrive within `body_timeout_ms` (408 or
    /// a drained 413).
    pub body_timeouts: Counter,
    /// Keep-alive connections closed while idle, waiting too long for the next request.
    pub idle_timeouts: Counter,
}

impl Default for EdgeMetrics {
    fn default() -> EdgeMetrics {
        seatfence_raft::metrics::install();
        std::sync::LazyLock::force(&seatfence_raft::metrics::METRICS);
        seatfence_raft::metrics::describe(FAMILIES);
        // The payment series show from zero on every edge, payments
        // configured or not (as they always have).
        let _ = seatfence_payments::PaymentMetrics::default();
        let responses =
            |class: &'static str| counter!("seatfence_http_responses_total", "class" => class);
        let refused = |reason: &'static str| counter!("seatfence_admission_rejections_total", "reason" => reason);
        EdgeMetrics {
            latency: LABELS.map(
                |route| histogram!("seatfence_http_request_duration_seconds", "route" => route),
            ),
            responses_2xx: responses("2xx"),
            responses_4xx: responses("4xx"),
            responses_5xx: responses("5xx"),
            holds_created: counter!("seatfence_holds_created_total"),
            hold_conflicts: counter!("seatfence_hold_conflicts_total"),
            queue_joins: counter!("seatfence_queue_joins_total"),
            tickets_refused: counter!("seatfence_queue_tickets_refused_total"),
            stale_epoch_edge: counter!("seatfence_stale_epoch_rejections_total", "layer" => "edge"),
            redirects_followed: counter!("seatfence_not_leader_redirects_total", "side" => "edge"),
            rejected_inflight: refused("inflight"),
            rejected_rate: refused("rate"),
            rejected_anonymous: refused("anonymous_rate"),
            rejected_body_budget: refused("body_budget"),
            no_leader: counter!("seatfence_no_leader_total"),
            connections: gauge!("seatfence_http_connections"),
            body_bytes: gauge!("seatfence_http_body_bytes_held"),
            connections_refused: counter!("seatfence_http_connections_refused_total"),
            connections_refused_per_ip: counter!("seatfence_http_connections_refused_per_ip_total"),
            tls_handshake_failures: counter!("seatfence_http_tls_handshake_failures_total"),
            header_timeouts: counter!("seatfence_http_timeouts_total", "kind" => "header"),
            body_timeouts: counter!("seatfence_http_timeouts_total", "kind" => "body"),
            idle_timeouts: counter!("seatfence_http_timeouts_total", "kind" => "idle"),
        }
    }
}

impl EdgeMetrics {
    /// Add 1 to the counter `f` picks, e.g. `metrics.inc(|m| &m.holds_created)`.
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

    /// Prometheus text exposition of this process's series; `redirects`
    /// is how many `not_leader` answers the edge's client has followed.
    pub fn render(&self, redirects: u64) -> String {
        self.redirects_followed.absolute(redirects);
        seatfence_raft::metrics::render()
    }
}

/// The process's own gauges, read at scrape time: live tokio tasks (a task
/// count that only grows is a leak the soak looks for), the edge client's
/// per-group write queues (one task each) and the bytes the process's
/// allocations hold (`seatfence_raft::heap`).
pub fn runtime_metrics(write_queues: usize) -> String {
    let tasks = tokio::runtime::Handle::try_current()
        .map(|h| h.metrics().num_alive_tasks())
        .unwrap_or(0);
    let heap = seatfence_raft::heap::held_bytes().unwrap_or(0);
    format!(
        "# HELP seatfence_tokio_alive_tasks Tasks alive in this process's tokio runtime.\n\
         # TYPE seatfence_tokio_alive_tasks gauge\n\
         seatfence_tokio_alive_tasks {tasks}\n\
         # HELP seatfence_client_write_queues Groups the edge's cluster client has a write queue (and task) for.\n\
         # TYPE seatfence_client_write_queues gauge\n\
         seatfence_client_write_queues {write_queues}\n\
         # HELP seatfence_heap_bytes Bytes this process's allocations hold now (0: the binary does not count them).\n\
         # TYPE seatfence_heap_bytes gauge\n\
         seatfence_heap_bytes {heap}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_is_a_histogram_with_the_edge_buckets_and_help() {
        let m = EdgeMetrics::default();
        m.observe("holds", 201, Duration::from_millis(3));
        m.observe("nope", 500, Duration::from_millis(3));
        let text = m.render(0);
        let bucket = |route: &str, le: &str| {
            format!(
                "seatfence_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"{le}\"}} "
            )
        };
        assert!(text.contains(&(bucket("holds", "0.002") + "0")), "{text}");
        assert!(text.contains(&(bucket("holds", "0.005") + "1")), "{text}");
        assert!(
            text.contains(&(bucket("other", "0.005") + "1")),
            "unknown routes count as other"
        );
        assert!(text.contains("seatfence_http_responses_total{class=\"5xx\"} 1"));
        assert!(text.contains("# HELP seatfence_holds_created_total Holds granted."));
        assert!(
            text.contains("seatfence_hold_conflicts_total 0"),
            "every series from zero"
        );
    }
}
