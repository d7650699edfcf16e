//! A bounded pool of [`Connection`]s to one upstream: at most `size` at once
//! (each runs one call), started lazily, kept while healthy, replaced when
//! the upstream went away, with a growing pause between failed starts so a
//! crashing child is not restarted in a tight loop.
//!
//! Every request that can draw a server-to-client message (a question,
//! progress, a log line) has a connection to itself: a tool call
//! ([`Pool::get`]), and a prompt, resource read, completion or listing
//! ([`Pool::request`], which waits at most `--upstream-wait-ms` for one).
//! What the upstream sends meanwhile belongs to that request and no other
//! caller's.
//!
//! [`Pool::restart`] (an operator's restart, from the admin API) closes the
//! idle connections at once and each busy one when its call ends (a call
//! in flight is not cut); the next call opens a new connection. What the
//! pool has seen is counted in its [`Stats`] for the heartbeat ([`Pool::report`]).
//!
//! [`Pool::retire`] (a reload removed or changed its upstream: see
//! `services/gateway/src/reload.rs`) drains it: no new call is given a
//! connection, the idle ones close at once, each busy one when its call
//! ends, and once the last call ended the pool says so in the log.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use rmcp::{
    Peer, RoleClient,
    model::{CancelledNotificationParam, ClientRequest, RequestId, ServerResult},
    service::{PeerRequestOptions, ServiceError},
};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::{
    config::{Endpoint, Protocol, Timings, UpstreamConfig},
    stats::Stats,
    upstream::{Connection, TokenSource, UpstreamError},
};

/// The most a failing upstream's restarts are spaced.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Connections to one upstream.
#[derive(Debug)]
pub struct Pool {
    name: String,
    endpoint: Endpoint,
    protocol: Protocol,
    connect_timeout: Duration,
    settle: Duration,
    cancel_grace: Duration,
    /// Longest [`Pool::get_within`] waits for a free place.
    wait: Duration,
    /// Longest one [`Pool::request`] runs.
    call_timeout: Duration,
    /// Boxed, here and in a [`Lease`]: a connection moves in and out of
    /// both on every call, and unboxed each move copied all of it.
    #[allow(clippy::vec_box, reason = "the box is what each move copies, not the Vec's buffer")]
    idle: Mutex<Vec<Box<Connection>>>,
    permits: Arc<Semaphore>,
    /// Consecutive failed starts and when the last one failed.
    failures: Mutex<(u32, Option<Instant>)>,
    /// Handles of the connections opened (pruned of closed ones), only for
    /// the readiness probe to see one is live: never to send a request.
    peers: Mutex<Vec<Peer<RoleClient>>>,
    /// Notified when the upstream says a list changed.
    lists_changed: Arc<Notify>,
    /// The access token every connection sends, when the upstream needs sign-in.
    tokens: Option<Arc<TokenSource>>,
    /// Connections it may hold.
    size: usize,
    /// Bumped by [`Pool::restart`]: a lease of an older generation closes
    /// its connection instead of keeping it.
    generation: AtomicU64,
    /// Set by [`Pool::retire`]: no new connection is leased.
    retired: AtomicBool,
    /// Whether its upstream has a circuit breaker (the readiness probe leaves it out).
    breaker: bool,
    stats: Stats,
    /// The series of its tool calls.
    calls: CallSeries,
}

/// An upstream's tool-call series, `presa_gateway_upstream_calls_total` by
/// outcome and `presa_gateway_upstream_call_seconds`, each resolved the
/// first time it is used (under the recorder in effect then: the process's,
/// installed before any call) and kept: registering a series by key, what
/// `counter!` does each time, hashed and looked its key up on every call
/// (~2,000 instructions a proxied call, callgrind).
#[derive(Default)]
struct CallSeries {
    outcomes: [std::sync::OnceLock<metrics::Counter>; CALL_OUTCOMES.len()],
    seconds: std::sync::OnceLock<metrics::Histogram>,
}

/// The outcomes a tool call is counted under.
pub const CALL_OUTCOMES: [&str; 6] = ["ok", "tool_error", "input_required", "cancelled", "retry", "error"];

impl std::fmt::Debug for CallSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallSeries").finish_non_exhaustive()
    }
}

/// A connection taken from the pool; it goes back when dropped, unless the
/// upstream went away, [`Lease::discard`] took it, or it was dropped with
/// work still running upstream ([`Lease::running`]): then the upstream is told
/// to stop and the connection is closed after the cancel grace period. (A
/// handler is dropped mid-call when its task is cancelled or its claim lost.)
#[derive(Debug)]
pub struct Lease {
    conn: Option<Box<Connection>>,
    pool: Arc<Pool>,
    _permit: OwnedSemaphorePermit,
    running: Mutex<Option<RequestId>>,
    generation: u64,
}

impl Pool {
    /// A pool of at most `config.pool` connections, none started yet.
    pub fn new(config: &UpstreamConfig, timings: &Timings) -> Arc<Pool> {
        metrics::gauge!("presa_gateway_upstream_pool_size", "upstream" => config.name.clone()).set(config.pool as f64);
        Arc::new(Pool {
            name: config.name.clone(),
            endpoint: config.endpoint.clone(),
            protocol: config.protocol,
            connect_timeout: timings.connect_timeout,
            settle: timings.settle,
            cancel_grace: timings.cancel_grace,
            wait: timings.wait,
            call_timeout: timings.call_timeout,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(config.pool)),
            failures: Mutex::new((0, None)),
            peers: Mutex::new(Vec::new()),
            lists_changed: Arc::new(Notify::new()),
            tokens: match &config.endpoint {
                Endpoint::Http { auth: Some(auth), .. } => Some(Arc::new(TokenSource::new(&config.name, auth.clone()))),
                _ => None,
            },
            size: config.pool,
            generation: AtomicU64::new(0),
            retired: AtomicBool::new(false),
            breaker: config.breaker.is_some(),
            stats: Stats::default(),
            calls: CallSeries::default(),
        })
    }

    /// Count a tool call that ended with `outcome` (one of [`CALL_OUTCOMES`]) after `elapsed`.
    pub fn record_call(&self, outcome: &'static str, elapsed: Duration) {
        let name = || self.name.clone();
        let counter =
            || metrics::counter!("presa_gateway_upstream_calls_total", "upstream" => name(), "outcome" => outcome);
        match CALL_OUTCOMES.iter().position(|o| *o == outcome) {
            Some(i) => self.calls.outcomes[i].get_or_init(counter).increment(1),
            None => counter().increment(1),
        }
        self.calls
            .seconds
            .get_or_init(|| metrics::histogram!("presa_gateway_upstream_call_seconds", "upstream" => name()))
            .record(elapsed.as_secs_f64());
    }

    /// The upstream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What it has seen.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Its figures for the heartbeat.
    pub fn report(&self) -> presa_store::UpstreamReport {
        let (catalog_version, tool_count) = self.stats.listing();
        presa_store::UpstreamReport {
            name: self.name.clone(),
            state: self.stats.state().to_string(),
            pool: self.size as u64,
            in_use: self.size.saturating_sub(self.available()) as u64,
            restarts: self.stats.restarts(),
            last_error: self.stats.last_error(),
            catalog_version,
            tool_count,
            tools: self.stats.calls(),
        }
    }

    /// Drop its connections: the idle ones now, each busy one when its
    /// call ends; the next call opens a new one. Counted as a restart.
    pub fn restart(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.stats.restarted();
        let idle = std::mem::take(&mut *self.idle.lock().expect("pool lock"));
        tracing::info!(upstream = %self.name, idle = idle.len(), "restarting the upstream's connections");
        for conn in idle {
            self.opened(-1.0);
            tokio::spawn(async move { conn.close().await });
        }
    }

    /// Whether its upstream has a circuit breaker.
    pub fn has_breaker(&self) -> bool {
        self.breaker
    }

    /// Stop serving (a reload removed or changed the upstream): no new call
    /// gets a connection ([`UpstreamError::Retired`]), the idle connections
    /// close now and each busy one when its call ends (a call in flight is
    /// not cut). Once every call ended, `drained` is logged. Not a restart.
    pub fn retire(self: &Arc<Self>) {
        // Retired before the generation moves: a lease that saw the new
        // generation was refused, one that saw the old is closed when dropped.
        self.retired.store(true, Ordering::SeqCst);
        self.generation.fetch_add(1, Ordering::SeqCst);
        let idle = std::mem::take(&mut *self.idle.lock().expect("pool lock"));
        let busy = self.size.saturating_sub(self.available());
        tracing::info!(upstream = %self.name, idle = idle.len(), busy, "retiring the upstream's pool; its calls in flight finish");
        for conn in idle {
            self.opened(-1.0);
            tokio::spawn(async move { conn.close().await });
        }
        let (pool, all) = (self.clone(), u32::try_from(self.size).unwrap_or(u32::MAX));
        tokio::spawn(async move {
            if let Ok(_all) = pool.permits.clone().acquire_many_owned(all).await {
                tracing::info!(upstream = %pool.name, "retired pool drained: its last call ended, its connections are closed");
            }
        });
    }

    /// Whether [`Pool::retire`] was called.
    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::SeqCst)
    }

    /// Calls the pool can run now without waiting.
    pub fn available(&self) -> usize {
        self.permits.available_permits()
    }

    /// A connection: an idle one, else a new one once a place is free
    /// (waiting as long as it takes: a tool call's own bounds apply).
    pub async fn get(self: &Arc<Self>) -> Result<Lease, UpstreamError> {
        let permit = self.permits.clone().acquire_owned().await.expect("the pool's semaphore is never closed");
        self.connect(permit).await
    }

    /// Like [`Pool::get`], but waiting at most `--upstream-wait-ms` for a
    /// free place; then [`UpstreamError::Busy`] (retryable).
    pub async fn get_within(self: &Arc<Self>) -> Result<Lease, UpstreamError> {
        let permit = tokio::time::timeout(self.wait, self.permits.clone().acquire_owned())
            .await
            .map_err(|_| UpstreamError::Busy { upstream: self.name.clone(), waited: self.wait })?
            .expect("the pool's semaphore is never closed");
        self.connect(permit).await
    }

    /// One request (a prompt, a resource read, a completion) on a connection
    /// of its own ([`Pool::get_within`]), for at most `--upstream-call-timeout-ms`.
    /// What the upstream asks meanwhile gets the fixed answers (no call is
    /// routed to the connection); its progress and logs are dropped. If this
    /// future is dropped before the answer (the client went away, the
    /// request's deadline passed), the upstream is told to stop and the
    /// connection closed after the cancel grace, never reused as if idle.
    pub async fn request(self: &Arc<Self>, request: ClientRequest) -> Result<ServerResult, UpstreamError> {
        let lease = self.get_within().await?;
        let options = PeerRequestOptions::with_timeout(self.call_timeout);
        let handle = lease.conn().peer().send_request_with_option(request, options).await?;
        lease.running(Some(handle.id.clone()));
        let result = handle.await_response().await;
        match &result {
            // The upstream may still run it: the connection goes (the lease's drop stops it).
            Err(ServiceError::Timeout { .. }) => {}
            _ => lease.running(None),
        }
        Ok(result?)
    }

    /// A connection in the place `permit` holds: an idle one, else a new one.
    async fn connect(self: &Arc<Self>, permit: OwnedSemaphorePermit) -> Result<Lease, UpstreamError> {
        match self.take_idle()? {
            Some(conn) => Ok(self.lease(conn, permit, self.generation.load(Ordering::SeqCst))),
            // Opening a connection is a large future (an rmcp handshake, a
            // child started): boxed, so the future of every call that finds
            // an idle one (each proxied call holds it) stays small.
            None => Box::pin(self.open(permit)).await,
        }
    }

    /// An idle connection still open, if there is one (those found closed are counted and dropped).
    fn take_idle(&self) -> Result<Option<Box<Connection>>, UpstreamError> {
        if self.is_retired() {
            return Err(UpstreamError::Retired { upstream: self.name.clone() });
        }
        loop {
            let idle = self.idle.lock().expect("pool lock").pop();
            match idle {
                Some(conn) if conn.is_closed() => {
                    tracing::warn!(upstream = %self.name, "the upstream connection went away; replacing it");
                    metrics::counter!("presa_gateway_upstream_restarts_total", "upstream" => self.name.clone())
                        .increment(1);
                    self.stats.restarted();
                    self.opened(-1.0);
                }
                other => return Ok(other),
            }
        }
    }

    /// A new connection in the place `permit` holds (after the restart backoff).
    async fn open(self: &Arc<Self>, permit: OwnedSemaphorePermit) -> Result<Lease, UpstreamError> {
        self.wait_out_backoff().await;
        let generation = self.generation.load(Ordering::SeqCst);
        if self.is_retired() {
            return Err(UpstreamError::Retired { upstream: self.name.clone() });
        }
        let open = Connection::open(
            &self.name,
            &self.endpoint,
            self.protocol,
            self.connect_timeout,
            self.lists_changed.clone(),
            self.tokens.clone(),
        );
        match open.await {
            Ok(conn) => {
                self.peers.lock().expect("pool lock").push(conn.peer().clone());
                // No call is routed to it yet: what the upstream asks on its
                // own right after starting gets the fixed answers.
                tokio::time::sleep(self.settle).await;
                *self.failures.lock().expect("pool lock") = (0, None);
                self.opened(1.0);
                self.stats.opened();
                Ok(self.lease(Box::new(conn), permit, generation))
            }
            Err(e) => {
                self.stats.start_failed(&e.to_string());
                let mut f = self.failures.lock().expect("pool lock");
                *f = (f.0.saturating_add(1), Some(Instant::now()));
                metrics::counter!("presa_gateway_upstream_start_failures_total", "upstream" => self.name.clone())
                    .increment(1);
                Err(e)
            }
        }
    }

    fn lease(self: &Arc<Self>, conn: Box<Connection>, permit: OwnedSemaphorePermit, generation: u64) -> Lease {
        Lease { conn: Some(conn), pool: self.clone(), _permit: permit, running: Mutex::new(None), generation }
    }

    /// Whether the upstream can be served: a connection is live, or a new
    /// one starts now (so a probe also brings back an upstream that died
    /// while idle, at the pace of the restart backoff). Sends no request.
    pub async fn ready(self: &Arc<Self>) -> bool {
        let live = {
            let mut peers = self.peers.lock().expect("pool lock");
            peers.retain(|p| !p.is_transport_closed());
            !peers.is_empty()
        };
        live || self.get_within().await.is_ok()
    }

    /// Fires when the upstream says one of its lists changed.
    pub fn lists_changed(&self) -> Arc<Notify> {
        self.lists_changed.clone()
    }

    async fn wait_out_backoff(&self) {
        let (n, last) = *self.failures.lock().expect("pool lock");
        if let Some(last) = last {
            let pause = Duration::from_millis(100).saturating_mul(1 << n.min(7)).min(MAX_BACKOFF);
            let since = last.elapsed();
            if since < pause {
                tokio::time::sleep(pause - since).await;
            }
        }
    }

    fn opened(&self, delta: f64) {
        metrics::gauge!("presa_gateway_upstream_connections", "upstream" => self.name.clone()).increment(delta);
    }

    /// Close every idle connection (on shutdown).
    pub async fn drain(&self) {
        let idle = std::mem::take(&mut *self.idle.lock().expect("pool lock"));
        for conn in idle {
            self.opened(-1.0);
            conn.close().await;
        }
    }
}

impl Lease {
    /// The connection.
    pub fn conn(&self) -> &Connection {
        self.conn.as_ref().expect("a lease holds its connection until dropped")
    }

    /// Say which request runs upstream now (`None`: none), for [`Drop`] to stop.
    pub fn running(&self, what: Option<RequestId>) {
        *self.running.lock().expect("lease lock") = what;
    }

    /// Take the connection out of the pool (to close it: a call on it was
    /// abandoned and may still run); its place frees up for a new one.
    pub fn discard(mut self) -> Box<Connection> {
        self.pool.opened(-1.0);
        self.conn.take().expect("a lease holds its connection until dropped")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let running = self.running.get_mut().map(Option::take).unwrap_or_default();
        if let Some(id) = running
            && let Some(conn) = self.conn.take()
        {
            // Dropped mid-call: tell the upstream to stop, and close the
            // connection after the grace period (what it still sends belongs
            // to no call).
            self.pool.opened(-1.0);
            let grace = self.pool.cancel_grace;
            tracing::info!(upstream = %self.pool.name, request = %id, "call given up; telling the upstream to stop");
            tokio::spawn(async move {
                let p = CancelledNotificationParam::new(Some(id), Some("cancelled".into()));
                let _ = tokio::time::timeout(grace, conn.peer().notify_cancelled(p)).await;
                tokio::time::sleep(grace).await;
                conn.close().await;
            });
            return;
        }
        if let Some(conn) = self.conn.take() {
            if conn.is_closed() {
                self.pool.opened(-1.0);
                metrics::counter!("presa_gateway_upstream_restarts_total", "upstream" => self.pool.name.clone())
                    .increment(1);
                self.pool.stats.restarted();
            } else {
                // Checked under the idle lock, which a restart takes after
                // bumping the generation: no connection of an older one stays.
                let mut idle = self.pool.idle.lock().expect("pool lock");
                if self.generation == self.pool.generation.load(Ordering::SeqCst) && !self.pool.is_retired() {
                    idle.push(conn);
                } else {
                    // Restarted or retired while it ran a call: it goes now that the call ended.
                    drop(idle);
                    self.pool.opened(-1.0);
                    tokio::spawn(async move { conn.close().await });
                }
            }
        }
    }
}
