//! Group commit: a combining queue that turns concurrent per-task writes
//! (creates on an API pod, concludes on a worker) into fewer script calls.
//!
//! A caller [`submit`](Batcher::submit)s its item and awaits its own reply.
//! Items wait in a queue; when no flush is in flight, the submitter spawns
//! one (on its own runtime, so a caller that stops waiting never strands
//! the others) that drains up to `max` items, splits them into the groups
//! one call may take ([`Flush::groups`]: one on a standalone server, one per
//! partition on a cluster), runs the groups concurrently, answers each item,
//! and goes on while items are queued. There is no timer: a lone item goes
//! out at once (its latency is unchanged), and items arriving while a flush
//! is in flight form the next batch, so batches grow with the load.
//!
//! A group's failure (its call failed as a whole) reaches every item of it;
//! a flush that panics answers its items with
//! [`RedisStoreError::Unanswered`] and the queue goes on.

use std::{
    future::Future,
    sync::{Arc, Mutex, PoisonError},
};

use futures::{FutureExt, future::join_all};
use tokio::sync::oneshot;

use crate::error::RedisStoreError;

/// What a [`Batcher`] runs: how items are grouped, and one call per group.
pub(crate) trait Flush: Send + Sync + 'static {
    /// What a caller submits.
    type Item: Send + 'static;
    /// What each item is answered.
    type Reply: Send + 'static;

    /// `items` (each `item(t)`) in the groups one call may take, each in
    /// the order given.
    fn groups<T>(&self, items: Vec<T>, item: impl Fn(&T) -> &Self::Item) -> Vec<Vec<T>>;

    /// One call for `group`: an answer per item, in order, or the call's
    /// error (then every item of the group gets it).
    fn flush(&self, group: Vec<Self::Item>) -> impl Future<Output = Result<Vec<Self::Reply>, RedisStoreError>> + Send;
}

/// A combining queue over a [`Flush`]; cheap to clone (its state is shared).
pub(crate) struct Batcher<F: Flush> {
    shared: Arc<Shared<F>>,
}

impl<F: Flush> Clone for Batcher<F> {
    fn clone(&self) -> Self {
        Batcher { shared: self.shared.clone() }
    }
}

impl<F: Flush> std::fmt::Debug for Batcher<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher").field("max", &self.shared.max).finish_non_exhaustive()
    }
}

/// A submitted item and where its answer goes.
type Waiting<F> = (<F as Flush>::Item, oneshot::Sender<Result<<F as Flush>::Reply, RedisStoreError>>);

struct Shared<F: Flush> {
    flush: F,
    /// Most items one flush drains.
    max: usize,
    state: Mutex<State<F>>,
}

struct State<F: Flush> {
    queued: Vec<Waiting<F>>,
    /// Whether a flush task runs (it drains `queued` until it is empty).
    flushing: bool,
}

impl<F: Flush> Batcher<F> {
    /// A queue flushing through `flush`, at most `max` items at a time (at least one).
    pub(crate) fn new(flush: F, max: usize) -> Batcher<F> {
        let state = Mutex::new(State { queued: Vec::new(), flushing: false });
        Batcher { shared: Arc::new(Shared { flush, max: max.max(1), state }) }
    }

    /// Queue `item` and wait for its answer. Must be called within a Tokio
    /// runtime (the flush is spawned on it).
    pub(crate) async fn submit(&self, item: F::Item) -> Result<F::Reply, RedisStoreError> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut state = self.shared.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.queued.push((item, tx));
            !std::mem::replace(&mut state.flushing, true)
        };
        if start {
            // The guard is made before the spawn: a task dropped before its
            // first poll (its runtime shutting down) still clears `flushing`.
            tokio::spawn(Shared::run(Stopped { shared: self.shared.clone(), finished: false }));
        }
        rx.await.unwrap_or_else(|_| Err(unanswered()))
    }
}

impl<F: Flush> Shared<F> {
    /// Flush batches until the queue is empty.
    ///
    /// Dropped unfinished, even before its first poll (its runtime shut
    /// down), `stopped` makes sure the queue does not stay marked as
    /// flushing, or nothing would ever flush it again.
    async fn run(mut stopped: Stopped<F>) {
        let this = stopped.shared.clone();
        loop {
            let batch: Vec<Waiting<F>> = {
                let mut state = this.state.lock().unwrap_or_else(PoisonError::into_inner);
                if state.queued.is_empty() {
                    state.flushing = false;
                    // From here a submitter may start the next flush: the
                    // guard must leave its queue alone.
                    stopped.finished = true;
                    return;
                }
                let n = state.queued.len().min(this.max);
                state.queued.drain(..n).collect()
            };
            let groups = this.flush.groups(batch, |(item, _)| item);
            join_all(groups.into_iter().map(|group| this.flush_group(group))).await;
        }
    }

    /// One call for `group`, each item answered (a panic answers them [`unanswered`]).
    async fn flush_group(&self, group: Vec<Waiting<F>>) {
        let (items, answers): (Vec<_>, Vec<_>) = group.into_iter().unzip();
        let replies = std::panic::AssertUnwindSafe(self.flush.flush(items)).catch_unwind().await;
        match replies {
            Ok(Ok(replies)) => {
                let mut replies = replies.into_iter();
                for answer in answers {
                    let _ = answer.send(replies.next().ok_or_else(unanswered));
                }
            }
            Ok(Err(e)) => {
                for answer in answers {
                    let _ = answer.send(Err(e.clone()));
                }
            }
            // The senders dropped with `answers` answer `unanswered()`.
            Err(_) => tracing::error!(items = answers.len(), "a batched write panicked"),
        }
    }
}

/// Marks a [`Shared`] as not flushing when its flush task ends, however it
/// ends; items still queued when it was dropped unfinished are answered
/// [`unanswered`] (their submitters would otherwise wait for a flush that
/// never comes, if none submits after them).
struct Stopped<F: Flush> {
    shared: Arc<Shared<F>>,
    /// Set when the flush ended by finding the queue empty (it cleared
    /// `flushing` itself, and a newer flush may own the queue by now).
    finished: bool,
}

impl<F: Flush> Drop for Stopped<F> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let mut state = self.shared.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.flushing {
            state.flushing = false;
            for (_, answer) in state.queued.drain(..) {
                let _ = answer.send(Err(unanswered()));
            }
        }
    }
}

/// What an item gets when its flush ended without answering it.
fn unanswered() -> RedisStoreError {
    RedisStoreError::Unanswered("its batch ended without an answer for it".into())
}

#[cfg(test)]
mod tests {
    use std::{
        sync::atomic::{AtomicUsize, Ordering},
        time::Duration,
    };

    use tokio::sync::Notify;

    use super::*;

    /// Items are numbers grouped by their tens; a call answers each with
    /// itself times ten, records what it took, and fails a group holding
    /// 13, panics on one holding 666. The first call waits for `release`.
    #[derive(Default)]
    struct Tens {
        calls: Mutex<Vec<Vec<u32>>>,
        release: Notify,
        held: AtomicUsize,
    }

    impl Flush for Arc<Tens> {
        type Item = u32;
        type Reply = u32;

        fn groups<T>(&self, items: Vec<T>, item: impl Fn(&T) -> &u32) -> Vec<Vec<T>> {
            let mut groups: Vec<Vec<T>> = Vec::new();
            for t in items {
                match groups.iter_mut().find(|g| *item(&g[0]) / 10 == *item(&t) / 10) {
                    Some(g) => g.push(t),
                    None => groups.push(vec![t]),
                }
            }
            groups
        }

        async fn flush(&self, group: Vec<u32>) -> Result<Vec<u32>, RedisStoreError> {
            self.calls.lock().unwrap().push(group.clone());
            if self.held.fetch_add(1, Ordering::SeqCst) == 0 {
                self.release.notified().await;
            }
            assert!(!group.contains(&666), "a flush that panics");
            if group.contains(&13) {
                return Err(RedisStoreError::Corrupt("unlucky".into()));
            }
            Ok(group.into_iter().map(|n| n * 10).collect())
        }
    }

    /// Wait until `calls` calls were made.
    async fn calls_reach(tens: &Tens, calls: usize) {
        for _ in 0..200 {
            if tens.calls.lock().unwrap().len() >= calls {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("only {} calls", tens.calls.lock().unwrap().len());
    }

    fn spawn_submit(b: &Batcher<Arc<Tens>>, n: u32) -> tokio::task::JoinHandle<Result<u32, RedisStoreError>> {
        let b = b.clone();
        tokio::spawn(async move { b.submit(n).await })
    }

    /// A batcher over [`Tens`] of at most `max` items, with a first write
    /// (1) whose flush is in flight and held until `release`.
    async fn held_flush(
        max: usize,
    ) -> (Arc<Tens>, Batcher<Arc<Tens>>, tokio::task::JoinHandle<Result<u32, RedisStoreError>>) {
        let tens = Arc::new(Tens::default());
        let batcher = Batcher::new(tens.clone(), max);
        let first = spawn_submit(&batcher, 1);
        calls_reach(&tens, 1).await;
        (tens, batcher, first)
    }

    #[tokio::test]
    async fn items_arriving_during_a_flush_go_out_together_in_order_up_to_max() {
        let (tens, batcher, first) = held_flush(3).await;
        // While the first call is in flight, six more queue: two batches of three.
        let mut rest = Vec::new();
        for n in [2, 3, 24, 5, 6, 7] {
            rest.push(spawn_submit(&batcher, n));
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tens.release.notify_one();
        assert_eq!(first.await.unwrap().unwrap(), 10);
        for (handle, n) in rest.into_iter().zip([2, 3, 24, 5, 6, 7]) {
            assert_eq!(handle.await.unwrap().unwrap(), n * 10, "each item gets its own answer");
        }
        let calls = tens.calls.lock().unwrap().clone();
        // A lone item went out at once; then batches of at most three, each
        // split by group (the tens), in submission order.
        assert_eq!(calls, vec![vec![1], vec![2, 3], vec![24], vec![5, 6, 7]]);
    }

    #[tokio::test]
    async fn a_group_error_reaches_every_item_of_it_and_only_them() {
        let (tens, batcher, first) = held_flush(64).await;
        let (a, b, c) = (spawn_submit(&batcher, 12), spawn_submit(&batcher, 13), spawn_submit(&batcher, 21));
        tokio::time::sleep(Duration::from_millis(20)).await;
        tens.release.notify_one();
        first.await.unwrap().unwrap();
        for failed in [a, b] {
            assert!(matches!(failed.await.unwrap(), Err(RedisStoreError::Corrupt(m)) if m == "unlucky"));
        }
        assert_eq!(c.await.unwrap().unwrap(), 210, "another group of the same batch is written");
    }

    #[tokio::test]
    async fn a_dropped_submitter_strands_no_one_and_a_panic_is_answered() {
        // The submitter that started the flush stops waiting for it.
        let (tens, batcher, first) = held_flush(64).await;
        let queued = spawn_submit(&batcher, 2);
        tokio::time::sleep(Duration::from_millis(20)).await;
        first.abort();
        assert!(first.await.unwrap_err().is_cancelled());
        tens.release.notify_one();
        assert_eq!(queued.await.unwrap().unwrap(), 20, "the flush goes on without its starter");
        // A flush that panics answers its items, and the queue still works.
        assert!(matches!(batcher.submit(666).await, Err(RedisStoreError::Unanswered(_))));
        assert_eq!(batcher.submit(4).await.unwrap(), 40);
    }

    /// Writes submitted back to back from many tasks, each flush ending as
    /// the next submitter starts one: every write is answered by its flush
    /// (a flush that ended must never touch the queue a newer one owns).
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn flushes_handing_over_back_to_back_answer_every_write() {
        struct Echo;
        impl Flush for Echo {
            type Item = u32;
            type Reply = u32;
            fn groups<T>(&self, items: Vec<T>, _item: impl Fn(&T) -> &u32) -> Vec<Vec<T>> {
                vec![items]
            }
            async fn flush(&self, group: Vec<u32>) -> Result<Vec<u32>, RedisStoreError> {
                tokio::task::yield_now().await;
                Ok(group)
            }
        }
        let batcher = Batcher::new(Echo, 64);
        let loops = (0..16u32).map(|t| {
            let b = batcher.clone();
            tokio::spawn(async move {
                for i in 0..2_000 {
                    let n = t * 10_000 + i;
                    assert_eq!(b.submit(n).await.unwrap(), n, "write {n} answered by its flush");
                }
            })
        });
        for l in join_all(loops).await {
            l.unwrap();
        }
    }

    /// A flush task dropped before its first poll (its runtime shut down
    /// right after the spawn) does not leave the queue marked as flushing:
    /// the next submit, on another runtime, is answered.
    #[test]
    fn a_flush_task_dropped_before_its_first_poll_leaves_the_queue_usable() {
        let tens = Arc::new(Tens::default());
        // No flush waits for `release`.
        tens.held.store(1, Ordering::SeqCst);
        let batcher = Batcher::new(tens.clone(), 64);
        let first = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        first.block_on(async {
            // Polled once: queued, and its flush task spawned but not run
            // (a current-thread runtime runs it only once this block yields).
            let mut submit = std::pin::pin!(batcher.submit(1));
            assert!(futures::poll!(submit.as_mut()).is_pending());
        });
        drop(first);
        assert!(tens.calls.lock().unwrap().is_empty(), "the flush task never ran");
        let second = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        second.block_on(async {
            let answered = tokio::time::timeout(Duration::from_secs(5), batcher.submit(3)).await;
            assert_eq!(answered.expect("a new flush starts").unwrap(), 30);
        });
    }

    /// A flush task dropped unfinished (its runtime shut down) answers what
    /// it had and what was queued, and the next submit (on another runtime)
    /// starts a flush again instead of waiting for one that never comes.
    #[test]
    fn a_flush_ended_with_its_runtime_leaves_the_queue_usable() {
        let tens = Arc::new(Tens::default());
        let batcher = Batcher::new(tens.clone(), 64);
        let first = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (in_flight, queued) = first.block_on(async {
            let in_flight = spawn_submit(&batcher, 1);
            calls_reach(&tens, 1).await;
            let queued = spawn_submit(&batcher, 2);
            tokio::time::sleep(Duration::from_millis(20)).await;
            (in_flight, queued)
        });
        drop(first);
        let second = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        second.block_on(async {
            assert!(in_flight.await.is_err(), "its runtime is gone");
            assert!(queued.await.is_err(), "its runtime is gone");
            let answered = tokio::time::timeout(Duration::from_secs(5), batcher.submit(3)).await;
            assert_eq!(answered.expect("a new flush starts").unwrap(), 30);
        });
    }
}
