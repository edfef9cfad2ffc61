//! The sink's tables, created and migrated by the exporter itself.
//!
//! Each migration runs once, in its own transaction, and is recorded in
//! `seatfence_migrations` in that transaction, so a crash leaves either
//! all of a migration or none of it; a transaction-level advisory lock
//! keeps two exporters from migrating at once. Append new migrations; never
//! edit one that shipped.

use anyhow::Context;
use tokio_postgres::Client;

/// Held by the exporter for its whole run: one writer per database.
pub const RUN_LOCK: i64 = 0x5ea7_f3e0;
const MIGRATE_LOCK: i64 = 0x5ea7_f3e1;

/// `(version, name, SQL)`, in order.
pub const MIGRATIONS: &[(i32, &str, &str)] = &[(
    1,
    "tables for events, bookings, payments, refunds, the change log and the cursor",
    r#"
CREATE TABLE events (
    event_id     text PRIMARY KEY,
    name         text NOT NULL,
    home_region  text NOT NULL,
    owner_region text NOT NULL,
    epoch        bigint NOT NULL,
    capacity     bigint NOT NULL,
    price_cents  bigint NOT NULL,
    currency     text NOT NULL,
    opens_at     timestamptz,
    closes_at    timestamptz,
    sale_forced  text,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    feed_seq     bigint NOT NULL
);
CREATE TABLE bookings (
    booking_id   text PRIMARY KEY,
    event_id     text NOT NULL,
    hold_id      text NOT NULL,
    user_id      text NOT NULL,
    status       text NOT NULL,
    seats        text[] NOT NULL,
    payment_id   text NOT NULL,
    amount_cents bigint NOT NULL,
    currency     text NOT NULL,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    feed_seq     bigint NOT NULL
);
CREATE INDEX bookings_event ON bookings (event_id, status);
CREATE TABLE payments (
    payment_id    text PRIMARY KEY,
    booking_id    text NOT NULL,
    event_id      text NOT NULL,
    amount_cents  bigint NOT NULL,
    currency      text NOT NULL,
    status        text NOT NULL,
    txn_id        text,
    confirmed_via text,
    captured_at   timestamptz,
    updated_at    timestamptz NOT NULL,
    feed_seq      bigint NOT NULL
);
CREATE TABLE refunds (
    booking_id    text PRIMARY KEY,
    event_id      text NOT NULL,
    payment_id    text NOT NULL,
    amount_cents  bigint NOT NULL,
    currency      text NOT NULL,
    status        text NOT NULL,
    refund_id     text,
    reason        text NOT NULL,
    requested_by  text,
    release_seats boolean,
    requested_at  timestamptz NOT NULL,
    refunded_at   timestamptz,
    feed_seq      bigint NOT NULL
);
CREATE TABLE seatfence_changes (
    event_id text NOT NULL,
    seq      bigint NOT NULL,
    type     text NOT NULL,
    at       timestamptz NOT NULL,
    body     jsonb NOT NULL,
    PRIMARY KEY (event_id, seq)
);
CREATE TABLE seatfence_export (
    id         smallint PRIMARY KEY CHECK (id = 1),
    cursor     text NOT NULL,
    changes    bigint NOT NULL,
    updated_at timestamptz NOT NULL
);
"#,
)];

/// Bring the database to the newest schema; returns the version.
pub async fn migrate(pg: &mut Client) -> anyhow::Result<i32> {
    pg.batch_execute(
        "CREATE TABLE IF NOT EXISTS seatfence_migrations (
            version    integer PRIMARY KEY,
            name       text NOT NULL,
            applied_at timestamptz NOT NULL DEFAULT now()
        )",
    )
    .await
    .context("create seatfence_migrations")?;
    let mut version = 0;
    for (v, name, sql) in MIGRATIONS {
        let tx = pg.transaction().await?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATE_LOCK])
            .await?;
        let done = tx
            .query_opt(
                "SELECT 1 FROM seatfence_migrations WHERE version = $1",
                &[v],
            )
            .await?
            .is_some();
        if !done {
            tx.batch_execute(sql)
                .await
                .with_context(|| format!("migration {v} ({name})"))?;
            tx.execute(
                "INSERT INTO seatfence_migrations (version, name) VALUES ($1, $2)",
                &[v, name],
            )
            .await?;
            tracing::info!(version = v, "migrated: {name}");
        }
        tx.commit().await?;
        version = *v;
    }
    Ok(version)
}
