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
//!
//! Each connection runs in its own task under [`Inline`]: hyper polls the
//! request's service future inside the connection's, so the wakes one gives
//! the other (hyper's request body channel, the reply channel a handler
//! closes, `respond.rs`) come during the task's own poll, which tokio would
//! take for a yield (see `crate::inline`). The connection's timers wake
//! nothing when a read or a request moves them (`watch.rs`'s `Watch`).

mod connections;
mod watch;

use std::{future::Future, io, sync::Arc, time::Duration};

use axum::{
    Router,
    body::Body,
    extract::{Request, State},
    http::{HeaderValue, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::{
    net::{TcpListener, TcpStream},
    time::Instant,
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tower::ServiceExt;

use crate::inline::Inline;
use connections::{Connections, Kind, Room, Ticket};
use watch::{Deadline, Tracked, Watch, Watched};

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
    let open = Arc::new(Connections::new(limits));
    let connections = TaskTracker::new();
    let closing = CancellationToken::new();
    tokio::pin!(shutdown);
    'serving: loop {
        // Leave new connections in the backlog until one can be served.
        loop {
            let wake = match open.room() {
                Room::Free(_) | Room::Idle(_) => break,
                Room::Full(wake) => wake,
            };
            tokio::select! {
                () = open.changed.notified() => {}
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
        let watch = Arc::new(Watch::new(limits, open.changed.clone()));
        let ticket = loop {
            let wake = match open.room() {
                Room::Free(kind) => match open.admit(kind, &watch) {
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
                () = open.changed.notified() => {}
                () = sleep_until(wake) => {}
                () = &mut shutdown => break 'serving,
            }
        };
        let (router, closing) = (router.clone(), closing.clone());
        // Inline: the connection drives its request inline, and a request
        // wakes its connection's task during its poll (see `crate::inline`).
        connections.spawn(Inline::new(Box::pin(connection(tcp, router, watch, Arc::new(ticket), closing))));
    }
    closing.cancel();
    connections.close();
    connections.wait().await;
    Ok(())
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
            // The connection first: its poll is where the watch's deadline
            // changes (but for an eviction, which wakes the task through
            // `evicting`), and `expired` reads it after (see `Watch`).
            biased;
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
