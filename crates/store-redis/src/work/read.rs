//! Reading new work: `read.lua` over the partitions (one script over all of
//! them on a standalone server, one each on a cluster), and the blocking
//! `XREAD` a standalone claim waits with. [`Reader`] keeps the read side's
//! state: the rotation that keeps partitions fair, and the cursors of a
//! drained read for the next claim to wait from.

use std::{
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use futures::future::join_all;
use redis::Value;

use super::Queue;
use super::{CLUSTER_POLL, Entry, Reads, Woke, delivered, flat_entries};
use crate::{
    conn::{Verbosity, traced},
    error::RedisStoreError,
    keys::GROUP,
};

/// Stream cursors: each partition's last entry id.
type Cursors = Vec<(u16, String)>;

/// What the read side remembers between claims.
#[derive(Debug, Default)]
pub(crate) struct Reader {
    /// Rotates the partition order of reads, for fairness.
    rotate: AtomicUsize,
    /// Standalone: the stream cursors of a read that delivered work and
    /// drained every stream, for the next claim to wait from (see
    /// `Queue::claim_fair`).
    drained_at: Mutex<Option<Cursors>>,
}

impl Reader {
    /// The `n` partitions starting one further than last time.
    pub(super) fn rotated(&self, n: u16) -> Vec<u16> {
        let start = self.rotate.fetch_add(1, Ordering::Relaxed) % usize::from(n);
        (0..n).map(|i| (start as u16 + i) % n).collect()
    }

    /// Where the rotation is now (`unhold.lua` starts its scopes there).
    pub(super) fn rotation(&self) -> usize {
        self.rotate.load(Ordering::Relaxed)
    }

    /// The cursors a drained read kept, taken (the next claim starts from them once).
    pub(super) fn take_drained(&self) -> Option<Cursors> {
        self.drained_at.lock().ok().and_then(|mut c| c.take())
    }

    /// Keep the cursors of a read that delivered work and drained every stream.
    pub(super) fn keep_drained(&self, cursors: &[(u16, String)]) {
        if let Ok(mut kept) = self.drained_at.lock() {
            *kept = Some(cursors.to_vec());
        }
    }
}

impl Queue {
    /// Partitions in a rotating order, so no partition is always served last.
    pub(super) fn rotated_partitions(&self) -> Vec<u16> {
        self.state.reader.rotated(self.link.keys.partitions())
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
    pub(super) async fn read_new(
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
        if self.reads == Reads::PerPartition {
            return self.read_partitions(parts, worker, count, idle).await.map(|e| (e, Vec::new()));
        }
        self.read_standalone(&parts, worker, count, idle).await
    }

    /// `read_new` on a cluster: one script per partition (keys of different
    /// slots cannot share one), in waves that never ask for more than is
    /// left of `count` in all: a wave reads up to that many partitions
    /// concurrently, each for an equal part, and a partition that gave all
    /// it was asked (it may hold more) goes round again. Asking every
    /// partition for `count` at once delivered up to one `count` a partition;
    /// the excess was handed back one `XCLAIM` each and then waited for the
    /// next lapsed-lease pass (at most a second) to be taken again, which
    /// under a backlog cut a worker to about a hundred tasks a second.
    async fn read_partitions(
        &self,
        parts: Vec<u16>,
        worker: &str,
        count: usize,
        idle: u64,
    ) -> Result<Vec<Entry>, RedisStoreError> {
        let mut left: std::collections::VecDeque<u16> = parts.into();
        let (mut entries, mut failure) = (Vec::new(), None);
        while entries.len() < count && !left.is_empty() {
            let want = count - entries.len();
            let wave: Vec<u16> = left.drain(..want.min(left.len())).collect();
            // `wave.len() <= want`, so the asks add up to at most `want`.
            let ask = want / wave.len();
            let reads = wave.iter().map(|p| async move {
                let (flat, _, _) = self.read_script(&[*p], worker, ask, idle, false).await?;
                flat_entries(&[*p], flat)
            });
            for (p, reply) in wave.iter().zip(join_all(reads).await) {
                match reply {
                    Ok(e) => {
                        if e.len() == ask {
                            left.push_back(*p);
                        }
                        entries.extend(e);
                    }
                    Err(e) => failure = Some(e),
                }
            }
        }
        delivered(entries, failure)
    }

    /// `read_new` on standalone Redis: one `read.lua` over `parts`, the docs
    /// of the delivered entries' tasks brought along.
    pub(super) async fn read_standalone(
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

    pub(super) async fn read_script(
        &self,
        parts: &[u16],
        worker: &str,
        count: usize,
        idle: u64,
        with_docs: bool,
    ) -> Result<(Vec<Value>, Vec<String>, Vec<Option<String>>), RedisStoreError> {
        let keys = &self.link.keys;
        let mut inv = super::READ.prepare_invoke();
        for p in parts {
            inv.key(keys.work(*p));
        }
        inv.arg(GROUP).arg(worker).arg(count).arg(idle);
        if with_docs {
            for p in parts {
                inv.arg(keys.task_prefix(*p));
            }
        }
        self.link.invoke(&inv).await
    }

    /// Wait up to `slice` for entries added after `cursors` (from a drained
    /// [`read_new`](Self::read_new)): a blocking `XREAD` over every partition
    /// on a dedicated connection. It only wakes the claim, which then reads
    /// with `read.lua`: nothing is delivered here, so a worker dying while it
    /// waits (or right after) leaves no entry behind.
    ///
    /// Returns the partitions the wait woke on (those with entries after
    /// their cursor); `None` when it timed out or could not wait.
    pub(super) async fn wait_new(
        &self,
        cursors: &[(u16, String)],
        slice: Duration,
    ) -> Result<Option<Vec<u16>>, RedisStoreError> {
        let Some(blocking) = self.link.topology.blocking() else {
            return Ok(None);
        };
        let Some(pool) = blocking.pool()? else {
            // Sentinel, and no primary found yet: the claim's reads find one.
            tokio::time::sleep(slice.min(CLUSTER_POLL)).await;
            return Ok(None);
        };
        let mut conn = match Box::pin(pool.get()).await {
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
            cmd.arg(self.link.keys.work(*p));
        }
        for (_, cursor) in cursors {
            cmd.arg(cursor);
        }
        let limit = slice + self.link.op_timeout();
        let reply = Box::pin(cmd.query_async::<Value>(&mut *conn));
        match traced(&self.link.target, Verbosity::Debug, || "XREAD".into(), None, limit, reply).await {
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
    pub(super) fn woken(&self, cursors: &[(u16, String)], reply: Value) -> Option<Vec<u16>> {
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
        let keys = &self.link.keys;
        let parts: Vec<u16> = streams
            .iter()
            .filter_map(|s| redis::from_redis_value_ref::<String>(s).ok())
            .filter_map(|s| cursors.iter().map(|(p, _)| *p).find(|p| keys.work(*p) == s))
            .collect();
        (!parts.is_empty()).then_some(parts)
    }
}
