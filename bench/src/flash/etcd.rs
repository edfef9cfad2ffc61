//! The flash sale on etcd: one key per taken seat; a hold is one
//! transaction that compares every requested seat key's absence
//! (`create_revision == 0`) and then puts them all, so it is all or none.
//! Durability is etcd's own (every write fsynced to a majority's WAL).
//! Built only with `--features etcd` (the client's build needs `protoc`).

use anyhow::Context;
use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp};

use super::backend::{Counts, HoldAnswer};

pub struct EtcdBackend {
    /// Several connections, used in turn (one HTTP/2 connection per client).
    clients: Vec<Client>,
    next: std::sync::atomic::AtomicUsize,
    prefix: String,
    capacity: u32,
}

impl EtcdBackend {
    pub async fn connect(
        endpoints: &[String],
        conns: usize,
        event: &str,
        capacity: u32,
    ) -> anyhow::Result<EtcdBackend> {
        let mut clients = Vec::new();
        for _ in 0..conns.max(1) {
            clients.push(
                Client::connect(endpoints, None)
                    .await
                    .with_context(|| format!("connect to etcd at {endpoints:?}"))?,
            );
        }
        // A fresh key range per run, as a new event would have.
        let run = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let prefix = format!("seat/{event}/{run}/");
        // Compact what earlier runs left, as etcd's auto-compaction would in
        // production (uncompacted, a second run was ~6× slower).
        let c = &mut clients[0];
        let rev = c
            .get(prefix.clone(), None)
            .await
            .context("read etcd's revision")?
            .header()
            .map(|h| h.revision())
            .unwrap_or(0);
        if rev > 1 {
            c.compact(rev, None).await.context("compact etcd")?;
        }
        Ok(EtcdBackend {
            clients,
            next: Default::default(),
            prefix,
            capacity,
        })
    }

    fn client(&self) -> Client {
        let i = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.clients[i % self.clients.len()].clone()
    }

    pub async fn hold(&self, buyer: u64, attempt: u32, seats: &[u32]) -> HoldAnswer {
        let hold_id = format!("h{buyer}-{attempt}");
        let keys: Vec<String> = seats
            .iter()
            .map(|s| format!("{}{s}", self.prefix))
            .collect();
        let txn = Txn::new()
            .when(
                keys.iter()
                    .map(|k| Compare::create_revision(k.as_str(), CompareOp::Equal, 0))
                    .collect::<Vec<_>>(),
            )
            .and_then(
                keys.iter()
                    .map(|k| TxnOp::put(k.as_str(), hold_id.as_str(), None))
                    .collect::<Vec<_>>(),
            );
        match self.client().txn(txn).await {
            Ok(r) if r.succeeded() => HoldAnswer::Granted(hold_id),
            Ok(_) => HoldAnswer::Conflict,
            Err(_) => HoldAnswer::Error("etcd_error".into()),
        }
    }

    pub async fn counts(&self) -> anyhow::Result<Counts> {
        let r = self
            .client()
            .get(
                self.prefix.clone(),
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
            .await?;
        let held = r.count() as u64;
        Ok(Counts {
            available: u64::from(self.capacity).saturating_sub(held),
            held,
            sold: 0,
        })
    }
}
