//! Finding the primary through Redis Sentinel.
//!
//! [`Sentinels::discover`] follows the Sentinel client protocol
//! (<https://redis.io/docs/latest/develop/reference/sentinel-clients/>): ask
//! the Sentinels for the primary's address (`SENTINEL
//! get-master-addr-by-name`), then connect to that address and check with
//! `ROLE` that it is a primary, since a Sentinel that has not yet seen a
//! failover (or one cut off from the others) can name a server that is gone
//! or was turned into a replica. Every Sentinel is asked at once, each with
//! its own `op_timeout`, and the first answer naming a confirmed primary
//! wins, so a Sentinel that is down or black-holed costs nothing while
//! another answers. Answers naming something that is not a primary (or does
//! not answer) are skipped; when none is left, discovery fails, and the
//! caller (a command, the pub/sub hub's reconnect) tries again later: that
//! is the window of a failover in progress, which [`Sentinels::trouble`]
//! describes for `/readyz`. For 200 ms after a failed discovery, the next
//! ones fail at once with the same reason (a failover must not turn every
//! command of every pod into a round of Sentinel connections).
//!
//! Hand-written rather than redis-rs' `sentinel` feature: that one asks
//! `SENTINEL MASTERS` through connections it caches behind `&mut self`, with
//! no bound of its own on a Sentinel that stops answering, while here every
//! step is bounded by `op_timeout` and the result feeds the connections
//! presa already heals (`conn/mod.rs`).
//!
//! Nothing is cached but the last primary found (for the blocking-read pool,
//! which follows it, and for logging a move): each new connection asks
//! again. Besides, the store asks one Sentinel once a second
//! ([`Sentinels::named_primary`], `link.rs`) whether the primary moved while the command connection's old
//! one is still up, and drops that connection if so. Connections are rare (start-up, after an error a new connection
//! cures), and a fresh answer is what makes every connection follow a
//! failover.

use std::{
    sync::Mutex,
    time::{Duration, Instant},
};

use futures::{StreamExt, stream::FuturesUnordered};
use redis::{
    AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo,
    TlsCertificates, Value,
};

use super::bounded;
use crate::{config::SentinelConfig, error::RedisStoreError};

/// The Sentinels of one store, and what the last discovery found.
pub(crate) struct Sentinels {
    addresses: Vec<(String, u16)>,
    master: String,
    /// AUTH for the Sentinels.
    sentinel_auth: RedisConnectionInfo,
    /// AUTH for the primary.
    data_auth: RedisConnectionInfo,
    tls: bool,
    certs: Option<TlsCertificates>,
    op_timeout: Duration,
    /// The primary the last successful discovery confirmed.
    primary: Mutex<Option<Primary>>,
    /// When and why the last discovery failed, while no later one succeeded.
    trouble: Mutex<Option<(Instant, String)>>,
}

/// Least time between two discoveries after one failed: the commands (and
/// reconnects) in between share its outcome instead of each asking every
/// Sentinel again, so a failover does not turn every pod's traffic into a
/// storm of Sentinel connections.
const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(200);

/// A confirmed primary.
#[derive(Clone)]
pub(crate) struct Primary {
    /// `host:port`, as the Sentinels announce it.
    pub(crate) address: String,
    /// How to connect to it (address, AUTH, TLS).
    pub(crate) info: ConnectionInfo,
}

impl std::fmt::Debug for Sentinels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let primary = self.primary.lock().ok().and_then(|p| p.as_ref().map(|p| p.address.clone()));
        f.debug_struct("Sentinels")
            .field("addresses", &self.addresses)
            .field("master", &self.master)
            .field("primary", &primary)
            .finish_non_exhaustive()
    }
}

fn auth(username: &Option<String>, password: &Option<String>) -> RedisConnectionInfo {
    let mut info = RedisConnectionInfo::default();
    if let Some(u) = username {
        info = info.set_username(u);
    }
    if let Some(p) = password {
        info = info.set_password(p);
    }
    info
}

impl Sentinels {
    /// From a validated configuration.
    pub(crate) fn new(
        cfg: &SentinelConfig,
        certs: Option<TlsCertificates>,
        op_timeout: Duration,
    ) -> Result<Sentinels, RedisStoreError> {
        Ok(Sentinels {
            addresses: cfg.addresses()?,
            master: cfg.master.clone(),
            // Sentinels have no CLIENT SETINFO before Redis 7.2: do not send it.
            sentinel_auth: auth(&cfg.sentinel_username, &cfg.sentinel_password).set_skip_set_lib_name(),
            data_auth: auth(&cfg.username, &cfg.password),
            tls: cfg.tls,
            certs,
            op_timeout,
            primary: Mutex::new(None),
            trouble: Mutex::new(None),
        })
    }

    /// A client of `host:port` with `redis` settings (AUTH), over TLS when configured.
    fn client(&self, host: &str, port: u16, redis: RedisConnectionInfo) -> Result<Client, RedisStoreError> {
        let addr = if self.tls {
            ConnectionAddr::TcpTls { host: host.to_string(), port, insecure: false, tls_params: None }
        } else {
            ConnectionAddr::Tcp(host.to_string(), port)
        };
        let info = addr.into_connection_info()?.set_redis_settings(redis);
        Ok(match &self.certs {
            Some(certs) => Client::build_with_tls(info, certs.clone())?,
            None => Client::open(info)?,
        })
    }

    fn connection_config(&self) -> AsyncConnectionConfig {
        AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.op_timeout))
            .set_response_timeout(Some(self.op_timeout))
    }

    fn master_addr_cmd(&self) -> redis::Cmd {
        redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg(&self.master).to_owned()
    }

    /// One Sentinel's answer: the primary's `host` and `port`.
    async fn ask(&self, host: &str, port: u16) -> Result<(String, u16), String> {
        let client = self.client(host, port, self.sentinel_auth.clone()).map_err(|e| e.to_string())?;
        let config = self.connection_config();
        let query = async {
            let mut conn = client.get_multiplexed_async_connection_with_config(&config).await?;
            self.master_addr_cmd().query_async::<Option<(String, u16)>>(&mut conn).await
        };
        match bounded(self.op_timeout, query).await {
            Ok(Some(addr)) => Ok(addr),
            Ok(None) => Err(format!("Sentinel {host}:{port} does not know the master {:?}", self.master)),
            Err(e) => Err(format!("Sentinel {host}:{port}: {e}")),
        }
    }

    /// Whether `host:port` answers `ROLE` as a primary.
    async fn confirm(&self, host: &str, port: u16) -> Result<ConnectionInfo, String> {
        let client = self.client(host, port, self.data_auth.clone()).map_err(|e| e.to_string())?;
        let config = self.connection_config();
        let query = async {
            let mut conn = client.get_multiplexed_async_connection_with_config(&config).await?;
            redis::cmd("ROLE").query_async::<Value>(&mut conn).await
        };
        match bounded(self.op_timeout, query).await {
            Ok(reply) => match role(&reply).as_deref() {
                Some("master") => Ok(client.get_connection_info().clone()),
                Some(other) => Err(format!("{host}:{port} is a {other}, not a primary (a failover is under way)")),
                None => Err(format!("{host}:{port} answered ROLE with {reply:?}")),
            },
            Err(e) => Err(format!("primary {host}:{port}: {e}")),
        }
    }

    /// Find and confirm the current primary (see the module docs). Takes at
    /// most about twice `op_timeout`.
    pub(crate) async fn discover(&self) -> Result<Primary, RedisStoreError> {
        if let Some((at, why)) = self.trouble.lock().ok().and_then(|t| t.clone())
            && at.elapsed() < RETRY_AFTER_FAILURE
        {
            return Err(RedisStoreError::Unreachable(why));
        }
        let mut answers: FuturesUnordered<_> = self.addresses.iter().map(|(h, p)| self.ask(h, *p)).collect();
        let mut tried: Vec<(String, u16)> = Vec::new();
        let mut errors: Vec<String> = Vec::new();
        while let Some(answer) = answers.next().await {
            let (host, port) = match answer {
                Ok(addr) => addr,
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            if tried.contains(&(host.clone(), port)) {
                continue;
            }
            tried.push((host.clone(), port));
            match self.confirm(&host, port).await {
                Ok(info) => return Ok(self.found(format!("{host}:{port}"), info)),
                Err(e) => errors.push(e),
            }
        }
        errors.sort();
        errors.dedup();
        let why = format!("no Redis primary for Sentinel master {:?}: {}", self.master, errors.join("; "));
        if let Ok(mut t) = self.trouble.lock() {
            *t = Some((Instant::now(), why.clone()));
        }
        Err(RedisStoreError::Unreachable(why))
    }

    /// Record a confirmed primary (logging when it moved).
    fn found(&self, address: String, info: ConnectionInfo) -> Primary {
        let primary = Primary { address, info };
        if let Ok(mut t) = self.trouble.lock() {
            *t = None;
        }
        if let Ok(mut last) = self.primary.lock() {
            match last.as_ref().map(|p| p.address.as_str()) {
                Some(was) if was == primary.address => {}
                Some(was) => {
                    tracing::warn!(from = was, to = %primary.address, master = %self.master, "Redis primary moved (Sentinel failover)");
                }
                None => {
                    tracing::info!(primary = %primary.address, master = %self.master, "Redis primary found through Sentinel");
                }
            }
            *last = Some(primary.clone());
        }
        primary
    }

    /// The primary the last successful discovery confirmed, if any.
    pub(crate) fn last(&self) -> Option<Primary> {
        self.primary.lock().ok().and_then(|p| p.clone())
    }

    /// Why the last discovery found no primary, while none succeeded since:
    /// a failover in progress, or the Sentinels unreachable.
    pub(crate) fn trouble(&self) -> Option<String> {
        self.trouble.lock().ok().and_then(|t| t.as_ref().map(|(_, why)| why.clone()))
    }
}

/// Where [`Sentinels::named_primary`] asks: one Sentinel, over one kept
/// connection, the next one after an error.
#[derive(Default)]
pub(crate) struct Asking {
    at: usize,
    kept: Option<redis::aio::MultiplexedConnection>,
}

impl Sentinels {
    /// The primary one Sentinel names now (`host:port`), asked as `asking`
    /// says; `None` when it could not tell (the next Sentinel is asked next time).
    pub(crate) async fn named_primary(&self, asking: &mut Asking) -> Option<String> {
        if asking.kept.is_none() {
            let (host, port) = &self.addresses[asking.at % self.addresses.len()];
            let open = async {
                let client = self.client(host, *port, self.sentinel_auth.clone())?;
                Ok::<_, RedisStoreError>(
                    client.get_multiplexed_async_connection_with_config(&self.connection_config()).await?,
                )
            };
            asking.kept = bounded(self.op_timeout, async { open.await.map_err(redis_error) }).await.ok();
        }
        let Some(c) = asking.kept.as_mut() else {
            asking.at += 1;
            return None;
        };
        match bounded(self.op_timeout, self.master_addr_cmd().query_async::<Option<(String, u16)>>(c)).await {
            Ok(Some((host, port))) => Some(format!("{host}:{port}")),
            Ok(None) => None,
            Err(_) => {
                asking.kept = None;
                asking.at += 1;
                None
            }
        }
    }
}

/// A store error as a redis error, for [`bounded`] (which takes redis results).
fn redis_error(e: RedisStoreError) -> redis::RedisError {
    match e {
        RedisStoreError::Redis(r) => r,
        other => redis::RedisError::from((redis::ErrorKind::Io, "sentinel connection", other.to_string())),
    }
}

/// The role a `ROLE` reply names (`master`, `slave`, `sentinel`).
fn role(reply: &Value) -> Option<String> {
    match reply {
        Value::Array(items) => match items.first()? {
            Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
            Value::SimpleString(s) => Some(s.clone()),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_reads_the_first_element() {
        let master = Value::Array(vec![Value::BulkString(b"master".to_vec()), Value::Int(0), Value::Array(vec![])]);
        assert_eq!(role(&master).as_deref(), Some("master"));
        let replica = Value::Array(vec![
            Value::BulkString(b"slave".to_vec()),
            Value::BulkString(b"127.0.0.1".to_vec()),
            Value::Int(6379),
        ]);
        assert_eq!(role(&replica).as_deref(), Some("slave"));
        assert_eq!(role(&Value::Nil), None);
        assert_eq!(role(&Value::Array(vec![])), None);
    }
}
