//! Serving a router on TCP with connection limits: what a slow, silent or
//! unauthenticated client may hold, so that it cannot starve everyone else.
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
//! A 401 or 403 answer closes its connection (`Connection: close`): a
//! client without a valid token cannot keep one open past its refusal.
//!
//! At most [`ServeLimits::max_connections`] connections are served at once.
//! At the limit, a new connection makes room by closing an idle one: first
//! one that has not sent a complete request head yet (silent, dribbling),
//! oldest first, once it is more than a moment old (`NEW_CONNECTION_GRACE`,
//! 250 ms: time to send a first request), else the kept-alive connection
//! idle the longest (it is let finish writing, then closed). Connections
//! with a request in flight are never closed for room.
//!
//! When none can be closed (every one has a request in flight, or has just
//! arrived), up to [`ServeLimits::probe_connections`] more are accepted for
//! the health probes ([`PROBE_PATHS`]), each closed after its answer: so
//! `/healthz`, `/readyz` and `/metrics` never wait behind the limit. Any
//! other request on one of those waits up to about a second for a regular
//! slot, then gets 503 with `Retry-After`. Past those, new connections wait
//! in the listen backlog until one closes.
//!
//! Shutdown stops accepting, lets in-flight requests finish and closes idle
//! connections at once.

use std::{
    collections::HashMap,
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
    http::{HeaderValue, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::Notify,
    time::{Instant, Sleep},
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tower::ServiceExt;

/// The paths served on the connections past [`ServeLimits::max_connections`]
/// (see the module docs): liveness, readiness and the metrics scrape.
pub const PROBE_PATHS: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// How long a new connection is never closed for room, however full the
/// limit: the time a client needs to send its first request head.
const NEW_CONNECTION_GRACE: Duration = Duration::from_millis(250);

/// How long an idle connection closed to make room, which has served
/// requests before, may take to close (hyper finishes writing its last
/// answer first); one that never sent a request is closed at once.
const EVICT_GRACE: Duration = Duration::from_secs(1);

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
    /// Connections served at once; at the limit an idle one is closed for a
    /// new one, and when none is idle new ones wait in the listen backlog. Default 10 000.
    pub max_connections: usize,
    /// Connections accepted past `max_connections`, while every other one has
    /// a request in flight, for the [`PROBE_PATHS`] alone. Default 16.
    pub probe_connections: usize,
}

impl Default for ServeLimits {
    fn default() -> Self {
        ServeLimits {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(75),
            max_connections: 10_000,
            probe_connections: 16,
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
    let slots = Arc::new(Slots::new(limits));
    let connections = TaskTracker::new();
    let closing = CancellationToken::new();
    tokio::pin!(shutdown);
    'serving: loop {
        // Leave new connections in the backlog until one can be served.
        loop {
            let wake = match slots.room() {
                Room::Free(_) | Room::Idle(_) => break,
                Room::Full(wake) => wake,
            };
            tokio::select! {
                () = slots.changed.notified() => {}
                () = sleep_until(wake) => {}
                () = &mut shutdown => break 'serving,
            }
        }
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
        let watch = Arc::new(Watch::new(limits, slots.changed.clone()));
        let ticket = loop {
            let wake = match slots.room() {
                Room::Free(kind) => match slots.admit(kind, &watch) {
                    Some(ticket) => break ticket,
                    None => None,
                },
                Room::Idle(victim) => {
                    tracing::debug!("connection limit reached: closing an idle connection");
                    victim.evict();
                    None
                }
                Room::Full(wake) => wake,
            };
            tokio::select! {
                () = slots.changed.notified() => {}
                () = sleep_until(wake) => {}
                () = &mut shutdown => break 'serving,
            }
        };
        let (router, closing) = (router.clone(), closing.clone());
        connections.spawn(connection(tcp, router, watch, Arc::new(ticket), closing));
    }
    closing.cancel();
    connections.close();
    connections.wait().await;
    Ok(())
}

/// What a connection may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Anything (one of the `max_connections`).
    Any,
    /// The [`PROBE_PATHS`] alone, one request (one of the `probe_connections`).
    Probe,
}

/// The open connections of one listener, by kind.
#[derive(Debug)]
struct Slots {
    limits: ServeLimits,
    open: Mutex<Open>,
    /// Notified when a connection closes or its request ends (it may become idle).
    changed: Arc<Notify>,
}

#[derive(Debug, Default)]
struct Open {
    next_id: u64,
    connections: HashMap<u64, (Kind, Arc<Watch>)>,
    any: usize,
    probes: usize,
}

/// A connection's place in [`Slots`], given back on drop.
#[derive(Debug)]
struct Ticket {
    slots: Arc<Slots>,
    id: u64,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut open = self.slots.open();
        match open.connections.remove(&self.id) {
            Some((Kind::Any, _)) => open.any -= 1,
            Some((Kind::Probe, _)) => open.probes -= 1,
            None => {}
        }
        drop(open);
        self.slots.changed.notify_one();
    }
}

impl Ticket {
    fn kind(&self) -> Kind {
        self.slots.open().connections.get(&self.id).map_or(Kind::Probe, |(kind, _)| *kind)
    }

    /// Move a probe connection into one of the `max_connections`, closing
    /// an idle one for room if need be; `false` when none frees up within
    /// [`NEW_CONNECTION_GRACE`] and [`EVICT_GRACE`] (every connection busy).
    async fn upgrade(&self) -> bool {
        let give_up = Instant::now() + NEW_CONNECTION_GRACE + EVICT_GRACE;
        loop {
            match self.slots.room_in(&[Kind::Any]) {
                Room::Free(_) => {
                    let mut open = self.slots.open();
                    if open.any < self.slots.limits.max_connections.max(1)
                        && let Some(entry) = open.connections.get_mut(&self.id)
                    {
                        entry.0 = Kind::Any;
                        open.any += 1;
                        open.probes -= 1;
                        return true;
                    }
                }
                Room::Idle(victim) => victim.evict(),
                Room::Full(_) => {}
            }
            if Instant::now() >= give_up {
                return false;
            }
            // Rare (every connection taken): a short poll rather than another waiter on `changed`.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Slots {
    fn new(limits: ServeLimits) -> Self {
        Slots { limits, open: Mutex::new(Open::default()), changed: Arc::new(Notify::new()) }
    }

    fn open(&self) -> MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where a connection accepted now would go (see the module docs).
    fn room(&self) -> Room {
        self.room_in(&[Kind::Any, Kind::Probe])
    }

    /// [`Slots::room`] among `kinds`, in this order.
    fn room_in(&self, kinds: &[Kind]) -> Room {
        let open = self.open();
        let now = Instant::now();
        let mut wake: Option<Instant> = None;
        for &kind in kinds {
            let (used, cap) = match kind {
                Kind::Any => (open.any, self.limits.max_connections.max(1)),
                Kind::Probe => (open.probes, self.limits.probe_connections),
            };
            if used < cap {
                return Room::Free(kind);
            }
            let mut idlest: Option<((bool, Instant), &Arc<Watch>)> = None;
            for (_, watch) in open.connections.values().filter(|(k, _)| *k == kind) {
                match watch.standing(now) {
                    // It frees a slot within EVICT_GRACE.
                    Standing::Closing => return Room::Full(None),
                    Standing::Idle(order) if idlest.is_none_or(|(o, _)| order < o) => idlest = Some((order, watch)),
                    Standing::New(until) => wake = Some(wake.map_or(until, |w| w.min(until))),
                    Standing::Idle(_) | Standing::Busy => {}
                }
            }
            if let Some((_, watch)) = idlest {
                return Room::Idle(watch.clone());
            }
            // Every one of this kind has a request in flight (or just arrived): try the next kind.
        }
        Room::Full(wake)
    }

    /// Register `watch`'s connection in a free slot of `kind`, if there still is one.
    fn admit(self: &Arc<Self>, kind: Kind, watch: &Arc<Watch>) -> Option<Ticket> {
        let mut open = self.open();
        match kind {
            Kind::Any if open.any < self.limits.max_connections.max(1) => open.any += 1,
            Kind::Probe if open.probes < self.limits.probe_connections => open.probes += 1,
            _ => return None,
        }
        open.next_id += 1;
        let id = open.next_id;
        open.connections.insert(id, (kind, watch.clone()));
        Some(Ticket { slots: self.clone(), id })
    }
}

/// What [`Slots::room`] found.
#[derive(Debug)]
enum Room {
    /// A free slot of this kind.
    Free(Kind),
    /// None free, but this idle connection can be closed for one.
    Idle(Arc<Watch>),
    /// None: wait for a change (a connection closing or going idle), or
    /// until this instant (a new connection's grace ends).
    Full(Option<Instant>),
}

/// Where one connection stands for [`Slots::room`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
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

/// `sleep_until(at)`, or never.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Drive one connection until it ends, its watch expires or shutdown (or
/// an eviction) has let its in-flight request finish.
async fn connection(
    tcp: TcpStream,
    router: Router,
    watch: Arc<Watch>,
    ticket: Arc<Ticket>,
    closing: CancellationToken,
) {
    let limits = watch.limits;
    let io = TokioIo::new(Watched { io: tcp, watch: watch.clone() });
    let on_request = watch.clone();
    let place = ticket.clone();
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let guard = on_request.request_started();
        let probe = PROBE_PATHS.contains(&req.uri().path());
        let req = req.map(|body| Body::new(Deadline::new(body, limits.body_read_timeout)));
        let (router, place) = (router.clone(), place.clone());
        async move {
            // Past the limit, only probes are served at once; anything else waits briefly for a regular slot.
            let refused = place.kind() == Kind::Probe && !probe && !place.upgrade().await;
            let mut response = if refused {
                connection_limit_reached()
            } else {
                router.oneshot(req).await.unwrap_or_else(|never| match never {})
            };
            // A refused caller does not keep its connection; nor does a probe past the limit.
            let closes = place.kind() == Kind::Probe
                || matches!(response.status(), StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN);
            if closes {
                response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
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
            () = watch.evicting.cancelled(), if !shutting_down => {
                conn.as_mut().graceful_shutdown();
                shutting_down = true;
            }
            () = watch.expired() => return,
        }
    }
}

/// 503 for a request other than a probe on a connection past the limit.
fn connection_limit_reached() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, "1")],
        "Connection limit reached: every connection has a request in flight; retry",
    )
        .into_response()
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
    /// Request heads received on this connection so far.
    served: u64,
    /// Told to close to make room (see [`Slots::room`]).
    evicted: bool,
}

/// The timers of one connection (see the module docs).
#[derive(Debug)]
struct Watch {
    limits: ServeLimits,
    phase: Mutex<Phase>,
    changed: Notify,
    /// Cancelled when the connection is told to close to make room.
    evicting: CancellationToken,
    /// The listener's [`Slots::changed`].
    slots_changed: Arc<Notify>,
}

impl Watch {
    fn new(limits: ServeLimits, slots_changed: Arc<Notify>) -> Self {
        let phase = Phase {
            in_flight: 0,
            since: Instant::now(),
            allowed: limits.header_read_timeout,
            reading_head: true,
            served: 0,
            evicted: false,
        };
        Watch {
            limits,
            phase: Mutex::new(phase),
            changed: Notify::new(),
            evicting: CancellationToken::new(),
            slots_changed,
        }
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
            self.changed.notify_one();
        }
    }

    /// A request head was parsed: no timer until its response ends.
    fn request_started(self: &Arc<Self>) -> InFlight {
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
            self.changed.notify_one();
            // An idle connection is one that can make room.
            self.slots_changed.notify_one();
        }
    }

    fn standing(&self, now: Instant) -> Standing {
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
    fn evict(&self) {
        let mut p = self.phase();
        if p.evicted || p.in_flight > 0 {
            return;
        }
        p.evicted = true;
        p.since = Instant::now();
        p.allowed = if p.served == 0 { Duration::ZERO } else { EVICT_GRACE };
        drop(p);
        self.evicting.cancel();
        self.changed.notify_one();
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
