//! `GET /v1/admin/changes` (operators): the changefeed of every event, or
//! of one, resumable from a cursor on any edge of any region.
//!
//! ```text
//!  ?after=CURSOR  ─▶ the events the directory knows (or ?event=ID)
//!    ─▶ each event's group: Query::Changes{after: its position, limit}
//!       (at its leader, no read-index round: every replica holds a prefix
//!       of the same numbered changes, so any answer is gap-free)
//!    ─▶ a position older than the event keeps ─▶ 410 cursor_expired
//!    ─▶ nothing new and ?wait_secs=N ─▶ ask again every 250 ms until N
//!  ◀── {changes: [...], next_cursor, unavailable: [event ids not read]}
//! ```
//!
//! A cursor is the position reached in every event: `c` then `.G-S` per
//! event group `G` read up to change `S` (`c.12-40.13-7`), or `.G-o` for
//! an event to read from its oldest kept change (`c.12-40.13-o`: an event
//! the first read could not reach). An event missing from it is at 0.
//! Without `after` a reader starts at each event's oldest kept change;
//! with one, a change it would skip is an error (410 with the oldest
//! cursor that resumes), never a silent gap. An event whose group does
//! not answer keeps its position and is listed in `unavailable`; on a
//! first read its position is `o`, so it starts from its oldest later too
//! (at 0 it would be 410 once its first change is pruned, a loss that
//! never happened).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::stream::{self, StreamExt};
use hyper::StatusCode;
use seatfence_core::inventory::{BookingFacts, Change, ChangePage, ChangeSubject};
use seatfence_core::{EventId, GroupId, Query, QueryResult};
use seatfence_raft::Read;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::events::{format_ms, parse_event_id};
use crate::message::{Reply, Req};
use crate::Edge;

/// Changes one answer carries at most (`?limit=`, default 500).
pub const MAX_LIMIT: u32 = 5_000;
/// The longest `?wait_secs=` a reader may ask.
pub const MAX_WAIT_SECS: u64 = 30;
/// Groups read at once.
const PARALLEL: usize = 16;
/// How often a waiting request asks again.
const POLL: Duration = Duration::from_millis(250);

/// Where a reader is in one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pos {
    /// Read up to this change (`G-S`).
    After(u64),
    /// Nothing read yet: from the oldest change the event keeps (`G-o`).
    Oldest,
    /// Read up to this change of an event this cluster restored from a
    /// backup (`G-Sr`): written by a cluster that restored it, so a
    /// position past the backed-up changes is one of its own.
    Restored(u64),
}

/// Where a reader is: per event group, its [`Pos`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cursor(pub BTreeMap<u64, Pos>);

impl Cursor {
    /// The cursor `s` spells (`c`, then `.G-S` or `.G-o` per group), or `None`
    /// when malformed; a group named twice keeps the earlier position.
    pub fn parse(s: &str) -> Option<Cursor> {
        let rest = s.strip_prefix('c')?;
        let mut map = BTreeMap::new();
        for pair in rest.split('.').skip(1) {
            let (g, seq) = pair.split_once('-')?;
            let g: u64 = g.parse().ok()?;
            let pos = match seq {
                "o" => Pos::Oldest,
                n => match n.strip_suffix('r') {
                    Some(n) => Pos::Restored(n.parse().ok()?),
                    None => Pos::After(n.parse().ok()?),
                },
            };
            // A group named twice stands at the earlier position: reading
            // again is safe, skipping is not. A number beats `o`: it says
            // where the reader stood, and keeps the 410 if that is gone.
            let at = map.entry(g).or_insert(pos);
            // One of them not written after a restore: the reader's
            // position is not known to be this cluster's.
            *at = match (*at, pos) {
                (Pos::After(a), Pos::After(b) | Pos::Restored(b))
                | (Pos::Restored(a), Pos::After(b)) => Pos::After(a.min(b)),
                (Pos::Restored(a), Pos::Restored(b)) => Pos::Restored(a.min(b)),
                (Pos::After(a), Pos::Oldest) | (Pos::Oldest, Pos::After(a)) => Pos::After(a),
                (Pos::Restored(a), Pos::Oldest) | (Pos::Oldest, Pos::Restored(a)) => {
                    Pos::Restored(a)
                }
                (Pos::Oldest, Pos::Oldest) => Pos::Oldest,
            };
        }
        (rest.is_empty() || rest.starts_with('.')).then_some(Cursor(map))
    }

    /// What to ask `group` for: the changes after this one (0: from the
    /// oldest kept).
    pub fn after(&self, group: GroupId) -> u64 {
        match self.0.get(&group.0) {
            Some(Pos::After(s) | Pos::Restored(s)) => *s,
            Some(Pos::Oldest) | None => 0,
        }
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("c")?;
        for (g, pos) in &self.0 {
            match pos {
                Pos::After(s) => write!(f, ".{g}-{s}")?,
                Pos::Restored(s) => write!(f, ".{g}-{s}r")?,
                Pos::Oldest => write!(f, ".{g}-o")?,
            }
        }
        Ok(())
    }
}

/// `GET /v1/admin/changes?after=CURSOR&event=ID&limit=N&wait_secs=S`.
pub async fn list(edge: &Edge, req: &Req) -> Result<Reply, ApiError> {
    req.operator(edge)?;
    let strict = req.query_param("after").is_some();
    let mut cursor = match req.query_param("after") {
        None => Cursor::default(),
        Some(s) => Cursor::parse(s).ok_or_else(|| {
            ApiError::bad(
                "invalid_cursor",
                "after must be a cursor this API returned (c.GROUP-SEQ…)",
            )
        })?,
    };
    let limit = req.limit_in(500, 1..=MAX_LIMIT)?;
    let wait = match req.query_param("wait_secs") {
        None => 0,
        Some(v) => v
            .parse::<u64>()
            .ok()
            .filter(|s| *s <= MAX_WAIT_SECS)
            .ok_or_else(|| {
                ApiError::bad(
                    "invalid_wait",
                    format!("wait_secs must be 0..={MAX_WAIT_SECS}"),
                )
            })?,
    };
    let events = events(edge, req.query_param("event")).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(wait);
    loop {
        let (changes, unavailable) =
            read_all(edge, &events, &mut cursor, strict, limit as usize).await?;
        let waited_out = tokio::time::Instant::now() + POLL > deadline;
        if !changes.is_empty() || waited_out {
            return Ok(Reply::json(
                StatusCode::OK,
                json!({
                    "changes": changes,
                    "next_cursor": cursor.to_string(),
                    "unavailable": unavailable,
                }),
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The events read: one (`?event=`), or every event the directory knows,
/// with their groups.
async fn events(edge: &Edge, one: Option<&str>) -> Result<Vec<(EventId, GroupId)>, ApiError> {
    if let Some(id) = one {
        let event_id = parse_event_id(id)?;
        let route = edge.commands.route(&event_id).await?;
        return Ok(vec![(event_id, route.group)]);
    }
    let directory = edge.commands.directory_at_leader().await?;
    let mut all: Vec<(EventId, GroupId)> = directory
        .events
        .values()
        .map(|r| (r.event_id.clone(), r.group))
        .collect();
    all.sort_by_key(|(_, g)| *g);
    Ok(all)
}

/// Read every event's changes after its position, up to `limit` in all;
/// advance `cursor` over what is returned.
async fn read_all(
    edge: &Edge,
    events: &[(EventId, GroupId)],
    cursor: &mut Cursor,
    strict: bool,
    limit: usize,
) -> Result<(Vec<Value>, Vec<String>), ApiError> {
    // Each ask owns what it uses, and they are collected before they are
    // polled: a stream holding the iterator's closure is not `Send` for
    // every lifetime, which the connection's task needs.
    let asks: Vec<_> = events
        .iter()
        .map(|(event, group)| {
            let (client, event, group) = (edge.commands.client.clone(), event.clone(), *group);
            let after = cursor.after(group);
            async move {
                let q = Query::Changes {
                    after,
                    limit: limit as u32,
                };
                let page = match client.query_with(group, &q, Read::Replica).await {
                    Ok((QueryResult::Changes(p), _)) => Some(p),
                    _ => None,
                };
                (event, group, page)
            }
        })
        .collect();
    let answers: Vec<_> = stream::iter(asks).buffered(PARALLEL).collect().await;
    advance(cursor, strict, answers, limit)
}

/// The answer to one read from each event's page (`None`: its group did
/// not answer), advancing `cursor` over the changes returned; `strict`
/// when the reader gave a cursor. Pure, so its rules are tested alone.
fn advance(
    cursor: &mut Cursor,
    strict: bool,
    answers: Vec<(EventId, GroupId, Option<Box<ChangePage>>)>,
    limit: usize,
) -> Result<(Vec<Value>, Vec<String>), ApiError> {
    let start = cursor.clone();
    let (mut out, mut unavailable, mut expired) = (Vec::new(), Vec::new(), Vec::new());
    let mut diverged = Vec::new();
    for (event, group, page) in answers {
        let page = match page {
            Some(p) if p.event_id.as_ref() == Some(&event) => p,
            _ => {
                unavailable.push(event.0.clone());
                // Not read: a first read starts it at its oldest, later.
                if !strict {
                    cursor.0.entry(group.0).or_insert(Pos::Oldest);
                }
                continue;
            }
        };
        // A restored event: positions this cluster writes say so.
        let here = |s: u64| match page.restored_through {
            Some(_) => Pos::Restored(s),
            None => Pos::After(s),
        };
        let pos = cursor.0.get(&group.0).copied();
        // Past the backed-up changes, in a cursor this cluster did not
        // write: the reader read the old cluster's later changes, and this
        // cluster numbers its own from there.
        if let (Some(through), Some(Pos::After(s))) = (page.restored_through, pos) {
            if s > through {
                diverged.push((event.0.clone(), group, Pos::Restored(through)));
                continue;
            }
        }
        // From the start: the oldest kept change. Else the next one must
        // still be kept.
        let from = match pos {
            Some(Pos::After(s) | Pos::Restored(s)) => s,
            None if strict => 0,
            Some(Pos::Oldest) | None => page.oldest_seq.saturating_sub(1),
        };
        if from.saturating_add(1) < page.oldest_seq {
            expired.push((event.0.clone(), group, here(page.oldest_seq - 1)));
            continue;
        }
        let room = limit.saturating_sub(out.len());
        let mut last = from;
        for c in page.changes.iter().filter(|c| c.seq > from).take(room) {
            out.push(change_json(&event, group, c));
            last = c.seq;
        }
        cursor.0.insert(group.0, here(last));
    }
    if !expired.is_empty() || !diverged.is_empty() {
        // From where the reader stood: what this answer read is not sent.
        let mut oldest = start;
        for (_, group, at) in expired.iter().chain(&diverged) {
            oldest.0.insert(group.0, *at);
        }
        let names = |v: &[(String, GroupId, Pos)]| -> Vec<String> {
            v.iter().map(|(e, _, _)| e.clone()).collect()
        };
        let mut why = Vec::new();
        if !expired.is_empty() {
            why.push(format!(
                "changes after this cursor are no longer kept for {}",
                names(&expired).join(", ")
            ));
        }
        if !diverged.is_empty() {
            why.push(format!(
                "{} were restored from a backup that ends before this cursor (the changes after \
                 the backup were made by the old cluster and are not here)",
                names(&diverged).join(", ")
            ));
        }
        let all: Vec<String> = names(&expired)
            .into_iter()
            .chain(names(&diverged))
            .collect();
        return Err(ApiError::Gone {
            code: "cursor_expired",
            message: format!(
                "{}: resume from oldest_cursor (what was between is lost to this reader)",
                why.join("; ")
            ),
            extra: json!({"oldest_cursor": oldest.to_string(), "events": all}),
        });
    }
    Ok((out, unavailable))
}

/// One change as the API shows it.
fn change_json(event: &EventId, group: GroupId, c: &Change) -> Value {
    let mut v = json!({
        "event_id": event.0,
        "seq": c.seq,
        "type": c.kind.as_str(),
        "at": format_ms(c.at_ms),
    });
    let (field, subject) = match &c.subject {
        ChangeSubject::Event(e) => (
            "event",
            json!({
                "event_id": event.0,
                "name": e.name,
                "home_region": e.home_region.0,
                "owner_region": e.owner.0,
                "epoch": e.epoch.0,
                "capacity": e.capacity,
                "price_cents": e.price_cents,
                "currency": e.currency,
                "opens_at": e.opens_at_ms.map(format_ms),
                "closes_at": e.closes_at_ms.map(format_ms),
                "sale_forced": e.forced_open.map(|o| if o { "open" } else { "closed" }),
            }),
        ),
        ChangeSubject::Hold(h) => (
            "hold",
            json!({
                "hold_id": format!("h{}-{}", group.0, h.seq),
                "user_id": h.owner.0,
                "seats": h.seats,
                "status": h.status.as_str(),
                "created_at": format_ms(h.created_ms),
                "expires_at": format_ms(h.expires_at_ms),
            }),
        ),
        ChangeSubject::Booking(b) => ("booking", booking_json(group, b)),
    };
    v[field] = subject;
    v
}

fn booking_json(group: GroupId, b: &BookingFacts) -> Value {
    json!({
        "booking_id": format!("b{}-{}", group.0, b.seq),
        "hold_id": format!("h{}-{}", group.0, b.seq),
        "user_id": b.owner.0,
        "status": b.status.as_str(),
        "seats": b.seats,
        "payment_id": b.payment_id,
        "amount_cents": b.amount_cents,
        "currency": b.currency,
        "txn_id": b.txn_id,
        "confirmed_via": b.confirmed_via.map(|v| v.as_str()),
        "refund_id": b.refund_id,
        "refund": b.refund.as_ref().map(|r| json!({
            "by": r.by,
            "reason": r.reason,
            "release_seats": r.release_seats,
            "at": format_ms(r.at_ms),
        })),
        "created_at": format_ms(b.created_ms),
        "updated_at": format_ms(b.updated_ms),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use seatfence_core::inventory::{ChangeKind, EventFacts};
    use seatfence_core::{Epoch, RegionId};

    #[test]
    fn cursors_round_trip_and_garbage_is_refused() {
        let c = Cursor(BTreeMap::from([
            (12, Pos::After(40)),
            (13, Pos::After(0)),
            (14, Pos::Oldest),
        ]));
        assert_eq!(c.to_string(), "c.12-40.13-0.14-o");
        assert_eq!(Cursor::parse("c.12-40.13-0.14-o"), Some(c));
        assert_eq!(Cursor::parse("c"), Some(Cursor::default()));
        // A group twice: the earlier position; a number over `o`.
        let twice = Cursor(BTreeMap::from([(1, Pos::After(2))]));
        assert_eq!(Cursor::parse("c.1-3.1-2"), Some(twice.clone()));
        assert_eq!(Cursor::parse("c.1-o.1-2"), Some(twice.clone()));
        assert_eq!(Cursor::parse("c.1-2.1-o"), Some(twice));
        for bad in [
            "", "x.1-2", "c1-2", "c.1", "c.a-1", "c.1-2.", "c.-1-2", "c.1-O", "c.1-oo", "c.o-1",
        ] {
            assert_eq!(Cursor::parse(bad), None, "{bad:?}");
        }
    }

    fn change(seq: u64) -> Change {
        Change {
            seq,
            at_ms: seq,
            kind: ChangeKind::EventCreated,
            subject: ChangeSubject::Event(EventFacts {
                name: "e".into(),
                home_region: RegionId("us-east".into()),
                owner: RegionId("us-east".into()),
                epoch: Epoch(1),
                capacity: 1,
                price_cents: 1,
                currency: "EUR".into(),
                opens_at_ms: None,
                closes_at_ms: None,
                forced_open: None,
            }),
        }
    }

    /// Event `e<g>` of group `g` keeping changes `oldest..next`, as a
    /// group answers `after`.
    fn page(
        g: u64,
        oldest: u64,
        next: u64,
        after: u64,
    ) -> (EventId, GroupId, Option<Box<ChangePage>>) {
        let page = ChangePage {
            event_id: Some(EventId(format!("e{g}"))),
            oldest_seq: oldest,
            next_seq: next,
            changes: (oldest.max(after + 1)..next).map(change).collect(),
            restored_through: None,
        };
        (EventId(format!("e{g}")), GroupId(g), Some(Box::new(page)))
    }

    /// [`page`] of an event restored from a backup that ended at `through`.
    fn restored(
        g: u64,
        through: u64,
        next: u64,
        after: u64,
    ) -> (EventId, GroupId, Option<Box<ChangePage>>) {
        let (e, g, mut p) = page(g, 1, next, after);
        p.as_mut().unwrap().restored_through = Some(through);
        (e, g, p)
    }

    /// A restored event (its backup ended at change 5; this cluster wrote
    /// 6 and 7 since): a cursor of the old cluster at or before 5 reads on
    /// and comes back marked `r`; one past 5 (the old cluster's own 6..)
    /// is 410 naming where to resume; a marked one past 5 reads on.
    #[test]
    fn a_cursor_past_a_restored_backup_is_gone_unless_this_cluster_wrote_it() {
        let mut at_backup = Cursor::parse("c.1-4").unwrap();
        let (out, _) = advance(&mut at_backup, true, vec![restored(1, 5, 8, 4)], 500).unwrap();
        assert_eq!(
            seqs(&out),
            [("e1".into(), 5), ("e1".into(), 6), ("e1".into(), 7)]
        );
        assert_eq!(at_backup.to_string(), "c.1-7r");

        let mut ahead = Cursor::parse("c.1-6").unwrap();
        let Err(ApiError::Gone {
            code,
            message,
            extra,
        }) = advance(&mut ahead, true, vec![restored(1, 5, 8, 6)], 500)
        else {
            panic!("a cursor of the old cluster past the backup was not refused");
        };
        assert_eq!(code, "cursor_expired");
        assert!(message.contains("restored from a backup"), "{message}");
        assert_eq!(extra["oldest_cursor"], "c.1-5r");

        let mut ours = Cursor::parse("c.1-6r").unwrap();
        let (out, _) = advance(&mut ours, true, vec![restored(1, 5, 8, 6)], 500).unwrap();
        assert_eq!(seqs(&out), [("e1".into(), 7)]);
        assert_eq!(ours.to_string(), "c.1-7r");
        // Parsed twice with and without the mark: the unmarked position wins.
        assert_eq!(Cursor::parse("c.1-6r.1-9").unwrap().to_string(), "c.1-6");
        assert_eq!(Cursor::parse("c.1-o.1-6r").unwrap().to_string(), "c.1-6r");
    }

    fn silent(g: u64) -> (EventId, GroupId, Option<Box<ChangePage>>) {
        (EventId(format!("e{g}")), GroupId(g), None)
    }

    fn seqs(out: &[Value]) -> Vec<(String, u64)> {
        out.iter()
            .map(|c| {
                (
                    c["event_id"].as_str().unwrap().to_string(),
                    c["seq"].as_u64().unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn a_first_read_puts_an_event_it_could_not_read_at_its_oldest() {
        let mut cursor = Cursor::default();
        let (out, unavailable) =
            advance(&mut cursor, false, vec![page(1, 1, 3, 0), silent(2)], 500).unwrap();
        assert_eq!(seqs(&out), [("e1".into(), 1), ("e1".into(), 2)]);
        assert_eq!(unavailable, ["e2"]);
        assert_eq!(cursor.to_string(), "c.1-2.2-o");

        // Later (group 2's first 49 changes pruned meanwhile), from this
        // cursor: group 2 still silent keeps its `o` ...
        let mut later = Cursor::parse(&cursor.to_string()).unwrap();
        assert_eq!(later.after(GroupId(2)), 0);
        let (out, unavailable) =
            advance(&mut later, true, vec![page(1, 1, 3, 2), silent(2)], 500).unwrap();
        assert!(out.is_empty() && unavailable == ["e2"]);
        assert_eq!(later.to_string(), "c.1-2.2-o");
        // ... and once it answers, it is read from its oldest kept change,
        // not refused as expired.
        let (out, unavailable) = advance(
            &mut later,
            true,
            vec![page(1, 1, 3, 2), page(2, 50, 52, 0)],
            500,
        )
        .unwrap();
        assert_eq!(seqs(&out), [("e2".into(), 50), ("e2".into(), 51)]);
        assert!(unavailable.is_empty());
        assert_eq!(later.to_string(), "c.1-2.2-51");
    }

    #[test]
    fn a_position_past_what_an_event_keeps_is_still_expired() {
        // Read up to 10, or never read with a cursor (an event created
        // since): both would skip changes 11..50, which are gone.
        for given in ["c.2-10", "c.1-2"] {
            let mut cursor = Cursor::parse(given).unwrap();
            let after = cursor.after(GroupId(2));
            let err = advance(&mut cursor, true, vec![page(2, 50, 52, after)], 500).unwrap_err();
            let ApiError::Gone { code, extra, .. } = err else {
                panic!("{err:?}")
            };
            assert_eq!(code, "cursor_expired");
            assert!(
                extra["oldest_cursor"].as_str().unwrap().contains(".2-49"),
                "{extra}"
            );
        }
    }

    #[test]
    fn an_unanswered_event_with_a_cursor_keeps_its_position() {
        // With a cursor, an event it does not name stays at 0 (created
        // since: its first change is still to read), and a named one where
        // it stood.
        let mut cursor = Cursor::parse("c.1-7").unwrap();
        let (_, unavailable) = advance(&mut cursor, true, vec![silent(1), silent(2)], 500).unwrap();
        assert_eq!(unavailable, ["e1", "e2"]);
        assert_eq!(cursor.to_string(), "c.1-7");
    }
}
