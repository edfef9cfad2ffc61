//! Reads of a group's applied state, answered by `State::query`. The node
//! serves them over `NodeService.Query` (from the leader when the caller
//! asks for a linearizable read).

use serde::{Deserialize, Serialize};

use crate::directory::{Directory, EventRoute};
use crate::ids::EventId;
use crate::inventory::{Booking, Event, Hold, Inventory, OutboxItem};
use crate::state::State;

/// A read of one group's applied state; each is for an event group or for the directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Query {
    /// Event group: the event record.
    Event,
    /// Event group: the event and up to `max_seats` free seat ids.
    Availability {
        /// Most free seat ids to list.
        max_seats: u32,
    },
    /// Event group: one hold and its booking.
    Booking(u64),
    /// Event group: held holds with a pending payment whose deadline is at
    /// or before `until_ms`, earliest deadline first, at most `limit`.
    DuePayments {
        /// The latest deadline to include, in Unix ms.
        until_ms: u64,
        /// Most holds to list.
        limit: u32,
    },
    /// Event group: undelivered outbox items, oldest first, at most `limit`.
    Outbox {
        /// Most items to list.
        limit: u32,
    },
    /// Event group: whether a webhook's provider event id was acted on.
    Inbox(String),
    /// Directory: one event's route.
    Route(EventId),
    /// Directory: all of it.
    Directory,
    /// Directory: the newest `limit` audit entries, newest first.
    Audit {
        /// Most entries to list.
        limit: u32,
    },
    /// Event group: this replica's seats, holds and bookings (the chaos
    /// harness compares replicas with it; fine for drill-sized events).
    Replica,
    /// Event group: released bookings whose payment is not known to be
    /// terminal yet (answered as [`QueryResult::DuePayments`]), at most
    /// `limit`.
    Unsettled {
        /// Most bookings to list.
        limit: u32,
    },
    /// Directory: the first answer to `owner`'s request with key `key`.
    Answer {
        /// The caller whose key it is.
        owner: String,
        /// The Idempotency-Key.
        key: String,
    },
    /// Event group: its payments at a glance ([`PaymentSummary`]).
    Payments,
    /// Event groups: up to `limit` changes of the changefeed after `after`
    /// (0: from the first kept), with the range this replica keeps.
    Changes {
        /// The last change seq the reader has; 0: start from the oldest kept.
        after: u64,
        /// Most changes to list.
        limit: u32,
    },
    /// Event group: its waiting room at `now_ms`, and where `buyer` stands
    /// in it.
    Room {
        /// The buyer whose standing to report; `None`: only the room.
        buyer: Option<crate::ids::UserId>,
        /// The moment to compute the room at, in Unix ms (the caller's clock).
        now_ms: u64,
    },
}

/// A waiting room at a moment, as [`Query::Room`] answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoomView {
    /// The room's settings.
    pub settings: crate::inventory::RoomSettings,
    /// When the sale opens, in Unix ms (the event's `opens_at_ms`).
    pub opens_at_ms: Option<u64>,
    /// Whether the opening's draw has run.
    pub opened: bool,
    /// Buyers in the queue not admitted yet.
    pub queue_len: u64,
    /// Positions admitted so far.
    pub admitted: u64,
    /// Places whose buyer held seats while admitted.
    pub tickets_used: u64,
    /// Places admitted whose time ran out unused.
    pub lapsed: u64,
    /// Places that lapsed and joined again.
    pub rejoined: u64,
}

/// An event's payments, as [`Query::Payments`] answers them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentSummary {
    /// The event's id; `None` when this replica has no event.
    pub event_id: Option<EventId>,
    /// Held holds whose payment is pending: only the reconciler ends them
    /// once their deadline passes.
    pub pending: u64,
    /// The earliest deadline among them.
    pub oldest_deadline_ms: Option<u64>,
    /// Released bookings whose payment is not known to be terminal yet.
    pub unsettled: u64,
    /// Refunds not yet issued at the gateway.
    pub refunds_pending: u64,
}

/// One replica's records of an event, as [`Query::Replica`] answers them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaDump {
    /// The event record; `None` when this replica has none.
    pub event: Option<Event>,
    /// Every seat's id and state, in seat id order.
    pub seats: Vec<(String, crate::inventory::SeatState)>,
    /// Every hold, in sequence number order.
    pub holds: Vec<Hold>,
    /// Every booking, in its hold's sequence number order.
    pub bookings: Vec<Booking>,
}

/// The answer to a [`Query`]; each variant answers the query of the same name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum QueryResult {
    /// The event record; `None` when this replica has none.
    Event(Option<Event>),
    /// The event and some of its free seats.
    Availability {
        /// The event record; `None` when this replica has none.
        event: Option<Event>,
        /// Free seat ids in layout order, at most `max_seats`.
        free_seats: Vec<String>,
    },
    /// The event's route; `None`: no such event.
    Route(Option<EventRoute>),
    /// A copy of the whole directory.
    Directory(Directory),
    /// Audit entries, newest first.
    Audit(Vec<crate::audit::AuditEntry>),
    /// One hold and its booking, with what answers about them carry.
    Booking {
        /// The event's id; `None` when this replica has no event.
        event_id: Option<EventId>,
        /// The hold; `None`: no hold with that sequence number.
        hold: Option<Hold>,
        /// Its booking; `None`: none was made (or no such hold).
        booking: Option<Booking>,
        /// The event's seat price and currency.
        price: Option<(u64, String)>,
        /// The event's epoch and owner region (the fence answers carry).
        fence: Option<(crate::ids::Epoch, crate::ids::RegionId)>,
    },
    /// `(hold, booking)` pairs.
    DuePayments(Vec<(Hold, Booking)>),
    /// Undelivered outbox items.
    Outbox {
        /// The event's id; `None` when this replica has no event.
        event_id: Option<EventId>,
        /// Each item with its booking, oldest first.
        items: Vec<(OutboxItem, Booking)>,
    },
    /// Whether the webhook's provider event id was acted on.
    Inbox(bool),
    /// This replica's records of the event.
    Replica(Box<ReplicaDump>),
    /// The answer recorded under the key; `None`: none.
    Answer(Option<crate::answers::KeyedAnswer>),
    /// The event's payments at a glance.
    Payments(PaymentSummary),
    /// A page of the changefeed.
    Changes(Box<crate::inventory::ChangePage>),
    /// The waiting room and a buyer's standing in it.
    Room {
        /// The event's id; `None` when this replica has no event.
        event_id: Option<EventId>,
        /// The room at `now_ms`; `None`: the event has no waiting room.
        room: Option<RoomView>,
        /// Where `buyer` stands; `None` without a room, a buyer, or a place of theirs.
        standing: Option<crate::inventory::Standing>,
    },
}

impl State {
    /// Answer `q` from this replica's applied state.
    pub fn query(&self, q: &Query) -> QueryResult {
        let inv = self.inventory();
        match q {
            Query::Event => QueryResult::Event(inv.event.clone()),
            Query::Availability { max_seats } => QueryResult::Availability {
                event: inv.event.clone(),
                free_seats: inv.free_seats(*max_seats as usize),
            },
            Query::Booking(seq) => booking_answer(inv, *seq),
            Query::DuePayments { until_ms, limit } => {
                QueryResult::DuePayments(due_payments(inv, *until_ms, *limit))
            }
            Query::Payments => QueryResult::Payments(payment_summary(inv)),
            Query::Unsettled { limit } => QueryResult::DuePayments(unsettled_payments(inv, *limit)),
            Query::Outbox { limit } => outbox_answer(inv, *limit),
            Query::Inbox(id) => QueryResult::Inbox(inv.inbox.contains_key(id)),
            Query::Changes { after, limit } => {
                let mut page = inv.change_page(*after, *limit as usize);
                if let State::Event(e) = self {
                    page.restored_through = e
                        .restore
                        .as_ref()
                        .filter(|m| m.done)
                        .map(|m| m.changes_through);
                }
                QueryResult::Changes(Box::new(page))
            }
            Query::Answer { owner, key } => {
                QueryResult::Answer(self.answers().get(&(owner.clone(), key.clone())).cloned())
            }
            Query::Room { buyer, now_ms } => room_answer(inv, buyer.as_ref(), *now_ms),
            Query::Route(e) => QueryResult::Route(self.directory().events.get(e).cloned()),
            Query::Directory => QueryResult::Directory(self.directory().clone()),
            Query::Replica => QueryResult::Replica(Box::new(replica_dump(inv))),
            Query::Audit { limit } => QueryResult::Audit(self.newest_audit(*limit)),
        }
    }

    /// The newest `limit` audit entries, newest first.
    fn newest_audit(&self, limit: u32) -> Vec<crate::audit::AuditEntry> {
        self.audit()
            .values()
            .rev()
            .take(limit as usize)
            .cloned()
            .collect()
    }
}

/// [`Query::Booking`]: hold `seq`, its booking, and the event's price and fence.
fn booking_answer(inv: &Inventory, seq: u64) -> QueryResult {
    QueryResult::Booking {
        event_id: inv.event.as_ref().map(|e| e.event_id.clone()),
        hold: inv.holds.get(&seq).cloned(),
        booking: inv.bookings.get(&seq).cloned(),
        price: inv
            .event
            .as_ref()
            .map(|e| (e.price_cents, e.currency.clone())),
        fence: inv.event.as_ref().map(|e| (e.epoch, e.owner.clone())),
    }
}

/// Hold `seq` with its booking; `None` unless both exist.
fn hold_and_booking(inv: &Inventory, seq: &u64) -> Option<(Hold, Booking)> {
    Some((inv.holds.get(seq)?.clone(), inv.bookings.get(seq)?.clone()))
}

/// [`Query::DuePayments`]: pending payments due by `until_ms`, earliest first.
fn due_payments(inv: &Inventory, until_ms: u64, limit: u32) -> Vec<(Hold, Booking)> {
    inv.index
        .pay_deadlines
        .iter()
        .take_while(|(deadline, _)| *deadline <= until_ms)
        // The limit counts deadlines, not pairs found: a hold missing its
        // booking still uses up a place.
        .take(limit as usize)
        .filter_map(|(_, seq)| hold_and_booking(inv, seq))
        .collect()
}

/// [`Query::Unsettled`]: released bookings whose payment is not terminal yet.
fn unsettled_payments(inv: &Inventory, limit: u32) -> Vec<(Hold, Booking)> {
    inv.index
        .unsettled
        .iter()
        .take(limit as usize)
        .filter_map(|seq| hold_and_booking(inv, seq))
        .collect()
}

/// [`Query::Payments`]: the event's payments at a glance.
fn payment_summary(inv: &Inventory) -> PaymentSummary {
    PaymentSummary {
        event_id: inv.event.as_ref().map(|e| e.event_id.clone()),
        pending: inv.index.pay_deadlines.len() as u64,
        oldest_deadline_ms: inv.index.pay_deadlines.get_min().map(|(at, _)| *at),
        unsettled: inv.index.unsettled.len() as u64,
        refunds_pending: inv.refunds_pending() as u64,
    }
}

/// [`Query::Outbox`]: undelivered outbox items with their bookings, oldest first.
fn outbox_answer(inv: &Inventory, limit: u32) -> QueryResult {
    QueryResult::Outbox {
        event_id: inv.event.as_ref().map(|e| e.event_id.clone()),
        items: inv
            .index
            .outbox_pending
            .iter()
            .filter_map(|id| {
                let item = inv.outbox.get(id)?;
                Some((item.clone(), inv.bookings.get(&item.booking)?.clone()))
            })
            .take(limit as usize)
            .collect(),
    }
}

/// [`Query::Room`]: the waiting room at `now_ms` and where `buyer` stands in it.
fn room_answer(inv: &Inventory, buyer: Option<&crate::ids::UserId>, now_ms: u64) -> QueryResult {
    let opens_at_ms = inv.event.as_ref().and_then(|e| e.opens_at_ms);
    let room = inv.room.as_ref();
    QueryResult::Room {
        event_id: inv.event.as_ref().map(|e| e.event_id.clone()),
        room: room.map(|r| RoomView {
            settings: r.settings,
            opens_at_ms,
            opened: r.opened,
            queue_len: r.queue_len(now_ms),
            admitted: r.admitted(now_ms),
            tickets_used: r.tickets_used,
            lapsed: r.lapsed(now_ms, &inv.index.used_positions),
            rejoined: r.rejoined,
        }),
        standing: room
            .zip(buyer.and_then(|b| inv.places.get(b)))
            .map(|(r, place)| r.standing(place, opens_at_ms.unwrap_or(0), now_ms)),
    }
}

/// [`Query::Replica`]: every seat, hold and booking this replica has.
fn replica_dump(inv: &Inventory) -> ReplicaDump {
    ReplicaDump {
        event: inv.event.clone(),
        seats: inv
            .seats
            .iter()
            .map(|(id, seat)| (id.clone(), seat.state))
            .collect(),
        holds: inv.holds.values().cloned().collect(),
        bookings: inv.bookings.values().cloned().collect(),
    }
}
