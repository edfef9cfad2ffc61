//! What each route lets in before its handler runs, decided on the
//! request's head alone: who may call it (checked before any body byte is
//! read) and the largest body it reads.

use super::{Route, RouteDef};
use crate::message::MAX_BODY_BYTES;

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// No token needed: the probes, `/metrics`, the console's page and
    /// assets, and the gateway's callback and webhook (checked by their
    /// handlers against the gateway, after their address's rate).
    Anyone,
    /// Any valid bearer token (a buyer or an operator).
    Token,
    /// A token with the operator claim.
    Operator,
}

/// The body limit of every route not named in [`RouteDef::body_limit`]: a
/// hold, a booking or an operator's call is a few hundred bytes (a hold
/// naming 100 seats of 64 bytes each is under 8 KiB).
pub const BODY_LIMIT: usize = 16 << 10;

/// The webhook's limit: a gateway's notification, with room to spare.
pub const WEBHOOK_BODY_LIMIT: usize = 64 << 10;

impl RouteDef {
    /// Who may call this route. Every handler checks its caller again; this
    /// is what lets the edge refuse a stranger before reading the body.
    pub fn who(&self) -> Who {
        match self.route {
            Route::Healthz
            | Route::Readyz
            | Route::Metrics
            | Route::Console
            | Route::ConsoleAsset
            | Route::PaymentCallback
            | Route::PaymentWebhook => Who::Anyone,
            Route::CreateEvent | Route::OpenSale | Route::CloseSale => Who::Operator,
            _ if self.path.starts_with("/v1/admin/") => Who::Operator,
            _ => Who::Token,
        }
    }

    /// The largest body this route reads; a larger one is 413
    /// `payload_too_large`. An event's creation carries its seat map.
    pub fn body_limit(&self) -> usize {
        match self.route {
            Route::CreateEvent => MAX_BODY_BYTES,
            Route::PaymentWebhook => WEBHOOK_BODY_LIMIT,
            _ => BODY_LIMIT,
        }
    }
}
