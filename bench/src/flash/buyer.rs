//! One buyer of a flash-sale run: what it wants (from its seeded RNG),
//! picking seats from the map once a request slot is free, holding them
//! (the same request again on an error, other seats on a conflict), then
//! booking and paying or letting the hold lapse.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::SemaphorePermit;

use super::backend::HoldAnswer;
use super::view::Pick;
use super::{Run, Tick};

/// One buyer: pick seats, hold (retrying the same request on an error,
/// other seats on a conflict), then book and pay or walk away.
pub(super) async fn buyer(run: Arc<Run>, i: u64, arrival: Instant, late: bool) {
    run.arrived.fetch_add(1, Ordering::Relaxed);
    let mut b = Buyer::new(&run, i, arrival, late);
    for attempt in 0..run.w.max_attempts.max(1) {
        let Some((seats, permit)) = b.pick_seats(&run).await else {
            return;
        };
        // Latency from the burst buyer's arrival (open loop: queueing for a
        // request slot counts); for a retry, a buyer who waited for seats or
        // a late arrival (many of them rush at the same returned seats, a
        // queue of the load generator's making), from the request's start.
        let t0 = if attempt == 0 && !late && !b.waited {
            arrival
        } else {
            Instant::now()
        };
        let answer = hold(&run, i, attempt, &seats).await;
        drop(permit);
        let latency_us = t0.elapsed().as_micros() as u64;
        let now = Instant::now();
        match answer {
            HoldAnswer::Granted(hold_id) => {
                run.answered(latency_us, true);
                after_grant(&run, i, &seats, hold_id, b.book).await;
                return;
            }
            HoldAnswer::Conflict => {
                run.answered(latency_us, false);
                run.conflicts.fetch_add(1, Ordering::Relaxed);
                run.view
                    .lock()
                    .expect("view lock")
                    .cooldown(&seats, now + Duration::from_millis(300));
            }
            HoldAnswer::Error(_) => {
                // Unknown outcome: the seats may be held until the hold lapses.
                run.view
                    .lock()
                    .expect("view lock")
                    .cooldown(&seats, now + run.w.hold_ttl + Duration::from_secs(1));
            }
        }
    }
    run.turned_away.fetch_add(1, Ordering::Relaxed);
}

/// What one buyer wants, drawn from an RNG seeded with `(seed, i)`, and
/// how it has fared.
struct Buyer {
    rng: StdRng,
    /// Seats wanted, 1–4.
    k: usize,
    /// Books and pays once it holds seats.
    book: bool,
    /// Until when it keeps refreshing a seat map with nothing free.
    wait_until: Instant,
    /// It has refreshed a seat map with nothing free.
    waited: bool,
}

impl Buyer {
    /// Buyer `i` of `run`, arrived at `arrival` (`late`: after the burst).
    fn new(run: &Run, i: u64, arrival: Instant, late: bool) -> Buyer {
        let mut rng = StdRng::seed_from_u64(run.w.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i);
        let k = rng.gen_range(1..=4usize);
        let share = run.w.book_share.clamp(0.0, 1.0);
        let book = run.payer.is_some() && (late || rng.gen_bool(share));
        // How long a buyer keeps refreshing a seat map with nothing free: late
        // arrivals came for the seats that lapsed holds give back; the burst's
        // buyers leave (holds only: they wait out the short conflict cooldowns,
        // so the run sells out).
        let wait_until = arrival
            + if late {
                run.w.hold_ttl + Duration::from_secs(2)
            } else if run.payer.is_none() {
                Duration::from_secs(1)
            } else {
                Duration::ZERO
            };
        Buyer {
            rng,
            k,
            book,
            wait_until,
            waited: false,
        }
    }

    /// Wait for a request slot, then pick seats from the map as it is then
    /// (picking first and queueing after would send stale picks): the seats
    /// and the slot. `None` when the run is over, or when nothing is free
    /// and the buyer gives up waiting (it is turned away).
    async fn pick_seats<'a>(&mut self, run: &'a Run) -> Option<(Vec<u32>, SemaphorePermit<'a>)> {
        loop {
            if run.over() {
                return None;
            }
            let permit = run.limiter.acquire().await.expect("limiter open");
            let now = Instant::now();
            let pick = run
                .view
                .lock()
                .expect("view lock")
                .pick(self.k, &mut self.rng, now);
            match pick {
                Pick::Seats(s) => return Some((s, permit)),
                // The seat map shows nothing free yet, but seats will come
                // back: buyers refresh it for a while.
                Pick::Wait if now < self.wait_until => {
                    drop(permit);
                    self.waited = true;
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Pick::Wait | Pick::SoldOut => {
                    run.turned_away.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
            }
        }
    }
}

/// Ask the backend to hold `seats` for buyer `i`: on an error (recorded),
/// the same request again, 3 tries at most and none once the run is over.
async fn hold(run: &Run, i: u64, attempt: u32, seats: &[u32]) -> HoldAnswer {
    let mut answer = HoldAnswer::Error("none".into());
    for _ in 0..3 {
        answer = run.backend.hold(i, attempt, seats).await;
        match &answer {
            HoldAnswer::Error(code) => run.record(Tick::Error(code.clone())),
            _ => break,
        }
        if run.over() {
            break;
        }
    }
    answer
}

/// Buyer `i` was granted `hold_id` on `seats`: count the seats taken;
/// then, when it books, pay (the seats are sold). With bookings, a hold
/// not paid for lapses: the seats come back to the map after it.
async fn after_grant(run: &Run, i: u64, seats: &[u32], hold_id: String, book: bool) {
    run.view.lock().expect("view lock").taken(seats);
    run.granted_holds.fetch_add(1, Ordering::Relaxed);
    let granted = run
        .granted_seats
        .fetch_add(seats.len() as u64, Ordering::Relaxed)
        + seats.len() as u64;
    run.note_granted(granted);
    run.check_sold_out();
    let paid = match (&run.payer, book) {
        (Some(pay), true) => match pay(i, hold_id).await {
            Ok(()) => true,
            Err(e) => {
                if run.booking_errors.fetch_add(1, Ordering::Relaxed) < 3 {
                    eprintln!("flash sale: booking failed: {e:#}");
                }
                false
            }
        },
        _ => false,
    };
    if paid {
        run.bookings.fetch_add(1, Ordering::Relaxed);
        run.confirmed_seats
            .fetch_add(seats.len() as u64, Ordering::Relaxed);
        run.record(Tick::Sold(seats.len() as u64));
        run.check_sold_out();
    } else if run.payer.is_some() {
        // The hold lapses; buyers see the seats again after it.
        let back = Instant::now() + run.w.hold_ttl + Duration::from_millis(500);
        run.view.lock().expect("view lock").release_at(seats, back);
    }
}
