//! The node's timer base: every timer of the node (openraft's election
//! timeouts, heartbeats and leader lease through [`TimerRuntime`], and the
//! node's own ticks through [`sleep`]) runs on one clock whose rate a drill
//! can change ([`set_rate`]): at rate 2 every timeout passes twice as fast
//! as on the wall, at 0.5 half as fast: a node whose oscillator drifts.
//!
//! The timer clock is continuous and monotonic: a rate change re-anchors it
//! at its current reading, so an instant taken before the change stays in
//! the past. Until a rate is set it *is* tokio's clock (no lock, no
//! arithmetic). The state machine's wall clock (`clock.rs`, which stamps
//! hold expiries) is separate and skewed separately.

use std::future::Future;
use std::ops::{Add, AddAssign, Sub, SubAssign};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;
use std::time::Duration;

use openraft::{AsyncRuntime, OptionalSend, TokioRuntime};
use tokio::time::Instant;

/// The slowest and fastest rates a drill may set.
pub const RATE_MIN: f64 = 0.1;
/// The fastest rate a drill may set.
pub const RATE_MAX: f64 = 10.0;

/// Whether a rate was ever set (then [`ANCHOR`] maps real to timer time).
static SKEWED: AtomicBool = AtomicBool::new(false);
static ANCHOR: RwLock<Option<Anchor>> = RwLock::new(None);

/// Timer time `virt` was real time `real`; since then it runs at `rate`.
#[derive(Clone, Copy, Debug)]
struct Anchor {
    real: Instant,
    virt: Instant,
    rate: f64,
}

impl Anchor {
    fn virt_at(&self, real: Instant) -> Instant {
        self.virt + real.saturating_duration_since(self.real).mul_f64(self.rate)
    }

    /// The real instant at which the timer clock reads `virt` (now or
    /// earlier for a time already past).
    fn real_at(&self, virt: Instant) -> Instant {
        self.real + virt.saturating_duration_since(self.virt).div_f64(self.rate)
    }
}

fn anchor() -> Option<Anchor> {
    if !SKEWED.load(Ordering::Acquire) {
        return None;
    }
    *ANCHOR.read().unwrap_or_else(|e| e.into_inner())
}

/// Run this process's timers at `rate` times the wall clock's speed
/// (clamped to [`RATE_MIN`]..=[`RATE_MAX`]; 1 is normal).
pub fn set_rate(rate: f64) {
    let rate = if rate.is_finite() {
        rate.clamp(RATE_MIN, RATE_MAX)
    } else {
        1.0
    };
    let mut a = ANCHOR.write().unwrap_or_else(|e| e.into_inner());
    let real = Instant::now();
    let virt = a.map_or(real, |a| a.virt_at(real));
    *a = Some(Anchor { real, virt, rate });
    SKEWED.store(true, Ordering::Release);
}

/// The timers' rate (1 unless a drill set another).
pub fn rate() -> f64 {
    anchor().map_or(1.0, |a| a.rate)
}

/// The wall time `d` of timer time takes now.
pub fn real_duration(d: Duration) -> Duration {
    match anchor() {
        None => d,
        Some(a) => d.div_f64(a.rate),
    }
}

/// Sleep for `d` of timer time (the node's own periodic work: hold expiry
/// ticks, payment sweeps, liveness pings).
pub fn sleep(d: Duration) -> tokio::time::Sleep {
    tokio::time::sleep(real_duration(d))
}

/// An instant of the timer clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TimerInstant(Instant);

impl TimerInstant {
    /// The real instant at which the timer clock reads `self`.
    fn real(self) -> Instant {
        match anchor() {
            None => self.0,
            Some(a) => a.real_at(self.0),
        }
    }
}

impl openraft::Instant for TimerInstant {
    fn now() -> Self {
        let real = Instant::now();
        TimerInstant(match anchor() {
            None => real,
            Some(a) => a.virt_at(real),
        })
    }
}

impl Add<Duration> for TimerInstant {
    type Output = Self;
    fn add(self, d: Duration) -> Self {
        TimerInstant(self.0 + d)
    }
}

impl AddAssign<Duration> for TimerInstant {
    fn add_assign(&mut self, d: Duration) {
        self.0 += d;
    }
}

impl Sub<Duration> for TimerInstant {
    type Output = Self;
    fn sub(self, d: Duration) -> Self {
        TimerInstant(self.0 - d)
    }
}

impl Sub<TimerInstant> for TimerInstant {
    type Output = Duration;
    fn sub(self, earlier: TimerInstant) -> Duration {
        self.0.saturating_duration_since(earlier.0)
    }
}

impl SubAssign<Duration> for TimerInstant {
    fn sub_assign(&mut self, d: Duration) {
        self.0 -= d;
    }
}

/// openraft's tokio runtime with its clock and sleeps on the timer clock.
#[derive(Debug)]
pub struct TimerRuntime(TokioRuntime);

impl AsyncRuntime for TimerRuntime {
    type JoinError = <TokioRuntime as AsyncRuntime>::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::JoinHandle<T>;
    type Sleep = tokio::time::Sleep;
    type Instant = TimerInstant;
    type TimeoutError = tokio::time::error::Elapsed;
    type Timeout<R, T: Future<Output = R> + OptionalSend> = tokio::time::Timeout<T>;
    type ThreadLocalRng = <TokioRuntime as AsyncRuntime>::ThreadLocalRng;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        TokioRuntime::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        tokio::time::sleep_until(deadline.real())
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(
        duration: Duration,
        future: F,
    ) -> Self::Timeout<R, F> {
        tokio::time::timeout(real_duration(duration), future)
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        tokio::time::timeout_at(deadline.real(), future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        TokioRuntime::is_panic(join_error)
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        TokioRuntime::thread_rng()
    }

    type Mpsc = <TokioRuntime as AsyncRuntime>::Mpsc;
    type Watch = <TokioRuntime as AsyncRuntime>::Watch;
    type Oneshot = <TokioRuntime as AsyncRuntime>::Oneshot;
    type Mutex<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::Mutex<T>;

    fn new(threads: usize) -> Self {
        TimerRuntime(TokioRuntime::new(threads))
    }

    fn block_on<F, T>(&mut self, future: F) -> T
    where
        F: Future<Output = T>,
    {
        self.0.block_on(future)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::Instant as _;

    /// One test: the rate is process-wide.
    #[tokio::test(start_paused = true)]
    async fn the_timer_clock_runs_at_its_rate_and_never_jumps() {
        let t0 = TimerInstant::now();
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(TimerInstant::now() - t0, Duration::from_secs(1));

        set_rate(2.0);
        let t1 = TimerInstant::now();
        assert_eq!(t1 - t0, Duration::from_secs(1), "no jump at a rate change");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(TimerInstant::now() - t1, Duration::from_secs(2));
        assert_eq!(
            real_duration(Duration::from_millis(800)),
            Duration::from_millis(400)
        );

        // A deadline 800 ms of timer time away passes after 400 ms of wall time.
        let deadline = TimerInstant::now() + Duration::from_millis(800);
        let start = Instant::now();
        TimerRuntime::sleep_until(deadline).await;
        assert_eq!(Instant::now() - start, Duration::from_millis(400));

        set_rate(0.5);
        let t2 = TimerInstant::now();
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(TimerInstant::now() - t2, Duration::from_secs(1));
        let start = Instant::now();
        sleep(Duration::from_millis(100)).await;
        assert_eq!(Instant::now() - start, Duration::from_millis(200));

        set_rate(f64::NAN);
        assert_eq!(rate(), 1.0);
        set_rate(1000.0);
        assert_eq!(rate(), RATE_MAX);
        set_rate(1.0);
    }
}
