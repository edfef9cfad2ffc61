//! A replica that joins a group as a learner does not campaign until its
//! log has reached the present.
//!
//! A group keeps one log across ownership moves, and a node may come back
//! to a group it was a voter of before: its replica was retired and its
//! data dropped when the group moved away, and the move back adds it as a
//! learner with an empty log. It then replays the group's log from the
//! start (or from a snapshot), and while it replays the part from before it
//! was removed, openraft's effective membership (the last one in its log,
//! committed or not) makes it a voter of that old configuration. When every
//! node of that old configuration is such a replayer (a move back to a
//! region adds all three at once) and their catch-up stalls, they elect a
//! leader among themselves on the old log and commit on it: a second leader
//! of the group, and what the real one acknowledged is lost. The chaos
//! drill found it (seed 1, a move back to the event's first region under a
//! paused leader); openraft's own check then caught the two histories as a
//! panic on the next append.
//!
//! Raft assumes a server keeps its state under its id; a node reusing its
//! id with an empty log breaks that. So a replica opened as the target of a
//! move or repair is *joining*: openraft's election switch stays off (it
//! still votes, and a leadership transfer to it still works) until
//! - its log stores an entry in which it is a learner (or it installs a
//!   snapshot with such a membership): every membership after that entry
//!   is the present one, or
//! - the directory lists it as a voter of the group: the move or repair
//!   finished, so the new configuration was committed, by a majority that
//!   holds the present log and would refuse a replayer's vote.
//!
//! The mark is stored with the group (meta `joining`), written before the
//! replica's first entry and removed after the entry that ends it, so a
//! restart in the middle of a catch-up keeps it.
//!
//! A *rejoin* mark is stronger: a node that came back under its id on an
//! empty data dir (`seatfence node --rejoin-empty`) is still a voter of its
//! groups' configurations, with no log and no memory of its votes. Its
//! replicas refuse every vote, pre-vote and leadership transfer (so the
//! forgotten log elects nobody; the voter counts as down) and never
//! campaign, whatever membership they store, until the directory records
//! that the group took the node back: demoted to a learner, caught up, made
//! a voter again by a caught-up majority (a `Rejoin` repair), or removed.
//! Then the mark becomes an ordinary joining mark, which the directory's
//! listing ends. Acknowledging appends stays allowed: an acknowledgement
//! is of entries this replica has just stored and flushed.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

use openraft::Membership;
use seatfence_core::GroupId;
use tokio::sync::watch;

use crate::storage::NodeDb;

/// Whether one replica is still joining; shared by its log store, state
/// machine and handle.
pub struct Joining {
    group: GroupId,
    node: u64,
    db: NodeDb,
    on: AtomicBool,
    /// A rejoin's mark: votes are refused too, and only the directory ends
    /// it (`end_rejoin`).
    rejoin: AtomicBool,
    tx: watch::Sender<bool>,
}

impl Joining {
    pub(crate) fn new(db: NodeDb, group: GroupId, node: u64, on: bool, rejoin: bool) -> Joining {
        let on = on || rejoin;
        Joining {
            group,
            node,
            db,
            on: AtomicBool::new(on),
            rejoin: AtomicBool::new(rejoin),
            tx: watch::Sender::new(on),
        }
    }

    /// Whether the replica must not campaign yet.
    pub fn is_on(&self) -> bool {
        self.on.load(SeqCst)
    }

    /// Whether the replica must refuse votes, pre-votes and leadership
    /// transfers: its node rejoined on an empty data dir and the group has
    /// not taken it back yet.
    pub fn refuses_votes(&self) -> bool {
        self.rejoin.load(SeqCst)
    }

    /// Make this replica a rejoining one (its node was just admitted under
    /// `--rejoin-empty`, before it serves any Raft message): stored, then
    /// in force. The caller turns elections off.
    pub(crate) fn begin_rejoin(&self) -> std::io::Result<()> {
        self.db.set_rejoin_mark(self.group)?;
        self.rejoin.store(true, SeqCst);
        self.on.store(true, SeqCst);
        self.tx.send_replace(true);
        Ok(())
    }

    /// The directory records that the group took this node back (or let
    /// it go): votes are answered again, and what is left is an ordinary
    /// joining mark, which the directory's listing of the node as a voter
    /// ends.
    pub fn end_rejoin(&self, why: &str) {
        if !self.rejoin.load(SeqCst) {
            return;
        }
        if let Err(e) = self.db.set_joining(self.group, true) {
            tracing::warn!(group = self.group.0, "downgrade the rejoin mark: {e}");
            return;
        }
        self.rejoin.store(false, SeqCst);
        tracing::info!(group = self.group.0, "rejoined: {why}");
    }

    /// A membership the replica just stored (a log entry, after it is
    /// written, or an installed snapshot's): it ends the joining if it
    /// lists this node as a learner (not a rejoin's: the log it replays
    /// may list it as a learner from before it was wiped).
    pub(crate) fn note_membership(&self, m: &Membership<u64, openraft::BasicNode>) {
        if self.is_on() && m.learner_ids().any(|id| id == self.node) {
            self.end("stored the membership that made it a learner");
        }
    }

    /// End the joining (idempotent; nothing while a rejoin's mark holds):
    /// the mark goes from storage, then elections may start (the
    /// registry's task watching it turns them on).
    pub fn end(&self, why: &str) {
        if self.refuses_votes() {
            return;
        }
        if !self.on.swap(false, SeqCst) {
            return;
        }
        if let Err(e) = self.db.set_joining(self.group, false) {
            tracing::warn!(group = self.group.0, "clear the joining mark: {e}");
        }
        tracing::info!(group = self.group.0, "joined: {why}");
        self.tx.send_replace(false);
    }

    /// Watches the joining: `true` until it ends. Holds no reference to
    /// it, so a waiter of a replica dropped while joining just stops.
    pub(crate) fn subscribe(&self) -> watch::Receiver<bool> {
        self.tx.subscribe()
    }
}
