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

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// The two pools of one worker.
#[derive(Debug, Clone)]
pub(crate) struct Slots {
    run: Arc<Semaphore>,
    parked: Arc<Semaphore>,
}

impl Slots {
    /// `run` handlers at once, plus up to `parked` waiting for input without a run slot.
    pub(crate) fn new(run: usize, parked: usize) -> Self {
        Slots { run: Arc::new(Semaphore::new(run.max(1))), parked: Arc::new(Semaphore::new(parked)) }
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

/// The slot one handler holds: a run slot, or a parked slot while it waits for input.
#[derive(Debug)]
pub(crate) struct Slot {
    slots: Slots,
    held: Mutex<Held>,
}

impl Slot {
    /// A handler starting with `permit`, a run slot of `slots`.
    pub(crate) fn running(slots: Slots, permit: OwnedSemaphorePermit) -> Self {
        Slot { slots, held: Mutex::new(Held::Running(permit)) }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// About to wait for input: give the run slot back if a parked slot is free.
    /// Returns whether it did.
    pub(crate) fn park(&self) -> bool {
        let mut held = self.held();
        if !matches!(*held, Held::Running(_)) {
            return false;
        }
        match self.slots.parked.clone().try_acquire_owned() {
            Ok(parked) => {
                *held = Held::Parked(parked);
                true
            }
            Err(_) => false,
        }
    }

    /// The answers arrived: wait for a run slot (unless `cancel` fires first,
    /// then `false`), then give the parked slot back.
    pub(crate) async fn resume(&self, cancel: &CancellationToken) -> bool {
        if !matches!(*self.held(), Held::Parked(_)) {
            return true;
        }
        let permit = tokio::select! {
            p = self.slots.acquire() => p,
            _ = cancel.cancelled() => return false,
        };
        *self.held() = Held::Running(permit);
        true
    }

    /// The handler ended: free whatever it holds (also done on drop).
    pub(crate) fn release(&self) {
        *self.held() = Held::Nothing;
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
