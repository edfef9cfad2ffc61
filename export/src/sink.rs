//! One page of changes into PostgreSQL, in one transaction with the cursor
//! that follows it.
//!
//! ```text
//!  BEGIN
//!    per change: INSERT seatfence_changes (event_id, seq)  ── a change seen twice
//!                                                            is a key violation:
//!                                                            the page is refused
//!                upsert its row (events | bookings + payments [+ refunds]),
//!                only over an older feed_seq
//!    UPDATE seatfence_export SET cursor = next_cursor
//!  COMMIT
//! ```
//!
//! The cursor commits with the rows it covers, so a crash anywhere resumes
//! from the last committed page: no change is applied twice and none is
//! skipped. `feed_seq` (the change's number within its event) makes every
//! upsert idempotent as well: a row is only replaced by a later change.

use anyhow::{bail, Context};
use serde_json::Value;
use tokio_postgres::{Client, Transaction};

/// The stored cursor (`None`: start from the oldest change kept).
pub async fn load_cursor(pg: &Client) -> anyhow::Result<Option<(String, i64)>> {
    Ok(pg
        .query_opt(
            "SELECT cursor, changes FROM seatfence_export WHERE id = 1",
            &[],
        )
        .await?
        .map(|r| (r.get(0), r.get(1))))
}

/// Apply `changes` and store `next_cursor`, atomically.
pub async fn apply_page(
    pg: &mut Client,
    changes: &[Value],
    next_cursor: &str,
) -> anyhow::Result<()> {
    let tx = pg.transaction().await?;
    for c in changes {
        apply(&tx, c)
            .await
            .with_context(|| format!("change {} of {}", c["seq"], c["event_id"]))?;
    }
    tx.execute(
        "INSERT INTO seatfence_export (id, cursor, changes, updated_at) VALUES (1, $1, $2, now())
         ON CONFLICT (id) DO UPDATE
         SET cursor = EXCLUDED.cursor, changes = seatfence_export.changes + $2, updated_at = now()",
        &[&next_cursor, &(changes.len() as i64)],
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

fn text<'a>(v: &'a Value, field: &str) -> anyhow::Result<&'a str> {
    v[field]
        .as_str()
        .with_context(|| format!("{field} is not a string in {v}"))
}

fn int(v: &Value, field: &str) -> anyhow::Result<i64> {
    v[field]
        .as_i64()
        .with_context(|| format!("{field} is not a number in {v}"))
}

async fn apply(tx: &Transaction<'_>, c: &Value) -> anyhow::Result<()> {
    let event_id = text(c, "event_id")?;
    let seq = int(c, "seq")?;
    let kind = text(c, "type")?;
    let at = text(c, "at")?;
    let body = c.to_string();
    tx.execute(
        "INSERT INTO seatfence_changes (event_id, seq, type, at, body)
         VALUES ($1, $2, $3, $4::text::timestamptz, $5::text::jsonb)",
        &[&event_id, &seq, &kind, &at, &body],
    )
    .await
    .context("record the change (a change seen twice is refused here)")?;
    match kind.split('.').next() {
        Some("event") => event(tx, &c["event"], seq, at).await,
        Some("booking") => booking(tx, event_id, &c["booking"], seq, at).await,
        Some("hold") => Ok(()),
        _ => bail!("unknown change type {kind}"),
    }
}

async fn event(tx: &Transaction<'_>, e: &Value, seq: i64, at: &str) -> anyhow::Result<()> {
    let opt = |f: &str| e[f].as_str().map(str::to_string);
    tx.execute(
        "INSERT INTO events (event_id, name, home_region, owner_region, epoch, capacity,
                             price_cents, currency, opens_at, closes_at, sale_forced,
                             created_at, updated_at, feed_seq)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::text::timestamptz, $10::text::timestamptz,
                 $11, $12::text::timestamptz, $12::text::timestamptz, $13)
         ON CONFLICT (event_id) DO UPDATE SET
             name = EXCLUDED.name, owner_region = EXCLUDED.owner_region,
             epoch = EXCLUDED.epoch, opens_at = EXCLUDED.opens_at,
             closes_at = EXCLUDED.closes_at, sale_forced = EXCLUDED.sale_forced,
             updated_at = EXCLUDED.updated_at, feed_seq = EXCLUDED.feed_seq
         WHERE events.feed_seq < EXCLUDED.feed_seq",
        &[
            &text(e, "event_id")?,
            &text(e, "name")?,
            &text(e, "home_region")?,
            &text(e, "owner_region")?,
            &int(e, "epoch")?,
            &int(e, "capacity")?,
            &int(e, "price_cents")?,
            &text(e, "currency")?,
            &opt("opens_at"),
            &opt("closes_at"),
            &opt("sale_forced"),
            &at,
            &seq,
        ],
    )
    .await
    .context("upsert the event")?;
    Ok(())
}

/// What a booking's payment and refund rows share with it, read once.
struct Money<'a> {
    event_id: &'a str,
    booking_id: &'a str,
    payment_id: &'a str,
    status: &'a str,
    amount: i64,
    currency: &'a str,
    seq: i64,
    at: &'a str,
}

/// A booking's row, then its payment's and, once a refund is pending or done, its refund's.
async fn booking(
    tx: &Transaction<'_>,
    event_id: &str,
    b: &Value,
    seq: i64,
    at: &str,
) -> anyhow::Result<()> {
    let status = text(b, "status")?;
    let seats: Vec<String> = b["seats"]
        .as_array()
        .context("seats")?
        .iter()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect();
    let (booking_id, payment_id) = (text(b, "booking_id")?, text(b, "payment_id")?);
    let (amount, currency) = (int(b, "amount_cents")?, text(b, "currency")?);
    tx.execute(
        "INSERT INTO bookings (booking_id, event_id, hold_id, user_id, status, seats, payment_id,
                               amount_cents, currency, created_at, updated_at, feed_seq)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::text::timestamptz,
                 $11::text::timestamptz, $12)
         ON CONFLICT (booking_id) DO UPDATE SET
             status = EXCLUDED.status, updated_at = EXCLUDED.updated_at,
             feed_seq = EXCLUDED.feed_seq
         WHERE bookings.feed_seq < EXCLUDED.feed_seq",
        &[
            &booking_id,
            &event_id,
            &text(b, "hold_id")?,
            &text(b, "user_id")?,
            &status,
            &seats,
            &payment_id,
            &amount,
            &currency,
            &text(b, "created_at")?,
            &text(b, "updated_at")?,
            &seq,
        ],
    )
    .await
    .context("upsert the booking")?;
    let m = Money {
        event_id,
        booking_id,
        payment_id,
        status,
        amount,
        currency,
        seq,
        at,
    };
    payment(tx, b, &m).await?;
    if matches!(status, "refund_pending" | "refunded") {
        refund(tx, b, &m).await?;
    }
    Ok(())
}

/// A booking's payment row: pending until captured; a release before any
/// capture voids it; captured money stays captured (a refund is its own
/// row).
async fn payment(tx: &Transaction<'_>, b: &Value, m: &Money<'_>) -> anyhow::Result<()> {
    let Money {
        event_id,
        booking_id,
        payment_id,
        status,
        amount,
        currency,
        seq,
        at,
    } = *m;
    let captured = b["txn_id"].is_string();
    let pay_status = match (status, captured) {
        ("pending", _) => "pending",
        ("expired", false) => "voided",
        _ => "captured",
    };
    let txn = b["txn_id"].as_str();
    let via = b["confirmed_via"].as_str();
    let captured_at = captured.then_some(at);
    tx.execute(
        "INSERT INTO payments (payment_id, booking_id, event_id, amount_cents, currency, status,
                               txn_id, confirmed_via, captured_at, updated_at, feed_seq)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::text::timestamptz, $10::text::timestamptz, $11)
         ON CONFLICT (payment_id) DO UPDATE SET
             status = EXCLUDED.status, txn_id = EXCLUDED.txn_id,
             confirmed_via = EXCLUDED.confirmed_via,
             captured_at = COALESCE(payments.captured_at, EXCLUDED.captured_at),
             updated_at = EXCLUDED.updated_at, feed_seq = EXCLUDED.feed_seq
         WHERE payments.feed_seq < EXCLUDED.feed_seq",
        &[
            &payment_id,
            &booking_id,
            &event_id,
            &amount,
            &currency,
            &pay_status,
            &txn,
            &via,
            &captured_at,
            &at,
            &seq,
        ],
    )
    .await
    .context("upsert the payment")?;
    Ok(())
}

/// A refunded (or refund-pending) booking's refund row.
async fn refund(tx: &Transaction<'_>, b: &Value, m: &Money<'_>) -> anyhow::Result<()> {
    let Money {
        event_id,
        booking_id,
        payment_id,
        status,
        amount,
        currency,
        seq,
        at,
    } = *m;
    let refund = &b["refund"];
    let reason = refund["reason"]
        .as_str()
        .unwrap_or("captured after the seats were released");
    let refunded_at = (status == "refunded").then_some(at);
    let requested_at = refund["at"].as_str().unwrap_or(at);
    tx.execute(
        "INSERT INTO refunds (booking_id, event_id, payment_id, amount_cents, currency, status,
                              refund_id, reason, requested_by, release_seats, requested_at,
                              refunded_at, feed_seq)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::text::timestamptz,
                 $12::text::timestamptz, $13)
         ON CONFLICT (booking_id) DO UPDATE SET
             status = EXCLUDED.status, refund_id = EXCLUDED.refund_id,
             refunded_at = EXCLUDED.refunded_at, feed_seq = EXCLUDED.feed_seq
         WHERE refunds.feed_seq < EXCLUDED.feed_seq",
        &[
            &booking_id,
            &event_id,
            &payment_id,
            &amount,
            &currency,
            &if status == "refunded" {
                "refunded"
            } else {
                "pending"
            },
            &b["refund_id"].as_str(),
            &reason,
            &refund["by"].as_str(),
            &refund["release_seats"].as_bool(),
            &requested_at,
            &refunded_at,
            &seq,
        ],
    )
    .await
    .context("upsert the refund")?;
    Ok(())
}
