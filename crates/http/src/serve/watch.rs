//! One connection's timers ([`Watch`]: head, body and idle deadlines, fed
//! by its socket reads and its requests) and the I/O wrappers that feed
//! them: the socket ([`Watched`]), a request body with a read deadline
//! ([`Deadline`]), a response body that keeps its request in flight ([`Tracked`]).

use std::{
    future::Future,
    io,
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    task::{Context, Poll},
    time::Duration,
};

use axum::{
    BoxError,
    body::{Body, Bytes},
};
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
    sync::Notify,
    time::{Instant, Sleep},
};
use tokio_util::sync::CancellationToken;

use super::{EVICT_GRACE, NEW_CONNECTION_GRACE, ServeLimits};

/// Where a connection is in its request cycle, and since when.
#[derive(Debug)]
pub(super) struct Phase {
    /// Requests whose response is not finished (hyper serves one at a time).
    in_flight: usize,
    /// Start of the current wait, and how long it may last.
    since: Instant,
    allowed: Duration,
    /// Whether the current wait is for a request head (else idle between requests).
    reading_head: bool,
    /// Request heads received on this connection so far.
    served: u64,
    /// Told to close to make room (see [`Connections::room`]).
    evicted: bool,
}

/// The timers of one connection (see the module docs).
///
/// Its deadline changes inside the connection's own poll (a read, a
/// request's start or end), or on an eviction, which cancels `evicting` and
/// so wakes the connection's task: [`Expiry`] reads it at every poll, and
/// no change needs to wake anything (see `connection` in `serve/mod.rs`).
#[derive(Debug)]
pub(super) struct Watch {
    pub(super) limits: ServeLimits,
    phase: Mutex<Phase>,
    /// Cancelled when the connection is told to close to make room.
    pub(super) evicting: CancellationToken,
    /// The listener's [`Connections::changed`].
    slots_changed: Arc<Notify>,
}

impl Watch {
    pub(super) fn new(limits: ServeLimits, slots_changed: Arc<Notify>) -> Self {
        let phase = Phase {
            in_flight: 0,
            since: Instant::now(),
            allowed: limits.header_read_timeout,
            reading_head: true,
            served: 0,
            evicted: false,
        };
        Watch { limits, phase: Mutex::new(phase), evicting: CancellationToken::new(), slots_changed }
    }

    fn phase(&self) -> MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes arrived: an idle connection starts reading a request head
    /// (one told to close keeps its short deadline).
    fn bytes_read(&self) {
        let mut p = self.phase();
        if p.in_flight == 0 && !p.reading_head && !p.evicted {
            p.since = Instant::now();
            p.allowed = self.limits.header_read_timeout;
            p.reading_head = true;
        }
    }

    /// A request head was parsed: no timer until its response ends.
    pub(super) fn request_started(self: &Arc<Self>) -> InFlight {
        let mut p = self.phase();
        p.in_flight += 1;
        p.served += 1;
        drop(p);
        InFlight(self.clone())
    }

    fn request_ended(&self) {
        let mut p = self.phase();
        p.in_flight = p.in_flight.saturating_sub(1);
        if p.in_flight == 0 {
            p.since = Instant::now();
            p.allowed = if p.evicted { EVICT_GRACE } else { self.limits.idle_timeout };
            p.reading_head = false;
            // An idle connection is one that can make room.
            self.slots_changed.notify_one();
        }
    }

    pub(super) fn standing(&self, now: Instant) -> Standing {
        let p = self.phase();
        if p.in_flight > 0 {
            Standing::Busy
        } else if p.evicted {
            Standing::Closing
        } else if p.served == 0 && now < p.since + NEW_CONNECTION_GRACE {
            Standing::New(p.since + NEW_CONNECTION_GRACE)
        } else {
            Standing::Idle((p.served > 0, p.since))
        }
    }

    /// Close to make room: at once when no request came yet, else after
    /// hyper finished writing (within [`EVICT_GRACE`]); a request that starts
    /// meanwhile is served first.
    pub(super) fn evict(&self) {
        let mut p = self.phase();
        if p.evicted || p.in_flight > 0 {
            return;
        }
        p.evicted = true;
        p.since = Instant::now();
        p.allowed = if p.served == 0 { Duration::ZERO } else { EVICT_GRACE };
        drop(p);
        self.evicting.cancel();
    }

    fn deadline(&self) -> Option<Instant> {
        let p = self.phase();
        (p.in_flight == 0).then(|| p.since + p.allowed)
    }

    /// Resolves when the current wait outlasts its limit, if polled after
    /// every change of it (see [`Watch`]).
    pub(super) fn expired(&self) -> Expiry<'_> {
        Expiry { watch: self, timer: None }
    }
}

/// [`Watch::expired`]: a timer at the current deadline, set again when it moves.
#[derive(Debug)]
pub(super) struct Expiry<'a> {
    watch: &'a Watch,
    timer: Option<Pin<Box<Sleep>>>,
}

impl Future for Expiry<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        // A request in flight: no deadline (a timer set before may still
        // fire, a spare wake, until the next wait resets it).
        let Some(at) = this.watch.deadline() else { return Poll::Pending };
        let timer = match &mut this.timer {
            Some(timer) => {
                if timer.deadline() != at {
                    timer.as_mut().reset(at);
                }
                timer
            }
            None => this.timer.insert(Box::pin(tokio::time::sleep_until(at))),
        };
        timer.as_mut().poll(cx)
    }
}

/// Held from a request's head until its response body is finished or dropped.
#[derive(Debug)]
pub(super) struct InFlight(Arc<Watch>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.request_ended();
    }
}

/// The socket, reporting reads to the connection's [`Watch`].
#[derive(Debug)]
pub(super) struct Watched {
    pub(super) io: TcpStream,
    pub(super) watch: Arc<Watch>,
}

impl AsyncRead for Watched {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.watch.bytes_read();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// A request body that fails once its read deadline passes.
pub(super) struct Deadline {
    body: Incoming,
    timer: Pin<Box<Sleep>>,
}

impl Deadline {
    pub(super) fn new(body: Incoming, limit: Duration) -> Self {
        Deadline { body, timer: Box::pin(tokio::time::sleep(limit)) }
    }
}

impl HttpBody for Deadline {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(BoxError::from)));
        }
        if this.timer.as_mut().poll(cx).is_ready() {
            let late = io::Error::new(io::ErrorKind::TimedOut, "request body read timed out");
            return Poll::Ready(Some(Err(late.into())));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A response body that keeps its request in flight until it is done.
pub(super) struct Tracked {
    pub(super) body: Body,
    pub(super) _guard: InFlight,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Where one connection stands for [`Connections::room`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Standing {
    /// A request in flight.
    Busy,
    /// Told to close, and idle: gone within [`EVICT_GRACE`].
    Closing,
    /// Accepted less than [`NEW_CONNECTION_GRACE`] ago without a request yet:
    /// not closed for room before this instant.
    New(Instant),
    /// Idle: may be closed for room, lowest order first (connections that
    /// never sent a request head before those that did, then the longest waiting).
    Idle((bool, Instant)),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(limits: ServeLimits) -> Arc<Watch> {
        Arc::new(Watch::new(limits, Arc::new(Notify::new())))
    }

    #[tokio::test]
    async fn a_request_ending_starts_the_idle_deadline() {
        let idle = Duration::from_millis(50);
        let w = watch(ServeLimits {
            idle_timeout: idle,
            header_read_timeout: Duration::from_secs(60),
            ..Default::default()
        });
        let mut expiry = std::pin::pin!(w.expired());
        let request = w.request_started();
        assert!(futures::poll!(expiry.as_mut()).is_pending());
        let ended = Instant::now();
        drop(request);
        // Polled again after the change, as `connection` polls it after its own poll.
        tokio::time::timeout(Duration::from_secs(10), expiry).await.expect("expired after idle_timeout");
        assert!(ended.elapsed() >= idle);
    }

    #[tokio::test]
    async fn a_read_on_an_idle_connection_starts_the_head_deadline() {
        let head = Duration::from_millis(50);
        let w = watch(ServeLimits {
            idle_timeout: Duration::from_secs(60),
            header_read_timeout: head,
            ..Default::default()
        });
        drop(w.request_started());
        let mut expiry = std::pin::pin!(w.expired());
        assert!(futures::poll!(expiry.as_mut()).is_pending(), "idle for a minute");
        let read = Instant::now();
        w.bytes_read();
        tokio::time::timeout(Duration::from_secs(10), expiry).await.expect("expired after header_read_timeout");
        assert!(read.elapsed() >= head);
    }
}
