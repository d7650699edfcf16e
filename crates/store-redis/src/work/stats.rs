//! The work queue's statistics (`work_stats`): `work_stats.lua` on every partition.

use std::time::Duration;

use futures::future::join_all;
use presa_store::PartitionStats;

use super::Queue;
use crate::{error::RedisStoreError, keys::GROUP};

/// A pending entry idle for longer than `max_lease` plus this was handed
/// back (`release`, or returned unclaimed: last delivery at the Unix epoch,
/// decades ago), so statistics count it as queued; a lapsed lease is idle for
/// `max_lease` plus however long its worker has been gone.
const HANDED_BACK_IDLE: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

impl Queue {
    /// Every partition's work queue (`work_stats.lua`, one round trip each, all
    /// partitions at once). Unlike the memory store, the work of a task that
    /// expired still counts until a claim drops it (nothing reads the task).
    pub(crate) async fn work_stats(&self) -> Result<Vec<PartitionStats>, RedisStoreError> {
        let handed_back_idle = self.link.cfg.max_lease.saturating_add(HANDED_BACK_IDLE).as_millis() as u64;
        let reads = (0..self.link.keys.partitions()).map(|partition| async move {
            let mut inv = super::WORK_STATS.prepare_invoke();
            inv.key(self.link.keys.work(partition)).key(self.link.keys.delayed(partition));
            inv.arg(GROUP).arg(handed_back_idle);
            let (queued, pending, age, queued_age, delayed, due_age): (i64, i64, i64, i64, i64, i64) =
                self.link.invoke(&inv).await?;
            Ok(PartitionStats {
                partition,
                queued: queued.max(0) as u64,
                pending: pending.max(0) as u64,
                oldest_pending_age_ms: u64::try_from(age).ok(),
                oldest_queued_age_ms: u64::try_from(queued_age).ok(),
                delayed: delayed.max(0) as u64,
                oldest_due_age_ms: u64::try_from(due_age).ok(),
            })
        });
        join_all(reads).await.into_iter().collect()
    }
}
