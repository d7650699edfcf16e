//! Worker slots: how many handlers run at once, how many may wait for
//! input, and how many of either one scope (principal) may hold.
//!
//! A worker holds one *run* slot per handler that is doing work
//! (`WorkerConfig::concurrency`). A handler that parks on input
//! ([`crate::ToolContext::input`]) swaps its run slot for a *parked* slot
//! (`WorkerConfig::max_parked`), so tasks waiting for a client never keep
//! running work from starting; when its answers arrive it waits for a run slot
//! again before it continues. When every parked slot is taken, a parking
//! handler keeps its run slot (the old behaviour), so parked work stays
//! bounded by `concurrency + max_parked` handlers per worker. The lease of a
//! parked task is still renewed and its writes still fenced: only the slot changes.
//!
//! **Fair shares.** One scope holds at most its share of each pool
//! (`WorkerConfig::run_share`, `WorkerConfig::parked_share`): the worker
//! claims with [`Slots::shares`], so the store skips (and keeps queued) the
//! work of a scope at its run share; a handler of a scope at its parked
//! share keeps its run slot instead of parking; and a resuming handler waits
//! until its scope is under its run share again. So however much work one
//! principal queues or parks, the rest of the pool stays free for others.
//! The anonymous scope (no authentication: one principal) has no share.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use presa_store::{Scope, Shares};
use presa_telemetry::metrics::{self, WorkerGauges};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// What one scope holds of a worker's pools.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Use {
    running: usize,
    parked: usize,
}

/// Each scope's use of the pools, and the caps on it.
#[derive(Debug)]
struct Scopes {
    /// The most run slots one scope holds (`None`: no cap).
    run_cap: Option<usize>,
    /// The most parked slots one scope holds (`None`: no cap).
    parked_cap: Option<usize>,
    /// Scopes holding anything (removed when they hold nothing).
    held: Mutex<HashMap<Scope, Use>>,
    /// Pinged whenever a scope gives back a run slot.
    freed: Notify,
}

impl Scopes {
    fn held(&self) -> MutexGuard<'_, HashMap<Scope, Use>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Change `scope`'s use by `f`; forget the scope when it holds nothing.
    fn change(&self, scope: &Scope, f: impl FnOnce(&mut Use)) {
        let mut held = self.held();
        let u = held.entry(scope.clone()).or_default();
        let before = u.running;
        f(u);
        let freed = u.running < before;
        if *u == Use::default() {
            held.remove(scope);
        }
        drop(held);
        if freed {
            self.freed.notify_waiters();
        }
    }
}

/// The two pools of one worker, and the gauges that report them.
#[derive(Debug, Clone)]
pub(crate) struct Slots {
    run: Arc<Semaphore>,
    parked: Arc<Semaphore>,
    scopes: Arc<Scopes>,
    gauges: WorkerGauges,
}

impl Slots {
    /// `run` handlers at once, plus up to `parked` waiting for input without
    /// a run slot; one scope holds at most `run_cap` and `parked_cap` of them.
    pub(crate) fn new(run: usize, parked: usize, run_cap: Option<usize>, parked_cap: Option<usize>) -> Self {
        let run = run.max(1);
        let gauges = metrics::worker_capacity(run, parked);
        let scopes = Scopes { run_cap, parked_cap, held: Mutex::default(), freed: Notify::new() };
        Slots {
            run: Arc::new(Semaphore::new(run)),
            parked: Arc::new(Semaphore::new(parked)),
            scopes: Arc::new(scopes),
            gauges,
        }
    }

    /// Wait for a free run slot.
    pub(crate) async fn acquire(&self) -> OwnedSemaphorePermit {
        self.run.clone().acquire_owned().await.expect("the run semaphore is never closed")
    }

    /// Run slots free now.
    pub(crate) fn free(&self) -> usize {
        self.run.available_permits()
    }

    /// The room each scope has for new work now, for a claim.
    pub(crate) fn shares(&self) -> Shares {
        let Some(cap) = self.scopes.run_cap else {
            return Shares::default();
        };
        let held = self.scopes.held();
        held.iter().fold(Shares::capped(cap), |s, (scope, u)| s.with_held(scope.clone(), u.running))
    }
}

/// One run share of a scope taken by a resuming handler before it has its
/// run slot: given back on drop unless disarmed (the handler now runs).
struct RunShare<'a> {
    scopes: &'a Scopes,
    scope: &'a Scope,
    armed: bool,
}

impl Drop for RunShare<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.scopes.change(self.scope, |u| u.running = u.running.saturating_sub(1));
        }
    }
}

/// What a handler holds; the permits are held for their `Drop` (freeing the slot).
#[derive(Debug)]
enum Held {
    Running(#[allow(dead_code)] OwnedSemaphorePermit),
    Parked(#[allow(dead_code)] OwnedSemaphorePermit),
    Nothing,
}

/// A handler's slot and whether it waits for input (with either slot).
#[derive(Debug)]
struct State {
    held: Held,
    waiting: bool,
}

/// The slot one handler holds: a run slot, or a parked slot while it waits for input.
///
/// Every change moves the worker's gauges (`presa_worker_slots_in_use`,
/// `presa_worker_tasks`) and its scope's use by what it changed, and
/// dropping the slot takes back whatever it still counts.
#[derive(Debug)]
pub(crate) struct Slot {
    slots: Slots,
    scope: Scope,
    state: Mutex<State>,
}

impl Slot {
    /// A handler of `scope` starting with `permit`, a run slot of `slots`.
    pub(crate) fn running(slots: Slots, permit: OwnedSemaphorePermit, scope: &Scope) -> Self {
        // A principal's shares span the endpoints its tasks were made on.
        let scope = scope.principal();
        slots.gauges.run_slots_in_use.increment(1.0);
        slots.gauges.running.increment(1.0);
        slots.scopes.change(&scope, |u| u.running += 1);
        Slot { slots, scope, state: Mutex::new(State { held: Held::Running(permit), waiting: false }) }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// About to wait for input: give the run slot back if a parked slot is
    /// free and the scope is under its parked share. Returns whether it did.
    pub(crate) fn park(&self) -> bool {
        let mut state = self.state();
        if !matches!(state.held, Held::Running(_)) {
            return false;
        }
        let g = &self.slots.gauges;
        if !state.waiting {
            state.waiting = true;
            g.running.decrement(1.0);
            g.input_required.increment(1.0);
        }
        let scopes = &self.slots.scopes;
        let parked_here = scopes.held().get(&self.scope).map_or(0, |u| u.parked);
        if !self.scope.is_anonymous() && scopes.parked_cap.is_some_and(|cap| parked_here >= cap) {
            return false;
        }
        match self.slots.parked.clone().try_acquire_owned() {
            Ok(parked) => {
                state.held = Held::Parked(parked);
                scopes.change(&self.scope, |u| {
                    u.running = u.running.saturating_sub(1);
                    u.parked += 1;
                });
                g.run_slots_in_use.decrement(1.0);
                g.parked_slots_in_use.increment(1.0);
                true
            }
            Err(_) => false,
        }
    }

    /// The answers arrived: wait until the scope is under its run share and
    /// a run slot is free (unless `cancel` fires first, then `false`), then
    /// give the parked slot back.
    pub(crate) async fn resume(&self, cancel: &CancellationToken) -> bool {
        if !matches!(self.state().held, Held::Parked(_)) {
            self.stop_waiting(&mut self.state());
            return true;
        }
        // The scope's share first, then the slot.
        let Some(mut share) = self.take_run_share(cancel).await else {
            return false;
        };
        let permit = tokio::select! {
            p = self.slots.acquire() => p,
            _ = cancel.cancelled() => return false,
        };
        let mut state = self.state();
        self.stop_waiting(&mut state);
        if matches!(state.held, Held::Parked(_)) {
            self.slots.gauges.parked_slots_in_use.decrement(1.0);
            self.slots.gauges.run_slots_in_use.increment(1.0);
            self.slots.scopes.change(&self.scope, |u| u.parked = u.parked.saturating_sub(1));
            state.held = Held::Running(permit);
            // The run share taken now belongs to the running handler.
            share.armed = false;
        }
        true
    }

    /// Count this handler in its scope's run share as soon as the scope is
    /// under it; `None` if `cancel` fires first. The share goes back when the
    /// returned guard drops armed.
    async fn take_run_share(&self, cancel: &CancellationToken) -> Option<RunShare<'_>> {
        let scopes = &self.slots.scopes;
        loop {
            let freed = scopes.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut held = scopes.held();
                let u = held.entry(self.scope.clone()).or_default();
                if self.scope.is_anonymous() || scopes.run_cap.is_none_or(|cap| u.running < cap) {
                    u.running += 1;
                    return Some(RunShare { scopes, scope: &self.scope, armed: true });
                }
            }
            tokio::select! {
                _ = freed => {}
                _ = cancel.cancelled() => return None,
            }
        }
    }

    /// No longer waiting for input: count the handler as running again.
    fn stop_waiting(&self, state: &mut State) {
        if state.waiting && !matches!(state.held, Held::Nothing) {
            state.waiting = false;
            self.slots.gauges.input_required.decrement(1.0);
            self.slots.gauges.running.increment(1.0);
        }
    }

    /// The handler ended: free whatever it holds (also done on drop).
    pub(crate) fn release(&self) {
        let mut state = self.state();
        let g = &self.slots.gauges;
        match state.held {
            Held::Running(_) => {
                g.run_slots_in_use.decrement(1.0);
                self.slots.scopes.change(&self.scope, |u| u.running = u.running.saturating_sub(1));
            }
            Held::Parked(_) => {
                g.parked_slots_in_use.decrement(1.0);
                self.slots.scopes.change(&self.scope, |u| u.parked = u.parked.saturating_sub(1));
            }
            Held::Nothing => return,
        }
        let task = if state.waiting { &g.input_required } else { &g.running };
        task.decrement(1.0);
        *state = State { held: Held::Nothing, waiting: false };
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(s: &str) -> Scope {
        Scope { tenant: "t".into(), subject: s.into(), endpoint: None }
    }

    #[tokio::test]
    async fn claims_see_each_scopes_room() {
        let slots = Slots::new(4, 4, Some(2), Some(1));
        let a1 = Slot::running(slots.clone(), slots.acquire().await, &scope("a"));
        let _a2 = Slot::running(slots.clone(), slots.acquire().await, &scope("a"));
        let _b = Slot::running(slots.clone(), slots.acquire().await, &scope("b"));
        let shares = slots.shares();
        assert!(!shares.admits(&scope("a")), "a holds its 2 of 2");
        assert!(shares.admits(&scope("b")));
        assert!(shares.admits(&scope("c")));
        // Parked, a's handler frees a's share for new work.
        assert!(a1.park());
        assert!(slots.shares().admits(&scope("a")));
        assert_eq!(Slots::new(4, 4, None, None).shares(), Shares::default());
    }

    #[tokio::test]
    async fn a_scope_at_its_parked_share_keeps_its_run_slot() {
        let slots = Slots::new(4, 4, None, Some(1));
        let a1 = Slot::running(slots.clone(), slots.acquire().await, &scope("a"));
        let a2 = Slot::running(slots.clone(), slots.acquire().await, &scope("a"));
        let b = Slot::running(slots.clone(), slots.acquire().await, &scope("b"));
        assert!(a1.park());
        assert!(!a2.park(), "a holds its one parked slot");
        assert!(b.park(), "b still parks");
        assert_eq!(slots.parked.available_permits(), 2);
    }

    #[tokio::test]
    async fn resuming_waits_for_the_scopes_run_share() {
        let slots = Slots::new(4, 4, Some(1), None);
        let a1 = Slot::running(slots.clone(), slots.acquire().await, &scope("a"));
        assert!(a1.park());
        let a2 = Slot::running(slots.clone(), slots.acquire().await, &scope("a"));
        let resumed = tokio::spawn(async move { (a1.resume(&CancellationToken::new()).await, a1) });
        tokio::task::yield_now().await;
        assert!(!resumed.is_finished(), "a is at its run share: resuming waits though slots are free");
        a2.release();
        let (ok, _a1) = resumed.await.unwrap();
        assert!(ok);
        assert!(!slots.shares().admits(&scope("a")));
    }

    #[tokio::test]
    async fn a_parked_handler_frees_its_run_slot_until_it_resumes() {
        let slots = Slots::new(1, 1, None, None);
        let a = Slot::running(slots.clone(), slots.acquire().await, &scope("a"));
        assert_eq!(slots.free(), 0);
        assert!(a.park());
        assert_eq!(slots.free(), 1, "parked: the run slot is free for other work");
        let b = Slot::running(slots.clone(), slots.acquire().await, &scope("a"));
        // Only one parked slot: a second parking handler keeps its run slot.
        assert!(!b.park());
        assert_eq!(slots.free(), 0);
        let resumed = tokio::spawn(async move { (a.resume(&CancellationToken::new()).await, a) });
        tokio::task::yield_now().await;
        assert!(!resumed.is_finished(), "resuming waits for a run slot");
        b.release();
        let (ok, a) = resumed.await.unwrap();
        assert!(ok);
        assert_eq!(slots.free(), 0);
        assert_eq!(slots.parked.available_permits(), 1);
        a.release();
        assert_eq!(slots.free(), 1);
    }

    #[tokio::test]
    async fn cancel_stops_waiting_for_a_run_slot() {
        let slots = Slots::new(1, 1, None, None);
        let a = Slot::running(slots.clone(), slots.acquire().await, &scope("a"));
        assert!(a.park());
        let _other = slots.acquire().await;
        let cancel = CancellationToken::new();
        cancel.cancel();
        assert!(!a.resume(&cancel).await);
    }
}
