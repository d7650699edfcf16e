//! The claim loop: read new work, take held and lapsed work when due, and
//! wait (blocking on the streams, or woken by the wake channels) until
//! something is claimed or the wait is over. Also the fault points tests
//! use to kill or stall a worker at the worst instant.

use std::time::{Duration, Instant};

use presa_store::{Claim, Shares, StoreError, TaskId, TaskStream};
use tokio::sync::Notify;

use super::Queue;
use super::{CLUSTER_POLL, Entry, MAX_SLICE, Reads, is_nogroup};
use crate::error::RedisStoreError;

impl Queue {
    /// Up to `max` claims for `worker` within `shares`, waiting up to `wait`.
    /// Runs in its own task so that a caller dropping this future (say, a
    /// worker shutting down mid-wait) strands nothing: entries delivered to
    /// a claim nobody receives would otherwise sit until `max_lease`. The
    /// task stops waiting once the caller is gone and releases whatever it
    /// had claimed by then. A worker watches what it runs through the
    /// claimed channels: subscribed before its first claim, so nothing
    /// published after a claim is missed.
    pub(crate) async fn claim_fair(
        &self,
        worker: &str,
        max: usize,
        lease: Duration,
        wait: Duration,
        shares: &Shares,
    ) -> Result<Vec<Claim>, StoreError> {
        if let Err(e) = self.start_watching_claimed().await {
            tracing::warn!(error = %e, "could not watch the claimed channels; runs re-read their tasks on a timer");
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let queue = self.clone();
        let worker = worker.to_owned();
        let shares = shares.clone();
        tokio::spawn(async move {
            let who = Claimant { worker: &worker, lease };
            // Boxed: inline, `claim_until`'s large future made this task's
            // future as large, and spawning copies it whole (about 63,000
            // instructions of `memcpy` a claim, all of it for a claim of one
            // task); boxed, the spawn moves a few pointers.
            let result = Box::pin(queue.claim_until(who, max, wait, &shares, &|| tx.is_closed())).await;
            if let Err(Ok(claims)) = tx.send(result) {
                for claim in claims {
                    if let Err(e) = queue.release(&claim).await {
                        tracing::warn!(error = %e, "could not release an unreceived claim");
                    }
                }
            }
        });
        rx.await.map_err(|_| StoreError::Unavailable("claim task stopped".into()))?.map_err(StoreError::from)
    }

    /// Subscribe the claimed channels, once (see [`Claimed`](crate::claimed::Claimed)).
    async fn start_watching_claimed(&self) -> Result<(), RedisStoreError> {
        self.state.claimed.start(&self.link.hub, &self.link.keys).await
    }

    /// What the holder of a claim on task `id` watches: its claimed channel.
    pub(crate) async fn watch_claimed(&self, id: &TaskId) -> Result<TaskStream, RedisStoreError> {
        self.start_watching_claimed().await?;
        Ok(self.state.claimed.watch(id))
    }

    /// Up to `max` claims for `worker` (see the module docs), waiting up to
    /// `wait` for work; `caller_gone` ends the wait early.
    async fn claim_until(
        &self,
        who: Claimant<'_>,
        max: usize,
        wait: Duration,
        shares: &Shares,
        caller_gone: &(dyn Fn() -> bool + Send + Sync),
    ) -> Result<Vec<Claim>, RedisStoreError> {
        let Claimant { worker, lease } = who;
        let mut out = Vec::new();
        let mut shares = shares.clone();
        if max == 0 {
            return Ok(out);
        }
        let deadline = Instant::now() + wait;
        let wake = self.link.topology.wakeups(&self.link.keys, &self.link.hub).await;
        // An earlier claim's read delivered work and drained the streams: wait
        // from its cursors instead of reading again first (anything added
        // since wakes the wait at once). An idle worker then reads once per
        // task, not twice.
        let drained_at = self.state.reader.take_drained();
        // What the last wait saw: the partitions it woke on, and the cursors
        // it waited from (the next read looks at those partitions only).
        let mut woke = None;
        // (Lapsed leases are looked for after the wait, as after any wait.)
        if let Some(cursors) = drained_at
            && !wait.is_zero()
        {
            let slice = wait.min(self.slice_before_due());
            woke = self.wait_new(&cursors, slice).await?.map(|parts| (parts, cursors));
        }
        loop {
            // Registered before looking, so a wake-up while we look is kept.
            let mut woken = std::pin::pin!(wake.as_deref().map(Notify::notified));
            if let Some(n) = woken.as_mut().as_pin_mut() {
                n.enable();
            }
            // Work put off that came due joins the streams first (read next).
            if self.state.delayed.due()
                && let Err(e) = self.promote().await
                && !is_nogroup(&e)
            {
                tracing::warn!(error = %e, "queueing due delayed work failed; a later claim does it");
            }
            let (fresh, cursors) = match self.read_new(worker, max - out.len(), lease, woke.take()).await {
                // The groups were lost (e.g. Redis restarted empty): make them again.
                Err(e) if is_nogroup(&e) => {
                    self.ensure_groups().await?;
                    self.read_new(worker, max - out.len(), lease, None).await?
                }
                other => other?,
            };
            fault_point(Fault::AfterRead, &fresh).await;
            if !fresh.is_empty() && !cursors.is_empty() {
                self.state.reader.keep_drained(&cursors);
            }
            self.take(who, fresh, max, &mut shares, &mut out).await?;
            self.take_held_and_lapsed(who, max, &mut shares, &mut out).await?;
            let now = Instant::now();
            if !out.is_empty() || now >= deadline || caller_gone() {
                return Ok(out);
            }
            let slice = (deadline - now).min(self.slice_before_due());
            if self.reads == Reads::PerPartition {
                // One XREADGROUP cannot block on streams of several slots:
                // sleep until a partition's wake channel pings (or poll).
                match woken.as_mut().as_pin_mut() {
                    Some(n) => {
                        let _ = tokio::time::timeout(slice, n).await;
                    }
                    None => tokio::time::sleep(slice.min(CLUSTER_POLL)).await,
                }
                continue;
            }
            // No cursors: the read was full but every entry was dropped
            // (tasks gone): read again at once.
            if !cursors.is_empty() {
                woke = self.wait_new(&cursors, slice).await?.map(|parts| (parts, cursors));
            }
        }
    }

    /// Work held for fair shares that may go to this claim now, then work
    /// whose lease lapsed, each when its turn is due, claimed into `out` up to `max`.
    async fn take_held_and_lapsed(
        &self,
        who: Claimant<'_>,
        max: usize,
        shares: &mut Shares,
        out: &mut Vec<Claim>,
    ) -> Result<(), RedisStoreError> {
        let Claimant { worker, lease } = who;
        if out.len() < max && self.state.recovery.unhold_due() {
            let held = match self.unhold(worker, max - out.len(), lease, shares).await {
                Err(e) if is_nogroup(&e) => Vec::new(),
                Err(e) => {
                    tracing::warn!(error = %e, "taking held work failed; it is taken later");
                    Vec::new()
                }
                Ok(held) => held,
            };
            self.take(who, held, max, shares, out).await?;
        }
        if out.len() < max && self.state.recovery.recovery_due(lease) {
            let lapsed = match self.recover(worker, max - out.len(), lease).await {
                Err(e) if is_nogroup(&e) => {
                    self.ensure_groups().await?;
                    Vec::new()
                }
                // Never lose what this call already claimed.
                Err(e) if !out.is_empty() => {
                    tracing::warn!(error = %e, "recovery failed; returning the new work");
                    Vec::new()
                }
                other => other?,
            };
            fault_point(Fault::AfterRecover, &lapsed).await;
            self.take(who, lapsed, max, shares, out).await?;
        }
        Ok(())
    }
}

impl Queue {
    /// The longest a claim waits in one go: [`MAX_SLICE`], or less, to wake
    /// when the earliest due delayed work this store knows of comes due.
    fn slice_before_due(&self) -> Duration {
        let due = self.state.delayed.until_next().unwrap_or(MAX_SLICE);
        MAX_SLICE.min(due.max(Duration::from_millis(1)))
    }
}

/// Who claims, and for how long: what every step of one claim passes on.
#[derive(Debug, Clone, Copy)]
pub(super) struct Claimant<'a> {
    /// The consumer the entries are delivered to.
    pub(super) worker: &'a str,
    /// The lease each claim gets.
    pub(super) lease: Duration,
}

/// Where a test injects a fault (`PRESA_FAULT`): right after new entries
/// were delivered to this process (`…-after-read`), or after it took over
/// lapsed entries (`…-after-recover`), before `claim.lua` runs: the worst
/// instant for the recovery bound. `exit-after-read` exits the process
/// (code 86); `stall-after-read:<ms>` stalls the claim that long first (a
/// GC pause). Unset in production.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    AfterRead,
    AfterRecover,
}

async fn fault_point(at: Fault, delivered: &[Entry]) {
    static FAULT: std::sync::LazyLock<Option<(Fault, Option<Duration>)>> = std::sync::LazyLock::new(|| {
        let spec = std::env::var("PRESA_FAULT").ok()?;
        let (what, ms) = spec.split_once(':').map_or((spec.as_str(), None), |(w, ms)| (w, ms.parse().ok()));
        let (action, place) = what.split_once("-after-")?;
        let at = match place {
            "read" => Fault::AfterRead,
            "recover" => Fault::AfterRecover,
            _ => return None,
        };
        match action {
            "exit" => Some((at, None)),
            "stall" => Some((at, Some(Duration::from_millis(ms.unwrap_or(1000))))),
            _ => None,
        }
    });
    let Some((fault, stall)) = *FAULT else { return };
    if fault != at || delivered.is_empty() {
        return;
    }
    match stall {
        Some(pause) => {
            tracing::warn!(?at, ?pause, entries = delivered.len(), "PRESA_FAULT: stalling before the claim");
            tokio::time::sleep(pause).await;
        }
        None => {
            tracing::error!(?at, entries = delivered.len(), "PRESA_FAULT: exiting before the claim");
            std::process::exit(86);
        }
    }
}
