//! [`EventDuties`]: the one dispatcher of the work a node does for the
//! event groups it leads. Each led group has its own schedule per
//! [`Duty`]; a pass runs as a task of its own (at most one per group and
//! duty, at most [`Duty::limit`] groups at once per duty) and hands its
//! memory back when it ends, so a slow gateway in one group's sweep never
//! holds another group's expiry, and an awake idle group costs one read
//! of its state per scan (every 500 ms). A sleeping group costs a look at
//! its nap: what a scan read of it (whether this node leads it, when its
//! next tick is due) holds until it wakes, since nothing changes its state
//! meanwhile ([`GroupHandle::nap`]).
//!
//! ```text
//!  wake (the earliest due pass, a pass ending, or every 500 ms of the node's timer:
//!        then the led groups are read again, and their tick due times; a
//!        sleeping group's from what was read in the same nap)
//!   └─ every event group this node leads:
//!        Tick       when a hold deadline, a room draw or a cleanup is due ─▶ propose Tick (term-fenced)
//!        Reconcile  every reconcile_interval_ms after the last sweep      ─▶ reconciler::sweep
//!        Refunds    every outbox_interval_ms (10 ms after a busy pass)    ─▶ outbox::refunds
//!        Emails     the same                                              ─▶ outbox::emails
//!   └─ a pass ends ─▶ its memory back in the group's slot, its figures into the node's gauges
//!  a group no longer led: its slot (memory, figures) dropped once nothing of it runs
//! ```

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use seatfence_core::{Epoch, EventId, GroupId};
use seatfence_payments::outbox::{self, EmailLane, LaneReport, RefundLane};
use seatfence_payments::reconciler::{self, SweepReport};
use seatfence_payments::Payments;
use seatfence_raft::clock::Clock;
use seatfence_raft::registry::{GroupHandle, Registry};
use seatfence_raft::Proposer;
use tokio::sync::watch;
use tokio::task::{Id, JoinSet};

use crate::tick;

/// The longest a dispatcher sleeps (on the node's timer): how late a tick
/// may notice a deadline, and a new leadership its first pass.
pub const WAKE_EVERY: Duration = Duration::from_millis(500);

/// The shortest sleep between two wakes that are not a pass ending (a
/// busy outbox lane's 10 ms pause is this).
pub const MIN_WAKE: Duration = Duration::from_millis(10);

/// One kind of leader work on an event group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Duty {
    /// Expiry, the waiting room's draw, retention (`tick`).
    Tick,
    /// The payment reconciler's sweep.
    Reconcile,
    /// The outbox's refunds lane.
    Refunds,
    /// The outbox's confirmation emails lane.
    Emails,
}

impl Duty {
    const ALL: [Duty; 4] = [Duty::Tick, Duty::Reconcile, Duty::Refunds, Duty::Emails];

    /// Groups this duty runs for at once on one node: the reconciler one
    /// at a time (its batches are its concurrency at the gateway), the mail
    /// sink one page at a time, refunds a few, ticks freely (each is one
    /// proposal).
    pub fn limit(self) -> usize {
        match self {
            Duty::Tick => 64,
            Duty::Reconcile | Duty::Emails => 1,
            Duty::Refunds => 4,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What one pass hands back: the group's memory of the duty, and what it
/// saw.
enum Done {
    Tick,
    Reconcile(reconciler::Memory, SweepReport),
    Refunds(RefundLane, LaneReport),
    Emails(EmailLane, LaneReport),
}

/// One led group's slot: when each duty is next due, which run now, their
/// memories (taken by a running pass), and the last figures.
#[derive(Default)]
struct Slot {
    /// `None`: due now.
    next: [Option<Instant>; 4],
    running: [bool; 4],
    reconcile: Option<reconciler::Memory>,
    refunds: Option<RefundLane>,
    emails: Option<EmailLane>,
    sweep: SweepReport,
    lane: LaneReport,
}

impl Slot {
    fn fresh() -> Slot {
        Slot {
            reconcile: Some(Default::default()),
            refunds: Some(Default::default()),
            emails: Some(Default::default()),
            ..Slot::default()
        }
    }

    fn busy(&self) -> bool {
        self.running.iter().any(|r| *r)
    }

    fn due(&self, duty: Duty, now: Instant) -> bool {
        !self.running[duty.index()] && self.next[duty.index()].is_none_or(|at| at <= now)
    }
}

/// A group this node leads, as a scan found it.
struct Led {
    gid: GroupId,
    g: Arc<GroupHandle>,
    /// Its next tick: when, its event and epoch.
    tick: Option<(u64, EventId, Epoch)>,
    /// Asleep with nothing for the payment duties
    /// (`seatfence_payments::nothing_pending`): their passes are skipped
    /// until it wakes.
    quiet: bool,
}

/// What a scan read of a sleeping group, kept for the rest of its nap.
struct Seen {
    nap: u64,
    led: bool,
    tick: Option<(u64, EventId, Epoch)>,
    quiet: bool,
    /// The last scan that found it in the same nap.
    scan: u64,
}

/// The dispatcher of one node (see the module's diagram).
pub struct EventDuties {
    registry: Arc<Registry>,
    proposer: Arc<Proposer>,
    clock: Arc<dyn Clock>,
    /// The payment side (`None`: no reconciler, no outbox on this node).
    payments: Option<Arc<Payments>>,
}

impl EventDuties {
    /// The dispatcher over `registry`'s event groups: ticks through `proposer` at `clock`'s
    /// time; payment passes only with `payments`.
    pub fn new(
        registry: Arc<Registry>,
        proposer: Arc<Proposer>,
        clock: Arc<dyn Clock>,
        payments: Option<Arc<Payments>>,
    ) -> EventDuties {
        EventDuties {
            registry,
            proposer,
            clock,
            payments,
        }
    }

    /// Run until `rx_stop`; passes still running then are aborted (every
    /// step of every duty is a fenced, idempotent command: a new leader, or
    /// this node's next life, takes up where one stopped).
    pub async fn run(self, mut rx_stop: watch::Receiver<bool>) {
        let mut slots: HashMap<GroupId, Slot> = HashMap::new();
        let mut passes: JoinSet<(GroupId, Done)> = JoinSet::new();
        let mut running: HashMap<Id, (GroupId, Duty)> = HashMap::new();
        let mut led: Vec<Led> = Vec::new();
        let mut seen: HashMap<GroupId, Seen> = HashMap::new();
        let mut scans = 0u64;
        let mut next_scan = Instant::now();
        loop {
            let now = Instant::now();
            // Which groups this node leads, and when a tick is due in
            // them, is read every `WAKE_EVERY` only: a wake for a lane's
            // schedule costs no lock of any group.
            let scan = now >= next_scan;
            if scan {
                scans += 1;
                led = self.led(&mut seen, scans);
                next_scan = now + seatfence_raft::timer::real_duration(WAKE_EVERY);
                let ids: HashSet<GroupId> = led.iter().map(|l| l.gid).collect();
                slots.retain(|gid, slot| slot.busy() || ids.contains(gid));
            }
            let mut busy = [0usize; Duty::ALL.len()];
            for (_, duty) in running.values() {
                busy[duty.index()] += 1;
            }
            for l in &led {
                let slot = slots.entry(l.gid).or_insert_with(|| self.fresh_slot());
                if l.quiet {
                    // What a pass of an event with nothing pending reports.
                    slot.sweep = SweepReport::default();
                    slot.lane = LaneReport::default();
                }
                for duty in self.duties() {
                    if (duty == Duty::Tick && !scan)
                        || (duty != Duty::Tick && l.quiet)
                        || busy[duty.index()] >= duty.limit()
                        || !slot.due(duty, now)
                    {
                        continue;
                    }
                    let Some(pass) = self.pass(duty, l, slot) else {
                        continue;
                    };
                    slot.running[duty.index()] = true;
                    busy[duty.index()] += 1;
                    let id = passes.spawn(pass).id();
                    running.insert(id, (l.gid, duty));
                }
            }
            self.set_gauges(&slots);
            let wait = self.wait(&slots, next_scan);
            tokio::select! {
                biased;
                _ = rx_stop.wait_for(|s| *s) => break,
                Some(done) = passes.join_next_with_id(), if !passes.is_empty() => {
                    self.ended(done, &mut slots, &mut running);
                    while let Some(done) = passes.try_join_next_with_id() {
                        self.ended(done, &mut slots, &mut running);
                    }
                }
                _ = seatfence_raft::timer::sleep(wait) => {}
            }
        }
        passes.shutdown().await;
    }

    /// The slot of a group this node just came to lead: its first sweep
    /// one `reconcile_interval_ms` later (as a leader's first sweep always
    /// came: the buyer's own callback goes first), the rest at once.
    fn fresh_slot(&self) -> Slot {
        let mut slot = Slot::fresh();
        if let Some(p) = &self.payments {
            let first = Duration::from_millis(p.config.reconcile_interval_ms);
            slot.next[Duty::Reconcile.index()] =
                Some(Instant::now() + seatfence_raft::timer::real_duration(first));
        }
        slot
    }

    /// The event groups this node leads now, with their next ticks. A
    /// sleeping group is read once per nap (`seen` keeps what was read);
    /// an awake one at every scan.
    fn led(&self, seen: &mut HashMap<GroupId, Seen>, scan: u64) -> Vec<Led> {
        // Under the registry's read lock: only led groups' handles are
        // cloned, and a sleeping group read in this nap costs no lock.
        let led = self.registry.scan(|g| {
            if g.id.is_directory() {
                return None;
            }
            let nap = g.nap();
            let (led, tick, quiet) = match (nap, seen.get_mut(&g.id)) {
                (Some(n), Some(s)) if s.nap == n.seq => {
                    s.scan = scan;
                    (s.led, s.tick.clone(), s.quiet)
                }
                // A sleeping follower cannot lead without waking first.
                (Some(n), _) if !n.as_leader => (false, None, false),
                _ => {
                    let led = g.leads();
                    let (tick, idle) = match led {
                        true => g.read(|s| {
                            let inv = s.state.inventory();
                            let idle = nap.is_some() && seatfence_payments::nothing_pending(inv);
                            (tick::next(inv), idle)
                        }),
                        false => (None, false),
                    };
                    // Only a nap keeps the state as read.
                    let quiet = idle && nap.is_some();
                    if let Some(n) = nap {
                        let (nap, tick) = (n.seq, tick.clone());
                        seen.insert(
                            g.id,
                            Seen {
                                nap,
                                led,
                                tick,
                                quiet,
                                scan,
                            },
                        );
                    }
                    (led, tick, quiet)
                }
            };
            led.then(|| Led {
                gid: g.id,
                g: g.clone(),
                tick,
                quiet,
            })
        });
        seen.retain(|_, s| s.scan == scan);
        led
    }

    /// The duties this node runs (the payment ones only with payments).
    fn duties(&self) -> impl Iterator<Item = Duty> + '_ {
        Duty::ALL
            .into_iter()
            .filter(|d| *d == Duty::Tick || self.payments.is_some())
    }

    /// The pass of `duty` for group `gid`, with the memory it takes from
    /// `slot`; `None` when there is nothing to do (no tick due).
    fn pass(
        &self,
        duty: Duty,
        led: &Led,
        slot: &mut Slot,
    ) -> Option<impl std::future::Future<Output = (GroupId, Done)> + Send + 'static> {
        let now_ms = self.clock.now_ms();
        if duty == Duty::Tick && led.tick.as_ref().is_none_or(|t| t.0 > now_ms) {
            return None;
        }
        let (gid, g) = (led.gid, led.g.clone());
        let proposer = self.proposer.clone();
        let payments = self.payments.clone();
        let job: std::pin::Pin<Box<dyn std::future::Future<Output = Done> + Send>> = match duty {
            Duty::Tick => {
                let (_, event_id, epoch) = led.tick.as_ref().filter(|t| t.0 <= now_ms)?;
                let event = (event_id.clone(), *epoch);
                Box::pin(async move {
                    tick::propose(&proposer, gid, &g, event, now_ms).await;
                    Done::Tick
                })
            }
            Duty::Reconcile => {
                let (p, mut memory) = (payments?, slot.reconcile.take()?);
                Box::pin(async move {
                    let report = reconciler::sweep(&p, gid, &g, &mut memory).await;
                    Done::Reconcile(memory, report)
                })
            }
            Duty::Refunds => {
                let (p, mut lane) = (payments?, slot.refunds.take()?);
                Box::pin(async move {
                    let report = outbox::refunds(&p, gid, &g, &mut lane).await;
                    Done::Refunds(lane, report)
                })
            }
            Duty::Emails => {
                let (p, mut lane) = (payments?, slot.emails.take()?);
                Box::pin(async move {
                    let report = outbox::emails(&p, gid, &g, &mut lane).await;
                    Done::Emails(lane, report)
                })
            }
        };
        Some(async move { (gid, job.await) })
    }

    /// A pass ended: its memory back in its slot, its next time set.
    fn ended(
        &self,
        done: Result<(Id, (GroupId, Done)), tokio::task::JoinError>,
        slots: &mut HashMap<GroupId, Slot>,
        running: &mut HashMap<Id, (GroupId, Duty)>,
    ) {
        let (gid, done) = match done {
            Ok((id, done)) => {
                running.remove(&id);
                done
            }
            Err(e) => {
                // A pass that panicked: its memory is lost, the group's
                // next pass starts over (as a new leader would).
                if let Some((gid, duty)) = running.remove(&e.id()) {
                    tracing::error!(group = gid.0, ?duty, "leader duty failed: {e}");
                    if let Some(slot) = slots.get_mut(&gid) {
                        slot.running[duty.index()] = false;
                        let fresh = Slot::fresh();
                        match duty {
                            Duty::Tick => {}
                            Duty::Reconcile => slot.reconcile = fresh.reconcile,
                            Duty::Refunds => slot.refunds = fresh.refunds,
                            Duty::Emails => slot.emails = fresh.emails,
                        }
                    }
                }
                return;
            }
        };
        let Some(slot) = slots.get_mut(&gid) else {
            return;
        };
        let after = |d: Duration| Some(Instant::now() + seatfence_raft::timer::real_duration(d));
        let duty = match done {
            Done::Tick => Duty::Tick,
            Done::Reconcile(memory, report) => {
                slot.reconcile = Some(memory);
                slot.sweep = report;
                let p = self.payments.as_ref().expect("a sweep has payments");
                slot.next[Duty::Reconcile.index()] =
                    after(Duration::from_millis(p.config.reconcile_interval_ms));
                Duty::Reconcile
            }
            Done::Refunds(lane, report) => {
                slot.refunds = Some(lane);
                slot.lane = report;
                let p = self.payments.as_ref().expect("a lane has payments");
                slot.next[Duty::Refunds.index()] = after(outbox::next_pass(p, report.busy));
                Duty::Refunds
            }
            Done::Emails(lane, report) => {
                slot.emails = Some(lane);
                // The backlog gauge is counted by the refunds lane; what
                // this pass delivered is gone from it now, not at that
                // lane's next pass.
                slot.lane.backlog = slot.lane.backlog.saturating_sub(report.delivered);
                let p = self.payments.as_ref().expect("a lane has payments");
                slot.next[Duty::Emails.index()] = after(outbox::next_pass(p, report.busy));
                Duty::Emails
            }
        };
        slot.running[duty.index()] = false;
    }

    /// How long to sleep (on the node's timer): until the earliest
    /// scheduled pass that is not running or the next scan of the led
    /// groups (ticks are found by reading state), [`MIN_WAKE`] at least, so
    /// many groups' staggered schedules share wakes.
    fn wait(&self, slots: &HashMap<GroupId, Slot>, next_scan: Instant) -> Duration {
        let now = Instant::now();
        let earliest = slots
            .values()
            .flat_map(|slot| {
                Duty::ALL
                    .into_iter()
                    .filter(|d| *d != Duty::Tick && !slot.running[d.index()])
                    .filter_map(|d| slot.next[d.index()])
            })
            .chain([next_scan])
            .min()
            .unwrap_or(next_scan);
        let real = earliest.saturating_duration_since(now).max(MIN_WAKE);
        // `real` is wall time; the timer's rate scales what we sleep.
        let rate = seatfence_raft::timer::rate();
        Duration::from_secs_f64((real.as_secs_f64() * rate).min(60.0)).min(WAKE_EVERY)
    }

    /// The payment gauges, over the groups this node leads (each group's
    /// last pass): sums, and the oldest ages.
    fn set_gauges(&self, slots: &HashMap<GroupId, Slot>) {
        let Some(p) = &self.payments else {
            return;
        };
        let m = &p.metrics;
        let sum = |f: fn(&Slot) -> u64| slots.values().map(f).sum::<u64>() as f64;
        let max = |f: fn(&Slot) -> u64| slots.values().map(f).max().unwrap_or(0) as f64;
        m.reconcile_backlog.set(sum(|s| s.sweep.visits));
        m.unsettled.set(sum(|s| s.sweep.unsettled));
        m.captured_unbooked.set(sum(|s| s.sweep.captured_unbooked));
        m.unknown_payment_age
            .set(max(|s| s.sweep.oldest_unknown_ms) / 1000.0);
        m.outbox_backlog.set(sum(|s| s.lane.backlog));
        m.refund_pending_age
            .set(max(|s| s.lane.refund_age_ms) / 1000.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_due_when_its_time_came_and_nothing_of_it_runs() {
        let now = Instant::now();
        let mut slot = Slot::fresh();
        assert!(
            slot.due(Duty::Refunds, now),
            "a fresh slot's lanes are due at once"
        );
        slot.next[Duty::Refunds.index()] = Some(now + Duration::from_secs(1));
        assert!(!slot.due(Duty::Refunds, now));
        assert!(slot.due(Duty::Refunds, now + Duration::from_secs(1)));
        slot.running[Duty::Emails.index()] = true;
        assert!(!slot.due(Duty::Emails, now), "one pass per group and duty");
        assert!(slot.busy());
    }

    #[test]
    fn every_duty_has_a_limit_and_its_own_place() {
        let places: std::collections::HashSet<usize> =
            Duty::ALL.iter().map(|d| d.index()).collect();
        assert_eq!(places.len(), Duty::ALL.len());
        assert!(Duty::ALL.iter().all(|d| d.limit() >= 1));
        assert_eq!(
            Duty::Reconcile.limit(),
            1,
            "one sweep at a time, as the gateway expects"
        );
    }
}
