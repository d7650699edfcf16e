//! The pub/sub hub: ONE subscriber connection per store (so per process)
//! multiplexing every local watcher.
//!
//! A small actor task owns the connection (standalone: a dedicated
//! `Client::get_async_pubsub()`; cluster: a RESP3 cluster connection using
//! sharded `SSUBSCRIBE`), subscribes a channel when its first local watcher
//! appears and unsubscribes it when the last one goes, and fans every message
//! out to the local watchers' bounded queues. When the connection drops (or a
//! periodic PING fails) it reconnects with backoff and re-subscribes every
//! channel still watched (logged, and counted in
//! [`RECONNECTS_METRIC`](crate::metrics::RECONNECTS_METRIC)). With Sentinel each
//! reconnect first asks the Sentinels for the primary, so after a failover
//! the hub re-subscribes on the promoted replica. Messages published while
//! it is away are lost: pub/sub is only a wake-up, the task record is the truth.
//!
//! A subscription is confirmed by Redis before [`Hub::subscribe`] returns, so
//! whatever is published after that reaches the watcher.
//!
//! The connection itself (standalone or sharded) is in `hub/live.rs`.

use std::{
    collections::{HashMap, HashSet},
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use futures::{Stream, StreamExt};
use presa_store::{
    StoreError,
    fanout::{self, Offered, Overflow, QueueLimits, QueueReceiver, QueueSender},
};
use tokio::{
    sync::{mpsc, oneshot},
    time::Instant,
};

use crate::{
    config::RedisConfig,
    conn::{Endpoint, bounded},
    error::RedisStoreError,
};

mod live;

use live::{Live, connect, next_message};

/// How often an idle subscriber connection is checked with PING.
const PING_EVERY: Duration = Duration::from_secs(5);
/// Longest pause between reconnect attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Shortest pause between reconnect attempts.
const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// Most bytes of snapshots queued for one task watcher (two of the largest
/// tasks by default); past it, or past `watch_buffer` snapshots, it misses some.
pub(crate) const WATCH_QUEUE_BYTES: usize = 4 * 1024 * 1024;

/// One message as received: its channel and payload.
#[derive(Debug, Clone)]
pub(crate) struct Delivery {
    /// The channel it was published on.
    pub(crate) channel: Arc<str>,
    /// The payload, shared by every local watcher of the channel.
    pub(crate) payload: Arc<[u8]>,
}

enum Cmd {
    Sub {
        id: u64,
        channels: Vec<String>,
        sender: QueueSender<Delivery>,
        reply: oneshot::Sender<Result<(), RedisStoreError>>,
    },
    Unsub {
        id: u64,
    },
}

/// Handle of the hub actor. Cheap to share; the actor stops once the hub and
/// every subscription are dropped.
#[derive(Debug)]
pub(crate) struct Hub {
    tx: mpsc::UnboundedSender<Cmd>,
    next_id: AtomicU64,
    /// A task watcher's queue: `watch_buffer` snapshots or [`WATCH_QUEUE_BYTES`].
    watch: QueueLimits,
    op_timeout: Duration,
}

impl Hub {
    /// Start the actor (it connects lazily, on the first subscription).
    pub(crate) fn spawn(cfg: &RedisConfig, endpoint: Endpoint) -> Hub {
        let (tx, rx) = mpsc::unbounded_channel();
        let actor = Actor {
            endpoint,
            cluster: cfg.cluster,
            connected_before: false,
            op_timeout: cfg.op_timeout,
            live: None,
            subs: HashMap::new(),
            channels: HashMap::new(),
            backoff: MIN_BACKOFF,
            retry_at: None,
            failed_at: None,
        };
        tokio::spawn(actor.run(rx));
        let watch = QueueLimits { max_items: cfg.watch_buffer, max_bytes: WATCH_QUEUE_BYTES };
        Hub { tx, next_id: AtomicU64::new(1), watch, op_timeout: cfg.op_timeout }
    }

    /// Watch `channels` as wake-ups (confirmed by Redis when this returns):
    /// a watcher that falls behind its queue misses messages.
    pub(crate) async fn subscribe(&self, channels: Vec<String>) -> Result<Subscription, RedisStoreError> {
        self.subscribe_with(channels, self.watch, Overflow::Skip).await
    }

    /// Watch `channels` (confirmed by Redis when this returns) through a
    /// queue of `limits`, which does `overflow` when full.
    pub(crate) async fn subscribe_with(
        &self,
        channels: Vec<String>,
        limits: QueueLimits,
        overflow: Overflow,
    ) -> Result<Subscription, RedisStoreError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, rx) = fanout::queue(limits, overflow);
        // Built first so that every exit path (errors, timeouts, the caller
        // dropping this future) unregisters through `Drop`.
        let sub = Subscription { id, rx, hub: self.tx.clone() };
        let (reply, answer) = oneshot::channel();
        let gone = || RedisStoreError::Pool("pub/sub hub stopped".into());
        self.tx.send(Cmd::Sub { id, channels, sender, reply }).map_err(|_| gone())?;
        // The actor bounds each of its Redis calls by op_timeout (connect,
        // then subscribe); allow for one queued request ahead of ours.
        let limit = self.op_timeout * 3;
        match tokio::time::timeout(limit, answer).await {
            Ok(Ok(Ok(()))) => Ok(sub),
            Ok(Ok(Err(e))) => Err(e),
            Ok(Err(_)) => Err(gone()),
            Err(_) => Err(RedisStoreError::Timeout(limit)),
        }
    }
}

/// A local watcher's queue: deliveries, or `Lagged` once (an ending queue
/// that overflowed) and the end; unsubscribes when dropped.
#[derive(Debug)]
pub(crate) struct Subscription {
    id: u64,
    rx: QueueReceiver<Delivery>,
    hub: mpsc::UnboundedSender<Cmd>,
}

impl Stream for Subscription {
    type Item = Result<Delivery, StoreError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_next_unpin(cx)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let _ = self.hub.send(Cmd::Unsub { id: self.id });
    }
}

impl std::fmt::Debug for Cmd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cmd::Sub { id, channels, .. } => write!(f, "Sub({id}, {channels:?})"),
            Cmd::Unsub { id } => write!(f, "Unsub({id})"),
        }
    }
}

struct Actor {
    endpoint: Endpoint,
    /// Sharded pub/sub over a cluster connection, or one standalone server.
    cluster: bool,
    /// Whether a connection was ever up (the next one is a reconnect).
    connected_before: bool,
    op_timeout: Duration,
    live: Option<Live>,
    /// Watcher id → (its channels, its queue).
    subs: HashMap<u64, (Vec<String>, QueueSender<Delivery>)>,
    /// Channel → watcher ids.
    channels: HashMap<String, HashSet<u64>>,
    backoff: Duration,
    /// When disconnected: the background reconnect's next attempt.
    retry_at: Option<Instant>,
    /// When the connection was last lost or failed to open.
    failed_at: Option<Instant>,
}

impl Actor {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Cmd>) {
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let reconnect_at = match (&self.live, self.channels.is_empty()) {
                (None, false) => Some(self.retry_at.unwrap_or_else(Instant::now)),
                _ => None,
            };
            tokio::select! {
                cmd = rx.recv() => match cmd {
                    Some(Cmd::Sub { id, channels, sender, reply }) => {
                        let result = self.sub(id, channels, sender).await;
                        let _ = reply.send(result);
                    }
                    Some(Cmd::Unsub { id }) => self.unsub(id).await,
                    None => return,
                },
                msg = next_message(&mut self.live) => match msg {
                    Some(d) => {
                        for id in self.fan_out(d) {
                            self.unsub(id).await;
                        }
                    }
                    None => self.lost("subscriber connection closed"),
                },
                _ = ping.tick(), if self.live.is_some() => {
                    let limit = self.op_timeout;
                    if let Some(live) = self.live.as_mut()
                        && let Err(e) = bounded(limit, live.sink.ping()).await
                    {
                        self.lost(&e.to_string());
                    }
                }
                _ = sleep_until(reconnect_at), if reconnect_at.is_some() => {
                    if let Err(e) = self.ensure_live().await {
                        tracing::debug!(error = %e, "pub/sub reconnect failed");
                    }
                }
            }
        }
    }

    fn lost(&mut self, why: &str) {
        if self.live.take().is_some() {
            tracing::warn!(reason = why, "pub/sub connection lost; will re-subscribe");
        }
        let now = Instant::now();
        self.failed_at = Some(now);
        self.retry_at = Some(now + self.backoff);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    /// Connect and re-subscribe every watched channel, unless connected
    /// already. Right after a failed attempt this fails at once, so queued
    /// callers are told "unavailable" promptly instead of each waiting out
    /// another connect timeout; otherwise a caller does not wait for the
    /// background reconnect's backoff.
    async fn ensure_live(&mut self) -> Result<(), RedisStoreError> {
        if self.live.is_some() {
            return Ok(());
        }
        if let Some(at) = self.failed_at
            && at.elapsed() < MIN_BACKOFF
        {
            return Err(RedisStoreError::Pool("pub/sub connection is down (reconnecting)".into()));
        }
        let result = async {
            let mut live = connect(&self.endpoint, self.cluster, self.op_timeout).await?;
            let all: Vec<String> = self.channels.keys().cloned().collect();
            for chunk in all.chunks(512) {
                bounded(self.op_timeout, live.sink.subscribe(chunk)).await?;
            }
            Ok::<_, RedisStoreError>(live)
        }
        .await;
        match result {
            Ok(live) => {
                if self.connected_before {
                    tracing::warn!(channels = self.channels.len(), "pub/sub reconnected; channels re-subscribed");
                    metrics::counter!(crate::metrics::RECONNECTS_METRIC, "connection" => "pubsub").increment(1);
                }
                self.connected_before = true;
                self.live = Some(live);
                self.retry_at = None;
                self.failed_at = None;
                self.backoff = MIN_BACKOFF;
                Ok(())
            }
            Err(e) => {
                self.lost(&e.to_string());
                Err(e)
            }
        }
    }

    async fn sub(
        &mut self,
        id: u64,
        channels: Vec<String>,
        sender: QueueSender<Delivery>,
    ) -> Result<(), RedisStoreError> {
        let fresh: Vec<String> = channels
            .iter()
            .filter(|c| !self.channels.contains_key(*c))
            .cloned()
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        self.ensure_live().await?;
        if !fresh.is_empty() {
            let limit = self.op_timeout;
            let live = self.live.as_mut().expect("connected above");
            if let Err(e) = bounded(limit, live.sink.subscribe(&fresh)).await {
                self.lost(&e.to_string());
                return Err(e);
            }
        }
        for ch in &channels {
            self.channels.entry(ch.clone()).or_default().insert(id);
        }
        self.subs.insert(id, (channels, sender));
        Ok(())
    }

    async fn unsub(&mut self, id: u64) {
        let Some((channels, _)) = self.subs.remove(&id) else {
            return;
        };
        let mut idle = Vec::new();
        for ch in channels {
            if let Some(ids) = self.channels.get_mut(&ch) {
                ids.remove(&id);
                if ids.is_empty() {
                    self.channels.remove(&ch);
                    idle.push(ch);
                }
            }
        }
        if idle.is_empty() {
            return;
        }
        let limit = self.op_timeout;
        if let Some(live) = self.live.as_mut()
            && let Err(e) = bounded(limit, live.sink.unsubscribe(&idle)).await
        {
            self.lost(&e.to_string());
        }
    }

    /// Hand `d` to every watcher of its channel; returns the watchers it
    /// ended (they lagged), to unsubscribe.
    fn fan_out(&mut self, d: Delivery) -> Vec<u64> {
        let Some(ids) = self.channels.get(&*d.channel) else {
            return Vec::new();
        };
        let mut ended = Vec::new();
        for id in ids {
            let Some((_, sender)) = self.subs.get(id) else {
                continue;
            };
            match sender.offer(d.clone(), d.payload.len()) {
                Offered::Queued | Offered::Closed => {}
                Offered::Skipped => tracing::debug!(channel = %d.channel, "watcher lagging; snapshot dropped"),
                Offered::Ended => {
                    tracing::warn!(channel = %d.channel, "event subscriber lagged and was ended");
                    ended.push(*id);
                }
            }
        }
        ended
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
