//! The bytes-per-scope quota (`CreateLimits::max_bytes_per_scope`).
//!
//! Every task created under a quota reserves the size of its record
//! (serialised JSON: arguments, client capabilities, answers) under its
//! scope until it expires, and is counted again at the size each write
//! leaves it (answers, status messages, results), so one scope cannot fill
//! Redis. A client write that would grow a live task past the quota is
//! refused (`presa_store::growth_quota`). The layout of the scope's three
//! keys is `lua/bytes.lua`'s; they expire with the last reservation.
//!
//! A scope's tasks are spread over every partition, so, like the active-task
//! limit (`limits.rs`), the reservations live in the scope's own slot.
//! Standalone Redis takes a task's and its scope's keys in one script:
//! `create_scoped.lua` admits, reserves and creates, `transition.lua`
//! compares-and-sets and resizes, atomically. A cluster runs the steps one
//! after another:
//! - create: `quota.lua` reserves unless the quota would be exceeded
//!   (concurrent creates never reserve more than the quota between them),
//!   then `create.lua` writes the task; when the create definitely did not
//!   happen (id collision) the reservation is taken back; a crash in between
//!   leaves a reservation that lasts until the would-be task's expiry,
//!   erring on the side of refusing;
//! - a client write that grows a live task: `resize.lua` counts the new size
//!   first (refusing growth past the quota), then `transition.lua`; a write
//!   that then loses its compare-and-set puts the size back to what is stored;
//! - a write that may not be refused (a worker's, one ending the task):
//!   `transition.lua`, then, when it ends the task, `resize.lua` counts its
//!   final size. A worker's status messages and input requests in between
//!   are counted at the next client write or at the end, not one by one:
//!   one round trip per task instead of one per write.

use presa_store::{Scope, Task, TaskId, util::now_ms};

use super::Records;
use crate::{conn::Verbosity, error::RedisStoreError, link::Link, record::encode};

/// The expiry of a task that never expires, as a score (2^52 ms: year 144 683).
const NEVER: u64 = 1 << 52;

/// A reservation's score: its task's expiry, Unix ms ([`NEVER`] when it never expires).
pub(super) fn reservation_expiry(task: &Task) -> u64 {
    task.ttl_ms.map_or(NEVER, |ttl| task.created_at_ms.saturating_add(ttl))
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
        for key in self.link.keys.scope_byte_keys(&task.scope) {
            inv.key(key);
        }
        inv.arg(quota).arg(task.id.as_str()).arg(bytes).arg(reservation_expiry(task)).arg(now_ms());
        let reserved: i64 = self.link.invoke(&inv).await?;
        Ok(u64::try_from(reserved).ok().filter(|n| *n > 0))
    }

    /// `resize.lua`: count task `id` of `scope` at `bytes`, refusing growth
    /// past `quota` when one is given; `settle`: the write that ends the task
    /// landed, so the reservation is settled at that size, at this score
    /// (the task's [`reservation_expiry`]; `bytes.lua`).
    pub(super) async fn resize(
        &self,
        scope: &Scope,
        id: &TaskId,
        bytes: usize,
        quota: Option<u64>,
        settle: Option<u64>,
    ) -> Result<Resized, RedisStoreError> {
        let mut inv = super::RESIZE.prepare_invoke();
        for key in self.link.keys.scope_byte_keys(scope) {
            inv.key(key);
        }
        inv.arg(id.as_str())
            .arg(bytes)
            .arg(quota.map(|q| q.to_string()).unwrap_or_default())
            .arg(now_ms())
            .arg(settle.map(|score| score.to_string()).unwrap_or_default());
        Ok(match self.link.invoke::<i64>(&inv).await? {
            -2 => Resized::Refused,
            before => u64::try_from(before).map_or(Resized::Unreserved, Resized::Was),
        })
    }

    /// Best effort: count task `id` of `scope` at `bytes` (a write that may
    /// not be refused landed, or one that was counted first lost its
    /// compare-and-set). A failure leaves the count off until the next write
    /// counts the task again, or its expiry. `settle` as [`resize`](Self::resize)'s.
    pub(super) async fn recount(&self, scope: &Scope, id: &TaskId, bytes: usize, settle: Option<u64>) {
        if let Err(e) = self.resize(scope, id, bytes, None, settle).await {
            tracing::warn!(error = %e, task = %id, "could not count a task's new size under its byte quota");
        }
    }

    /// Best effort: take back `task`'s reservation (its create did not happen).
    pub(super) async fn unreserve(&self, task: &Task) {
        let Ok(bytes) = encode(task).map(|doc| doc.len()) else {
            return;
        };
        let [reservations, sizes, total] = self.link.keys.scope_byte_keys(&task.scope);
        let zrem = redis::cmd("ZREM").arg(reservations).arg(task.id.as_str()).to_owned();
        let undone = match self.link.query::<i64>(Verbosity::Info, &zrem).await {
            Ok(1) => {
                let hdel = redis::cmd("HDEL").arg(sizes).arg(task.id.as_str()).to_owned();
                let decr = redis::cmd("DECRBY").arg(total).arg(bytes).to_owned();
                match self.link.query::<i64>(Verbosity::Info, &hdel).await {
                    Ok(_) => self.link.query::<i64>(Verbosity::Info, &decr).await.map(|_| ()),
                    Err(e) => Err(e),
                }
            }
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = undone {
            tracing::warn!(error = %e, "could not take back a byte reservation; it lasts until its expiry");
        }
    }
}

/// What `resize.lua` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Resized {
    /// The task has no reservation (created without a quota, or expired):
    /// nothing is counted.
    Unreserved,
    /// Counted at the new size; it was counted at this many bytes before.
    Was(u64),
    /// The growth would pass the quota; nothing changed.
    Refused,
}
