//! [`Blocking`]: the connections a standalone server's claims block on
//! (`XREAD … BLOCK`), apart from the shared command connection.

use std::sync::Mutex;

use deadpool_redis::{Pool, PoolConfig, Runtime, Timeouts};
use redis::{AsyncConnectionConfig, ConnectionInfo};

use super::Endpoint;
use crate::{config::RedisConfig, error::RedisStoreError};

/// The pool of dedicated connections for blocking reads (standalone only),
/// without a response timeout. With Sentinel it follows the primary: a pool
/// is built for the primary the last discovery confirmed (by the command
/// connection or the pub/sub hub), and replaced when that moves.
pub(crate) struct Blocking {
    cfg: RedisConfig,
    endpoint: Endpoint,
    /// The pool, and the primary (`host:port`; empty without Sentinel) it connects to.
    current: Mutex<Option<(String, Pool)>>,
}

impl std::fmt::Debug for Blocking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let on = self.current.lock().ok().and_then(|c| c.as_ref().map(|(a, _)| a.clone()));
        f.debug_struct("Blocking").field("primary", &on).finish_non_exhaustive()
    }
}

impl Blocking {
    /// Without Sentinel the pool is built at once (a bad URL fails here).
    pub(crate) fn new(cfg: &RedisConfig, endpoint: &Endpoint) -> Result<Blocking, RedisStoreError> {
        let blocking = Blocking { cfg: cfg.clone(), endpoint: endpoint.clone(), current: Mutex::new(None) };
        if !endpoint.is_sentinel() {
            blocking.pool()?;
        }
        Ok(blocking)
    }

    /// The pool for the primary known now (`None`: none known yet).
    pub(crate) fn pool(&self) -> Result<Option<Pool>, RedisStoreError> {
        let mut current =
            self.current.lock().map_err(|_| RedisStoreError::Pool("blocking pool lock poisoned".into()))?;
        if let Some((address, pool)) = current.as_ref()
            && (!self.endpoint.is_sentinel()
                || self.endpoint.known_primary()?.is_some_and(|(known, _)| &known == address))
        {
            return Ok(Some(pool.clone()));
        }
        let Some((address, info)) = self.endpoint.known_primary()? else {
            return Ok(None);
        };
        let pool = blocking_pool(&self.cfg, info)?;
        if current.is_some() {
            tracing::info!(primary = %address, "blocking-read connections follow the new Redis primary");
        }
        *current = Some((address, pool.clone()));
        Ok(Some(pool))
    }
}

fn blocking_pool(cfg: &RedisConfig, info: ConnectionInfo) -> Result<Pool, RedisStoreError> {
    let conn_config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(cfg.op_timeout))
        // Blocking reads are bounded by the caller (BLOCK + op_timeout).
        .set_response_timeout(None);
    let manager = deadpool_redis::Manager::new_with_config(info, conn_config)?;
    let mut pool_config = PoolConfig::new(cfg.blocking_connections);
    pool_config.timeouts =
        Timeouts { wait: Some(cfg.op_timeout), create: Some(cfg.op_timeout), recycle: Some(cfg.op_timeout) };
    Pool::builder(manager)
        .config(pool_config)
        .runtime(Runtime::Tokio1)
        .build()
        .map_err(|e| RedisStoreError::Config(e.to_string()))
}
