//! A claim's lease: the idle time that makes its entry recoverable when the
//! lease ends, and renewing, removing and releasing claimed work
//! (`renew.lua`, `remove_work.lua`, `release.lua`), each fenced by the
//! claim's attempt and finding its work by the claim's [`Receipt`].

use std::time::Duration;

use presa_store::Claim;

use super::{Queue, receipt::Receipt};
use crate::{error::RedisStoreError, keys::GROUP};

impl Queue {
    /// The idle time (ms) that makes an entry recoverable after `lease`.
    pub(super) fn lease_idle(&self, lease: Duration) -> u64 {
        let horizon = self.link.cfg.max_lease;
        horizon.saturating_sub(lease.min(horizon)).as_millis() as u64
    }
    /// The task key, partition and entry id a claim refers to.
    fn locate(&self, claim: &Claim) -> Result<(String, u16, String), RedisStoreError> {
        let bad = || RedisStoreError::Corrupt(format!("not a Redis work receipt: {:?}", claim.receipt));
        let Receipt { partition, entry } = claim.receipt.parse().map_err(|_| bad())?;
        let key = self.link.keys.task(&claim.task.id).ok_or_else(bad)?;
        if self.link.keys.partition_of(&claim.task.id) != Some(partition) {
            return Err(bad());
        }
        Ok((key, partition, entry))
    }

    /// The work entry of `claim`, for the write concluding it. A receipt
    /// that is not this store's (never, from its own claims) leaves the
    /// work to the claims that find the task ended.
    pub(crate) fn entry_of(&self, claim: &Claim) -> Option<String> {
        self.locate(claim).ok().map(|(_, _, entry)| entry)
    }

    /// `renew.lua`: push the claim's lease out, if it still holds the work.
    pub(crate) async fn renew(&self, claim: &Claim, lease: Duration) -> Result<bool, RedisStoreError> {
        let Ok((key, p, entry)) = self.locate(claim) else {
            return Ok(false);
        };
        let mut inv = super::RENEW.prepare_invoke();
        inv.key(key)
            .key(self.link.keys.work(p))
            .arg(GROUP)
            .arg(entry)
            .arg(claim.task.attempt)
            .arg(self.lease_idle(lease));
        // renew.lua: 1 renewed, 0 lost.
        self.link.invoke::<bool>(&inv).await
    }

    /// `remove_work.lua`: drop the claim's work, unless a newer attempt holds it.
    pub(crate) async fn remove_work(&self, claim: &Claim) -> Result<(), RedisStoreError> {
        let (key, p, entry) = self.locate(claim)?;
        let mut inv = super::REMOVE_WORK.prepare_invoke();
        inv.key(key).key(self.link.keys.work(p)).arg(GROUP).arg(entry).arg(claim.task.attempt);
        self.link.invoke::<i64>(&inv).await.map(|_| ())
    }

    /// `release.lua`: hand the claim's work back for another worker to claim at once.
    pub(crate) async fn release(&self, claim: &Claim) -> Result<(), RedisStoreError> {
        let (key, p, entry) = self.locate(claim)?;
        let mut inv = super::RELEASE.prepare_invoke();
        inv.key(key)
            .key(self.link.keys.work(p))
            .key(self.link.keys.wake(p))
            .arg(GROUP)
            .arg(entry)
            .arg(claim.task.attempt)
            .arg(self.link.topology.wake_cmd());
        self.link.invoke::<i64>(&inv).await.map(|_| ())
    }
}
