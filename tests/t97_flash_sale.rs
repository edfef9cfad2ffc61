//! Smoke test of `seatfence bench flash-sale`: a small launch day (400
//! seats, 1,500 buyers in a burst, half of them paying, holds lapsing after
//! 2 s, late arrivals after) through the real binary, on a local 3-node
//! region with the mock gateway. Asserts what a buyer and the box office
//! would check, not a speed: every seat sold exactly once, nothing
//! oversold, the counters equal the records and the clients' confirmed
//! bookings, one capture per confirmed booking.

use std::process::Command;

use serde_json::Value;

#[test]
fn t97_flash_sale_sells_out_exactly() {
    let out = Command::new(env!("CARGO_BIN_EXE_seatfence"))
        .args([
            "bench",
            "flash-sale",
            "--seats",
            "400",
            "--buyers",
            "1500",
            "--inflight",
            "32",
            "--hold-ttl",
            "2",
            "--late-rate",
            "300",
            "--duration",
            "90",
            "--seed",
            "7",
            "--json",
        ])
        .output()
        .expect("run seatfence bench flash-sale");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "flash-sale failed: {}\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    let r: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!("--json did not print one JSON object ({e}): {stdout}\nstderr: {stderr}")
    });
    for field in [
        "holds_per_sec",
        "p99_ms",
        "capacity",
        "sold",
        "oversold",
        "counters_match",
    ] {
        assert!(r.get(field).is_some(), "--json lacks {field}: {r}");
    }
    assert_eq!(r["capacity"], 400, "{r}");
    assert_eq!(r["sold"], 400, "every seat sold, no more: {r}");
    assert_eq!(r["oversold"], false, "{r}");
    assert_eq!(r["counters_match"], true, "{r}");
    assert_eq!(r["sold_out"], true, "{r}");
    assert_eq!(r["held"], 0, "no seat left held once sold out: {r}");
    let run = &r["run"];
    assert_eq!(
        r["captures"], run["bookings_confirmed"],
        "one capture per confirmed booking: {r}"
    );
    assert_eq!(run["confirmed_seats"], 400, "{r}");
    assert!(
        run["granted_seats"].as_u64().unwrap() > 400,
        "some holds lapsed and their seats were sold again: {r}"
    );
    assert!(r["holds_per_sec"].as_f64().unwrap() > 0.0, "{r}");
    assert_eq!(
        run["errors"].as_object().map(|e| e.len()),
        Some(0),
        "no request failed: {r}"
    );
}
