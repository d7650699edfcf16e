//! A claim's lease: the idle time that makes its entry recoverable when the
//! lease ends, and renewing, removing and releasing claimed work
//! (`renew.lua`, `remove_work.lua`, `release.lua`), each fenced by the
//! claim's attempt. Receipts are `<partition>/<entry id>`.

use std::time::Duration;

use presa_store::Claim;

use crate::{RedisStore, RedisStoreError, keys::GROUP, scripts};

impl RedisStore {
    /// The idle time (ms) that makes an entry recoverable after `lease`.
    pub(super) fn lease_idle(&self, lease: Duration) -> u64 {
        let horizon = self.inner.cfg.max_lease;
        horizon.saturating_sub(lease.min(horizon)).as_millis() as u64
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
}
