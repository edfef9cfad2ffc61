//! Reads where the buyer is: availability, event and waiting-room reads
//! answered by a replica in the edge's own region within a staleness bound
//! (`?max_stale_ms=`, default [`DEFAULT_MAX_STALE_MS`]; 0 asks the
//! leader), else by the leader as before. See
//! `seatfence_regions::local_reads` for how the bound is proven. Never for
//! decisions: holds, bookings and every fenced write go to the leader.

use std::time::Duration;

use seatfence_core::directory::EventRoute;
use seatfence_core::{Query, QueryResult};

use crate::error::ApiError;
use crate::message::Req;
use crate::Edge;

/// The staleness bound of a read that names none (ms).
pub const DEFAULT_MAX_STALE_MS: u32 = 1_000;

/// The largest bound a read may ask (ms).
pub const MAX_STALE_MS: u32 = 60_000;

/// Who answered a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServedBy {
    /// The group's leader (or this edge's cache of its answer).
    Leader,
    /// A replica in this edge's region.
    Replica,
}

impl ServedBy {
    /// `leader` or `replica`, as answers name it (`served_by`).
    pub fn as_str(self) -> &'static str {
        match self {
            ServedBy::Leader => "leader",
            ServedBy::Replica => "replica",
        }
    }
}

/// The request's `max_stale_ms`: how old a read's answer may be.
pub fn max_stale(req: &Req) -> Result<Duration, ApiError> {
    let ms = match req.query_param("max_stale_ms") {
        None => DEFAULT_MAX_STALE_MS,
        Some(v) => v
            .parse::<u32>()
            .ok()
            .filter(|n| *n <= MAX_STALE_MS)
            .ok_or_else(|| {
                ApiError::bad(
                    "invalid_max_stale",
                    format!("max_stale_ms must be 0..={MAX_STALE_MS}"),
                )
            })?,
    };
    Ok(Duration::from_millis(u64::from(ms)))
}

/// A read's answer and where it came from.
pub struct Answer {
    /// What the group answered.
    pub result: QueryResult,
    /// The answering replica's term.
    pub term: u64,
    /// How stale it may be: for a replica, since the point that proves
    /// it; for the leader, since the question was sent (its answer covers
    /// every write it acknowledged before then, and crosses back after).
    pub stale: Duration,
    /// Who answered.
    pub served: ServedBy,
}

/// `q` of `route`'s group: from a replica in this region when one proves
/// `bound`, else from the leader.
pub async fn ask(
    edge: &Edge,
    route: &EventRoute,
    q: &Query,
    bound: Duration,
) -> Result<Answer, ApiError> {
    let local = &edge.commands.local_reads;
    if !bound.is_zero() {
        if let Some(a) = local.read(route.group, q, bound).await {
            return Ok(Answer {
                result: a.result,
                term: a.term,
                stale: a.stale,
                served: ServedBy::Replica,
            });
        }
        local.note_fallback();
    }
    let sent = std::time::Instant::now();
    // Confirmed by the leader's lease (a read-index round when it is not
    // fresh): a node that no longer leads refuses, so `stale_ms` never
    // covers a deposed leader's or a follower's state.
    let (result, term) = edge
        .commands
        .client
        .query_with(route.group, q, seatfence_raft::Read::Lease)
        .await
        .map_err(|e| edge.commands.client_error(e))?;
    Ok(Answer {
        result,
        term,
        stale: sent.elapsed(),
        served: ServedBy::Leader,
    })
}

/// `q` from a replica in this region within `bound`, or `None` (ask the
/// leader the way the caller asks it).
pub async fn local_only(
    edge: &Edge,
    route: &EventRoute,
    q: &Query,
    bound: Duration,
) -> Option<QueryResult> {
    let local = &edge.commands.local_reads;
    if bound.is_zero() {
        return None;
    }
    match local.read(route.group, q, bound).await {
        Some(a) => Some(a.result),
        None => {
            local.note_fallback();
            None
        }
    }
}
