//! Worker slots: how many handlers run at once, and how many may wait for input.
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

use std::sync::{Arc, Mutex};

use presa_telemetry::metrics::{self, WorkerGauges};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// The two pools of one worker, and the gauges that report them.
#[derive(Debug, Clone)]
pub(crate) struct Slots {
    run: Arc<Semaphore>,
    parked: Arc<Semaphore>,
    gauges: WorkerGauges,
}

impl Slots {
    /// `run` handlers at once, plus up to `parked` waiting for input without a run slot.
    pub(crate) fn new(run: usize, parked: usize) -> Self {
        let run = run.max(1);
        let gauges = metrics::worker_capacity(run, parked);
        Slots { run: Arc::new(Semaphore::new(run)), parked: Arc::new(Semaphore::new(parked)), gauges }
    }

    /// Wait for a free run slot.
    pub(crate) async fn acquire(&self) -> OwnedSemaphorePermit {
        self.run.clone().acquire_owned().await.expect("the run semaphore is never closed")
    }

    /// Run slots free now.
    pub(crate) fn free(&self) -> usize {
        self.run.available_permits()
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
/// `presa_worker_tasks`) by what it changed, and dropping the slot takes
/// back whatever it still counts.
#[derive(Debug)]
pub(crate) struct Slot {
    slots: Slots,
    state: Mutex<State>,
}

impl Slot {
    /// A handler starting with `permit`, a run slot of `slots`.
    pub(crate) fn running(slots: Slots, permit: OwnedSemaphorePermit) -> Self {
        slots.gauges.run_slots_in_use.increment(1.0);
        slots.gauges.running.increment(1.0);
        Slot { slots, state: Mutex::new(State { held: Held::Running(permit), waiting: false }) }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// About to wait for input: give the run slot back if a parked slot is free.
    /// Returns whether it did.
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
        match self.slots.parked.clone().try_acquire_owned() {
            Ok(parked) => {
                state.held = Held::Parked(parked);
                g.run_slots_in_use.decrement(1.0);
                g.parked_slots_in_use.increment(1.0);
                true
            }
            Err(_) => false,
        }
    }

    /// The answers arrived: wait for a run slot (unless `cancel` fires first,
    /// then `false`), then give the parked slot back.
    pub(crate) async fn resume(&self, cancel: &CancellationToken) -> bool {
        if !matches!(self.state().held, Held::Parked(_)) {
            self.stop_waiting(&mut self.state());
            return true;
        }
        let permit = tokio::select! {
            p = self.slots.acquire() => p,
            _ = cancel.cancelled() => return false,
        };
        let mut state = self.state();
        self.stop_waiting(&mut state);
        if matches!(state.held, Held::Parked(_)) {
            self.slots.gauges.parked_slots_in_use.decrement(1.0);
            self.slots.gauges.run_slots_in_use.increment(1.0);
            state.held = Held::Running(permit);
        }
        true
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
            Held::Running(_) => g.run_slots_in_use.decrement(1.0),
            Held::Parked(_) => g.parked_slots_in_use.decrement(1.0),
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

    #[tokio::test]
    async fn a_parked_handler_frees_its_run_slot_until_it_resumes() {
        let slots = Slots::new(1, 1);
        let a = Slot::running(slots.clone(), slots.acquire().await);
        assert_eq!(slots.free(), 0);
        assert!(a.park());
        assert_eq!(slots.free(), 1, "parked: the run slot is free for other work");
        let b = Slot::running(slots.clone(), slots.acquire().await);
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
        let slots = Slots::new(1, 1);
        let a = Slot::running(slots.clone(), slots.acquire().await);
        assert!(a.park());
        let _other = slots.acquire().await;
        let cancel = CancellationToken::new();
        cancel.cancel();
        assert!(!a.resume(&cancel).await);
    }
}
