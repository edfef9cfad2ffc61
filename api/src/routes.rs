//! The edge's routes, written once. [`ROUTES`] drives dispatch (`http.rs`
//! matches a request against it and calls the handler its [`Route`] names),
//! admission (`admitted` routes take a rate token and an in-flight slot
//! first), the audit trail (`audit`), the latency label (`label`) and the
//! OpenAPI test (every row is in docs/openapi.json, and nothing else is).

use std::sync::LazyLock;

use hyper::Method;
use serde_json::Value;

/// One operation the edge serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `GET /healthz`: liveness probe, always 200.
    Healthz,
    /// `GET /readyz`: readiness probe, 503 while no directory leader is known.
    Readyz,
    /// `GET /metrics`: Prometheus text of the edge and the process.
    Metrics,
    /// `GET /console`: the operators' console page.
    Console,
    /// `GET /console/{asset}`: one of the console's static assets.
    ConsoleAsset,
    /// `POST /v1/events` (operator): create an event and its group.
    CreateEvent,
    /// `GET /v1/events/{event_id}`: the event.
    GetEvent,
    /// `GET /v1/events/{event_id}/availability`: free seats, possibly cached briefly.
    Availability,
    /// `GET /v1/admin/events/{event_id}/payments`: the event's pending payments and refunds.
    EventPayments,
    /// `GET /v1/admin/changes`: the changefeed, resumable from a cursor.
    Changes,
    /// `POST /v1/events/{event_id}/open` (operator): open the sale.
    OpenSale,
    /// `POST /v1/events/{event_id}/close` (operator): close the sale.
    CloseSale,
    /// `POST /v1/holds`: hold seats for the caller (admitted).
    CreateHold,
    /// `POST /v1/events/{event_id}/queue`: join the waiting room (admitted).
    JoinQueue,
    /// `GET /v1/events/{event_id}/queue/me`: where the caller stands in the queue.
    QueueStanding,
    /// `POST /v1/admin/events/{event_id}/waiting-room`: set the room's settings.
    SetWaitingRoom,
    /// `GET /v1/holds/{hold_id}`: the hold (owner only).
    GetHold,
    /// `DELETE /v1/holds/{hold_id}`: cancel the hold before payment (admitted).
    CancelHold,
    /// `POST /v1/bookings`: a pending booking for a hold (admitted).
    CreateBooking,
    /// `GET /v1/bookings/{booking_id}`: the booking (owner only).
    GetBooking,
    /// `POST /v1/admin/bookings/{booking_id}/refund`: refund a confirmed booking.
    RefundBooking,
    /// `GET /v1/payments/callback`: the buyer's browser back from the gateway.
    PaymentCallback,
    /// `POST /v1/payments/webhook`: the gateway's signed notification.
    PaymentWebhook,
    /// `GET /v1/admin/cluster`: every node's and group's state.
    Cluster,
    /// `GET /v1/admin/fleet/metrics`: every node's `/metrics`, labelled by node.
    FleetMetrics,
    /// `GET /v1/admin/audit`: the operators' audit trail, newest first.
    Audit,
    /// `GET /v1/admin/version`: this binary's and the cluster's data formats.
    Version,
    /// `POST /v1/admin/version`: raise the cluster's active data format.
    SetFormat,
    /// `POST /v1/admin/groups/{group_id}/transfer-leader`: move a group's leadership.
    TransferLeader,
    /// `POST /v1/admin/nodes/{node_id}/drain`: move every leadership off the node.
    Drain,
    /// `POST /v1/admin/nodes/{node_id}/undrain`: put a drained node back in service.
    Undrain,
    /// `POST /v1/admin/nodes/{node_id}/decommission`: retire the node.
    Decommission,
    /// `POST /v1/admin/nodes/{node_id}/recommission`: undo an unfinished decommission.
    Recommission,
    /// `POST /v1/admin/nodes/{node_id}/declare-dead`: replace a suspect node's replicas.
    DeclareDead,
    /// `POST /v1/admin/events/{event_id}/move`: start moving the event to another region.
    StartMove,
    /// `GET /v1/admin/moves`: the moves, newest first.
    ListMoves,
    /// `GET /v1/admin/moves/{move_id}`: one move.
    GetMove,
    /// `POST /v1/admin/moves/{move_id}/abort`: abort a move before its membership change.
    AbortMove,
    /// `POST /v1/admin/events/{event_id}/follow-buyers`: turn the event's
    /// `follow_buyers` policy on or off.
    FollowBuyers,
}

/// An operator action recorded in the audit trail: its name and its
/// target, a template whose `{name}` is a path parameter and `{body.f}` the
/// body's field `f` (`?` when absent).
#[derive(Debug, Clone, Copy)]
pub struct Audited {
    /// The action's name in the trail, e.g. `drain`.
    pub action: &'static str,
    /// The target template, e.g. `node {node_id}`.
    pub target: &'static str,
}

/// One row of the route table.
#[derive(Debug)]
pub struct RouteDef {
    /// The operation, which names the handler.
    pub route: Route,
    /// The HTTP method it is served with.
    pub method: Method,
    /// The OpenAPI path; `{x}` matches one path segment.
    pub path: &'static str,
    /// The label of `seatfence_http_request_duration_seconds`.
    pub label: &'static str,
    /// A buyer mutation: admission (rate, in flight) before the handler.
    pub admitted: bool,
    /// How an operator's call is recorded in the audit trail; `None`: not recorded.
    pub audit: Option<Audited>,
}

const fn row(route: Route, method: Method, path: &'static str, label: &'static str) -> RouteDef {
    RouteDef {
        route,
        method,
        path,
        label,
        admitted: false,
        audit: None,
    }
}

const fn admitted(mut r: RouteDef) -> RouteDef {
    r.admitted = true;
    r
}

const fn audited(mut r: RouteDef, action: &'static str, target: &'static str) -> RouteDef {
    r.audit = Some(Audited { action, target });
    r
}

/// Every route the edge serves.
pub const ROUTES: &[RouteDef] = &[
    row(Route::Healthz, Method::GET, "/healthz", "other"),
    row(Route::Readyz, Method::GET, "/readyz", "other"),
    row(Route::Metrics, Method::GET, "/metrics", "other"),
    row(Route::Console, Method::GET, "/console", "other"),
    row(
        Route::ConsoleAsset,
        Method::GET,
        "/console/{asset}",
        "other",
    ),
    audited(
        row(Route::CreateEvent, Method::POST, "/v1/events", "events"),
        "create-event",
        "event {body.event_id}",
    ),
    row(
        Route::GetEvent,
        Method::GET,
        "/v1/events/{event_id}",
        "events",
    ),
    row(
        Route::Availability,
        Method::GET,
        "/v1/events/{event_id}/availability",
        "availability",
    ),
    audited(
        row(
            Route::OpenSale,
            Method::POST,
            "/v1/events/{event_id}/open",
            "events",
        ),
        "open-sale",
        "event {event_id}",
    ),
    audited(
        row(
            Route::CloseSale,
            Method::POST,
            "/v1/events/{event_id}/close",
            "events",
        ),
        "close-sale",
        "event {event_id}",
    ),
    admitted(row(Route::CreateHold, Method::POST, "/v1/holds", "holds")),
    admitted(row(
        Route::JoinQueue,
        Method::POST,
        "/v1/events/{event_id}/queue",
        "queue",
    )),
    row(
        Route::QueueStanding,
        Method::GET,
        "/v1/events/{event_id}/queue/me",
        "queue",
    ),
    audited(
        row(
            Route::SetWaitingRoom,
            Method::POST,
            "/v1/admin/events/{event_id}/waiting-room",
            "admin",
        ),
        "waiting-room",
        "event {event_id}: {body.admit_per_sec}/s",
    ),
    row(Route::GetHold, Method::GET, "/v1/holds/{hold_id}", "holds"),
    admitted(row(
        Route::CancelHold,
        Method::DELETE,
        "/v1/holds/{hold_id}",
        "holds",
    )),
    admitted(row(
        Route::CreateBooking,
        Method::POST,
        "/v1/bookings",
        "bookings",
    )),
    row(
        Route::GetBooking,
        Method::GET,
        "/v1/bookings/{booking_id}",
        "bookings",
    ),
    row(
        Route::PaymentCallback,
        Method::GET,
        "/v1/payments/callback",
        "bookings",
    ),
    row(
        Route::PaymentWebhook,
        Method::POST,
        "/v1/payments/webhook",
        "bookings",
    ),
    row(Route::Cluster, Method::GET, "/v1/admin/cluster", "admin"),
    row(
        Route::FleetMetrics,
        Method::GET,
        "/v1/admin/fleet/metrics",
        "admin",
    ),
    row(Route::Audit, Method::GET, "/v1/admin/audit", "admin"),
    row(Route::Version, Method::GET, "/v1/admin/version", "admin"),
    audited(
        row(Route::SetFormat, Method::POST, "/v1/admin/version", "admin"),
        "set-format",
        "format v{body.format}",
    ),
    audited(
        row(
            Route::TransferLeader,
            Method::POST,
            "/v1/admin/groups/{group_id}/transfer-leader",
            "admin",
        ),
        "transfer-leader",
        "group {group_id} to node {body.to}",
    ),
    audited(
        row(
            Route::Drain,
            Method::POST,
            "/v1/admin/nodes/{node_id}/drain",
            "admin",
        ),
        "drain",
        "node {node_id}",
    ),
    audited(
        row(
            Route::Undrain,
            Method::POST,
            "/v1/admin/nodes/{node_id}/undrain",
            "admin",
        ),
        "undrain",
        "node {node_id}",
    ),
    audited(
        row(
            Route::Decommission,
            Method::POST,
            "/v1/admin/nodes/{node_id}/decommission",
            "admin",
        ),
        "decommission",
        "node {node_id}",
    ),
    audited(
        row(
            Route::Recommission,
            Method::POST,
            "/v1/admin/nodes/{node_id}/recommission",
            "admin",
        ),
        "recommission",
        "node {node_id}",
    ),
    audited(
        row(
            Route::DeclareDead,
            Method::POST,
            "/v1/admin/nodes/{node_id}/declare-dead",
            "admin",
        ),
        "declare-dead",
        "node {node_id}",
    ),
    audited(
        row(
            Route::StartMove,
            Method::POST,
            "/v1/admin/events/{event_id}/move",
            "admin",
        ),
        "move",
        "event {event_id} to {body.to_region}",
    ),
    audited(
        row(
            Route::FollowBuyers,
            Method::POST,
            "/v1/admin/events/{event_id}/follow-buyers",
            "admin",
        ),
        "follow-buyers",
        "event {event_id}: {body.enabled}",
    ),
    row(Route::ListMoves, Method::GET, "/v1/admin/moves", "admin"),
    row(
        Route::EventPayments,
        Method::GET,
        "/v1/admin/events/{event_id}/payments",
        "admin",
    ),
    row(Route::Changes, Method::GET, "/v1/admin/changes", "admin"),
    audited(
        row(
            Route::RefundBooking,
            Method::POST,
            "/v1/admin/bookings/{booking_id}/refund",
            "admin",
        ),
        "refund",
        "booking {booking_id}, reason {body.reason}",
    ),
    row(
        Route::GetMove,
        Method::GET,
        "/v1/admin/moves/{move_id}",
        "admin",
    ),
    audited(
        row(
            Route::AbortMove,
            Method::POST,
            "/v1/admin/moves/{move_id}/abort",
            "admin",
        ),
        "abort-move",
        "move {move_id}",
    ),
];

/// A request matched against [`ROUTES`].
#[derive(Debug)]
pub enum Matched {
    /// The row serving this method and path.
    Route(&'static RouteDef),
    /// The path is served, not with this method (405).
    WrongMethod,
    /// No route has this path (404).
    NoRoute,
}

/// Each route's path, split into segments once.
static SEGMENTS: LazyLock<Vec<Vec<&'static str>>> = LazyLock::new(|| {
    ROUTES
        .iter()
        .map(|d| d.path.trim_matches('/').split('/').collect())
        .collect()
});

fn segments(path: &str) -> impl Iterator<Item = &str> {
    path.trim_matches('/').split('/')
}

/// Match `method` and `path` (surrounding slashes ignored). Allocates
/// nothing: it runs on every request.
pub fn find(method: &Method, path: &str) -> Matched {
    let mut path_known = false;
    for (def, pattern) in ROUTES.iter().zip(SEGMENTS.iter()) {
        if !matches_path(pattern, path) {
            continue;
        }
        if def.method == *method {
            return Matched::Route(def);
        }
        path_known = true;
    }
    if path_known {
        Matched::WrongMethod
    } else {
        Matched::NoRoute
    }
}

/// The methods `path` is served with, for a 405's `Allow` header.
pub fn allowed(path: &str) -> String {
    let mut methods: Vec<&str> = ROUTES
        .iter()
        .zip(SEGMENTS.iter())
        .filter(|(_, pattern)| matches_path(pattern, path))
        .map(|(def, _)| def.method.as_str())
        .collect();
    methods.sort_unstable();
    methods.dedup();
    methods.join(", ")
}

/// The path parameters of `path` (which matched `def`), in order.
pub fn params<'a>(def: &RouteDef, path: &'a str) -> Vec<&'a str> {
    def.path
        .trim_matches('/')
        .split('/')
        .zip(segments(path))
        .filter(|(p, _)| p.starts_with('{'))
        .map(|(_, s)| s)
        .collect()
}

impl Matched {
    /// The latency label of the request (`other` when no route matched).
    pub fn label(&self) -> &'static str {
        match self {
            Matched::Route(def) => def.label,
            _ => "other",
        }
    }
}

fn matches_path(pattern: &[&str], path: &str) -> bool {
    let mut segs = segments(path);
    for p in pattern {
        match segs.next() {
            Some(s) if p.starts_with('{') || p == &s => {}
            _ => return false,
        }
    }
    segs.next().is_none()
}

/// Characters of one body value an audit target keeps.
const MAX_TARGET_VALUE: usize = 128;

impl Audited {
    /// The audit target of a request with `params` and `body`.
    pub fn target(&self, def: &RouteDef, params: &[&str], body: &[u8]) -> String {
        let names: Vec<&str> = def
            .path
            .split('/')
            .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
            .collect();
        let mut parsed: Option<Value> = None;
        let mut out = String::new();
        let mut rest = self.target;
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let close = rest[open..].find('}').map_or(rest.len(), |c| open + c);
            let name = &rest[open + 1..close];
            let value = match name.strip_prefix("body.") {
                Some(field) => {
                    let body = parsed
                        .get_or_insert_with(|| serde_json::from_slice(body).unwrap_or(Value::Null));
                    let v = match &body[field] {
                        Value::Null => "?".to_string(),
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    // A body is up to 1 MiB: the audit trail keeps a bounded
                    // excerpt of what it names, with no control characters
                    // (a newline or a terminal escape in a refund's reason
                    // must not forge or hide lines of `ctl audit`).
                    v.chars()
                        .take(MAX_TARGET_VALUE)
                        .map(|c| if c.is_control() { ' ' } else { c })
                        .collect()
                }
                None => names
                    .iter()
                    .position(|n| *n == name)
                    .and_then(|i| params.get(i))
                    .map_or("?".to_string(), |p| p.to_string()),
            };
            out.push_str(&value);
            rest = rest.get(close + 1..).unwrap_or("");
        }
        out.push_str(rest);
        out
    }
}

mod gate;
pub use gate::{Who, BODY_LIMIT, WEBHOOK_BODY_LIMIT};

#[cfg(test)]
mod tests;
