//! The checkers. Each looks at the run from one angle and returns a
//! [`Verdict`]; each is tested against histories with a planted fault.
//!
//! | checker | question |
//! |---|---|
//! | `linearizable` | does some order of the seat operations, each inside its own invoke–complete window, explain every answer? (Wing–Gong search per seat, memoized) |
//! | `no_double_sale` | is any seat sold to two bookings, on any replica or as buyers were told? |
//! | `confirmations_durable` | is every confirmation a buyer saw present on every replica at the end? |
//! | `no_stale_epoch` | was any write accepted under an epoch a finished move had replaced? |
//! | `counters` | do every replica's counters equal its seat records? |
//! | `captures` | at most one capture per booking, each matching a confirmed or refunded booking? |
//! | `money` | did every captured payment end as a confirmed booking or exactly one refund (never kept for nothing)? |
//! | `coverage` | did every scheduled fault happen, did a leader change, did a move overlap a fault? |

pub mod captures;
pub mod confirmations;
pub mod counters;
pub mod coverage;
pub mod double_sale;
pub mod growth;
pub mod linearizable;
pub mod money;
pub mod stale_epoch;

use serde::{Deserialize, Serialize};

use crate::history::{History, Op};
use crate::run::{FinalState, RunInfo};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    Pass,
    Fail,
    /// The checker could not decide (for example its search budget ran
    /// out); never counted as a pass.
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    pub message: String,
    /// History op numbers involved.
    #[serde(default)]
    pub ops: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    pub checker: String,
    pub status: Status,
    /// One line: what was checked, how much.
    pub summary: String,
    pub violations: Vec<Violation>,
}

impl Verdict {
    pub fn new(checker: &str, summary: String, violations: Vec<Violation>) -> Verdict {
        Verdict {
            checker: checker.to_string(),
            status: if violations.is_empty() {
                Status::Pass
            } else {
                Status::Fail
            },
            summary,
            violations,
        }
    }
}

/// Everything a checker may look at.
pub struct Input<'a> {
    pub run: &'a RunInfo,
    pub history: &'a History,
    pub ops: Vec<Op>,
    pub finals: &'a FinalState,
}

impl<'a> Input<'a> {
    pub fn new(run: &'a RunInfo, history: &'a History, finals: &'a FinalState) -> Input<'a> {
        Input {
            run,
            history,
            ops: history.ops(),
            finals,
        }
    }
}

/// Run every checker.
pub fn check_all(input: &Input<'_>) -> Vec<Verdict> {
    vec![
        linearizable::check(input),
        double_sale::check(input),
        confirmations::check(input),
        stale_epoch::check(input),
        counters::check(input),
        captures::check(input),
        money::check(input),
        coverage::check(input),
    ]
}

/// Bookings buyers were told are confirmed: `(event, booking, hold, seats, op)`.
pub(crate) fn confirmed_bookings(ops: &[Op]) -> Vec<(String, String, Vec<String>, u64)> {
    use crate::history::{Call, Outcome, Reply};
    let mut out = Vec::new();
    for o in ops {
        let (event, booking, seats) = match &o.call {
            Call::Pay {
                event,
                booking,
                seats,
                ..
            }
            | Call::ReadBooking {
                event,
                booking,
                seats,
                ..
            } => (event, booking, seats),
            _ => continue,
        };
        if let Outcome::Ok(Reply::Booking { status }) = &o.outcome {
            if status == "confirmed" {
                out.push((event.clone(), booking.clone(), seats.clone(), o.op));
            }
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! Small runs for the checkers' self-tests.
    use seatfence_core::inventory::{
        Booking, BookingStatus, Event, Hold, HoldStatus, PaymentAttempt, SeatState,
    };
    use seatfence_core::ReplicaDump;

    use crate::history::{Call, Entry, History, Reply};
    use crate::run::{EventFinal, EventInfo, FinalState, ReplicaFinal, RunInfo};

    /// The wall-clock start of [`run_with_wall_clock`]'s history.
    pub const STARTED_UNIX_MS: u64 = 1_800_000_000_000;

    /// [`run`] with its wall-clock start recorded (holds' own expiries
    /// count).
    pub fn run_with_wall_clock() -> RunInfo {
        RunInfo {
            started_unix_ms: STARTED_UNIX_MS,
            max_skew_ms: 1_500,
            ..run()
        }
    }

    pub fn run() -> RunInfo {
        RunInfo {
            seed: 1,
            duration_s: 60,
            hold_ttl_ms: 4_000,
            max_skew_ms: 0,
            events: vec![EventInfo {
                event_id: "e".into(),
                group: 5,
                seats: vec!["S1".into(), "S2".into()],
                hot: true,
                home_region: "us-east".into(),
                ..EventInfo::default()
            }],
            ..RunInfo::default()
        }
    }

    /// A history builder: ops with explicit times (seconds).
    #[derive(Default)]
    pub struct H {
        pub entries: Vec<Entry>,
        next: u64,
    }

    impl H {
        pub fn op(&mut self, p: &str, call: Call, t0: f64, t1: f64, done: Done) -> u64 {
            self.next += 1;
            let op = self.next;
            let us = |s: f64| (s * 1e6) as u64;
            self.entries.push(Entry::Invoke {
                t: us(t0),
                process: p.into(),
                op,
                call,
            });
            self.entries.push(match done {
                Done::Ok(reply) => Entry::Ok {
                    t: us(t1),
                    process: p.into(),
                    op,
                    reply,
                },
                Done::Fail(code, unavailable) => Entry::Fail {
                    t: us(t1),
                    process: p.into(),
                    op,
                    code: code.into(),
                    unavailable,
                },
                Done::Info => Entry::Info {
                    t: us(t1),
                    process: p.into(),
                    op,
                    reason: "timeout".into(),
                },
            });
            op
        }

        /// A cancel of `hold` (seat S1) answered 200 with the hold's `status`.
        pub fn cancel(&mut self, p: &str, hold: &str, t0: f64, t1: f64, status: &str) -> u64 {
            let call = Call::Cancel {
                event: "e".into(),
                hold: hold.into(),
                seats: vec!["S1".into()],
            };
            let reply = Reply::Cancelled {
                epoch: 1,
                status: Some(status.into()),
            };
            self.op(p, call, t0, t1, Done::Ok(reply))
        }

        pub fn hold(&mut self, p: &str, seat: &str, t0: f64, t1: f64, hold: Option<&str>) -> u64 {
            let call = Call::Hold {
                event: "e".into(),
                seats: vec![seat.into()],
                edge: "n1".into(),
            };
            let done = match hold {
                Some(h) => Done::Ok(Reply::Held {
                    hold: h.into(),
                    seats: vec![seat.into()],
                    epoch: 1,
                    expires_at_ms: None,
                }),
                None => Done::Fail("seats_unavailable", vec![seat.into()]),
            };
            self.op(p, call, t0, t1, done)
        }

        /// A hold of `seat` answered 201 with its own `expires_at`:
        /// `expires_s` seconds after history time 0 of a run that started
        /// at [`STARTED_UNIX_MS`].
        pub fn hold_until(
            &mut self,
            p: &str,
            seat: &str,
            t: (f64, f64),
            hold: &str,
            expires_s: f64,
        ) -> u64 {
            let call = Call::Hold {
                event: "e".into(),
                seats: vec![seat.into()],
                edge: "n1".into(),
            };
            let reply = Reply::Held {
                hold: hold.into(),
                seats: vec![seat.into()],
                epoch: 1,
                expires_at_ms: Some(STARTED_UNIX_MS + (expires_s * 1e3) as u64),
            };
            self.op(p, call, t.0, t.1, Done::Ok(reply))
        }

        /// The nemesis skewed clocks `ms` ahead from `t0` to `t1` (s), as
        /// fault `id` of `run`'s schedule.
        pub fn clock_skew(&mut self, run: &mut RunInfo, id: u32, ms: i64, t0: f64, t1: f64) {
            let us = |s: f64| (s * 1e6) as u64;
            run.schedule.push(crate::schedule::ScheduledFault {
                id,
                at_ms: us(t0) / 1_000,
                duration_ms: us(t1 - t0) / 1_000,
                fault: crate::schedule::Fault::ClockSkew { ms },
            });
            self.entries.push(Entry::Fault {
                t: us(t0),
                id,
                kind: "clock-skew".into(),
                detail: format!("{ms:+} ms"),
            });
            self.entries.push(Entry::Heal { t: us(t1), id });
        }

        /// `c1` books hold `h5-1` (seat S1) as booking `b5-1`.
        pub fn book(&mut self, t0: f64) -> u64 {
            let call = Call::Book {
                event: "e".into(),
                hold: "h5-1".into(),
                seats: vec!["S1".into()],
            };
            let reply = Reply::Booked {
                booking: "b5-1".into(),
                payment_id: "p1".into(),
                epoch: 1,
            };
            self.op("c1", call, t0, t0 + 0.1, Done::Ok(reply))
        }

        /// `c1` learns booking `b5-1`'s `status`: from the callback after
        /// paying (`Some(abandon)`) or from a booking read (`None`).
        pub fn booking_status(&mut self, t0: f64, t1: f64, pay: Option<bool>, status: &str) -> u64 {
            let (event, hold, booking, seats) =
                ("e".into(), "h5-1".into(), "b5-1".into(), vec!["S1".into()]);
            let call = match pay {
                Some(abandon) => Call::Pay {
                    event,
                    hold,
                    booking,
                    seats,
                    abandon,
                },
                None => Call::ReadBooking {
                    event,
                    hold,
                    booking,
                    seats,
                },
            };
            let reply = Reply::Booking {
                status: status.into(),
            };
            self.op("c1", call, t0, t1, Done::Ok(reply))
        }

        pub fn history(&self) -> History {
            let mut entries = self.entries.clone();
            entries.sort_by_key(|e| e.t());
            History { entries }
        }
    }

    pub enum Done {
        Ok(Reply),
        Fail(&'static str, Vec<String>),
        Info,
    }

    pub fn event(epoch: u64, available: u64, held: u64, sold: u64) -> Event {
        Event {
            event_id: seatfence_core::EventId("e".into()),
            name: "e".into(),
            home_region: seatfence_core::RegionId("us-east".into()),
            owner: seatfence_core::RegionId("us-east".into()),
            epoch: seatfence_core::Epoch(epoch),
            sections: vec![String::new()],
            hold_ttl_ms: 4_000,
            max_seats_per_hold: 4,
            max_seats_per_buyer: None,
            opens_at_ms: None,
            closes_at_ms: None,
            survival: Default::default(),
            forced_open: None,
            capacity: available + held + sold,
            available,
            held,
            sold,
            spec_hash: 0,
            next_hold_seq: 10,
            next_outbox_id: 1,
            price_cents: 100,
            currency: "EUR".into(),
            retention_ms: seatfence_core::inventory::DEFAULT_RETENTION_MS,
            clock_ms: 0,
            changes_retention_ms: seatfence_core::inventory::DEFAULT_CHANGES_RETENTION_MS,
            next_change_seq: 1,
        }
    }

    pub fn hold(seq: u64, seats: &[&str], status: HoldStatus) -> Hold {
        Hold {
            seq,
            owner: seatfence_core::UserId("u".into()),
            seats: seats.iter().map(|s| s.to_string()).collect(),
            created_ms: 0,
            expires_at_ms: 4_000,
            status,
            extensions: 0,
        }
    }

    pub fn booking(seq: u64, status: BookingStatus, payment: &str) -> Booking {
        Booking {
            seq,
            owner: seatfence_core::UserId("u".into()),
            payment: PaymentAttempt {
                payment_id: payment.into(),
                provider_key: String::new(),
                signature: String::new(),
                approve_url: String::new(),
                amount_cents: 100,
                currency: "EUR".into(),
            },
            status,
            created_ms: 0,
            updated_ms: 0,
            intents: 1,
            txn_id: None,
            confirmed_via: None,
            refund_id: None,
            intent_by: None,
            voiding: false,
            settled: false,
            refund: None,
        }
    }

    /// One event, one replica per dump on nodes 1, 2, 3...
    pub fn finals(dumps: Vec<ReplicaDump>) -> FinalState {
        FinalState {
            events: vec![EventFinal {
                event_id: "e".into(),
                group: 5,
                epoch: 1,
                owner: "us-east".into(),
                members: (1..=dumps.len() as u64).collect(),
                replicas: dumps
                    .into_iter()
                    .enumerate()
                    .map(|(i, d)| ReplicaFinal {
                        node: i as u64 + 1,
                        applied_index: 10,
                        dump: Some(d),
                        error: None,
                    })
                    .collect(),
            }],
            gateway: vec![],
            converged: true,
            notes: vec![],
        }
    }

    /// A consistent replica: S1 sold to booking 1 (hold 1), S2 free.
    pub fn good_dump() -> ReplicaDump {
        ReplicaDump {
            event: Some(event(1, 1, 0, 1)),
            seats: vec![
                ("S1".into(), SeatState::Sold(1)),
                ("S2".into(), SeatState::Available),
            ],
            holds: vec![hold(1, &["S1"], HoldStatus::Booked)],
            bookings: vec![booking(1, BookingStatus::Confirmed, "p1")],
        }
    }
}
