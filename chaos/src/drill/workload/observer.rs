//! The observer: every node's view of who leads which group, polled all
//! along the drill. The leader changes go into the history (for the
//! report and the `coverage` checker); the latest leaders and voters are
//! what the nemesis aims at; how many groups sleep goes to the progress
//! line.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::drill::World;
use crate::history::Entry;

/// Ask every node who leads what, every 200 ms; record each new
/// `(term, leader)` of a group.
pub async fn observer(w: Arc<World>) {
    while w.pause(200).await {
        let asks = w.grpc.iter().map(|(id, addr)| {
            let client = w.client.clone();
            async move {
                let r =
                    tokio::time::timeout(Duration::from_millis(500), client.status_at(addr)).await;
                (*id, r.ok().and_then(Result::ok))
            }
        });
        let mut asleep = 0;
        for (id, status) in futures::future::join_all(asks).await {
            let Some(status) = status else { continue };
            for g in status.groups.iter().filter(|g| g.role == "leader") {
                asleep += usize::from(g.asleep);
                let mut leaders = w.leaders.lock().expect("leaders lock poisoned");
                let newer = leaders.get(&g.group_id).is_none_or(|(term, leader)| {
                    g.term > *term || (g.term == *term && *leader != id)
                });
                if newer {
                    leaders.insert(g.group_id, (g.term, id));
                    drop(leaders);
                    w.rec.push(Entry::Leader {
                        t: 0,
                        group: g.group_id,
                        leader: id,
                        term: g.term,
                    });
                }
                w.voters
                    .lock()
                    .expect("voters lock poisoned")
                    .insert(g.group_id, g.voters.clone());
            }
        }
        w.asleep.store(asleep, Ordering::Relaxed);
        w.asleep_max.fetch_max(asleep, Ordering::Relaxed);
    }
}
