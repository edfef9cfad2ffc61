//! The linearizability checker against small histories: good ones pass
//! (quickly, even with many concurrent ops), each planted violation is
//! caught.

use super::check;
use crate::check::fixtures::{finals, good_dump, run, run_with_wall_clock, Done, H};
use crate::check::{Input, Status, Verdict};
use crate::history::Call;

fn verdict(h: &H) -> Verdict {
    let run = run();
    let hist = h.history();
    let finals = finals(vec![good_dump()]);
    check(&Input::new(&run, &hist, &finals))
}

#[test]
fn concurrent_holds_one_winner_pass() {
    let mut h = H::default();
    h.hold("c1", "S1", 0.0, 0.2, Some("h5-1"));
    h.hold("c2", "S1", 0.1, 0.3, None);
    // The loser's 409 may come before the winner's 201.
    h.hold("c3", "S1", 0.05, 0.06, None);
    h.hold("c4", "S1", 0.01, 0.3, None);
    let v = verdict(&h);
    // c3's 409 completed at 0.06 while only c1 could have taken the seat
    // (invoked at 0.0): fine, c1 may have linearized first.
    assert_eq!(v.status, Status::Pass, "{v:?}");
}

#[test]
fn planted_double_hold_is_caught() {
    let mut h = H::default();
    h.hold("c1", "S1", 0.0, 0.1, Some("h5-1"));
    // Two seconds later, well inside the 4 s TTL, another buyer gets it.
    let bad = h.hold("c2", "S1", 2.0, 2.1, Some("h5-2"));
    let v = verdict(&h);
    assert_eq!(v.status, Status::Fail, "{v:?}");
    assert!(v.violations[0].ops.contains(&bad), "{v:?}");
}

#[test]
fn hold_after_expiry_passes_and_after_cancel_passes() {
    let mut h = H::default();
    h.hold("c1", "S1", 0.0, 0.1, Some("h5-1"));
    h.hold("c2", "S1", 5.0, 5.1, Some("h5-2"));
    h.cancel("c2", "h5-2", 5.5, 5.6, "released");
    h.hold("c3", "S1", 5.7, 5.8, Some("h5-3"));
    assert_eq!(verdict(&h).status, Status::Pass);
}

#[test]
fn cancel_of_a_lapsed_hold_answers_expired() {
    let run_with = |status: &str| {
        let mut h = H::default();
        h.hold("c1", "S1", 0.0, 0.1, Some("h5-1"));
        // After the TTL someone else holds the seat; then c1 cancels.
        h.hold("c2", "S1", 5.0, 5.1, Some("h5-2"));
        let cancel = h.cancel("c1", "h5-1", 5.5, 5.6, status);
        (verdict(&h), cancel)
    };
    // The hold had lapsed: the cancel says so, and changes nothing.
    assert_eq!(run_with("expired").0.status, Status::Pass);
    // A cancel that claims to have released a seat someone else holds.
    let (v, cancel) = run_with("released");
    assert_eq!(v.status, Status::Fail, "{v:?}");
    assert!(v.violations[0].ops.contains(&cancel), "{v:?}");
}

#[test]
fn abandoned_payment_may_free_the_seat_early() {
    let run_with = |abandon: bool| {
        let mut h = H::default();
        h.hold("c1", "S1", 0.0, 0.1, Some("h5-1"));
        h.book(0.2);
        h.booking_status(0.4, 0.5, Some(abandon), "pending");
        // Long before the 4 s TTL, someone else gets the seat.
        h.hold("c2", "S1", 1.0, 1.1, Some("h5-2"));
        verdict(&h).status
    };
    // The reconciler releases a cancelled payment at once: fine.
    assert_eq!(run_with(true), Status::Pass);
    // A payment nobody cancelled holds its seat until the deadline.
    assert_eq!(run_with(false), Status::Fail);
}

#[test]
fn phantom_unavailable_is_caught() {
    let mut h = H::default();
    // Nobody ever held S2, yet a lone hold was refused.
    let bad = h.hold("c1", "S2", 1.0, 1.1, None);
    let v = verdict(&h);
    assert_eq!(v.status, Status::Fail, "{v:?}");
    assert_eq!(v.violations[0].ops, vec![bad]);
}

#[test]
fn unknown_hold_may_or_may_not_have_happened() {
    // It happened: explains the later 409.
    let mut h = H::default();
    h.op(
        "c1",
        Call::Hold {
            event: "e".into(),
            seats: vec!["S1".into()],
            edge: "n1".into(),
        },
        0.0,
        0.5,
        Done::Info,
    );
    h.hold("c2", "S1", 1.0, 1.1, None);
    assert_eq!(verdict(&h).status, Status::Pass);
    // It did not: a later 201 is fine too.
    let mut h = H::default();
    h.op(
        "c1",
        Call::Hold {
            event: "e".into(),
            seats: vec!["S1".into()],
            edge: "n1".into(),
        },
        0.0,
        0.5,
        Done::Info,
    );
    h.hold("c2", "S1", 1.0, 1.1, Some("h5-9"));
    assert_eq!(verdict(&h).status, Status::Pass);
}

#[test]
fn sold_seat_held_again_is_caught() {
    let mut h = H::default();
    h.hold("c1", "S1", 0.0, 0.1, Some("h5-1"));
    h.book(0.2);
    h.booking_status(0.4, 0.6, Some(false), "confirmed");
    // Long after the TTL: a sold seat never comes back.
    let bad = h.hold("c2", "S1", 30.0, 30.1, Some("h5-7"));
    let v = verdict(&h);
    assert_eq!(v.status, Status::Fail, "{v:?}");
    assert!(v.violations[0].ops.contains(&bad), "{v:?}");
}

#[test]
fn confirmed_then_read_pending_is_caught() {
    let mut h = H::default();
    h.hold("c1", "S1", 0.0, 0.1, Some("h5-1"));
    h.book(0.2);
    h.booking_status(0.5, 0.6, Some(false), "confirmed");
    let bad = h.booking_status(1.0, 1.1, None, "pending");
    let v = verdict(&h);
    assert_eq!(v.status, Status::Fail, "{v:?}");
    assert!(v.violations[0].ops.contains(&bad), "{v:?}");
}

#[test]
fn many_concurrent_ops_stay_fast() {
    // 16 clients hammering one seat for 60 s of history: the search
    // must finish (memoization), and pass.
    let mut h = H::default();
    let mut t = 0.0;
    let mut seq = 0;
    while t < 60.0 {
        seq += 1;
        let name = format!("h5-{seq}");
        h.hold("w", "S1", t, t + 0.05, Some(&name));
        for c in 0..15 {
            let t0 = t + 0.01 * c as f64;
            h.hold(&format!("c{c}"), "S1", t0, t0 + 0.08, None);
        }
        h.cancel("w", &name, t + 0.2, t + 0.25, "released");
        t += 0.3;
    }
    assert_eq!(verdict(&h).status, Status::Pass);
}

/// A hold's own `expires_at` decides when it may lapse: freed a second
/// early with no clock ahead is caught (the TTL-and-slack model, 2.5 s of
/// slack with the drill's 1.5 s skews, let it pass), and passes while a
/// clock ran 1.5 s ahead.
#[test]
fn a_hold_freed_before_its_own_expiry_is_caught() {
    let verdict_of = |skew: Option<i64>| {
        let mut run = run_with_wall_clock();
        let mut h = H::default();
        h.hold_until("c1", "S1", (0.0, 0.1), "h5-1", 4.0);
        if let Some(ms) = skew {
            h.clock_skew(&mut run, 0, ms, 1.0, 3.5);
        }
        let bad = h.hold("c2", "S1", 3.0, 3.1, Some("h5-2"));
        let hist = h.history();
        let finals = finals(vec![good_dump()]);
        (check(&Input::new(&run, &hist, &finals)), bad)
    };
    let (v, bad) = verdict_of(None);
    assert_eq!(v.status, Status::Fail, "{v:?}");
    assert!(v.violations[0].ops.contains(&bad), "{v:?}");
    // A clock behind frees nothing early.
    assert_eq!(verdict_of(Some(-1_500)).0.status, Status::Fail);
    assert_eq!(verdict_of(Some(1_500)).0.status, Status::Pass);

    // At its own expiry (less the tolerance), it may lapse.
    let run = run_with_wall_clock();
    let mut h = H::default();
    h.hold_until("c1", "S1", (0.0, 0.1), "h5-1", 4.0);
    h.hold("c2", "S1", 3.8, 3.9, Some("h5-2"));
    let hist = h.history();
    let finals = finals(vec![good_dump()]);
    assert_eq!(
        check(&Input::new(&run, &hist, &finals)).status,
        Status::Pass
    );
}
