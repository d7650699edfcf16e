//! [`Inline`]: a future that, when it wakes itself during its own poll, is
//! polled again at once instead of going back through the scheduler.
//!
//! tokio takes a task woken during its own poll for a yield: it goes to the
//! back of the run queue and another worker thread is woken to steal it (a
//! futex wake and a wasted wakeup of that thread, then a whole extra poll of
//! the task's futures). Some wakes are of that kind by construction, when one
//! future of a task hands something to another future of the same task:
//!
//! - serving (`serve/mod.rs`): hyper's HTTP/1 connection runs the request's
//!   service future inside its own poll, so a request body read (hyper's
//!   body channel) or the reply channel a finished handler closes
//!   (`respond.rs`) wakes the connection's task while it is being polled;
//! - the gateway's own POST to an upstream (`services/gateway/src/upstream/direct.rs`)
//!   runs hyper's client connection inside the call: handing it the request
//!   wakes the call's task.
//!
//! A waker of its own makes such a wake a flag the poll loop reads; a wake
//! from anywhere else (the I/O driver, another thread, after the poll) goes
//! to the task's waker as before.

use std::{
    future::Future,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU8, Ordering},
    },
    task::{Context, Poll, Wake, Waker},
};

use futures::task::AtomicWaker;

/// The inner future is being polled.
const POLLING: u8 = 1;
/// It was woken during that poll.
const WOKEN: u8 = 2;

/// How many times in a row a future that keeps waking itself is polled
/// again before it yields (so it cannot hold its worker forever); it also
/// yields at once when the task's cooperative budget is spent.
const MAX_AGAIN: usize = 8;

/// `F`, polled again while it wakes itself during its poll (see the module docs).
pub struct Inline<F> {
    inner: F,
    wake: Arc<InlineWake>,
    /// `wake` as a [`Waker`], made once.
    waker: Waker,
}

impl<F> std::fmt::Debug for Inline<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inline").finish_non_exhaustive()
    }
}

/// The waker `F` sees.
#[derive(Debug, Default)]
struct InlineWake {
    /// [`POLLING`] and [`WOKEN`].
    state: AtomicU8,
    /// The task's own waker, as of its last poll.
    outer: AtomicWaker,
}

impl Wake for InlineWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // During the poll: a flag the poll loop reads (its swap comes after
        // this in the state's order, so it sees the flag). Otherwise the
        // task's waker (at worst a spare wake, never a lost one).
        let flagged =
            self.state.fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| (s & POLLING != 0).then_some(s | WOKEN));
        if flagged.is_err() {
            self.outer.wake();
        }
    }
}

impl<F: Future + Unpin> Inline<F> {
    /// `inner` (a boxed future, or any that is `Unpin`), polled as the module docs say.
    pub fn new(inner: F) -> Self {
        let wake = Arc::new(InlineWake::default());
        let waker = Waker::from(wake.clone());
        Inline { inner, wake, waker }
    }
}

impl<F: Future + Unpin> Future for Inline<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        this.wake.outer.register(cx.waker());
        let mut inner_cx = Context::from_waker(&this.waker);
        for _ in 0..MAX_AGAIN {
            this.wake.state.store(POLLING, Ordering::Release);
            let polled = Pin::new(&mut this.inner).poll(&mut inner_cx);
            // A wake after this swap finds the state clear and goes to the task's waker.
            let state = this.wake.state.swap(0, Ordering::AcqRel);
            if polled.is_ready() {
                return polled;
            }
            if state & WOKEN == 0 {
                return Poll::Pending;
            }
            // Woken because tokio's budget for this task's poll ran out
            // (its resources then wake and refuse): polling again would
            // only be refused again.
            if !tokio::task::coop::has_budget_remaining() {
                break;
            }
        }
        // Still waking itself, or out of budget: through the scheduler, like any yield.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// Counts the wakes of the task's waker.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A task's waker that counts its wakes.
    fn counted() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count::default());
        (count.clone(), Waker::from(count))
    }

    #[test]
    fn a_wake_during_the_poll_polls_again_without_the_scheduler() {
        let (count, waker) = counted();
        let mut cx = Context::from_waker(&waker);
        let mut polls = 0;
        // Wakes itself on its first poll (as handing hyper's connection a request does), then is ready.
        let mut f = Inline::new(Box::pin(std::future::poll_fn(|cx| {
            polls += 1;
            if polls == 1 {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Poll::Ready(polls)
        })));
        assert_eq!(Pin::new(&mut f).poll(&mut cx), Poll::Ready(2));
        assert_eq!(count.0.load(Ordering::SeqCst), 0, "the task's waker was not woken");
    }

    #[test]
    fn a_wake_after_the_poll_wakes_the_task() {
        let (count, waker) = counted();
        let mut cx = Context::from_waker(&waker);
        let mut kept: Option<Waker> = None;
        let mut f = Inline::new(Box::pin(std::future::poll_fn(|cx| {
            kept = Some(cx.waker().clone());
            Poll::<()>::Pending
        })));
        assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        drop(f);
        kept.expect("polled").wake();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_future_that_keeps_waking_itself_yields() {
        let (count, waker) = counted();
        let mut cx = Context::from_waker(&waker);
        let mut polls = 0;
        let mut f = Inline::new(Box::pin(std::future::poll_fn(|cx| {
            polls += 1;
            cx.waker().wake_by_ref();
            Poll::<()>::Pending
        })));
        assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        drop(f);
        assert_eq!(polls, MAX_AGAIN);
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "woken once, to be polled again later");
    }
}
