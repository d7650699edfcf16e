//! Concurrency permits that span the cluster ([`Permits`]): at most N of a
//! thing at once (a tool's runs against what it protects: `Tool::concurrency`),
//! kept by the store so every process shares one count.
//!
//! A limit (`PermitName::limit`, a tool) holds one semaphore per key
//! (`PermitName::key`: empty, a tenant, an argument's value). A permit is a
//! **lease**: its holder (a task id, fenced by the claim's attempt) holds it
//! until an expiry it renews with its task's lease, so a holder that dies
//! frees it within one lease; expired holders are purged on every acquire
//! and release. A holder whose id already holds the permit under an older
//! fence takes it over (its task was claimed again); an older fence cannot
//! renew, release or take back a newer holder's permit.
//!
//! Those that find no permit free **wait in line**, ordered by their
//! `order` (a task's creation time), then id: a permit goes only to one of
//! the first `free` waiters, so the line is kept whoever asks first. A
//! waiter is seen again each time it asks; one not seen for `waiter_ttl`
//! (a cancelled or deleted task) drops out of the line instead of blocking
//! it, and comes back at its own place if it asks again. A release answers
//! the waiters a free permit now belongs to, so their holder can wake them.
//!
//! The rule is written once in Rust ([`Semaphore`], run by the memory store)
//! and once in Lua (`acquire_permit.lua` and its siblings on Redis), and the
//! store contract holds both to it.

use std::{
    collections::{BTreeSet, HashMap},
    time::Duration,
};

use crate::error::StoreError;

/// Which semaphore: a limit and a key within it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PermitName {
    /// The limit (a tool's: every key of it lives together, one slot on Redis Cluster).
    pub limit: String,
    /// The key within the limit ("" for one count; a tenant, an argument's value).
    pub key: String,
}

/// Who asks for a permit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Its id (a task's).
    pub id: String,
    /// Its fence (the claim's attempt): an older one cannot act on a newer one's permit.
    pub fence: u64,
    /// Its place in the line (a task's creation time, Unix ms): lower first.
    pub order: u64,
}

/// How many permits, and how long a holder and a waiter last unseen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PermitTerms {
    /// Permits of the limit (at least 1).
    pub permits: u32,
    /// How long a permit lasts unless renewed (the holder's task lease).
    pub lease: Duration,
    /// How long a waiter keeps its place in the line unseen.
    pub waiter_ttl: Duration,
}

/// What an acquire answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    /// The permit is the holder's until its lease ends.
    Granted,
    /// No permit for it yet: `in_use` are held, `ahead` waiters come before it.
    Waiting {
        /// Permits held now.
        in_use: u32,
        /// Waiters in the line before it.
        ahead: u32,
    },
    /// A newer holder of the same id holds it: this one is stale.
    Fenced,
}

/// What a release answered.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Released {
    /// Whether the holder's permit (or place in the line) was given up.
    pub released: bool,
    /// The first waiters, as many as permits are free now: theirs to take.
    pub wake: Vec<String>,
}

/// One semaphore's state, for the admin view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermitUsage {
    /// The key within the limit.
    pub key: String,
    /// Permits held now.
    pub in_use: u32,
    /// Waiters in line.
    pub waiting: u32,
}

/// Concurrency permits that span the cluster, kept by the store (see the module docs).
#[async_trait::async_trait]
pub trait Permits: Send + Sync + std::fmt::Debug {
    /// Take a permit of `name` for `holder` under `terms`, or take (or keep)
    /// its place in the line, by the store's clock.
    async fn acquire_permit(
        &self,
        name: &PermitName,
        holder: &Holder,
        terms: PermitTerms,
    ) -> Result<Acquired, StoreError>;

    /// Extend `holder`'s permit by the terms' lease: `false` when it holds
    /// none (it expired, or a newer fence holds it).
    async fn renew_permit(&self, name: &PermitName, holder: &Holder, terms: PermitTerms) -> Result<bool, StoreError>;

    /// Give up `holder`'s permit and its place in the line (a stale fence
    /// gives up nothing), and answer the waiters to wake.
    async fn release_permit(
        &self,
        name: &PermitName,
        holder: &Holder,
        terms: PermitTerms,
    ) -> Result<Released, StoreError>;

    /// The keys of `limit` used lately, with their permits in use and waiters (at most 100).
    async fn permit_usage(&self, limit: &str) -> Result<Vec<PermitUsage>, StoreError>;
}

/// One semaphore (the rule every store follows; the memory store's state):
/// holders with their fence and expiry, the line by order then id, and when
/// each waiter was last seen. Times are the store's clock, Unix ms.
#[derive(Debug, Clone, Default)]
pub struct Semaphore {
    /// Holder id → (fence, expiry).
    holders: HashMap<String, (u64, u64)>,
    /// The line: (order, id).
    line: BTreeSet<(u64, String)>,
    /// Waiter id → (order, last seen).
    waiters: HashMap<String, (u64, u64)>,
}

impl Semaphore {
    /// Drop the holders whose lease ended and the waiters unseen for `waiter_ttl` at `now`.
    pub fn purge(&mut self, now: u64, waiter_ttl: Option<Duration>) {
        self.holders.retain(|_, (_, expiry)| *expiry > now);
        if let Some(ttl) = waiter_ttl {
            let ttl = ttl.as_millis() as u64;
            let stale: Vec<String> = self
                .waiters
                .iter()
                .filter(|(_, (_, seen))| seen.saturating_add(ttl) <= now)
                .map(|(id, _)| id.clone())
                .collect();
            for id in stale {
                self.leave_line(&id);
            }
        }
    }

    fn leave_line(&mut self, id: &str) {
        if let Some((order, _)) = self.waiters.remove(id) {
            self.line.remove(&(order, id.to_string()));
        }
    }

    /// Whether it holds nothing and nobody waits (the memory store drops it).
    pub fn is_idle(&self) -> bool {
        self.holders.is_empty() && self.waiters.is_empty()
    }

    /// Permits held and waiters in line.
    pub fn usage(&self) -> (u32, u32) {
        (self.holders.len() as u32, self.waiters.len() as u32)
    }

    /// [`Permits::acquire_permit`] at `now`.
    pub fn acquire(&mut self, holder: &Holder, terms: PermitTerms, now: u64) -> Acquired {
        self.purge(now, Some(terms.waiter_ttl));
        let expiry = now.saturating_add(terms.lease.as_millis() as u64);
        if let Some((fence, _)) = self.holders.get(&holder.id) {
            if *fence > holder.fence {
                return Acquired::Fenced;
            }
            self.holders.insert(holder.id.clone(), (holder.fence, expiry));
            self.leave_line(&holder.id);
            return Acquired::Granted;
        }
        self.leave_line(&holder.id);
        self.line.insert((holder.order, holder.id.clone()));
        self.waiters.insert(holder.id.clone(), (holder.order, now));
        let in_use = self.holders.len() as u32;
        let free = terms.permits.max(1).saturating_sub(in_use) as usize;
        let ahead = self.line.iter().take_while(|(_, id)| *id != holder.id).count();
        if ahead < free {
            self.leave_line(&holder.id);
            self.holders.insert(holder.id.clone(), (holder.fence, expiry));
            return Acquired::Granted;
        }
        Acquired::Waiting { in_use, ahead: ahead as u32 }
    }

    /// [`Permits::renew_permit`] at `now`.
    pub fn renew(&mut self, holder: &Holder, lease: Duration, now: u64) -> bool {
        self.purge(now, None);
        match self.holders.get_mut(&holder.id) {
            Some((fence, expiry)) if *fence == holder.fence => {
                *expiry = now.saturating_add(lease.as_millis() as u64);
                true
            }
            _ => false,
        }
    }

    /// [`Permits::release_permit`] at `now`.
    pub fn release(&mut self, holder: &Holder, terms: PermitTerms, now: u64) -> Released {
        self.purge(now, Some(terms.waiter_ttl));
        let released = match self.holders.get(&holder.id) {
            Some((fence, _)) if *fence != holder.fence => false,
            Some(_) => {
                self.holders.remove(&holder.id);
                true
            }
            None => self.waiters.contains_key(&holder.id),
        };
        if released {
            self.leave_line(&holder.id);
        }
        let free = terms.permits.max(1).saturating_sub(self.holders.len() as u32) as usize;
        Released { released, wake: self.line.iter().take(free).map(|(_, id)| id.clone()).collect() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(id: &str, fence: u64, order: u64) -> Holder {
        Holder { id: id.into(), fence, order }
    }

    const TERMS: PermitTerms =
        PermitTerms { permits: 2, lease: Duration::from_millis(1_000), waiter_ttl: Duration::from_millis(3_000) };

    #[test]
    fn two_at_once_in_order_leases_and_fences() {
        let mut s = Semaphore::default();
        // Asked out of order: the earlier task waiting keeps its place.
        assert_eq!(s.acquire(&holder("c", 1, 30), TERMS, 0), Acquired::Granted);
        assert_eq!(s.acquire(&holder("d", 1, 40), TERMS, 0), Acquired::Granted);
        assert_eq!(s.acquire(&holder("f", 1, 60), TERMS, 0), Acquired::Waiting { in_use: 2, ahead: 0 });
        assert_eq!(s.acquire(&holder("e", 1, 50), TERMS, 0), Acquired::Waiting { in_use: 2, ahead: 0 });
        assert_eq!(s.acquire(&holder("f", 1, 60), TERMS, 10), Acquired::Waiting { in_use: 2, ahead: 1 });
        // A release wakes the first waiter; a later one does not pass it.
        let released = s.release(&holder("c", 1, 30), TERMS, 20);
        assert_eq!(released, Released { released: true, wake: vec!["e".into()] });
        assert_eq!(s.acquire(&holder("f", 1, 60), TERMS, 30), Acquired::Waiting { in_use: 1, ahead: 1 });
        assert_eq!(s.acquire(&holder("e", 1, 50), TERMS, 30), Acquired::Granted);
        // A stale fence neither renews nor releases; the newer one takes over its own permit.
        assert_eq!(s.acquire(&holder("d", 2, 40), TERMS, 40), Acquired::Granted);
        assert!(!s.renew(&holder("d", 1, 40), TERMS.lease, 50));
        assert!(!s.release(&holder("d", 1, 40), TERMS, 50).released);
        assert_eq!(s.acquire(&holder("d", 1, 40), TERMS, 50), Acquired::Fenced);
        assert!(s.renew(&holder("d", 2, 40), TERMS.lease, 50));
        // Leases end: d (renewed at 50) and e (taken at 30) expire; f, still seen, gets one.
        assert_eq!(s.acquire(&holder("f", 1, 60), TERMS, 1_100), Acquired::Granted);
        // A waiter unseen past its ttl is out of the line.
        assert_eq!(s.acquire(&holder("g", 1, 70), TERMS, 1_100), Acquired::Granted);
        assert_eq!(s.acquire(&holder("h", 1, 80), TERMS, 1_100), Acquired::Waiting { in_use: 2, ahead: 0 });
        assert_eq!(s.acquire(&holder("i", 1, 90), TERMS, 4_200), Acquired::Granted, "h unseen since 1100, f g expired");
        assert_eq!(s.usage(), (1, 0));
    }
}
