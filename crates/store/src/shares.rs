//! Fair shares at claim time: how many more work items of each scope one
//! claim may take.
//!
//! A worker caps the run slots any one scope (principal) holds
//! (`WorkerConfig::max_running_per_scope`). It tells the store, with every
//! claim, how much room each scope has left on it; the store then skips the
//! work of a scope without room (it stays queued, in order, for a worker
//! that has room, or for this one once the scope's work ends) and claims the
//! work behind it. So one principal's backlog, however long, never stands
//! between another principal and a free slot: the head of a shared FIFO
//! queue is not allowed to block it.
//!
//! The anonymous scope ([`Scope::anonymous`], every caller of a server
//! without authentication) is one principal by definition: no cap applies to
//! it, so a single-tenant deployment runs as many tasks at once as before.
//!
//! Pure bookkeeping, no IO: [`Shares::take`] is the one admission rule every
//! backend applies.

use std::collections::HashMap;

use presa_tasks::Scope;

/// Room per scope for one claim. `Shares::default()` admits everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shares {
    /// The most run slots one scope may hold; `None`: no cap.
    cap: Option<usize>,
    /// Slots each scope holds now (scopes not named hold none).
    held: HashMap<Scope, usize>,
}

impl Shares {
    /// Every scope may hold up to `cap` slots; none holds any yet.
    pub fn capped(cap: usize) -> Self {
        Shares { cap: Some(cap), held: HashMap::new() }
    }

    /// Record that `scope` already holds `n` slots.
    pub fn with_held(mut self, scope: Scope, n: usize) -> Self {
        self.held.insert(scope.principal(), n);
        self
    }

    /// Whether work of `scope` may be claimed now.
    pub fn admits(&self, scope: &Scope) -> bool {
        // Counted by principal (`Scope::principal`): one share across endpoints.
        scope.is_anonymous() || self.cap.is_none_or(|cap| self.held.get(&scope.principal()).copied().unwrap_or(0) < cap)
    }

    /// Admit one work item of `scope` (counting it), or refuse it when the
    /// scope is at its cap.
    pub fn take(&mut self, scope: &Scope) -> bool {
        if !self.admits(scope) {
            return false;
        }
        if self.cap.is_some() && !scope.is_anonymous() {
            *self.held.entry(scope.principal()).or_default() += 1;
        }
        true
    }

    /// Whether any scope could be refused (a cap is set).
    pub fn is_capped(&self) -> bool {
        self.cap.is_some()
    }

    /// The cap, if any.
    pub fn cap(&self) -> Option<usize> {
        self.cap
    }

    /// The scopes at their cap now (a backend may skip their work without
    /// reading it).
    pub fn full(&self) -> impl Iterator<Item = &Scope> {
        self.held.iter().filter(|(_, n)| self.cap.is_some_and(|cap| **n >= cap)).map(|(s, _)| s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(s: &str) -> Scope {
        Scope { tenant: "t".into(), subject: s.into(), endpoint: None }
    }

    #[test]
    fn default_admits_everything() {
        let mut s = Shares::default();
        assert!((0..1000).all(|_| s.take(&scope("a"))));
        assert!(!s.is_capped());
        assert_eq!(s.full().count(), 0);
    }

    #[test]
    fn a_scope_at_its_cap_is_refused_and_others_are_not() {
        let mut s = Shares::capped(2).with_held(scope("a"), 1);
        assert!(s.take(&scope("a")));
        assert!(!s.take(&scope("a")), "a holds 2 of 2");
        assert!(s.take(&scope("b")));
        assert!(s.take(&scope("b")));
        assert!(!s.admits(&scope("b")));
        let mut full: Vec<_> = s.full().map(|s| s.subject.clone()).collect();
        full.sort();
        assert_eq!(full, ["a", "b"]);
        assert!(s.admits(&scope("c")));
    }

    #[test]
    fn the_anonymous_scope_has_no_cap() {
        let mut s = Shares::capped(1).with_held(Scope::anonymous(), 5);
        assert!((0..100).all(|_| s.take(&Scope::anonymous())));
        assert!(!s.take(&scope("a")) || !s.take(&scope("a")));
    }

    #[test]
    fn a_cap_of_zero_admits_nothing() {
        let mut s = Shares::capped(0);
        assert!(!s.take(&scope("a")));
    }
}
