//! The flash sale on PostgreSQL, the way a team would build it there: one
//! row per seat, a hold is a conditional `UPDATE … WHERE state =
//! 'available'` in one transaction that commits only when every requested
//! seat was updated (all or none). The statement runs inside a PL/pgSQL
//! function so a hold is one round trip and one transaction; the exception
//! rolls the partial update back. Durability is the server's
//! (`fsync = on`, `synchronous_commit = on`; `bench/compare.sh` sets both).

use std::sync::Mutex;

use anyhow::Context;
use tokio::sync::Semaphore;
use tokio_postgres::{Client, NoTls};

use super::backend::{Counts, HoldAnswer};

pub struct PgBackend {
    /// Idle connections; the semaphore counts them.
    idle: Mutex<Vec<Client>>,
    permits: Semaphore,
    event: String,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS seats (
    event_id text NOT NULL,
    seat_no  int  NOT NULL,
    state    text NOT NULL,
    hold_id  text,
    PRIMARY KEY (event_id, seat_no)
);
CREATE OR REPLACE FUNCTION hold_seats(p_event text, p_seats int[], p_hold text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE n int;
BEGIN
    UPDATE seats SET state = 'held', hold_id = p_hold
     WHERE event_id = p_event AND seat_no = ANY(p_seats) AND state = 'available';
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n <> cardinality(p_seats) THEN
        RAISE EXCEPTION 'seats_unavailable' USING ERRCODE = 'SF409';
    END IF;
END $$;
";

impl PgBackend {
    /// Connect `conns` sessions to `url` and load `capacity` available
    /// seats for `event` (dropping the event's earlier rows).
    pub async fn connect(
        url: &str,
        conns: usize,
        event: &str,
        capacity: u32,
    ) -> anyhow::Result<PgBackend> {
        let mut clients = Vec::new();
        for _ in 0..conns.max(1) {
            let (client, conn) = tokio_postgres::connect(url, NoTls)
                .await
                .with_context(|| format!("connect to PostgreSQL at {url}"))?;
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    eprintln!("postgres connection: {e}");
                }
            });
            clients.push(client);
        }
        let c = &clients[0];
        c.batch_execute(SCHEMA).await.context("create schema")?;
        c.execute("DELETE FROM seats WHERE event_id = $1", &[&event])
            .await?;
        c.execute(
            "INSERT INTO seats (event_id, seat_no, state)
             SELECT $1, g, 'available' FROM generate_series(0, $2 - 1) AS g",
            &[&event, &(capacity as i32)],
        )
        .await
        .context("load seats")?;
        c.batch_execute("VACUUM ANALYZE seats").await?;
        let n = clients.len();
        Ok(PgBackend {
            idle: Mutex::new(clients),
            permits: Semaphore::new(n),
            event: event.to_string(),
        })
    }

    async fn with_client<T>(&self, f: impl AsyncFnOnce(&Client) -> T) -> anyhow::Result<T> {
        let _permit = self.permits.acquire().await?;
        let client = self
            .idle
            .lock()
            .expect("pool lock")
            .pop()
            .context("pool empty")?;
        let out = f(&client).await;
        self.idle.lock().expect("pool lock").push(client);
        Ok(out)
    }

    pub async fn hold(&self, buyer: u64, attempt: u32, seats: &[u32]) -> HoldAnswer {
        let seat_nos: Vec<i32> = seats.iter().map(|&s| s as i32).collect();
        let hold_id = format!("h{buyer}-{attempt}");
        let event = &self.event;
        let r = self
            .with_client(async |c| {
                c.execute(
                    "SELECT hold_seats($1, $2, $3)",
                    &[event, &seat_nos, &hold_id],
                )
                .await
            })
            .await;
        match r {
            Ok(Ok(_)) => HoldAnswer::Granted(hold_id),
            Ok(Err(e)) => match e.code().map(|c| c.code()) {
                // Our refusal, or a deadlock between two holds (retried
                // like a conflict).
                Some("SF409") | Some("40P01") => HoldAnswer::Conflict,
                Some(code) => HoldAnswer::Error(format!("pg_{code}")),
                None => HoldAnswer::Error("transport".into()),
            },
            Err(_) => HoldAnswer::Error("pool".into()),
        }
    }

    pub async fn counts(&self) -> anyhow::Result<Counts> {
        let event = &self.event;
        let row = self
            .with_client(async |c| {
                c.query_one(
                    "SELECT count(*) FILTER (WHERE state = 'available'),
                            count(*) FILTER (WHERE state = 'held'),
                            count(*) FILTER (WHERE state = 'sold')
                       FROM seats WHERE event_id = $1",
                    &[event],
                )
                .await
            })
            .await??;
        let n = |i: usize| row.get::<_, i64>(i) as u64;
        Ok(Counts {
            available: n(0),
            held: n(1),
            sold: n(2),
        })
    }
}
