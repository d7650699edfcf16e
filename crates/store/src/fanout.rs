//! Bounded per-subscriber queues: what a publisher hands each subscriber of
//! an event bus (the memory store's, the Redis store's pub/sub hub).
//!
//! Every subscriber has its own queue, bounded in items and in bytes
//! ([`QueueLimits`]). A publisher never waits for a subscriber: when an item
//! does not fit, the queue either skips it ([`Overflow::Skip`], for wake-ups
//! whose reader re-reads the record) or ends ([`Overflow::End`]): everything
//! queued is freed at once, and the subscriber's stream yields
//! [`StoreError::Lagged`] and then ends. So a subscriber that stops reading
//! (a stalled SSE client) holds at most its queue's bound, never what the
//! publishers go on sending.

use std::{
    collections::VecDeque,
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    task::{Context, Poll},
};

use futures::{Stream, task::AtomicWaker};

use crate::error::StoreError;

/// How much one subscriber's queue may hold before it overflows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLimits {
    /// Most items queued.
    pub max_items: usize,
    /// Most bytes queued (the sum of the sizes offered with the items).
    pub max_bytes: usize,
}

/// What a full queue does with an item that does not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// Drop the item, keep the subscriber (a wake-up: the reader re-reads the record).
    Skip,
    /// Drop everything queued and end the subscriber with [`StoreError::Lagged`].
    End,
}

/// The outcome of [`QueueSender::offer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offered {
    /// Queued.
    Queued,
    /// Did not fit and was dropped ([`Overflow::Skip`]).
    Skipped,
    /// Did not fit: the subscriber was ended ([`Overflow::End`]) by this offer.
    Ended,
    /// The subscriber is gone (dropped, or ended earlier): forget this sender.
    Closed,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    waker: AtomicWaker,
    limits: QueueLimits,
    overflow: Overflow,
}

struct State<T> {
    items: VecDeque<(T, usize)>,
    bytes: usize,
    /// Ended for lagging: the receiver yields `Lagged` once, then ends.
    lagged: bool,
    /// The receiver was dropped, or the sender was.
    closed: bool,
}

impl<T> Shared<T> {
    fn state(&self) -> MutexGuard<'_, State<T>> {
        // Every critical section leaves the state consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The publisher's end of one subscriber's queue.
pub struct QueueSender<T> {
    shared: Arc<Shared<T>>,
}

/// The subscriber's end: a stream of items, or `Err(Lagged)` then the end.
pub struct QueueReceiver<T> {
    shared: Arc<Shared<T>>,
    done: bool,
}

impl<T> std::fmt::Debug for QueueSender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.shared.state();
        f.debug_struct("QueueSender").field("items", &s.items.len()).field("bytes", &s.bytes).finish()
    }
}

impl<T> std::fmt::Debug for QueueReceiver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueReceiver").field("done", &self.done).finish_non_exhaustive()
    }
}

/// A new subscriber queue.
pub fn queue<T>(limits: QueueLimits, overflow: Overflow) -> (QueueSender<T>, QueueReceiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State { items: VecDeque::new(), bytes: 0, lagged: false, closed: false }),
        waker: AtomicWaker::new(),
        limits,
        overflow,
    });
    (QueueSender { shared: shared.clone() }, QueueReceiver { shared, done: false })
}

impl<T> QueueSender<T> {
    /// Queue `item`, which counts for `bytes`, without waiting.
    pub fn offer(&self, item: T, bytes: usize) -> Offered {
        let limits = self.shared.limits;
        let mut s = self.shared.state();
        if s.closed || s.lagged {
            return Offered::Closed;
        }
        let fits = s.items.len() < limits.max_items && s.bytes.saturating_add(bytes) <= limits.max_bytes;
        let offered = if fits {
            s.items.push_back((item, bytes));
            s.bytes += bytes;
            Offered::Queued
        } else if self.shared.overflow == Overflow::Skip {
            return Offered::Skipped;
        } else {
            // Freed now, not when (if ever) the stalled reader comes back.
            s.items.clear();
            s.bytes = 0;
            s.lagged = true;
            Offered::Ended
        };
        drop(s);
        self.shared.waker.wake();
        offered
    }

    /// Bytes queued now (what this subscriber holds).
    pub fn queued_bytes(&self) -> usize {
        self.shared.state().bytes
    }

    /// Whether the subscriber is gone (dropped, or ended for lagging).
    pub fn is_closed(&self) -> bool {
        let s = self.shared.state();
        s.closed || s.lagged
    }
}

impl<T> Drop for QueueSender<T> {
    fn drop(&mut self) {
        self.shared.state().closed = true;
        self.shared.waker.wake();
    }
}

impl<T> Drop for QueueReceiver<T> {
    fn drop(&mut self) {
        let mut s = self.shared.state();
        s.closed = true;
        s.items.clear();
        s.bytes = 0;
    }
}

impl<T> Stream for QueueReceiver<T> {
    type Item = Result<T, StoreError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        let shared = self.shared.clone();
        let next = || {
            let mut s = shared.state();
            if s.lagged {
                return Some(Err(StoreError::Lagged));
            }
            if let Some((item, bytes)) = s.items.pop_front() {
                s.bytes -= bytes;
                return Some(Ok(item));
            }
            s.closed.then_some(Err(StoreError::Unavailable("subscription closed".into())))
        };
        // Registered before the second look, so an offer in between wakes us.
        let first = next();
        let found = match first {
            Some(item) => Some(item),
            None => {
                shared.waker.register(cx.waker());
                next()
            }
        };
        match found {
            Some(Ok(item)) => Poll::Ready(Some(Ok(item))),
            Some(Err(StoreError::Lagged)) => {
                self.done = true;
                Poll::Ready(Some(Err(StoreError::Lagged)))
            }
            // The sender went away: a plain end.
            Some(Err(_)) => {
                self.done = true;
                Poll::Ready(None)
            }
            None => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    const SMALL: QueueLimits = QueueLimits { max_items: 3, max_bytes: 10 };

    #[tokio::test]
    async fn items_arrive_in_order() {
        let (tx, mut rx) = queue::<u32>(SMALL, Overflow::End);
        assert_eq!(tx.offer(1, 1), Offered::Queued);
        assert_eq!(tx.offer(2, 1), Offered::Queued);
        assert_eq!(tx.queued_bytes(), 2);
        assert_eq!(rx.next().await.unwrap().unwrap(), 1);
        assert_eq!(rx.next().await.unwrap().unwrap(), 2);
        assert_eq!(tx.queued_bytes(), 0);
        drop(tx);
        assert!(rx.next().await.is_none(), "the sender went away: a plain end");
    }

    #[tokio::test]
    async fn a_full_ending_queue_frees_everything_and_says_it_lagged() {
        let (tx, mut rx) = queue::<u32>(SMALL, Overflow::End);
        assert_eq!(tx.offer(1, 6), Offered::Queued);
        assert_eq!(tx.offer(2, 6), Offered::Ended, "over max_bytes");
        assert_eq!(tx.queued_bytes(), 0, "freed at once");
        assert!(tx.is_closed());
        assert_eq!(tx.offer(3, 1), Offered::Closed);
        assert!(matches!(rx.next().await, Some(Err(StoreError::Lagged))));
        assert!(rx.next().await.is_none());
    }

    #[tokio::test]
    async fn a_full_skipping_queue_keeps_what_it_has() {
        let (tx, mut rx) = queue::<u32>(SMALL, Overflow::Skip);
        for i in 0..3 {
            assert_eq!(tx.offer(i, 1), Offered::Queued);
        }
        assert_eq!(tx.offer(9, 1), Offered::Skipped, "over max_items");
        assert_eq!(rx.next().await.unwrap().unwrap(), 0);
        assert_eq!(tx.offer(4, 1), Offered::Queued);
    }

    #[tokio::test]
    async fn a_waiting_receiver_is_woken() {
        let (tx, mut rx) = queue::<u32>(SMALL, Overflow::End);
        let waiting = tokio::spawn(async move { rx.next().await.map(Result::unwrap) });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        tx.offer(7, 1);
        assert_eq!(waiting.await.unwrap(), Some(7));
        let (tx, rx) = queue::<u32>(SMALL, Overflow::End);
        drop(rx);
        assert_eq!(tx.offer(1, 1), Offered::Closed);
    }
}
