//! Durability: what Redis must confirm before presa acknowledges a write.
//!
//! Redis replicates asynchronously: the primary answers a write before any
//! replica has it, and a failover to a replica that had not received it yet
//! discards it. [`Durability`] is the operator's choice between the two:
//!
//! - [`Durability::Primary`] (the default): a write is acknowledged once the
//!   primary applied it. A failover can lose the writes of its last moments
//!   (`docs/redis.md`, "What a failover can lose").
//! - [`Durability::Replicated`]: a create, and every write that ends a task,
//!   is sent in one pipeline with `WAIT <replicas> <timeout>`, and counts as
//!   done only when that many replicas confirmed they have it. `WAIT` blocks
//!   the connection it runs on, so these writes go over connections of their
//!   own ([`Confirming`], a small pool), never the shared command connection
//!   that every other command of the pod is multiplexed on. A create replayed
//!   under its idempotency key is confirmed too: a write to the partition's
//!   `sync` key and a `WAIT` behind it ([`RedisStore::confirm_partition`]), as
//!   replication keeps order and the replayed task was written before.
//!
//! A write the replicas did not confirm in time is still on the primary:
//! [`Replication::Short`] says so, and the caller decides (a create answers a
//! retryable error whose retry under the same idempotency key returns the
//! task if the primary kept it; a worker's outcome is kept and counted).

use std::{
    sync::Mutex,
    time::{Duration, Instant},
};

use redis::{FromRedisValue, Value};
use tokio::sync::Semaphore;

use crate::{
    config::{Durability, RedisConfig},
    conn::{Conn, Endpoint, Healing, Target, Verbosity, bounded, connect, traced},
    error::RedisStoreError,
    scripts::Invocation,
};

/// How many replicas confirmed a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Replication {
    /// As many as [`Durability`] asks (always, with `Primary`).
    Confirmed,
    /// Fewer within the timeout: the write is on the primary only (or on
    /// fewer replicas than asked).
    Short {
        /// Replicas that confirmed.
        acked: u64,
        /// Replicas asked for.
        wanted: u32,
    },
}

/// The connections confirming writes (replicated durability): at most
/// `RedisConfig::durable_connections` at once, each used by one write at a
/// time, kept while healthy.
pub(crate) struct Confirming {
    /// The store's settings, with `op_timeout` stretched by `WAIT`'s timeout
    /// (the response of a write and its `WAIT` takes up to both).
    cfg: RedisConfig,
    endpoint: Endpoint,
    idle: Mutex<Vec<Conn>>,
    permits: Semaphore,
    replicas: u32,
    timeout: Duration,
}

impl std::fmt::Debug for Confirming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Confirming").field("replicas", &self.replicas).field("timeout", &self.timeout).finish()
    }
}

impl Confirming {
    /// The pool for `cfg`'s durability; `None` with [`Durability::Primary`].
    pub(crate) fn new(cfg: &RedisConfig, endpoint: &Endpoint) -> Option<Confirming> {
        let Durability::Replicated { replicas, timeout } = cfg.durability else {
            return None;
        };
        let stretched = RedisConfig { op_timeout: cfg.op_timeout + timeout, ..cfg.clone() };
        Some(Confirming {
            cfg: stretched,
            endpoint: endpoint.clone(),
            idle: Mutex::new(Vec::new()),
            permits: Semaphore::new(cfg.durable_connections),
            replicas,
            timeout,
        })
    }

    /// Run `pipe` (its last command a `WAIT`) on a connection of its own.
    /// The connection is kept for the next write only when it answered.
    async fn run(&self, pipe: &redis::Pipeline) -> redis::RedisResult<Vec<Value>> {
        let _permit = tokio::time::timeout(self.cfg.op_timeout, self.permits.acquire()).await.map_err(|_| {
            redis::RedisError::from((redis::ErrorKind::Io, "every confirming connection is busy (durable_connections)"))
        })?;
        let cached = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let mut conn = match cached {
            Some(conn) => conn,
            None => Box::pin(connect(&self.cfg, &self.endpoint)).await.map_err(as_redis)?.0,
        };
        let reply = pipe.query_async::<Vec<Value>>(&mut conn).await;
        // A Sentinel-found primary may have moved: a connection that failed is dropped.
        if reply.is_ok()
            && let Ok(mut idle) = self.idle.lock()
        {
            idle.push(conn);
        }
        reply
    }
}

fn as_redis(e: RedisStoreError) -> redis::RedisError {
    match e {
        RedisStoreError::Redis(e) => e,
        other => redis::RedisError::from((redis::ErrorKind::Io, "connecting", other.to_string())),
    }
}

impl Confirming {
    /// Run `inv`, a script that writes (a create, or a write that ends a
    /// task), and `WAIT` for its replicas in the same pipeline on a
    /// confirming connection. A fresh server (or a failover to one) that
    /// has not seen the script gets it loaded over `conn` (bounded by
    /// `op_timeout`) first.
    pub(crate) async fn invoke<T: FromRedisValue + Send>(
        &self,
        inv: &Invocation<'_>,
        conn: &Healing,
        op_timeout: Duration,
        target: &Target,
    ) -> Result<(T, Replication), RedisStoreError> {
        let mut pipe = redis::pipe();
        pipe.invoke_script(inv).cmd("WAIT").arg(self.replicas).arg(self.timeout.as_millis() as u64);
        let lua = inv.lua;
        let mut reply = self.round_trip(lua.name, &pipe, target).await;
        if let Err(RedisStoreError::Redis(e)) = &reply
            && e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
        {
            // Load it (not run it), then the pipeline again (its WAIT ran on nothing).
            let mut c = conn.get().await?;
            bounded(op_timeout, inv.load_async(&mut c)).await?;
            reply = self.round_trip(lua.name, &pipe, target).await;
        }
        let mut values = reply?.into_iter();
        let (Some(value), Some(acked)) = (values.next(), values.next()) else {
            return Err(RedisStoreError::Corrupt("a write with WAIT answered fewer than two replies".into()));
        };
        let value = T::from_redis_value(value).map_err(|e| RedisStoreError::Corrupt(e.to_string()))?;
        Ok((value, self.judge(acked)?))
    }

    /// Confirm that what was written before now is on the replicas: a
    /// write to the partition's `sync` key (expiring in 10 s) and a `WAIT`
    /// behind it. For a create replayed under its idempotency key, whose
    /// first attempt may not have been confirmed.
    pub(crate) async fn sync(&self, sync_key: String, target: &Target) -> Result<Replication, RedisStoreError> {
        let mut pipe = redis::pipe();
        pipe.cmd("SET")
            .arg(sync_key)
            .arg(presa_store::util::now_ms())
            .arg("PX")
            .arg(10_000)
            .ignore()
            .cmd("WAIT")
            .arg(self.replicas)
            .arg(self.timeout.as_millis() as u64);
        let reply = self.round_trip("sync", &pipe, target).await?;
        match reply.into_iter().next() {
            Some(acked) => self.judge(acked),
            None => Err(RedisStoreError::Corrupt("WAIT answered nothing".into())),
        }
    }

    async fn round_trip(
        &self,
        name: &'static str,
        pipe: &redis::Pipeline,
        target: &Target,
    ) -> Result<Vec<Value>, RedisStoreError> {
        let started = Instant::now();
        let r = traced(
            target,
            Verbosity::Info,
            || "EVALSHA".into(),
            Some(name),
            self.cfg.op_timeout,
            Box::pin(self.run(pipe)),
        )
        .await;
        crate::metrics::round_trip(name, started.elapsed(), &r);
        r
    }
}

impl Confirming {
    /// `WAIT`'s answer (replicas that confirmed), against what was asked.
    fn judge(&self, acked: Value) -> Result<Replication, RedisStoreError> {
        let acked: u64 = redis::from_redis_value(acked).map_err(|e| RedisStoreError::Corrupt(e.to_string()))?;
        if acked >= u64::from(self.replicas) {
            Ok(Replication::Confirmed)
        } else {
            crate::metrics::unconfirmed();
            Ok(Replication::Short { acked, wanted: self.replicas })
        }
    }
}
