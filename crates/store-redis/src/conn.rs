//! Connections: one multiplexed, self-reconnecting command connection
//! (standalone [`ConnectionManager`] or cluster [`ClusterConnection`]), each
//! command bounded by `op_timeout`, and for standalone blocking work reads a
//! small pool of dedicated connections without a response timeout (a blocking
//! `XREADGROUP` would otherwise trip redis-rs' default 500 ms timeout, or hold
//! up every command queued behind it on the shared connection).

use std::time::Duration;

use deadpool_redis::{Pool, PoolConfig, Runtime, Timeouts};
use redis::{
    AsyncConnectionConfig, Client, Cmd, Pipeline, RedisFuture, Value,
    aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig},
    cluster::ClusterClient,
    cluster_async::ClusterConnection,
};

use crate::{RedisConfig, RedisStoreError};

/// The shared command connection.
#[derive(Clone)]
pub(crate) enum Conn {
    /// A standalone server (or a proxy that looks like one).
    Single(ConnectionManager),
    /// A Redis Cluster, routed by key slot.
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Conn::Single(_) => f.write_str("Conn::Single"),
            Conn::Cluster(_) => f.write_str("Conn::Cluster"),
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// Bound a Redis future by `limit`.
pub(crate) async fn bounded<T>(
    limit: Duration,
    fut: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T, RedisStoreError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r.map_err(RedisStoreError::from),
        Err(_) => Err(RedisStoreError::Timeout(limit)),
    }
}

/// Open the command connection (failing within `op_timeout` when Redis is unreachable).
pub(crate) async fn connect(cfg: &RedisConfig) -> Result<Conn, RedisStoreError> {
    let urls = cfg.urls();
    if cfg.cluster {
        let client = ClusterClient::builder(urls)
            .connection_timeout(cfg.op_timeout)
            .response_timeout(cfg.op_timeout)
            .retries(2)
            .build()?;
        let conn = bounded(cfg.op_timeout, client.get_async_connection()).await?;
        Ok(Conn::Cluster(conn))
    } else {
        let client = Client::open(urls[0].as_str())?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(cfg.op_timeout))
            .set_response_timeout(Some(cfg.op_timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let conn = bounded(cfg.op_timeout, ConnectionManager::new_with_config(client, config)).await?;
        Ok(Conn::Single(conn))
    }
}

/// The pool of dedicated connections for blocking reads (standalone only).
pub(crate) fn blocking_pool(cfg: &RedisConfig) -> Result<Pool, RedisStoreError> {
    let url = cfg.urls().remove(0);
    let conn_config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(cfg.op_timeout))
        // Blocking reads are bounded by the caller (BLOCK + op_timeout).
        .set_response_timeout(None);
    let manager = deadpool_redis::Manager::new_with_config(url.as_str(), conn_config)?;
    let mut pool_config = PoolConfig::new(cfg.blocking_connections);
    pool_config.timeouts =
        Timeouts { wait: Some(cfg.op_timeout), create: Some(cfg.op_timeout), recycle: Some(cfg.op_timeout) };
    Pool::builder(manager)
        .config(pool_config)
        .runtime(Runtime::Tokio1)
        .build()
        .map_err(|e| RedisStoreError::Config(e.to_string()))
}
