//! Serving a router on TCP with connection limits: what a slow or silent
//! client may hold, so that it cannot starve everyone else.
//!
//! Every accepted connection (HTTP/1.1, TCP_NODELAY) is watched by a small
//! state machine fed by its socket reads and its requests:
//!
//! - waiting for a request head (a new connection, or the first byte of the
//!   next request on a kept-alive one): the whole head must arrive within
//!   [`ServeLimits::header_read_timeout`], or the connection is closed. A
//!   client that sends nothing, or dribbles its headers, is gone after it;
//! - a request's body must arrive in full within
//!   [`ServeLimits::body_read_timeout`] of its head (else the request fails);
//! - between requests, a kept-alive connection is closed after
//!   [`ServeLimits::idle_timeout`];
//! - while a response is being produced or streamed (SSE) no timer runs.
//!
//! At most [`ServeLimits::max_connections`] connections are served at once;
//! past it new ones wait in the listen backlog until one closes. Shutdown
//! stops accepting, lets in-flight requests finish and closes idle
//! connections at once.

use std::{
    future::Future,
    io,
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    task::{Context, Poll},
    time::Duration,
};

use axum::{
    BoxError, Router,
    body::{Body, Bytes},
    extract::{Request, State},
    http::{StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::{Notify, Semaphore},
    time::{Instant, Sleep},
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tower::ServiceExt;

/// Per-connection limits of [`serve_with`].
#[derive(Debug, Clone, Copy)]
pub struct ServeLimits {
    /// A request head must arrive in full within this, counted from the
    /// connection's accept or the next request's first byte. Default 10 s.
    pub header_read_timeout: Duration,
    /// A request body must arrive in full within this after its head. Default 30 s.
    pub body_read_timeout: Duration,
    /// A kept-alive connection with no request is closed after this. Default 75 s
    /// (longer than the 60 s proxies such as nginx keep idle upstream connections).
    pub idle_timeout: Duration,
    /// Connections served at once; more wait in the listen backlog. Default 10 000.
    pub max_connections: usize,
}

impl Default for ServeLimits {
    fn default() -> Self {
        ServeLimits {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(75),
            max_connections: 10_000,
        }
    }
}

/// Serve `router` on `listener` with the default [`ServeLimits`] until
/// `shutdown` resolves, then stop accepting and let in-flight requests finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    serve_with(listener, router, ServeLimits::default(), shutdown).await
}

/// [`serve`] with explicit limits.
pub async fn serve_with(
    listener: TcpListener,
    router: Router,
    limits: ServeLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let connections = TaskTracker::new();
    let closing = CancellationToken::new();
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => p.expect("the connection semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // Out of file descriptors, a reset before accept…: keep serving.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = tcp.set_nodelay(true);
        let (router, closing) = (router.clone(), closing.clone());
        connections.spawn(async move {
            connection(tcp, router, limits, closing).await;
            drop(permit);
        });
    }
    closing.cancel();
    connections.close();
    connections.wait().await;
    Ok(())
}

/// Drive one connection until it ends, its watch expires or shutdown has
/// let its in-flight request finish.
async fn connection(tcp: TcpStream, router: Router, limits: ServeLimits, closing: CancellationToken) {
    let watch = Arc::new(Watch::new(limits));
    let io = TokioIo::new(Watched { io: tcp, watch: watch.clone() });
    let on_request = watch.clone();
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let guard = on_request.request_started();
        let req = req.map(|body| Body::new(Deadline::new(body, limits.body_read_timeout)));
        let router = router.clone();
        async move {
            let response = router.oneshot(req).await.unwrap_or_else(|never| match never {});
            Ok::<_, std::convert::Infallible>(response.map(|body| Body::new(Tracked { body, _guard: guard })))
        }
    });
    let conn = hyper::server::conn::http1::Builder::new().keep_alive(true).serve_connection(io, service);
    tokio::pin!(conn);
    let mut shutting_down = false;
    loop {
        tokio::select! {
            _ = conn.as_mut() => return,
            () = closing.cancelled(), if !shutting_down => {
                conn.as_mut().graceful_shutdown();
                shutting_down = true;
            }
            () = watch.expired() => return,
        }
    }
}

/// `Content-Length` declaring more than `max` bytes: 413 at once, before the body is read.
pub(crate) async fn refuse_declared_oversize(State(max): State<usize>, req: Request, next: Next) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    match declared {
        Some(n) if n > max as u64 => (
            StatusCode::PAYLOAD_TOO_LARGE,
            [(header::CONNECTION, "close")],
            format!("Request body larger than {max} bytes"),
        )
            .into_response(),
        _ => next.run(req).await,
    }
}

/// Where a connection is in its request cycle, and since when.
#[derive(Debug)]
struct Phase {
    /// Requests whose response is not finished (hyper serves one at a time).
    in_flight: usize,
    /// Start of the current wait, and how long it may last.
    since: Instant,
    allowed: Duration,
    /// Whether the current wait is for a request head (else idle between requests).
    reading_head: bool,
}

/// The timers of one connection (see the module docs).
#[derive(Debug)]
struct Watch {
    limits: ServeLimits,
    phase: Mutex<Phase>,
    changed: Notify,
}

impl Watch {
    fn new(limits: ServeLimits) -> Self {
        let phase =
            Phase { in_flight: 0, since: Instant::now(), allowed: limits.header_read_timeout, reading_head: true };
        Watch { limits, phase: Mutex::new(phase), changed: Notify::new() }
    }

    fn phase(&self) -> MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes arrived: an idle connection starts reading a request head.
    fn bytes_read(&self) {
        let mut p = self.phase();
        if p.in_flight == 0 && !p.reading_head {
            *p = Phase {
                in_flight: 0,
                since: Instant::now(),
                allowed: self.limits.header_read_timeout,
                reading_head: true,
            };
            self.changed.notify_one();
        }
    }

    /// A request head was parsed: no timer until its response ends.
    fn request_started(self: &Arc<Self>) -> InFlight {
        self.phase().in_flight += 1;
        InFlight(self.clone())
    }

    fn request_ended(&self) {
        let mut p = self.phase();
        p.in_flight = p.in_flight.saturating_sub(1);
        if p.in_flight == 0 {
            *p = Phase { in_flight: 0, since: Instant::now(), allowed: self.limits.idle_timeout, reading_head: false };
            self.changed.notify_one();
        }
    }

    fn deadline(&self) -> Option<Instant> {
        let p = self.phase();
        (p.in_flight == 0).then(|| p.since + p.allowed)
    }

    /// Resolves when the current wait outlasts its limit.
    async fn expired(&self) {
        loop {
            match self.deadline() {
                None => self.changed.notified().await,
                Some(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {
                            if self.deadline().is_some_and(|d| d <= Instant::now()) {
                                return;
                            }
                        }
                        () = self.changed.notified() => {}
                    }
                }
            }
        }
    }
}

/// Held from a request's head until its response body is finished or dropped.
#[derive(Debug)]
struct InFlight(Arc<Watch>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.request_ended();
    }
}

/// The socket, reporting reads to the connection's [`Watch`].
#[derive(Debug)]
struct Watched {
    io: TcpStream,
    watch: Arc<Watch>,
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
struct Deadline {
    body: Incoming,
    timer: Pin<Box<Sleep>>,
}

impl Deadline {
    fn new(body: Incoming, limit: Duration) -> Self {
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
struct Tracked {
    body: Body,
    _guard: InFlight,
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
