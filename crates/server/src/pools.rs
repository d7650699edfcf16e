//! Pod-wide pools shared between scopes: listen streams, in-request calls
//! (and the admin API's event streams, in `presa-http`). Each pool has a cap for the process and one per scope, checked and
//! counted together, so no scope takes more than its share and the process
//! never more than its total; a [`Permit`] holds one place until dropped.
//!
//! Sized together (the defaults of [`crate::ServerConfig`]), the process cap
//! is a multiple of the per-scope one: `max / max_per_scope` scopes at their
//! cap fill the pool, and the defaults make that 100.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
};

use presa_store::{Limit, Scope};
use presa_telemetry::metrics;

/// One pool: its limits, their names (what a refusal reports), and what is open.
#[derive(Debug)]
pub struct ScopedPool {
    /// Most places open at once in this process.
    max: usize,
    /// Most places one scope may hold (0: no limit beyond `max`).
    max_per_scope: usize,
    /// The two limits ([`Limit::MaxListenStreams`], [`Limit::MaxListenStreamsPerScope`]).
    names: (Limit, Limit),
    open: Mutex<Open>,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    /// Entries removed at zero.
    per_scope: HashMap<Scope, usize>,
}

/// A place in a [`ScopedPool`], given back when dropped.
#[derive(Debug)]
pub struct Permit {
    pool: Arc<ScopedPool>,
    scope: Scope,
}

impl ScopedPool {
    /// A pool of `max` places, `max_per_scope` for any one scope, whose
    /// refusals name `names` (the process's limit, then the scope's).
    pub fn new(max: usize, max_per_scope: usize, names: (Limit, Limit)) -> Arc<Self> {
        Arc::new(ScopedPool { max, max_per_scope, names, open: Mutex::default() })
    }

    /// One more place for `scope`, or the limit that is full
    /// (counted in `presa_refusals_total`).
    pub fn admit(self: &Arc<Self>, scope: &Scope) -> Result<Permit, Limit> {
        // One principal's share, whatever endpoint it calls (`Scope::principal`).
        let scope = &scope.principal();
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let refused = if open.total >= self.max {
            Some(self.names.0)
        } else if self.max_per_scope > 0 && open.per_scope.get(scope).copied().unwrap_or(0) >= self.max_per_scope {
            Some(self.names.1)
        } else {
            None
        };
        if let Some(limit) = refused {
            metrics::refusal(limit);
            return Err(limit);
        }
        open.total += 1;
        *open.per_scope.entry(scope.clone()).or_default() += 1;
        Ok(Permit { pool: self.clone(), scope: scope.clone() })
    }

    /// Places open now.
    pub fn open(&self) -> usize {
        self.open.lock().unwrap_or_else(PoisonError::into_inner).total
    }
}

impl Permit {
    /// The scope holding this place.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut open = self.pool.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.per_scope.get_mut(&self.scope) {
            *n -= 1;
            if *n == 0 {
                open.per_scope.remove(&self.scope);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(s: &str) -> Scope {
        Scope { tenant: "t".into(), subject: s.into(), endpoint: None }
    }

    #[test]
    fn each_scope_gets_its_share_and_the_process_its_total() {
        let (all, each) = (Limit::MaxInflightCalls, Limit::MaxInflightCallsPerScope);
        let pool = ScopedPool::new(3, 2, (all, each));
        let a1 = pool.admit(&scope("a")).unwrap();
        let _a2 = pool.admit(&scope("a")).unwrap();
        assert_eq!(pool.admit(&scope("a")).unwrap_err(), each);
        let _b = pool.admit(&scope("b")).unwrap();
        assert_eq!(pool.admit(&scope("c")).unwrap_err(), all);
        assert_eq!(pool.open(), 3);
        assert_eq!(a1.scope(), &scope("a"));
        drop(a1);
        let _c = pool.admit(&scope("c")).unwrap();
        assert_eq!(pool.open(), 3);
    }

    #[test]
    fn no_per_scope_limit_at_zero() {
        let pool = ScopedPool::new(2, 0, (Limit::MaxListenStreams, Limit::MaxListenStreamsPerScope));
        let _held: Vec<_> = (0..2).map(|_| pool.admit(&scope("a")).unwrap()).collect();
        assert_eq!(pool.admit(&scope("a")).unwrap_err(), Limit::MaxListenStreams);
    }
}
