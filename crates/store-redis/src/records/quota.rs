//! The bytes-per-scope quota (`CreateLimits::max_bytes_per_scope`).
//!
//! Every task created under a quota reserves the size of its record
//! (serialised JSON: arguments, client capabilities, answers) under its
//! scope until it expires, and is counted again at the size each write
//! leaves it (answers, status messages, results), so one scope cannot fill
//! Redis. A client write that would grow a live task past the quota is
//! refused (`presa_store::growth_quota`). The layout is `lua/bytes.lua`'s:
//! per scope one hash of bytes by expiry bucket with their total, and in
//! each task's own hash the size it is counted at and its bucket (`q`), so
//! a create costs three commands of the quota and a write that changes a
//! task's size two. A task is counted until its bucket's end, at most a
//! 64th of its lifetime (65.5 s at most) after its expiry
//! ([`reservation_bucket`]). The layout before the buckets (one entry a
//! task in three keys) is neither read nor written: a rolling upgrade is
//! from the previous release, which never writes it (docs/redis.md).
//!
//! A scope's tasks are spread over every partition, so, like the active-task
//! limit (`limits.rs`), the reservations live in the scope's own slot.
//! Standalone Redis takes a task's and its scope's keys in one script:
//! `create_scoped.lua` admits, reserves and creates, `transition.lua`
//! compares-and-sets and resizes, atomically. A cluster runs the steps one
//! after another:
//! - create: `quota.lua` reserves unless the quota would be exceeded
//!   (concurrent creates never reserve more than the quota between them),
//!   then `create.lua` writes the task with its `q`; when the create
//!   definitely did not happen (id collision) the reservation is taken back;
//!   a crash in between leaves a reservation that lasts until the would-be
//!   task's bucket ends, erring on the side of refusing;
//! - a client write that grows a live task: its `q` is read, `resize.lua`
//!   counts the growth first (refusing growth past the quota), then
//!   `transition.lua`; a write that then loses its compare-and-set takes
//!   the growth back;
//! - a write that may not be refused (a worker's, one ending the task):
//!   `transition.lua`, then, when it ends the task, `resize.lua` counts the
//!   difference from the size it was counted at. A worker's status messages
//!   and input requests in between are counted at the next client write or
//!   at the end, not one by one: one round trip per task instead of one per write.

use presa_store::{Scope, Task, TaskId, util::now_ms};

use super::Records;
use crate::{error::RedisStoreError, link::Link, record::encode};

/// The widest expiry bucket, ms (about a minute): no task is counted
/// longer than this past its expiry.
const WIDEST_BUCKET_MS: u64 = 1 << 16;

/// The expiry bucket that counts `task` (`lua/bytes.lua`): the end of the
/// bucket its expiry falls in, Unix ms, or `inf` when it never expires.
/// Buckets are a power of two wide, at most a 64th of the task's lifetime
/// and [`WIDEST_BUCKET_MS`], so the task is counted at most that long after
/// its expiry, and a scope whose tasks live alike has about 64 buckets.
pub(super) fn reservation_bucket(task: &Task) -> String {
    let Some(ttl) = task.ttl_ms else {
        return "inf".into();
    };
    let expiry = task.created_at_ms.saturating_add(ttl);
    let width = match ttl / 64 {
        0 => 1,
        w => (1 << w.ilog2()).min(WIDEST_BUCKET_MS),
    };
    expiry.div_ceil(width).saturating_mul(width).to_string()
}

/// A task's `q` (`lua/task.lua`): its size under the quota and its bucket.
pub(super) fn counted(task: &Task, bytes: usize) -> String {
    format!("{bytes}:{}", reservation_bucket(task))
}

/// The size and the bucket of a `q`.
pub(super) fn parse_counted(q: &str) -> Option<(u64, &str)> {
    let (bytes, bucket) = q.split_once(':')?;
    Some((bytes.parse().ok()?, bucket))
}

/// A scope's byte quota, as the steps a cluster runs around the task's own
/// scripts (standalone Redis runs them inside those).
pub(super) struct ScopeBytes<'s> {
    link: &'s Link,
}

impl Records {
    /// The per-scope byte quota's steps.
    pub(super) fn scope_bytes(&self) -> ScopeBytes<'_> {
        ScopeBytes { link: &self.link }
    }
}

impl ScopeBytes<'_> {
    /// Reserve `task`'s bytes under its scope's `quota`: the scope's reserved
    /// bytes with them, or `None` when that would exceed the quota.
    pub(super) async fn reserve(&self, task: &Task, quota: u64) -> Result<Option<u64>, RedisStoreError> {
        let bytes = encode(task)?.len();
        let mut inv = super::QUOTA.prepare_invoke();
        inv.key(self.link.keys.scope_bytes_buckets(&task.scope));
        inv.arg(quota).arg(counted(task, bytes)).arg(now_ms());
        let reserved: i64 = self.link.invoke(&inv).await?;
        Ok(u64::try_from(reserved).ok().filter(|n| *n > 0))
    }

    /// `resize.lua`: add `delta` bytes (negative to take back) to `bucket`
    /// of `scope` and its total, refusing growth past `quota` when one is
    /// given. A lapsed bucket counts nothing ([`Resized::Unreserved`]).
    pub(super) async fn count(
        &self,
        scope: &Scope,
        bucket: &str,
        delta: i64,
        quota: Option<u64>,
    ) -> Result<Resized, RedisStoreError> {
        let mut inv = super::RESIZE.prepare_invoke();
        inv.key(self.link.keys.scope_bytes_buckets(scope));
        inv.arg(bucket).arg(delta).arg(quota.map(|q| q.to_string()).unwrap_or_default()).arg(now_ms());
        Ok(match self.link.invoke::<i64>(&inv).await? {
            -2 => Resized::Refused,
            -1 => Resized::Unreserved,
            _ => Resized::Counted,
        })
    }

    /// Best effort: add `delta` bytes to `bucket` of `scope` (a write that
    /// may not be refused landed, or one counted first lost its
    /// compare-and-set). A failure leaves the count off until the bucket lapses.
    pub(super) async fn recount_bucket(&self, scope: &Scope, id: &TaskId, bucket: &str, delta: i64) {
        if delta == 0 {
            return;
        }
        if let Err(e) = self.count(scope, bucket, delta, None).await {
            tracing::warn!(error = %e, task = %id, "could not count a task's new size under its byte quota");
        }
    }

    /// Best effort: take back `task`'s reservation (its create did not happen).
    pub(super) async fn unreserve(&self, task: &Task) {
        let Ok(bytes) = encode(task).map(|doc| doc.len()) else {
            return;
        };
        let delta = -i64::try_from(bytes).unwrap_or(i64::MAX);
        if let Err(e) = self.count(&task.scope, &reservation_bucket(task), delta, None).await {
            tracing::warn!(error = %e, "could not take back a byte reservation; it lasts until its bucket ends");
        }
    }
}

/// What `resize.lua` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Resized {
    /// The task's bucket is gone (its end passed): nothing is counted.
    Unreserved,
    /// Counted.
    Counted,
    /// The growth would pass the quota; nothing changed.
    Refused,
}
