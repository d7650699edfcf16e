//! Taking over work nobody is running: entries whose lease lapsed
//! (`recover.lua`: `XAUTOCLAIM` past `max_lease`) and held entries of scopes
//! that have room again (`unhold.lua`). [`Recovery`] keeps when each last
//! ran, so a store looks at most every so often, whichever claim gets there
//! first, and at once again while a look finds a backlog. Each partition's
//! sweep for lapsed leases goes on from a cursor kept in Redis
//! (`Keys::recovery`), so a look costs what it takes, not what is pending.

use std::{
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
    time::{Duration, Instant},
};

use futures::future::join_all;
use presa_store::Shares;
use redis::Value;

use super::Queue;
use super::{Entry, delivered, flat_entries};
use crate::{
    error::RedisStoreError,
    keys::{GROUP, held_consumer},
};

/// How often claims with room look for held work (`unhold.lua`): the most a
/// scope's held work waits for a worker with room, beyond its next claim.
const UNHOLD_EVERY: Duration = Duration::from_millis(200);

/// When this store last looked for lapsed leases and for held work.
#[derive(Debug)]
pub(crate) struct Recovery {
    /// When this store was opened.
    born: Instant,
    /// When this store last looked for lapsed leases (`recover.lua`), ms
    /// after `born` (0: never); see [`Recovery::recovery_due`].
    last_recovery_ms: AtomicU64,
    /// Whether the last look took as many lapsed entries as it asked for:
    /// more are likely waiting, so the next claim looks again at once.
    backlog: AtomicBool,
    /// Seeds the jitter of the looks' period (random per store).
    seed: u64,
    /// When a claim last looked for held work (`unhold.lua`), in ms after
    /// `born` (0: never).
    last_unhold_ms: AtomicU64,
}

impl Default for Recovery {
    fn default() -> Self {
        use std::hash::{BuildHasher, Hasher};
        let seed = std::collections::hash_map::RandomState::new().build_hasher().finish();
        Recovery {
            born: Instant::now(),
            last_recovery_ms: AtomicU64::new(0),
            backlog: AtomicBool::new(false),
            seed,
            last_unhold_ms: AtomicU64::new(0),
        }
    }
}

impl Recovery {
    /// Whether a claim should look for lapsed leases now: at most once per
    /// `lease / 8` (and at least once a second) per store, whichever claim
    /// gets there first, that period jittered down by up to a quarter so
    /// workers started together do not sweep together. An entry lapses a
    /// whole lease after it was claimed or renewed, so looking more often
    /// recovers nothing sooner than that bound, while each look runs
    /// `XAUTOCLAIM` on every partition: done on every claim, it cost 48
    /// stream commands a task at low load. After a look that took all it
    /// asked for (a backlog of stranded work, say after a mass worker loss)
    /// the next claim looks again at once: recovery then runs as fast as
    /// the workers have room, not one claim's worth a period.
    pub(super) fn recovery_due(&self, lease: Duration) -> bool {
        let every = (lease / 8).min(Duration::from_secs(1));
        if self.backlog.swap(false, Ordering::Relaxed) {
            let now = (self.born.elapsed().as_millis() as u64).max(1);
            self.last_recovery_ms.store(now, Ordering::Relaxed);
            return true;
        }
        let last = self.last_recovery_ms.load(Ordering::Relaxed);
        let quarter = (every.as_millis() as u64 / 4).max(1);
        let jitter = Duration::from_millis(self.seed.wrapping_add(last).wrapping_mul(0x9E37_79B9_7F4A_7C15) % quarter);
        due(&self.last_recovery_ms, &self.born, every - jitter)
    }

    /// A look for lapsed leases asked for `asked` entries and took `took`.
    pub(super) fn swept(&self, asked: usize, took: usize) {
        self.backlog.store(asked > 0 && took >= asked, Ordering::Relaxed);
    }

    /// Whether a claim with room should look for held work now (at most
    /// every [`UNHOLD_EVERY`] per store).
    pub(super) fn unhold_due(&self) -> bool {
        due(&self.last_unhold_ms, &self.born, UNHOLD_EVERY)
    }
}

impl Queue {
    /// Up to `count` entries whose lease lapsed (idle for at least H),
    /// taken with `recover.lua` (recoverable again one `lease` later if
    /// never claimed).
    pub(super) async fn recover(
        &self,
        worker: &str,
        count: usize,
        lease: Duration,
    ) -> Result<Vec<Entry>, RedisStoreError> {
        let min_idle = self.link.cfg.max_lease.as_millis() as u64;
        let idle = self.lease_idle(lease);
        let found = self
            .over_partitions(&super::RECOVER, Cursors::Kept, |inv| {
                inv.arg(GROUP).arg(worker).arg(min_idle).arg(count).arg(idle);
            })
            .await?;
        self.state.recovery.swept(count, found.len());
        Ok(found)
    }

    /// Up to `count` held entries (`unhold.lua`) of scopes `shares` has room
    /// for (the held consumers of full scopes are skipped in Redis).
    pub(super) async fn unhold(
        &self,
        worker: &str,
        count: usize,
        lease: Duration,
        shares: &Shares,
    ) -> Result<Vec<Entry>, RedisStoreError> {
        let idle = self.lease_idle(lease);
        let per = shares.cap().unwrap_or(count).min(count);
        let rotation = self.state.reader.rotation();
        let skip: Vec<String> = shares.full().map(held_consumer).collect();
        // Consumers of workers gone for good are dropped once idle past H.
        let stale = self.link.cfg.max_lease.as_millis() as u64;
        self.over_partitions(&super::UNHOLD, Cursors::None, |inv| {
            inv.arg(GROUP).arg(worker).arg(count).arg(idle).arg(per).arg(rotation).arg(stale);
            for name in &skip {
                inv.arg(name);
            }
        })
        .await
    }

    /// Run a script that returns delivered entries (`recover.lua`,
    /// `unhold.lua`) over every partition: one call over all of them on a
    /// standalone server, one per partition on a cluster (keys of different
    /// slots cannot share one), with the same `args` each time. Its keys are
    /// each partition's work stream, followed by its recovery cursor with
    /// [`Cursors::Kept`].
    pub(super) async fn over_partitions(
        &self,
        script: &crate::scripts::Lua,
        cursors: Cursors,
        args: impl Fn(&mut crate::scripts::Invocation<'_>),
    ) -> Result<Vec<Entry>, RedisStoreError> {
        let run = |parts: Vec<u16>| {
            let mut inv = script.prepare_invoke();
            for p in &parts {
                inv.key(self.link.keys.work(*p));
                if cursors == Cursors::Kept {
                    inv.key(self.link.keys.recovery(*p));
                }
            }
            args(&mut inv);
            async move {
                let flat: Vec<Value> = self.link.invoke(&inv).await?;
                flat_entries(&parts, flat)
            }
        };
        let groups = self.link.topology.script_groups(self.rotated_partitions(), |p| *p);
        let (mut entries, mut failure) = (Vec::new(), None);
        for r in join_all(groups.into_iter().map(run)).await {
            match r {
                Ok(e) => entries.extend(e),
                Err(e) => failure = Some(e),
            }
        }
        delivered(entries, failure)
    }
}

/// Whether a script over the partitions (`over_partitions`) also gets each
/// partition's recovery cursor (`recover.lua`'s sweep goes on from it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cursors {
    None,
    Kept,
}

/// Whether something done at most once per `every` per store (looking for
/// lapsed leases, or for held work) is due now; `last` is when it last ran
/// (ms since `born`, 0: never). Whichever claim gets there first runs it.
pub(super) fn due(last: &AtomicU64, born: &Instant, every: Duration) -> bool {
    let every = every.as_millis() as u64;
    let now = (born.elapsed().as_millis() as u64).max(1);
    let seen = last.load(Ordering::Relaxed);
    if seen != 0 && now.saturating_sub(seen) < every {
        return false;
    }
    last.compare_exchange(seen, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
}
