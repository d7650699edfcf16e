//! The memory store's [`Permits`]: one [`Semaphore`] per limit and key in
//! the shared state, run under the lock by the same rule the Redis scripts
//! follow; a semaphore that holds nothing and has nobody waiting is dropped
//! by the purge.

use std::time::Duration;

use crate::{
    error::StoreError,
    memory::{MemoryStore, State},
    permits::Acquired,
    permits::Holder,
    permits::PermitName,
    permits::PermitTerms,
    permits::PermitUsage,
    permits::Permits,
    permits::Released,
    permits::Semaphore,
    util::now_ms,
};

/// How long a waiter unseen stays in line when the purge (which knows no
/// terms) meets it: a bound on memory, past any sensible waiter ttl.
const IDLE_WAITER: Duration = Duration::from_secs(3_600);

impl State {
    /// Drop expired holders, long-unseen waiters and the semaphores left idle.
    pub(super) fn purge_permits(&mut self, now: u64) {
        for keys in self.permits.values_mut() {
            for semaphore in keys.values_mut() {
                semaphore.purge(now, Some(IDLE_WAITER));
            }
            keys.retain(|_, s| !s.is_idle());
        }
        self.permits.retain(|_, keys| !keys.is_empty());
    }

    fn semaphore(&mut self, name: &PermitName) -> &mut Semaphore {
        self.permits.entry(name.limit.clone()).or_default().entry(name.key.clone()).or_default()
    }
}

#[async_trait::async_trait]
impl Permits for MemoryStore {
    async fn acquire_permit(
        &self,
        name: &PermitName,
        holder: &Holder,
        terms: PermitTerms,
    ) -> Result<Acquired, StoreError> {
        Ok(self.state().semaphore(name).acquire(holder, terms, now_ms()))
    }

    async fn renew_permit(&self, name: &PermitName, holder: &Holder, terms: PermitTerms) -> Result<bool, StoreError> {
        Ok(self.state().semaphore(name).renew(holder, terms.lease, now_ms()))
    }

    async fn release_permit(
        &self,
        name: &PermitName,
        holder: &Holder,
        terms: PermitTerms,
    ) -> Result<Released, StoreError> {
        Ok(self.state().semaphore(name).release(holder, terms, now_ms()))
    }

    async fn permit_usage(&self, limit: &str) -> Result<Vec<PermitUsage>, StoreError> {
        let now = now_ms();
        let mut s = self.state();
        let Some(keys) = s.permits.get_mut(limit) else { return Ok(Vec::new()) };
        let mut usage: Vec<PermitUsage> = keys
            .iter_mut()
            .map(|(key, semaphore)| {
                semaphore.purge(now, None);
                let (in_use, waiting) = semaphore.usage();
                PermitUsage { key: key.clone(), in_use, waiting }
            })
            .collect();
        usage.sort_by(|a, b| a.key.cmp(&b.key));
        usage.truncate(100);
        Ok(usage)
    }
}
