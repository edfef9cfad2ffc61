//! The move coordinator (DESIGN §6): drives every running ownership move,
//! one step at a time, on whichever node leads the directory.
//!
//! ```text
//!  directory apply / 1 s tick ─▶ leading group 0? ─▶ moves running or
//!  aborted-not-cleaned ─▶ one task per move:
//!     read the move from the local directory replica (the leader's)
//!     ─▶ perform its step at the event group's leader (idempotent)
//!     ─▶ Advance{from: step} (compare-and-set in the directory)
//! ```
//!
//! Nothing is remembered outside the directory except the start time of a
//! leader transfer (for the write-pause figure): a coordinator killed at any
//! point is replaced by the next directory leader, which repeats the step
//! the directory records. Repeating a step is harmless: learners already
//! present are not added again, a membership already in place is not
//! changed, a transfer to a target already leading is skipped, and a
//! repeated epoch bump is refused by the state machine as stale (which
//! names the bumped epoch, so the coordinator knows it happened).

use std::sync::Arc;
use std::time::Duration;

use seatfence_core::inventory::{EventAction, EventCommand, Outcome};
use seatfence_core::{Command, Epoch, GroupId, MoveOp, MoveRecord, RegionId, Response};
use seatfence_raft::membership::{MembershipOp, MembershipStatus};
use seatfence_raft::metrics::METRICS;
use seatfence_raft::registry::Registry;
use seatfence_regions::transfer::{self, TransferError};
use tokio::sync::watch;
use tokio::time::Instant;

/// How long one catch-up check watches a lagging learner for it to reach
/// the leader's last index as of the check's start.
const KEEP_PACE_WAIT: Duration = Duration::from_secs(2);

use super::{Context, Driven, Drives, Next};

mod plan;
pub use plan::{pending, plan_step, MoveAction};

/// The move coordinator: drives each pending move step by step while this node leads the
/// directory.
pub struct Coordinator(Context);

impl std::ops::Deref for Coordinator {
    type Target = Context;
    fn deref(&self) -> &Context {
        &self.0
    }
}

/// Run the coordinator of this node until `rx_stop`; it acts only while
/// the node leads the directory.
pub async fn run(context: Context, rx_stop: watch::Receiver<bool>) {
    Arc::new(Coordinator(context)).run(rx_stop).await
}

impl Driven for Coordinator {
    type Key = u64;
    type Item = MoveRecord;
    /// When the write pause started (the membership change, or the first
    /// leader transfer of this drive): for the pause's figure.
    type State = Option<Instant>;
    const KIND: &'static str = "move";

    fn registry(&self) -> &Registry {
        &self.registry
    }

    fn step_delay_ms(&self) -> u64 {
        self.config.step_delay_ms
    }

    fn item(&self, id: u64) -> Option<MoveRecord> {
        self.read_directory(|d| d.moves.get(&id).cloned())
    }

    fn step_name(m: &MoveRecord) -> &'static str {
        m.step.name()
    }

    /// Only a running move lingers (an aborted one is cleaned up at once).
    fn lingers(m: &MoveRecord) -> bool {
        m.is_running()
    }

    async fn step(
        &self,
        m: &MoveRecord,
        transfer_started: &mut Option<Instant>,
    ) -> anyhow::Result<Next> {
        self.perform(m, transfer_started).await
    }
}

impl Coordinator {
    async fn run(self: Arc<Self>, mut rx_stop: watch::Receiver<bool>) {
        let Some(dir) = self.registry.get(GroupId::DIRECTORY) else {
            return;
        };
        let mut rx_applied = dir.subscribe_applied();
        let mut drives = Drives::new(self.clone());
        loop {
            if dir.leads() {
                let pending = dir.read(|s| plan::pending(s.state.directory()));
                drives.start(pending, &rx_stop);
            }
            tokio::select! {
                biased;
                _ = rx_stop.wait_for(|s| *s) => break,
                changed = rx_applied.changed() => if changed.is_err() { break },
                // Leadership may arrive without a new apply.
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
        drives.join().await;
    }

    /// Perform `m`'s current step once (what `plan::plan_step` says it
    /// asks for), then record it in the directory (`Advance`) unless it
    /// must be tried again. `transfer_started`: when the write pause
    /// started (the membership change, or the first leader transfer of
    /// this task).
    async fn perform(
        &self,
        m: &MoveRecord,
        transfer_started: &mut Option<Instant>,
    ) -> anyhow::Result<Next> {
        let pause_ms = match self.read_directory(|d| plan::plan_step(d, m)) {
            MoveAction::CleanUp { group, learners } => {
                self.membership(group, MembershipOp::RemoveLearners(learners))
                    .await?;
                self.directory(MoveOp::Cleaned { move_id: m.move_id })
                    .await?;
                tracing::info!(move_id = m.move_id, "aborted move cleaned up");
                return Ok(Next::Finished);
            }
            MoveAction::AddLearners { group, learners } => {
                if !self.add_learners(m, group, learners).await? {
                    return Ok(Next::Again);
                }
                None
            }
            MoveAction::SetVoters { group, voters } => {
                self.change_membership(group, voters, transfer_started)
                    .await?;
                None
            }
            MoveAction::TransferInto { group, to, avoid } => {
                let started = *transfer_started.get_or_insert_with(Instant::now);
                if !self.transfer_into(group, &to, &avoid).await? {
                    return Ok(Next::Again);
                }
                tracing::info!(
                    move_id = m.move_id,
                    waited_ms = started.elapsed().as_millis() as u64,
                    "leader in the target region"
                );
                None
            }
            MoveAction::BumpEpoch { to, owner } => {
                self.bump_epoch(m, to, owner).await?;
                transfer_started.map(|t| t.elapsed().as_millis() as u64)
            }
            MoveAction::Finish { epoch } => {
                self.update_directory(m, epoch).await?;
                return Ok(Next::Finished);
            }
            MoveAction::Nothing => return Ok(Next::Finished),
        };
        self.advance(m, pause_ms).await
    }

    /// Step 2: `learners` are added (those present already are not added
    /// again). `true` once all of them have caught up; else `false` after
    /// a short wait.
    async fn add_learners(
        &self,
        m: &MoveRecord,
        group: GroupId,
        learners: Vec<(u64, String)>,
    ) -> anyhow::Result<bool> {
        let ids: Vec<u64> = learners.iter().map(|(id, _)| *id).collect();
        let st = self
            .membership(group, MembershipOp::AddLearners(learners))
            .await?;
        let slack = self.config.catch_up_slack;
        let mut lagging: Vec<u64> = ids
            .into_iter()
            .filter(|id| !st.caught_up(*id, slack))
            .collect();
        // Under steady writes a far learner is always a round trip's worth
        // of entries behind the leader's last index, which can exceed any
        // fixed slack (200 ms at 1,000 holds/s is 200 entries): it also
        // counts once it holds everything the leader had when this check
        // began, which shows it keeps pace.
        let target = st.last_log_index;
        let deadline = Instant::now() + KEEP_PACE_WAIT;
        while !lagging.is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let st = self.membership(group, MembershipOp::Status).await?;
            lagging.retain(|id| {
                !st.caught_up(*id, slack) && st.matched.get(id).is_none_or(|m| *m < target)
            });
        }
        if !lagging.is_empty() {
            tracing::debug!(move_id = m.move_id, ?lagging, "learners catching up");
            return Ok(false);
        }
        Ok(true)
    }

    /// Step 3: the group's voters become `to` (a membership already in
    /// place is not changed). The write pause starts once the change is
    /// made (`transfer_started`); an error unless the voters are exactly
    /// `to`, out of the joint configuration.
    async fn change_membership(
        &self,
        group: GroupId,
        to: Vec<u64>,
        transfer_started: &mut Option<Instant>,
    ) -> anyhow::Result<()> {
        let st = self
            .membership(group, MembershipOp::SetVoters(to.clone()))
            .await?;
        // The old leader hands over as soon as the change commits:
        // the write pause starts here.
        *transfer_started = Some(Instant::now());
        let mut voters = st.voters.clone();
        voters.sort_unstable();
        let mut want = to;
        want.sort_unstable();
        anyhow::ensure!(
            voters == want && !st.joint,
            "voters are {voters:?} (joint: {}), want {want:?}",
            st.joint
        );
        Ok(())
    }

    /// Step 6: the directory records the new epoch and owner, which
    /// finishes the move; its duration and write pause go to the metrics.
    async fn update_directory(&self, m: &MoveRecord, epoch: Epoch) -> anyhow::Result<()> {
        let done = self
            .directory(MoveOp::Finish {
                move_id: m.move_id,
                epoch,
            })
            .await?;
        let duration = done.duration_ms();
        METRICS.move_completed(duration, done.pause_ms.unwrap_or(0));
        tracing::info!(
            move_id = m.move_id,
            event = %m.event_id,
            to = %m.to_region,
            duration_ms = duration,
            pause_ms = ?done.pause_ms,
            "move done"
        );
        Ok(())
    }

    /// Record in the directory that `m`'s step is done (`Advance` from it,
    /// with the write pause once it is known). Losing that compare-and-set
    /// to another coordinator or an abort is no error: the move is read
    /// again either way.
    async fn advance(&self, m: &MoveRecord, pause_ms: Option<u64>) -> anyhow::Result<Next> {
        let advanced = seatfence_regions::ops::propose_move(
            &self.client,
            self.clock.now_ms(),
            MoveOp::Advance {
                move_id: m.move_id,
                from: m.step,
                pause_ms,
            },
        )
        .await?;
        match advanced {
            Ok(next) => tracing::info!(move_id = m.move_id, step = next.step.name(), "move step"),
            // Another coordinator (or an abort) got there first: re-read.
            Err(r) if r.code == "step_mismatch" => {}
            Err(r) => anyhow::bail!("{}: {}", r.code, r.message),
        }
        Ok(Next::Again)
    }

    /// Step 4: make one of `to` (target voters in the target region) the
    /// leader, none of `avoid`. `true` once one leads.
    async fn transfer_into(
        &self,
        group: GroupId,
        to: &[u64],
        avoid: &[u64],
    ) -> anyhow::Result<bool> {
        // A failed transfer can leave the group leaderless for an election
        // timeout: wait a while, then the step is tried again.
        let wait = Duration::from_secs(3);
        match transfer::transfer_leader(
            &self.client,
            group,
            to,
            avoid,
            self.config.catch_up_slack,
            wait,
        )
        .await
        {
            Ok(_) => Ok(true),
            Err(TransferError::TimedOut { .. } | TransferError::LeaderChanged { .. }) => Ok(false),
            Err(TransferError::NotCaughtUp { .. }) => {
                anyhow::bail!("no caught-up target voter to lead yet")
            }
            Err(TransferError::Avoided { .. }) => {
                anyhow::bail!("every target voter is drained; undrain one to finish the move")
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Step 5: the group's leader (in the target region) commits the new
    /// epoch. A repeat after success is refused as stale, naming it.
    async fn bump_epoch(
        &self,
        m: &MoveRecord,
        next: Epoch,
        new_owner: RegionId,
    ) -> anyhow::Result<()> {
        let cmd = Command::event(EventCommand {
            event_id: m.event_id.clone(),
            epoch: m.from_epoch,
            now_ms: 0,
            idempotency: None,
            action: EventAction::BumpEpoch {
                epoch: next,
                owner: new_owner.clone(),
            },
        });
        let out = self.client.write(m.group, &cmd).await?;
        match out.response {
            Response::Event(r) => match r.outcome {
                Outcome::EpochBumped { .. } => Ok(()),
                Outcome::StaleEpoch { current, owner } if current >= next => {
                    anyhow::ensure!(
                        current > next || owner == new_owner,
                        "epoch {current} is owned by {owner}, not {new_owner}"
                    );
                    Ok(())
                }
                other => anyhow::bail!("epoch bump refused: {other:?}"),
            },
            other => anyhow::bail!("group {} answered {other}", m.group),
        }
    }

    async fn membership(
        &self,
        group: GroupId,
        op: MembershipOp,
    ) -> anyhow::Result<MembershipStatus> {
        Ok(self.client.membership(group, &op).await?)
    }

    async fn directory(&self, op: MoveOp) -> anyhow::Result<MoveRecord> {
        seatfence_regions::ops::propose_move(&self.client, self.clock.now_ms(), op)
            .await?
            .map_err(|r| anyhow::anyhow!("{}: {}", r.code, r.message))
    }

    fn read_directory<T>(&self, f: impl FnOnce(&seatfence_core::Directory) -> T) -> T {
        let dir = self
            .registry
            .get(GroupId::DIRECTORY)
            .expect("every node hosts the directory");
        dir.read(|s| f(s.state.directory()))
    }
}
