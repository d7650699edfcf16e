//! The bytes-per-scope quota (`CreateLimits::max_bytes_per_scope`).
//!
//! Every task reserves the size of its record at creation (serialised JSON:
//! arguments, client capabilities, answers) under its scope until it expires,
//! so one scope cannot fill Redis. A scope's tasks are spread over every
//! partition, so, like the active-task limit (`limits.rs`), the reservation
//! lives in the scope's own slot (`Keys::scope_bytes`, `Keys::scope_bytes_total`)
//! and is made in two steps: `quota.lua` atomically reserves unless the quota
//! would be exceeded (concurrent creates never reserve more than the quota
//! between them), then `create.lua` writes the task. When the create
//! definitely did not happen (id collision) the reservation is taken back; a
//! crash in between leaves a reservation that lasts until the would-be task's
//! expiry, erring on the side of refusing. That is how a cluster creates;
//! standalone Redis runs all three steps as one script (`create_scoped.lua`,
//! `RedisStore::create_scoped`), which has no such window.

use presa_store::{Task, util::now_ms};

use crate::{RedisStore, RedisStoreError, conn::Verbosity, scripts, store::encode};

/// The expiry of a task that never expires, as a score (2^52 ms: year 144 683).
const NEVER: u64 = 1 << 52;

/// A reservation's score: its task's expiry, Unix ms ([`NEVER`] when it never expires).
pub(crate) fn reservation_expiry(task: &Task) -> u64 {
    task.ttl_ms.map_or(NEVER, |ttl| task.created_at_ms.saturating_add(ttl))
}

impl RedisStore {
    /// Reserve `task`'s bytes under its scope's `quota`: the scope's reserved
    /// bytes with them, or `None` when that would exceed the quota.
    pub(crate) async fn reserve_bytes(&self, task: &Task, quota: u64) -> Result<Option<u64>, RedisStoreError> {
        let bytes = encode(task)?.len();
        let keys = &self.inner.keys;
        let mut inv = scripts::QUOTA.prepare_invoke();
        inv.key(keys.scope_bytes(&task.scope))
            .key(keys.scope_bytes_total(&task.scope))
            .arg(quota)
            .arg(task.id.as_str())
            .arg(bytes)
            .arg(reservation_expiry(task))
            .arg(now_ms());
        let reserved: i64 = self.invoke(&inv).await?;
        Ok(u64::try_from(reserved).ok().filter(|n| *n > 0))
    }

    /// Best effort: take back `task`'s reservation (its create did not happen).
    pub(crate) async fn unreserve_bytes(&self, task: &Task) {
        let Ok(bytes) = encode(task).map(|doc| doc.len()) else {
            return;
        };
        let keys = &self.inner.keys;
        let member = format!("{}:{bytes}", task.id);
        let zrem = redis::cmd("ZREM").arg(keys.scope_bytes(&task.scope)).arg(&member).to_owned();
        let undone = match self.query::<i64>(Verbosity::Info, &zrem).await {
            Ok(1) => {
                let decr = redis::cmd("DECRBY").arg(keys.scope_bytes_total(&task.scope)).arg(bytes).to_owned();
                self.query::<i64>(Verbosity::Info, &decr).await.map(|_| ())
            }
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = undone {
            tracing::warn!(error = %e, "could not take back a byte reservation; it lasts until its expiry");
        }
    }
}
