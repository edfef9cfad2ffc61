//! A node back on an empty data dir (`--rejoin-empty`): its store
//! incarnation, and each replica refusing votes until its group took the
//! node back (the directory's rejoin record).

use seatfence_core::GroupId;

use super::{watch_joining, Registry};

impl Registry {
    /// Record this data dir's admitted store incarnation (see
    /// [`Registry::rejoin_settled`]).
    pub fn set_incarnation(&self, incarnation: u64) {
        self.incarnation
            .store(incarnation, std::sync::atomic::Ordering::SeqCst);
    }

    /// This node is rejoining under `--rejoin-empty` (just admitted, or
    /// restarted before every group took it back), before it serves any
    /// Raft message: mark it rejoining (flushed), and every replica already
    /// open that has no mark and whose group has not taken it back (group
    /// 0's, on a new data dir) with a rejoin mark, elections off; replicas
    /// opened later on new storage get one at open (see
    /// [`joining`](crate::joining)).
    pub async fn begin_rejoin(&self, incarnation: u64) -> anyhow::Result<()> {
        self.set_incarnation(incarnation);
        self.db.set_rejoining(true).await?;
        // At every start while rejoining: a crash between the admission
        // and the marks left an open replica (group 0's) unmarked. A group
        // the directory says took the node back keeps its own state.
        for h in self.all().into_values() {
            if h.joining.refuses_votes() || self.rejoin_settled(h.id) {
                continue;
            }
            h.joining.begin_rejoin()?;
            h.raft.runtime_config().elect(false);
            watch_joining(&h);
        }
        self.db.flush().await?;
        Ok(())
    }

    /// The term from which `id`'s rejoining replica here may take appends
    /// (see [`Rejoin::floors`](seatfence_core::Rejoin)); `None`: not yet.
    pub fn rejoin_floor(&self, id: GroupId) -> Option<u64> {
        let mine = self.incarnation.load(std::sync::atomic::Ordering::SeqCst);
        self.view(|d| d.rejoin_floor(self.node_id, mine, id))
            .flatten()
    }

    /// Whether this node's directory replica records that `id` took this
    /// node back after its rejoin on an empty data dir (a rejoin record of
    /// this data dir's incarnation that no longer lists `id` as pending).
    /// A replica that has not heard of the rejoin yet says no.
    pub fn rejoin_settled(&self, id: GroupId) -> bool {
        let mine = self.incarnation.load(std::sync::atomic::Ordering::SeqCst);
        self.view(|d| d.rejoin_settled(self.node_id, mine, id))
            .unwrap_or(false)
    }

    /// Follow the directory for a rejoining node: each replica whose group
    /// took it back answers votes again (and its ordinary joining mark
    /// ends once the directory lists it as a voter), and once none is
    /// pending the node-wide mark goes. Called on each directory change.
    pub async fn follow_rejoin(&self) {
        if !self.db.is_rejoining().unwrap_or(false) {
            return;
        }
        let mut all_settled = true;
        for h in self.all().into_values() {
            if !h.joining.refuses_votes() {
                continue;
            }
            if self.rejoin_settled(h.id) {
                h.joining
                    .end_rejoin("the directory records the group took it back");
                if h.id.is_directory() || self.directory_voter(h.id) {
                    h.joining.end("the directory lists it as a voter");
                }
            } else {
                all_settled = false;
            }
        }
        let me = seatfence_core::NodeId(self.node_id);
        let mine = self.incarnation.load(std::sync::atomic::Ordering::SeqCst);
        let none_pending = self.get(GroupId::DIRECTORY).is_some_and(|dir| {
            dir.sm.read(|s| {
                s.state
                    .directory()
                    .rejoins
                    .get(&me)
                    .is_some_and(|r| r.incarnation == mine && r.pending.is_empty())
            })
        });
        if all_settled && none_pending {
            match self.db.set_rejoining(false).await {
                Ok(()) => tracing::info!(
                    node = self.node_id,
                    "rejoined every group: this node votes again everywhere"
                ),
                Err(e) => tracing::warn!("clear the rejoin mark: {e}"),
            }
        }
    }
}
