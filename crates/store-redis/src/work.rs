//! Work claims over the partition streams and their consumer group.
//!
//! **Leases live in the pending-entries list.** Recovery is always
//! `XAUTOCLAIM` with min-idle = H (`RedisConfig::max_lease`); granting a lease
//! L sets the entry's idle time to H − L (`XCLAIM … IDLE`), so the entry
//! becomes recoverable exactly when the holder's lease ends, whatever lease
//! the recovering worker asks for. No extra key is needed.
//!
//! - **claim**: new entries first (`read.lua`: `XREADGROUP … >` over every
//!   partition, without blocking), then entries whose lease lapsed
//!   (`recover.lua`: `XAUTOCLAIM`); when there is neither, wait for new
//!   entries with a blocking `XREAD` (which delivers nothing) on a dedicated
//!   connection, from the cursors `read.lua` returned, in slices so lapsed
//!   leases are noticed during a long wait. The delivered entries' docs
//!   come with the read (standalone `read.lua`) or are read together
//!   (recovered entries, cluster mode), then one `claim_batch.lua` (per
//!   partition on a cluster) claims them all: for each entry it bumps the task's fencing
//!   `attempt` (and `rev`), sets the lease and publishes the snapshot, or
//!   drops the entry when the task is terminal or gone, exactly as
//!   `claim.lua` does for one; an entry whose task moved in between is
//!   retried alone with `claim.lua`. `deliveries` is the bumped attempt:
//!   every claim of the task's one work entry counts.
//! - **recovery bound**: an entry is never pending at idle ≈ 0. `read.lua`
//!   and `recover.lua` set the idle time of what they deliver to H − lease in
//!   the same step, and `claim.lua` only claims an entry still pending for
//!   its own consumer. So whatever instant a worker dies at (after the read,
//!   before the claim, while holding a lease, while waiting), each entry it
//!   held is recoverable at most one lease after its last read, claim or
//!   renewal, and a reader that stalled past that lease loses the entry to
//!   the recoverer (and a recoverer that wins bumps the attempt, fencing
//!   off any writes of an older holder).
//!   On a Redis Cluster one script cannot span slots, so partitions are
//!   read one script each, and a waiting claim sleeps until a partition's
//!   sharded wake channel pings (`create.lua` and `release.lua` publish it),
//!   re-reading at least every second.
//! - **drained reads**: a standalone read that delivered work and drained
//!   every stream keeps its cursors, and the next claim waits from them
//!   before reading (an entry added since wakes it at once), so an idle
//!   worker runs `read.lua` once per task instead of twice.
//! - **renew**: `renew.lua` sets the idle time to H − lease again, if the stored
//!   attempt is still the holder's and the entry is pending.
//! - **remove**: `remove_work.lua` (XACK + XDEL) unless a newer attempt holds the
//!   work (a stale holder must not drop it).
//! - **release**: `release.lua` keeps the entry pending but sets its last
//!   delivery to the epoch (`XCLAIM … TIME 0`), so the next claimer's
//!   XAUTOCLAIM takes it at once whatever its lease; the entry id and its
//!   place in the stream are kept.
//!
//! Receipts are `<partition>/<entry id>`.

use std::{
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use futures::future::join_all;
use presa_store::{Claim, PartitionStats, Shares, TaskId, util::now_ms};
use presa_tasks::{Event, apply};
use redis::Value;
use tokio::sync::Notify;

use crate::{
    RedisStore, RedisStoreError,
    conn::{Verbosity, traced},
    keys::{GROUP, held_consumer},
    scripts,
    store::{decode, encode},
};

/// Longest single blocking read while waiting for work: lapsed leases are
/// looked for again after each one.
const MAX_SLICE: Duration = Duration::from_secs(1);
/// How often a cluster-mode claim polls while waiting when it has no wake-up
/// subscription (no blocking reads there: one XREADGROUP cannot span slots).
const CLUSTER_POLL: Duration = Duration::from_millis(100);
/// Give up bumping an attempt after this many lost CAS races (a client
/// writing in a tight loop); the entry is released for a later claim.
const CLAIM_RACES: usize = 8;
/// How often claims with room look for held work (`unhold.lua`): the most a
/// scope's held work waits for a worker with room, beyond its next claim.
const UNHOLD_EVERY: Duration = Duration::from_millis(200);
/// A pending entry idle for longer than `max_lease` plus this was handed
/// back (`release`, or returned unclaimed: last delivery at the Unix epoch,
/// decades ago), so statistics count it as queued; a lapsed lease is idle for
/// `max_lease` plus however long its worker has been gone.
const HANDED_BACK_IDLE: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// What a blocking wait saw: the partitions it woke on, and the cursors
/// (each partition's last entry id) it waited from.
type Woke = (Vec<u16>, Vec<(u16, String)>);

/// One delivered stream entry.
#[derive(Debug)]
struct Entry {
    partition: u16,
    id: String,
    task: Option<String>,
    /// The task's doc when the read fetched it with the entry (standalone
    /// `read.lua`): `Some(None)` when the task is gone. `None`: not fetched.
    doc: Option<Option<String>>,
}

/// A delivered entry about to be claimed: its task as read and as claimed.
struct Pending {
    entry: Entry,
    id: TaskId,
    key: String,
    /// The stored rev the claim expects.
    expected: u64,
    next: presa_store::Task,
}

/// One reply of `claim.lua` (or one entry's of `claim_batch.lua`).
enum Claimed {
    /// Claimed: the new doc is stored.
    Yes,
    /// Dropped (task over, or the entry is no longer pending for us).
    Dropped,
    /// The rev moved: the current doc (`None`: the task vanished).
    Moved(Option<String>),
}

fn claimed(reply: &[Value]) -> Result<Claimed, RedisStoreError> {
    match reply {
        [Value::Int(1)] => Ok(Claimed::Yes),
        [Value::Int(-1)] => Ok(Claimed::Dropped),
        [Value::Int(0)] => Ok(Claimed::Moved(None)),
        [Value::Int(0), current] => redis::from_redis_value_ref(current)
            .map(Claimed::Moved)
            .map_err(|err| RedisStoreError::Corrupt(err.to_string())),
        other => Err(RedisStoreError::Corrupt(format!("unexpected claim reply: {other:?}"))),
    }
}

impl RedisStore {
    pub(crate) async fn claim_work(
        &self,
        worker: &str,
        max: usize,
        lease: Duration,
        wait: Duration,
        shares: &Shares,
        caller_gone: &(dyn Fn() -> bool + Send + Sync),
    ) -> Result<Vec<Claim>, RedisStoreError> {
        let mut out = Vec::new();
        let mut shares = shares.clone();
        if max == 0 {
            return Ok(out);
        }
        let deadline = Instant::now() + wait;
        let wake = self.inner.topology.wakeups(&self.inner.keys, &self.inner.hub).await;
        // An earlier claim's read delivered work and drained the streams: wait
        // from its cursors instead of reading again first (anything added
        // since wakes the wait at once). An idle worker then reads once per
        // task, not twice.
        let drained_at = self.inner.drained_at.lock().ok().and_then(|mut c| c.take());
        // What the last wait saw: the partitions it woke on, and the cursors
        // it waited from (the next read looks at those partitions only).
        let mut woke = None;
        // (Lapsed leases are looked for after the wait, as after any wait.)
        if let Some(cursors) = drained_at
            && !wait.is_zero()
        {
            woke = self.wait_new(&cursors, wait.min(MAX_SLICE)).await?.map(|parts| (parts, cursors));
        }
        loop {
            // Registered before looking, so a wake-up while we look is kept.
            let mut woken = std::pin::pin!(wake.as_deref().map(Notify::notified));
            if let Some(n) = woken.as_mut().as_pin_mut() {
                n.enable();
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
            if !fresh.is_empty()
                && !cursors.is_empty()
                && let Ok(mut kept) = self.inner.drained_at.lock()
            {
                *kept = Some(cursors.clone());
            }
            self.take(worker, fresh, max, lease, &mut shares, &mut out).await?;
            if out.len() < max && due(&self.inner.last_unhold_ms, &self.inner.born, UNHOLD_EVERY) {
                let held = match self.unhold(worker, max - out.len(), lease, &shares).await {
                    Err(e) if is_nogroup(&e) => Vec::new(),
                    Err(e) => {
                        tracing::warn!(error = %e, "taking held work failed; it is taken later");
                        Vec::new()
                    }
                    Ok(held) => held,
                };
                self.take(worker, held, max, lease, &mut shares, &mut out).await?;
            }
            if out.len() < max && self.recovery_due(lease) {
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
                self.take(worker, lapsed, max, lease, &mut shares, &mut out).await?;
            }
            let now = Instant::now();
            if !out.is_empty() || now >= deadline || caller_gone() {
                return Ok(out);
            }
            let slice = (deadline - now).min(MAX_SLICE);
            if self.inner.topology.blocking().is_none() {
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

    /// Whether a claim should look for lapsed leases now: at most once per
    /// `lease / 8` (and at least once a second) per store, whichever claim
    /// gets there first. An entry lapses a whole lease after it was claimed
    /// or renewed, so looking more often recovers nothing sooner than that
    /// bound, while each look runs `XAUTOCLAIM` on every partition: done on
    /// every claim, it cost 48 stream commands a task at low load.
    fn recovery_due(&self, lease: Duration) -> bool {
        let every = (lease / 8).min(Duration::from_secs(1));
        due(&self.inner.last_recovery_ms, &self.inner.born, every)
    }

    /// Partitions in a rotating order, so no partition is always served last.
    fn rotated_partitions(&self) -> Vec<u16> {
        let n = self.inner.keys.partitions();
        let start = self.inner.rotate.fetch_add(1, Ordering::Relaxed) % usize::from(n);
        (0..n).map(|i| (start as u16 + i) % n).collect()
    }

    /// Up to `count` new entries, without blocking (`read.lua`: delivered
    /// entries are recoverable one `lease` later even if never claimed),
    /// and, when the streams are drained (standalone only), each stream's
    /// cursor for [`wait_new`](Self::wait_new).
    ///
    /// After a wait (`woke`: the partitions it woke on, and the cursors it
    /// waited from) only the woken partitions are read; the others keep
    /// their cursors, so entries they got since still wake the next wait at
    /// once. An empty `read.lua` over every partition costs Redis about as
    /// much as the rest of a task's life (measured: ~68 µs, two stream
    /// commands a partition); one partition's read is a few µs.
    async fn read_new(
        &self,
        worker: &str,
        count: usize,
        lease: Duration,
        woke: Option<Woke>,
    ) -> Result<(Vec<Entry>, Vec<(u16, String)>), RedisStoreError> {
        let idle = self.lease_idle(lease);
        // (Only a blocking wait wakes: never on a cluster.)
        if let Some((parts, mut cursors)) = woke {
            let (entries, read) = self.read_standalone(&parts, worker, count, idle).await?;
            if read.is_empty() {
                return Ok((entries, read));
            }
            for (p, cursor) in read {
                if let Some(kept) = cursors.iter_mut().find(|(q, _)| *q == p) {
                    kept.1 = cursor;
                }
            }
            return Ok((entries, cursors));
        }
        let parts = self.rotated_partitions();
        if !self.inner.topology.spans_slots() {
            // One script per partition: keys of different slots cannot share
            // one. Over-delivered entries are handed back by `take`.
            let reads = parts.iter().map(|p| async move {
                let (flat, _, _) = self.read_script(&[*p], worker, count, idle, false).await?;
                flat_entries(&[*p], flat)
            });
            let (mut entries, mut failure) = (Vec::new(), None);
            for reply in join_all(reads).await {
                match reply {
                    Ok(e) => entries.extend(e),
                    Err(e) => failure = Some(e),
                }
            }
            return delivered(entries, failure).map(|e| (e, Vec::new()));
        }
        self.read_standalone(&parts, worker, count, idle).await
    }

    /// `read_new` on standalone Redis: one `read.lua` over `parts`, the docs
    /// of the delivered entries' tasks brought along.
    async fn read_standalone(
        &self,
        parts: &[u16],
        worker: &str,
        count: usize,
        idle: u64,
    ) -> Result<(Vec<Entry>, Vec<(u16, String)>), RedisStoreError> {
        let (flat, cursors, docs) = self.read_script(parts, worker, count, idle, true).await?;
        let mut entries = flat_entries(parts, flat)?;
        if docs.len() != entries.len() {
            return Err(RedisStoreError::Corrupt(format!(
                "read.lua returned {} docs for {} entries",
                docs.len(),
                entries.len()
            )));
        }
        for (entry, doc) in entries.iter_mut().zip(docs) {
            entry.doc = Some(doc);
        }
        if cursors.len() != parts.len() {
            return Ok((entries, Vec::new()));
        }
        Ok((entries, parts.iter().copied().zip(cursors).collect()))
    }

    async fn read_script(
        &self,
        parts: &[u16],
        worker: &str,
        count: usize,
        idle: u64,
        with_docs: bool,
    ) -> Result<(Vec<Value>, Vec<String>, Vec<Option<String>>), RedisStoreError> {
        let keys = &self.inner.keys;
        let mut inv = scripts::READ.prepare_invoke();
        for p in parts {
            inv.key(keys.work(*p));
        }
        inv.arg(GROUP).arg(worker).arg(count).arg(idle);
        if with_docs {
            for p in parts {
                inv.arg(keys.task_prefix(*p));
            }
        }
        self.invoke(&inv).await
    }

    /// Wait up to `slice` for entries added after `cursors` (from a drained
    /// [`read_new`](Self::read_new)): a blocking `XREAD` over every partition
    /// on a dedicated connection. It only wakes the claim, which then reads
    /// with `read.lua`: nothing is delivered here, so a worker dying while it
    /// waits (or right after) leaves no entry behind.
    ///
    /// Returns the partitions the wait woke on (those with entries after
    /// their cursor); `None` when it timed out or could not wait.
    async fn wait_new(&self, cursors: &[(u16, String)], slice: Duration) -> Result<Option<Vec<u16>>, RedisStoreError> {
        let Some(blocking) = self.inner.topology.blocking() else {
            return Ok(None);
        };
        let Some(pool) = blocking.pool()? else {
            // Sentinel, and no primary found yet: the claim's reads find one.
            tokio::time::sleep(slice.min(CLUSTER_POLL)).await;
            return Ok(None);
        };
        let mut conn = match pool.get().await {
            Ok(conn) => conn,
            Err(deadpool_redis::PoolError::Timeout(_)) => {
                // Every blocking connection is busy: poll instead.
                tokio::time::sleep(slice.min(CLUSTER_POLL)).await;
                return Ok(None);
            }
            Err(deadpool_redis::PoolError::Backend(e)) => return Err(e.into()),
            Err(e) => return Err(RedisStoreError::Pool(e.to_string())),
        };
        let mut cmd = redis::cmd("XREAD");
        cmd.arg("COUNT").arg(1).arg("BLOCK").arg(slice.as_millis().max(1) as u64).arg("STREAMS");
        for (p, _) in cursors {
            cmd.arg(self.inner.keys.work(*p));
        }
        for (_, cursor) in cursors {
            cmd.arg(cursor);
        }
        let limit = slice + self.op_timeout();
        let reply = cmd.query_async::<Value>(&mut *conn);
        match traced(&self.inner.target, Verbosity::Debug, || "XREAD".into(), None, limit, reply).await {
            Ok(reply) => Ok(self.woken(cursors, reply)),
            Err(e) => {
                // The reply may still be on its way: never reuse this connection.
                drop(deadpool_redis::Connection::take(conn));
                Err(e)
            }
        }
    }

    /// The partitions a blocking `XREAD` reply names (`[[stream, entries], …]`,
    /// or a map of them); `None` for a timeout or a reply naming none.
    fn woken(&self, cursors: &[(u16, String)], reply: Value) -> Option<Vec<u16>> {
        let streams: Vec<Value> = match reply {
            Value::Array(items) => items
                .into_iter()
                .filter_map(|item| match item {
                    Value::Array(mut pair) if !pair.is_empty() => Some(pair.swap_remove(0)),
                    _ => None,
                })
                .collect(),
            Value::Map(pairs) => pairs.into_iter().map(|(stream, _)| stream).collect(),
            _ => return None,
        };
        let keys = &self.inner.keys;
        let parts: Vec<u16> = streams
            .iter()
            .filter_map(|s| redis::from_redis_value_ref::<String>(s).ok())
            .filter_map(|s| cursors.iter().map(|(p, _)| *p).find(|p| keys.work(*p) == s))
            .collect();
        (!parts.is_empty()).then_some(parts)
    }

    /// Up to `count` entries whose lease lapsed (idle for at least H),
    /// taken with `recover.lua` (recoverable again one `lease` later if
    /// never claimed).
    async fn recover(&self, worker: &str, count: usize, lease: Duration) -> Result<Vec<Entry>, RedisStoreError> {
        let min_idle = self.inner.cfg.max_lease.as_millis() as u64;
        let idle = self.lease_idle(lease);
        self.over_partitions(&scripts::RECOVER, |inv| {
            inv.arg(GROUP).arg(worker).arg(min_idle).arg(count).arg(idle);
        })
        .await
    }

    /// Up to `count` held entries (`unhold.lua`) of scopes `shares` has room
    /// for (the held consumers of full scopes are skipped in Redis).
    async fn unhold(
        &self,
        worker: &str,
        count: usize,
        lease: Duration,
        shares: &Shares,
    ) -> Result<Vec<Entry>, RedisStoreError> {
        let idle = self.lease_idle(lease);
        let per = shares.cap().unwrap_or(count).min(count);
        let rotation = self.inner.rotate.load(Ordering::Relaxed);
        let skip: Vec<String> = shares.full().map(held_consumer).collect();
        self.over_partitions(&scripts::UNHOLD, |inv| {
            inv.arg(GROUP).arg(worker).arg(count).arg(idle).arg(per).arg(rotation);
            for name in &skip {
                inv.arg(name);
            }
        })
        .await
    }

    /// Run a script that returns delivered entries (`recover.lua`,
    /// `unhold.lua`) over every partition: one call over all of them on a
    /// standalone server, one per partition on a cluster (keys of different
    /// slots cannot share one), with the same `args` each time.
    async fn over_partitions(
        &self,
        script: &scripts::Lua,
        args: impl Fn(&mut scripts::Invocation<'_>),
    ) -> Result<Vec<Entry>, RedisStoreError> {
        let run = |parts: Vec<u16>| {
            let mut inv = script.prepare_invoke();
            for p in &parts {
                inv.key(self.inner.keys.work(*p));
            }
            args(&mut inv);
            async move {
                let flat: Vec<Value> = self.invoke(&inv).await?;
                flat_entries(&parts, flat)
            }
        };
        let groups = self.inner.topology.script_groups(self.rotated_partitions(), |p| *p);
        let (mut entries, mut failure) = (Vec::new(), None);
        for r in join_all(groups.into_iter().map(run)).await {
            match r {
                Ok(e) => entries.extend(e),
                Err(e) => failure = Some(e),
            }
        }
        delivered(entries, failure)
    }

    /// Claim delivered entries until `out` holds `max`; hand back the rest
    /// (and, after an error, everything not claimed, so nothing waits for H).
    ///
    /// The docs of every entry to claim that the read did not bring along
    /// are read together (concurrent `GET`s, pipelined on the shared
    /// connection), then one
    /// `claim_batch.lua` claims them all (standalone) or each partition's
    /// (cluster, concurrently). Only an entry whose task moved between the
    /// read and the script goes through the one-by-one `claim.lua` loop, from
    /// the doc the script returned.
    async fn take(
        &self,
        worker: &str,
        entries: Vec<Entry>,
        max: usize,
        lease: Duration,
        shares: &mut Shares,
        out: &mut Vec<Claim>,
    ) -> Result<(), RedisStoreError> {
        let room = max.saturating_sub(out.len());
        let mut entries = entries;
        let over = entries.split_off(room.min(entries.len()));
        for e in &over {
            // Over-delivered: give it back untouched.
            if let Err(err) = self.requeue(worker, e).await {
                tracing::warn!(error = %err, entry = %e.id, "could not hand back an entry; it is recovered after max_lease");
            }
        }
        let failure = match self.claim_entries(worker, entries, lease, shares, out).await {
            Ok(()) => return Ok(()),
            Err(err) => err,
        };
        if out.is_empty() {
            return Err(failure);
        }
        // What was claimed stays claimed and is returned.
        tracing::warn!(error = %failure, "claim interrupted");
        Ok(())
    }

    /// Claim `entries` into `out` (see [`take`](Self::take)), holding those
    /// of scopes without room in `shares` instead (see [`hold`](Self::hold));
    /// on an error, every entry not claimed, held or dropped is handed back first.
    async fn claim_entries(
        &self,
        worker: &str,
        entries: Vec<Entry>,
        lease: Duration,
        shares: &mut Shares,
        out: &mut Vec<Claim>,
    ) -> Result<(), RedisStoreError> {
        let keys = &self.inner.keys;
        // Entries naming no task of their partition are dropped.
        let mut located = Vec::with_capacity(entries.len());
        for e in entries {
            let id = e.task.as_deref().map(TaskId::from_wire);
            let key = id
                .as_ref()
                .and_then(|id| (keys.partition_of(id) == Some(e.partition)).then(|| keys.task(id)).flatten());
            match (id, key) {
                (Some(id), Some(key)) => located.push((e, id, key)),
                _ => {
                    tracing::warn!(entry = %e.id, "work entry names no task of its partition; dropped");
                    self.ack(e.partition, &e.id).await?;
                }
            }
        }
        // Docs the read did not bring along are read now.
        let fetched: Vec<_> = located.iter_mut().map(|(e, _, _)| e.doc.take()).collect();
        let reads = located.iter().zip(fetched).map(|((_, _, key), fetched)| async move {
            if let Some(doc) = fetched {
                return Ok(doc);
            }
            self.read_doc_text(key).await
        });
        let docs = match join_all(reads).await.into_iter().collect::<Result<Vec<_>, _>>() {
            Ok(docs) => docs,
            Err(err) => {
                self.requeue_all(worker, located.iter().map(|(e, _, _)| e)).await;
                return Err(err);
            }
        };
        // The reducer records each claim (the fence moves, `updated_at` too).
        let mut batch = Vec::with_capacity(located.len());
        let mut held = Vec::new();
        let mut failure = None;
        for ((e, id, key), doc) in located.into_iter().zip(docs) {
            if failure.is_some() {
                let _ = self.requeue(worker, &e).await;
                continue;
            }
            match self.next_claimed(worker, &e, &id, doc.as_deref()).await {
                Ok(Some((task, _))) if !shares.take(&task.scope) => held.push((e, held_consumer(&task.scope))),
                Ok(Some((task, next))) => batch.push(Pending { entry: e, id, key, expected: task.revision, next }),
                Ok(None) => {}
                Err(err) => {
                    let _ = self.requeue(worker, &e).await;
                    failure = Some(err);
                }
            }
        }
        self.hold(held).await;
        if let Some(err) = failure {
            self.requeue_all(worker, batch.iter().map(|p| &p.entry)).await;
            return Err(err);
        }
        let groups = self.inner.topology.script_groups(batch, |p| p.entry.partition);
        let replies = join_all(groups.iter().map(|g| self.claim_batch(worker, g, lease))).await;
        let mut retry = Vec::new();
        for (group, reply) in groups.into_iter().zip(replies) {
            let reply = match reply {
                Ok(r) => r,
                Err(err) => {
                    self.requeue_all(worker, group.iter().map(|p| &p.entry)).await;
                    failure = Some(err);
                    continue;
                }
            };
            for (p, r) in group.into_iter().zip(reply) {
                match r {
                    Claimed::Yes => out.push(Claim {
                        deliveries: p.next.attempt,
                        receipt: format!("{}/{}", p.entry.partition, p.entry.id),
                        task: p.next,
                    }),
                    Claimed::Dropped => {}
                    Claimed::Moved(doc) => retry.push((p, doc)),
                }
            }
        }
        for (p, doc) in retry {
            if failure.is_some() {
                let _ = self.requeue(worker, &p.entry).await;
                continue;
            }
            match self.claim_entry(worker, &p.entry, &p.id, &p.key, doc, lease).await {
                Ok(Some(c)) => out.push(c),
                Ok(None) => {}
                Err(err) => {
                    let _ = self.requeue(worker, &p.entry).await;
                    failure = Some(err);
                }
            }
        }
        failure.map_or(Ok(()), Err)
    }

    /// Hand entries back (best effort: one that fails is recovered after H).
    async fn requeue_all<'e>(&self, worker: &str, entries: impl Iterator<Item = &'e Entry>) {
        for e in entries {
            let _ = self.requeue(worker, e).await;
        }
    }

    /// The task as read and as claimed by `worker`, or `None` after dropping
    /// the entry (task gone, expired, terminal or corrupt).
    async fn next_claimed(
        &self,
        worker: &str,
        e: &Entry,
        id: &TaskId,
        doc: Option<&str>,
    ) -> Result<Option<(presa_store::Task, presa_store::Task)>, RedisStoreError> {
        let task = match doc.map(|d| decode(d.as_bytes())) {
            Some(Ok(t)) if !t.status.is_terminal() && !t.is_expired(now_ms()) => t,
            Some(Err(err)) => {
                tracing::error!(task = %id, error = %err, "corrupt task record; its work is dropped");
                self.ack(e.partition, &e.id).await?;
                return Ok(None);
            }
            _ => {
                self.ack(e.partition, &e.id).await?;
                return Ok(None);
            }
        };
        match apply(&task, &Event::Claimed { worker: worker.to_string() }, now_ms()) {
            Ok(Some(next)) => Ok(Some((task, next))),
            _ => {
                self.ack(e.partition, &e.id).await?;
                Ok(None)
            }
        }
    }

    /// Run `claim_batch.lua` over `group`: one reply per entry, in order.
    async fn claim_batch(
        &self,
        worker: &str,
        group: &[Pending],
        lease: Duration,
    ) -> Result<Vec<Claimed>, RedisStoreError> {
        let keys = &self.inner.keys;
        let mut inv = scripts::CLAIM_BATCH.prepare_invoke();
        for p in group {
            let channel = keys.events(&p.id).expect("same partition as the task key");
            inv.key(&p.key).key(keys.work(p.entry.partition)).key(channel);
        }
        inv.arg(GROUP).arg(worker).arg(self.lease_idle(lease)).arg(self.publish_cmd());
        for p in group {
            inv.arg(&p.entry.id).arg(p.expected).arg(encode(&p.next)?).arg(p.next.revision).arg(p.next.attempt);
        }
        let replies: Vec<Vec<Value>> = self.invoke(&inv).await?;
        if replies.len() != group.len() {
            return Err(RedisStoreError::Corrupt(format!(
                "claim_batch.lua answered {} of {} entries",
                replies.len(),
                group.len()
            )));
        }
        replies.iter().map(|r| claimed(r)).collect()
    }

    /// Claim one delivered entry with `claim.lua`, starting from `doc` (the
    /// task as last read), re-reading on each lost CAS race.
    async fn claim_entry(
        &self,
        worker: &str,
        e: &Entry,
        id: &TaskId,
        key: &str,
        mut doc: Option<String>,
        lease: Duration,
    ) -> Result<Option<Claim>, RedisStoreError> {
        let keys = &self.inner.keys;
        let stream = keys.work(e.partition);
        let channel = keys.events(id).expect("same partition as the task key");
        for _ in 0..CLAIM_RACES {
            let Some((task, next)) = self.next_claimed(worker, e, id, doc.as_deref()).await? else {
                return Ok(None);
            };
            let mut inv = scripts::CLAIM.prepare_invoke();
            inv.key(key)
                .key(&stream)
                .key(&channel)
                .arg(GROUP)
                .arg(&e.id)
                .arg(worker)
                .arg(task.revision)
                .arg(encode(&next)?)
                .arg(next.revision)
                .arg(next.attempt)
                .arg(self.lease_idle(lease))
                .arg(self.publish_cmd());
            let reply: Vec<Value> = self.invoke(&inv).await?;
            match claimed(&reply)? {
                Claimed::Yes => {
                    return Ok(Some(Claim {
                        deliveries: next.attempt,
                        receipt: format!("{}/{}", e.partition, e.id),
                        task: next,
                    }));
                }
                Claimed::Dropped => return Ok(None),
                Claimed::Moved(current) => doc = current,
            }
        }
        tracing::warn!(task = %id, "claim kept losing its CAS race; requeued");
        self.requeue(worker, e).await?;
        Ok(None)
    }

    /// Hold delivered entries this claim has no room for: each goes to its
    /// scope's held consumer (`XCLAIM … JUSTID`, one command per partition
    /// and scope), unclaimed, keeping its id; `unhold.lua` hands it to a
    /// worker with room. Best effort: an entry that fails to move stays with
    /// this worker and is recovered one lease later.
    async fn hold(&self, entries: Vec<(Entry, String)>) {
        let mut groups: Vec<(u16, String, Vec<String>)> = Vec::new();
        for (e, consumer) in entries {
            match groups.iter_mut().find(|(p, c, _)| *p == e.partition && *c == consumer) {
                Some((_, _, ids)) => ids.push(e.id),
                None => groups.push((e.partition, consumer, vec![e.id])),
            }
        }
        for (partition, consumer, ids) in groups {
            let cmd = redis::cmd("XCLAIM")
                .arg(self.inner.keys.work(partition))
                .arg(GROUP)
                .arg(&consumer)
                .arg(0)
                .arg(&ids)
                .arg("JUSTID")
                .to_owned();
            if let Err(e) = self.query::<Value>(Verbosity::Debug, &cmd).await {
                tracing::warn!(error = %e, held = ids.len(), "could not hold work; it is recovered after a lease");
            }
        }
    }

    /// The idle time (ms) that makes an entry recoverable after `lease`.
    fn lease_idle(&self, lease: Duration) -> u64 {
        let horizon = self.inner.cfg.max_lease;
        horizon.saturating_sub(lease.min(horizon)).as_millis() as u64
    }

    /// Make an entry this consumer holds (but never claimed) recoverable at once.
    async fn requeue(&self, worker: &str, e: &Entry) -> Result<(), RedisStoreError> {
        let cmd = redis::cmd("XCLAIM")
            .arg(self.inner.keys.work(e.partition))
            .arg(GROUP)
            .arg(worker)
            .arg(0)
            .arg(&e.id)
            .arg("TIME")
            .arg(0)
            .arg("JUSTID")
            .to_owned();
        self.query::<Value>(Verbosity::Info, &cmd).await?;
        Ok(())
    }

    async fn ack(&self, partition: u16, entry: &str) -> Result<(), RedisStoreError> {
        let mut inv = scripts::ACK.prepare_invoke();
        inv.key(self.inner.keys.work(partition)).arg(GROUP).arg(entry);
        self.invoke::<i64>(&inv).await.map(|_| ())
    }

    /// The task key, stream key and entry id a claim refers to.
    pub(crate) fn locate(&self, claim: &Claim) -> Result<(String, u16, String), RedisStoreError> {
        let bad = || RedisStoreError::Corrupt(format!("not a Redis work receipt: {:?}", claim.receipt));
        let (p, entry) = claim.receipt.split_once('/').ok_or_else(bad)?;
        let p: u16 = p.parse().map_err(|_| bad())?;
        let key = self.inner.keys.task(&claim.task.id).ok_or_else(bad)?;
        if self.inner.keys.partition_of(&claim.task.id) != Some(p) {
            return Err(bad());
        }
        Ok((key, p, entry.to_string()))
    }

    pub(crate) async fn renew_work(&self, claim: &Claim, lease: Duration) -> Result<bool, RedisStoreError> {
        let Ok((key, p, entry)) = self.locate(claim) else {
            return Ok(false);
        };
        let mut inv = scripts::RENEW.prepare_invoke();
        inv.key(key)
            .key(self.inner.keys.work(p))
            .arg(GROUP)
            .arg(entry)
            .arg(claim.task.attempt)
            .arg(self.lease_idle(lease));
        Ok(self.invoke::<i64>(&inv).await? == 1)
    }

    pub(crate) async fn remove_claimed_work(&self, claim: &Claim) -> Result<(), RedisStoreError> {
        let (key, p, entry) = self.locate(claim)?;
        let mut inv = scripts::REMOVE_WORK.prepare_invoke();
        inv.key(key).key(self.inner.keys.work(p)).arg(GROUP).arg(entry).arg(claim.task.attempt);
        self.invoke::<i64>(&inv).await.map(|_| ())
    }

    pub(crate) async fn release_work(&self, claim: &Claim) -> Result<(), RedisStoreError> {
        let (key, p, entry) = self.locate(claim)?;
        let mut inv = scripts::RELEASE.prepare_invoke();
        inv.key(key)
            .key(self.inner.keys.work(p))
            .key(self.inner.keys.wake(p))
            .arg(GROUP)
            .arg(entry)
            .arg(claim.task.attempt)
            .arg(self.wake_cmd());
        self.invoke::<i64>(&inv).await.map(|_| ())
    }

    /// Every partition's work queue (`stats.lua`, one round trip each, all
    /// partitions at once). Unlike the memory store, the work of a task that
    /// expired still counts until a claim drops it (nothing reads the task).
    pub(crate) async fn partition_stats(&self) -> Result<Vec<PartitionStats>, RedisStoreError> {
        let handed_back_idle = self.inner.cfg.max_lease.saturating_add(HANDED_BACK_IDLE).as_millis() as u64;
        let reads = (0..self.inner.keys.partitions()).map(|partition| async move {
            let mut inv = scripts::STATS.prepare_invoke();
            inv.key(self.inner.keys.work(partition)).arg(GROUP).arg(handed_back_idle);
            let (queued, pending, age, queued_age): (i64, i64, i64, i64) = self.invoke(&inv).await?;
            Ok(PartitionStats {
                partition,
                queued: queued.max(0) as u64,
                pending: pending.max(0) as u64,
                oldest_pending_age_ms: u64::try_from(age).ok(),
                oldest_queued_age_ms: u64::try_from(queued_age).ok(),
            })
        });
        join_all(reads).await.into_iter().collect()
    }

    /// Create the consumer group on every partition stream (MKSTREAM; an
    /// existing group is fine). Reading from id 0 so entries added before a
    /// lost group was re-created are still delivered. Claims call it
    /// themselves when a group is missing; [`RedisStore::connect`] calls it
    /// up front.
    pub async fn ensure_groups(&self) -> Result<(), RedisStoreError> {
        let creates = (0..self.inner.keys.partitions()).map(|p| async move {
            let cmd = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(self.inner.keys.work(p))
                .arg(GROUP)
                .arg("0")
                .arg("MKSTREAM")
                .to_owned();
            match self.query::<Value>(Verbosity::Info, &cmd).await {
                Err(RedisStoreError::Redis(e)) if e.code() == Some("BUSYGROUP") => Ok(()),
                other => other.map(|_| ()),
            }
        });
        join_all(creates).await.into_iter().collect()
    }
}

/// What per-partition reads delivered: entries some partitions handed to this
/// consumer must be claimed (or handed back), even if another partition
/// failed; the failure counts only when nothing was delivered.
/// Whether something done at most once per `every` per store (looking for
/// lapsed leases, or for held work) is due now; `last` is when it last ran
/// (ms since `born`, 0: never). Whichever claim gets there first runs it.
fn due(last: &std::sync::atomic::AtomicU64, born: &Instant, every: Duration) -> bool {
    let every = every.as_millis() as u64;
    let now = (born.elapsed().as_millis() as u64).max(1);
    let seen = last.load(Ordering::Relaxed);
    if seen != 0 && now.saturating_sub(seen) < every {
        return false;
    }
    last.compare_exchange(seen, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
}

fn delivered(entries: Vec<Entry>, failure: Option<RedisStoreError>) -> Result<Vec<Entry>, RedisStoreError> {
    match failure {
        Some(e) if entries.is_empty() => Err(e),
        Some(e) => {
            tracing::warn!(error = %e, "a partition read failed; using what the others delivered");
            Ok(entries)
        }
        None => Ok(entries),
    }
}

/// Decode `read.lua` / `recover.lua` replies: `{key index, entry id, task id, …}`
/// where the key index (1-based) points into `parts`.
fn flat_entries(parts: &[u16], flat: Vec<Value>) -> Result<Vec<Entry>, RedisStoreError> {
    let bad = |why: &str| RedisStoreError::Corrupt(format!("unexpected work read reply: {why}"));
    if !flat.len().is_multiple_of(3) {
        return Err(bad("not triples"));
    }
    flat.chunks(3)
        .map(|t| {
            let index: usize = redis::from_redis_value_ref(&t[0]).map_err(|_| bad("index"))?;
            let id: String = redis::from_redis_value_ref(&t[1]).map_err(|_| bad("entry id"))?;
            let task: String = redis::from_redis_value_ref(&t[2]).map_err(|_| bad("task"))?;
            let partition = *index.checked_sub(1).and_then(|i| parts.get(i)).ok_or_else(|| bad("index"))?;
            Ok(Entry { partition, id, task: (!task.is_empty()).then_some(task), doc: None })
        })
        .collect()
}

fn is_nogroup(e: &RedisStoreError) -> bool {
    matches!(e, RedisStoreError::Redis(r) if r.code() == Some("NOGROUP"))
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

#[cfg(test)]
mod tests {
    use std::{collections::HashSet, time::Duration};

    use presa_store::{Cas, CreateLimits, NewTask, Scope, TaskStore, Writer};
    use presa_testkit::redis::{TestRedis, unique_prefix};

    use super::*;
    use crate::RedisConfig;

    const LEASE: Duration = Duration::from_secs(30);

    fn new_task() -> NewTask {
        NewTask {
            scope: Scope::anonymous(),
            work: Default::default(),
            ttl_ms: None,
            poll_interval_ms: None,
            status_message: None,
        }
    }

    /// Everything `take` knows before the script: the entry, its task as read, as claimed.
    async fn pending(store: &RedisStore, e: Entry) -> Pending {
        let id = TaskId::from_wire(e.task.as_deref().unwrap());
        let key = store.inner.keys.task(&id).unwrap();
        let doc = store.read_doc_text(&key).await.unwrap();
        let (task, next) = store.next_claimed("w", &e, &id, doc.as_deref()).await.unwrap().unwrap();
        Pending { entry: e, id, key, expected: task.revision, next }
    }

    /// After a wait, only the partitions it woke on are read; the others keep
    /// the cursors the wait started from, so what they got meanwhile wakes
    /// the next wait at once instead of being skipped.
    #[tokio::test]
    async fn a_read_after_a_wait_looks_at_the_woken_partitions_and_keeps_the_other_cursors() {
        let redis = TestRedis::start().await;
        let cfg = RedisConfig::new(redis.url()).with_prefix(unique_prefix()).with_partitions(4);
        let store = RedisStore::connect(cfg).await.unwrap();
        let (none, start) = store.read_new("w", 10, LEASE, None).await.unwrap();
        assert!(none.is_empty());
        assert_eq!(start.len(), 4, "every stream drained: a cursor each");
        // Tasks until two partitions have some.
        let mut created = Vec::new();
        while created.iter().map(|t: &presa_store::Task| t.id.partition()).collect::<HashSet<_>>().len() < 2 {
            created.push(store.create(new_task(), CreateLimits::NONE).await.unwrap());
        }
        let part = |t: &presa_store::Task| store.inner.keys.partition_of(&t.id).unwrap();
        let (a, b) = (part(&created[0]), part(created.iter().find(|t| part(t) != part(&created[0])).unwrap()));
        let in_part =
            |p: u16| created.iter().filter(|t| part(t) == p).map(|t| t.id.to_string()).collect::<HashSet<_>>();

        let (got, cursors) = store.read_new("w", 10, LEASE, Some((vec![a], start.clone()))).await.unwrap();
        assert_eq!(got.iter().filter_map(|e| e.task.clone()).collect::<HashSet<_>>(), in_part(a));
        assert_eq!(cursors.len(), 4);
        for ((p, before), (q, after)) in start.iter().zip(&cursors) {
            assert_eq!(p, q);
            assert_eq!(before == after, *p != a, "only partition {a}'s cursor moves");
        }
        // The wait from those cursors wakes on b (and not on a, read up to its end).
        let woken = store.wait_new(&cursors, Duration::from_secs(5)).await.unwrap().expect("b has new entries");
        assert!(woken.contains(&b) && !woken.contains(&a), "{woken:?}");
        let (got, _) = store.read_new("w", 10, LEASE, Some((woken, cursors))).await.unwrap();
        let rest: HashSet<String> = created.iter().filter(|t| part(t) != a).map(|t| t.id.to_string()).collect();
        assert_eq!(got.iter().filter_map(|e| e.task.clone()).collect::<HashSet<_>>(), rest);
    }

    #[tokio::test]
    async fn a_wait_reply_names_its_partitions_in_either_protocol() {
        let redis = TestRedis::start().await;
        let cfg = RedisConfig::new(redis.url()).with_prefix(unique_prefix()).with_partitions(4);
        let store = RedisStore::connect(cfg).await.unwrap();
        let cursors: Vec<(u16, String)> = (0..4).map(|p| (p, "0-0".to_string())).collect();
        let stream = |p: u16| Value::BulkString(store.inner.keys.work(p).into_bytes());
        let resp2 = Value::Array(vec![
            Value::Array(vec![stream(2), Value::Array(vec![])]),
            Value::Array(vec![stream(0), Value::Array(vec![])]),
        ]);
        assert_eq!(store.woken(&cursors, resp2), Some(vec![2, 0]));
        let resp3 = Value::Map(vec![(stream(3), Value::Array(vec![]))]);
        assert_eq!(store.woken(&cursors, resp3), Some(vec![3]));
        assert_eq!(store.woken(&cursors, Value::Nil), None, "a timeout");
        let unknown = Value::Array(vec![Value::Array(vec![Value::BulkString(b"other".to_vec()), Value::Nil])]);
        assert_eq!(store.woken(&cursors, unknown), None);
    }

    /// A batch with a stale member: one entry taken over by another worker
    /// (as a recovery would), one whose task moved after it was read. The
    /// batch claims the good one, drops the taken one and reports the moved
    /// one, exactly as single `claim.lua` runs answer for the same entries.
    #[tokio::test]
    async fn a_stale_entry_in_a_batch_is_refused_as_a_single_claim_is() {
        let redis = TestRedis::start().await;
        let cfg = RedisConfig::new(redis.url()).with_prefix(unique_prefix()).with_partitions(1);
        let store = RedisStore::connect(cfg).await.unwrap();
        let limits = CreateLimits::NONE;
        for _ in 0..3 {
            store.create(new_task(), limits).await.unwrap();
        }
        let (entries, _) = store.read_new("w1", 3, LEASE, None).await.unwrap();
        assert_eq!(entries.len(), 3);
        let mut group = Vec::new();
        for e in entries {
            group.push(pending(&store, e).await);
        }
        // The second entry is taken over by w2; the third task moves on.
        let stream = store.inner.keys.work(0);
        let taken: Value = store
            .query(
                Verbosity::Info,
                redis::cmd("XCLAIM").arg(&stream).arg(GROUP).arg("w2").arg(0).arg(&group[1].entry.id),
            )
            .await
            .unwrap();
        assert!(matches!(taken, Value::Array(ref a) if a.len() == 1), "{taken:?}");
        let current = store.load(&group[2].id).await.unwrap().unwrap();
        let moved = apply(&current, &Event::SetMessage("moved".into()), now_ms()).unwrap().unwrap();
        assert!(matches!(store.transition(&moved, Writer::Client).await.unwrap(), Cas::Applied(_)));

        let replies = store.claim_batch("w1", &group, LEASE).await.unwrap();
        assert!(matches!(replies[0], Claimed::Yes));
        assert!(matches!(replies[1], Claimed::Dropped), "a taken-over entry is not claimed");
        let Claimed::Moved(Some(doc)) = &replies[2] else { panic!("the moved task is reported") };
        assert_eq!(decode(doc.as_bytes()).unwrap(), moved, "with its current doc");

        // The fence moved for the claimed task only.
        let stored = |i: usize| store.load(&group[i].id);
        assert_eq!(stored(0).await.unwrap().unwrap().attempt, 1);
        assert_eq!(stored(1).await.unwrap().unwrap().attempt, 0, "the taken-over task is untouched");
        assert_eq!(stored(2).await.unwrap().unwrap(), moved, "the moved task is untouched");

        // Single claims of the same two stale entries answer the same.
        for (i, want_dropped) in [(1, true), (2, false)] {
            let p = &group[i];
            let mut inv = scripts::CLAIM.prepare_invoke();
            inv.key(&p.key)
                .key(&stream)
                .key(store.inner.keys.events(&p.id).unwrap())
                .arg(GROUP)
                .arg(&p.entry.id)
                .arg("w1")
                .arg(p.expected)
                .arg(encode(&p.next).unwrap())
                .arg(p.next.revision)
                .arg(p.next.attempt)
                .arg(store.lease_idle(LEASE))
                .arg(store.publish_cmd());
            let single: Vec<Value> = store.invoke(&inv).await.unwrap();
            match claimed(&single).unwrap() {
                Claimed::Dropped => assert!(want_dropped, "entry {i}"),
                Claimed::Moved(Some(d)) => assert!(!want_dropped && d == *doc, "entry {i}"),
                _ => panic!("entry {i}: a single claim answered differently"),
            }
        }
        // The moved one is then claimed from its current doc (the retry path).
        let p = &group[2];
        let claim = store.claim_entry("w1", &p.entry, &p.id, &p.key, Some(doc.clone()), LEASE).await.unwrap().unwrap();
        assert_eq!(claim.task.attempt, 1);
        assert_eq!(claim.task.status_message.as_deref(), Some("moved"));
    }
}
