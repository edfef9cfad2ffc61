//! The buyers' seat map: what a buyer's app shows as free, from what the
//! load generator itself saw granted. Buyers pick among the best free seats
//! (the first `window` seats in seat order that are shown free), so
//! concurrent buyers race for the same seats the way they do on launch day.
//!
//! The map is advisory: a seat shown free may be taken (a concurrent buyer's
//! hold is in flight, a hold has not expired yet), which the system under
//! test refuses with a conflict. Nothing here decides what is sold.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

use rand::Rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seat {
    /// Not shown yet (behind the window).
    Unoffered,
    /// Shown free, at this index of `pool`.
    Pool(u32),
    /// Hidden for a while after a conflict (probably taken by a racing buyer).
    Cooldown,
    /// Granted to one of our buyers (held or sold).
    Taken,
}

pub struct SeatView {
    state: Vec<Seat>,
    pool: Vec<u32>,
    next_unoffered: u32,
    window: usize,
    /// (when, seat, what to do): seats coming back after a cooldown or an
    /// expiry.
    pending: BinaryHeap<Reverse<(Instant, u32, bool)>>,
}

/// What a buyer sees when it looks for `k` seats.
#[derive(Debug, PartialEq, Eq)]
pub enum Pick {
    Seats(Vec<u32>),
    /// Nothing shown free now, but seats will come back (cooldowns, holds
    /// that will expire).
    Wait,
    /// Nothing free and nothing coming back: sold out as far as buyers see.
    SoldOut,
}

impl SeatView {
    pub fn new(capacity: u32, window: usize) -> SeatView {
        SeatView {
            state: vec![Seat::Unoffered; capacity as usize],
            pool: Vec::new(),
            next_unoffered: 0,
            window: window.max(1),
            pending: BinaryHeap::new(),
        }
    }

    fn show(&mut self, seat: u32) {
        self.state[seat as usize] = Seat::Pool(self.pool.len() as u32);
        self.pool.push(seat);
    }

    fn hide(&mut self, seat: u32, to: Seat) {
        if let Seat::Pool(i) = self.state[seat as usize] {
            self.pool.swap_remove(i as usize);
            if let Some(&moved) = self.pool.get(i as usize) {
                self.state[moved as usize] = Seat::Pool(i);
            }
        }
        self.state[seat as usize] = to;
    }

    fn refresh(&mut self, now: Instant) {
        while let Some(Reverse((at, seat, expiry))) = self.pending.peek().copied() {
            if at > now {
                break;
            }
            self.pending.pop();
            let s = self.state[seat as usize];
            // A cooldown ends unless the seat was granted meanwhile; an
            // expiry returns a seat we had taken.
            if (!expiry && s == Seat::Cooldown) || (expiry && s == Seat::Taken) {
                self.show(seat);
            }
        }
        while self.pool.len() < self.window && (self.next_unoffered as usize) < self.state.len() {
            let seat = self.next_unoffered;
            self.next_unoffered += 1;
            if self.state[seat as usize] == Seat::Unoffered {
                self.show(seat);
            }
        }
    }

    /// Up to `k` distinct seats shown free (fewer when fewer are left).
    pub fn pick(&mut self, k: usize, rng: &mut impl Rng, now: Instant) -> Pick {
        self.refresh(now);
        if self.pool.is_empty() {
            return if self.pending.is_empty() {
                Pick::SoldOut
            } else {
                Pick::Wait
            };
        }
        let k = k.min(self.pool.len());
        let mut seats: Vec<u32> = Vec::with_capacity(k);
        while seats.len() < k {
            let s = self.pool[rng.gen_range(0..self.pool.len())];
            if !seats.contains(&s) {
                seats.push(s);
            }
        }
        seats.sort_unstable();
        Pick::Seats(seats)
    }

    /// Our buyer was granted these seats.
    pub fn taken(&mut self, seats: &[u32]) {
        for &s in seats {
            self.hide(s, Seat::Taken);
        }
    }

    /// A hold on these seats was refused (or its outcome is unknown): hide
    /// them until `until`, when they are shown again unless granted.
    pub fn cooldown(&mut self, seats: &[u32], until: Instant) {
        for &s in seats {
            if matches!(self.state[s as usize], Seat::Pool(_) | Seat::Unoffered) {
                self.hide(s, Seat::Cooldown);
                self.pending.push(Reverse((until, s, false)));
            }
        }
    }

    /// Our hold on these seats will lapse: show them again at `at`.
    pub fn release_at(&mut self, seats: &[u32], at: Instant) {
        for &s in seats {
            self.pending.push(Reverse((at, s, true)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use std::time::Duration;

    #[test]
    fn buyers_see_the_best_free_seats_and_sell_out() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let now = Instant::now();
        let mut v = SeatView::new(10, 4);
        let Pick::Seats(first) = v.pick(4, &mut rng, now) else {
            panic!("seats expected")
        };
        assert_eq!(first, vec![0, 1, 2, 3], "the window is the best four seats");
        v.taken(&first);
        v.cooldown(&[4, 5], now + Duration::from_secs(1));
        let Pick::Seats(next) = v.pick(4, &mut rng, now) else {
            panic!("seats expected")
        };
        assert_eq!(next, vec![6, 7, 8, 9], "cooled-down seats are hidden");
        v.taken(&next);
        assert_eq!(v.pick(1, &mut rng, now), Pick::Wait);
        // Seat 4 was granted to someone meanwhile; only 5 comes back.
        v.taken(&[4]);
        assert_eq!(
            v.pick(3, &mut rng, now + Duration::from_secs(2)),
            Pick::Seats(vec![5])
        );
        v.taken(&[5]);
        v.release_at(&[0], now + Duration::from_secs(3));
        assert_eq!(
            v.pick(1, &mut rng, now + Duration::from_secs(2)),
            Pick::Wait
        );
        assert_eq!(
            v.pick(1, &mut rng, now + Duration::from_secs(3)),
            Pick::Seats(vec![0])
        );
        v.taken(&[0]);
        assert_eq!(
            v.pick(1, &mut rng, now + Duration::from_secs(9)),
            Pick::SoldOut
        );
    }
}
