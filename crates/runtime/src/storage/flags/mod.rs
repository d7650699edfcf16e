//! The Redis flags both binaries share ([`RedisArgs`], with
//! [`DurabilityLevel`] and [`Switch`]) and the [`RedisConfig`] they make.

use std::{path::PathBuf, time::Duration};

use presa_store_redis::{Durability, RedisConfig, SentinelConfig};

use super::StorageError;
use crate::secret_file::{SecretFileError, SecretFlag};

/// `--redis-url-file`.
pub(super) const REDIS_URL_FILE: SecretFlag = SecretFlag { flag: "--redis-url-file", env: "PRESA_REDIS_URL_FILE" };
/// `--redis-password-file`.
pub(super) const REDIS_PASSWORD_FILE: SecretFlag =
    SecretFlag { flag: "--redis-password-file", env: "PRESA_REDIS_PASSWORD_FILE" };
/// `--redis-sentinel-password-file`.
pub(super) const REDIS_SENTINEL_PASSWORD_FILE: SecretFlag =
    SecretFlag { flag: "--redis-sentinel-password-file", env: "PRESA_REDIS_SENTINEL_PASSWORD_FILE" };

/// `--durability`: what a write must reach before it is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DurabilityLevel {
    /// The Redis primary applied it.
    Primary,
    /// The primary applied it and `--durability-replicas` replicas confirmed it (`WAIT`).
    Replicated,
}

/// Redis connection settings common to both binaries.
#[derive(Debug, Clone, clap::Args)]
pub struct RedisArgs {
    /// Redis URL (`redis://[user:password@]host:port[/db]`). Unset: the
    /// embedded in-memory mode (presa-api only).
    #[arg(long, env = "PRESA_REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<String>,

    /// `--redis-url` read from this file (a mounted Kubernetes Secret), so
    /// the URL's password is in no environment variable; trailing line ends dropped
    #[arg(long, env = "PRESA_REDIS_URL_FILE", value_name = "PATH", conflicts_with = "redis_url")]
    pub redis_url_file: Option<PathBuf>,

    /// Redis Sentinels, `HOST:PORT[,HOST:PORT…]`, instead of `--redis-url`:
    /// every connection asks them for the primary (checked with `ROLE`) and
    /// asks again after an error a new connection can cure, so pods follow
    /// a failover. Needs `--redis-sentinel-master`
    #[arg(long, env = "PRESA_REDIS_SENTINELS")]
    pub redis_sentinels: Option<String>,

    /// The name the Sentinels monitor the primary by (`sentinel monitor NAME …`)
    #[arg(long, env = "PRESA_REDIS_SENTINEL_MASTER")]
    pub redis_sentinel_master: Option<String>,

    /// With `--redis-sentinels`: username for the Sentinels (an ACL user in sentinel.conf)
    #[arg(long, env = "PRESA_REDIS_SENTINEL_USERNAME")]
    pub redis_sentinel_username: Option<String>,

    /// With `--redis-sentinels`: password for the Sentinels (`requirepass` in sentinel.conf)
    #[arg(long, env = "PRESA_REDIS_SENTINEL_PASSWORD", hide_env_values = true)]
    pub redis_sentinel_password: Option<String>,

    /// `--redis-sentinel-password` read from this file (a mounted Kubernetes Secret); trailing line ends dropped
    #[arg(
        long,
        env = "PRESA_REDIS_SENTINEL_PASSWORD_FILE",
        value_name = "PATH",
        conflicts_with = "redis_sentinel_password"
    )]
    pub redis_sentinel_password_file: Option<PathBuf>,

    /// With `--redis-sentinels`: username for the primary (with `--redis-url` it goes in the URL)
    #[arg(long, env = "PRESA_REDIS_USERNAME")]
    pub redis_username: Option<String>,

    /// With `--redis-sentinels`: password for the primary, `requirepass` (with `--redis-url` it goes in the URL)
    #[arg(long, env = "PRESA_REDIS_PASSWORD", hide_env_values = true)]
    pub redis_password: Option<String>,

    /// `--redis-password` read from this file (a mounted Kubernetes Secret); trailing line ends dropped
    #[arg(long, env = "PRESA_REDIS_PASSWORD_FILE", value_name = "PATH", conflicts_with = "redis_password")]
    pub redis_password_file: Option<PathBuf>,

    /// With `--redis-sentinels`: TLS to the Sentinels and the primary (as `rediss://`; `--redis-tls-ca-file` applies)
    #[arg(long, env = "PRESA_REDIS_SENTINEL_TLS", default_value_t = false)]
    pub redis_sentinel_tls: bool,

    /// Prefix of every Redis key and channel.
    #[arg(long, env = "PRESA_REDIS_PREFIX", default_value = "presa")]
    pub redis_prefix: String,

    /// Work partitions (streams); every pod must agree.
    #[arg(long, env = "PRESA_PARTITIONS", default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub partitions: u16,

    /// Redis Cluster mode (sharded pub/sub, cluster client).
    #[arg(long, env = "PRESA_REDIS_CLUSTER", default_value_t = false)]
    pub redis_cluster: bool,

    /// Timeout of one Redis command, in ms.
    #[arg(long, env = "PRESA_REDIS_TIMEOUT_MS", default_value_t = 2000)]
    pub redis_timeout_ms: u64,

    /// PEM file of the CA certificate(s) that sign the Redis server's
    /// certificate, for `rediss://` URLs (and `--redis-sentinel-tls`). Unset: the system's trusted roots.
    #[arg(long, env = "PRESA_REDIS_TLS_CA_FILE")]
    pub redis_tls_ca_file: Option<PathBuf>,

    /// How often the Redis epoch key is checked to detect a Redis that lost
    /// its data (flushed, restarted empty), in ms; `/readyz` checks it too.
    #[arg(long, env = "PRESA_STORE_EPOCH_CHECK_MS", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(100..))]
    pub store_epoch_check_ms: u64,

    /// What a create and a task's last write must reach before presa
    /// acknowledges them: `primary` (the primary applied it; a failover can
    /// lose the last writes) or `replicated` (also confirmed by
    /// `--durability-replicas` replicas with `WAIT`; a timeout is a retryable
    /// error). Needs Redis; see docs/redis.md "Durability".
    #[arg(long, env = "PRESA_DURABILITY", value_enum, default_value_t = DurabilityLevel::Primary)]
    pub durability: DurabilityLevel,

    /// With `--durability replicated`: replicas that must confirm each write (`WAIT`'s numreplicas).
    #[arg(long, env = "PRESA_DURABILITY_REPLICAS", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub durability_replicas: u32,

    /// With `--durability replicated`: how long a write waits for its replicas, in ms (`WAIT`'s timeout);
    /// past it a create is refused retryably (HTTP 503) and a worker's outcome is kept and counted
    #[arg(long, env = "PRESA_DURABILITY_TIMEOUT_MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub durability_timeout_ms: u64,

    /// With `--durability replicated`: most connections held at once by writes waiting for their replicas
    /// (`WAIT` blocks the connection it runs on, so these writes do not share the command connection)
    #[arg(long, env = "PRESA_DURABILITY_CONNECTIONS", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub durability_connections: u32,

    /// Liveness: `/healthz` answers 503 (so Kubernetes restarts the pod)
    /// once Redis has not answered for this long, in ms; 0 never.
    #[arg(long, env = "PRESA_STORE_LIVENESS_MS", default_value_t = 120_000)]
    pub store_liveness_ms: u64,

    /// How long the dead letter of a poison task (one whose work was
    /// delivered more than `--max-deliveries` times) is kept for an operator
    /// to replay or discard, in ms from its death (also in the embedded
    /// in-memory mode). Default 7 days.
    #[arg(long, env = "PRESA_DEAD_LETTER_TTL_MS", default_value_t = 7 * 24 * 3600 * 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub dead_letter_ttl_ms: u64,

    /// Index every task for the admin API's task listing (`/admin/v1/tasks`,
    /// the console's task table, `presa admin tasks`): one sorted-set member
    /// per task in Redis, written by the create script and gone with the
    /// task. `off` saves those bytes; listings then answer 501. Redis only
    /// (the embedded store lists its memory).
    #[arg(long, env = "PRESA_TASK_INDEX", value_enum, default_value_t = Switch::On)]
    pub task_index: Switch,

    /// Group commit: most writes run in one Redis script call. Creates (on a
    /// standalone Redis) and a worker's task-ending writes that arrive while
    /// one such call is in flight wait for it and go out together in the next
    /// (one `WAIT` for all with `--durability replicated`); a lone write goes
    /// out at once. 1 turns it off (each write its own script)
    #[arg(long, env = "PRESA_REDIS_BATCH_MAX", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub redis_batch_max: u32,

    /// The longest lease a worker's claim or renewal may hold, in ms (longer
    /// ones are cut to it): the work streams' recovery horizon. A claimed
    /// entry's idle time is set to this less its lease, so work whose holder
    /// died is taken over when its lease ends; give every pod of a cluster
    /// the same value (docs/redis.md "Work"), and no worker a longer `--lease-ms`. At least 1 s
    #[arg(long, env = "PRESA_MAX_LEASE_MS", default_value_t = 600_000, value_parser = clap::value_parser!(u64).range(1_000..))]
    pub max_lease_ms: u64,
}

/// A feature switch: `on` or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Switch {
    /// Enabled.
    On,
    /// Disabled.
    Off,
}

impl RedisArgs {
    /// The Redis configuration these settings ask for: `None` for none
    /// (no `--redis-url`, no `--redis-sentinels`: the embedded mode), or why
    /// they contradict each other.
    ///
    /// The `*-file` flags are read here (see [`crate::secret_file`]): a file
    /// that cannot be read, or is empty, is an error naming the flag and path.
    pub fn config(&self) -> Result<Option<RedisConfig>, StorageError> {
        let secrets = self.with_secret_files()?;
        secrets.config_given()
    }

    /// These settings with each `*-file` flag's file read into its plain twin.
    fn with_secret_files(&self) -> Result<RedisArgs, SecretFileError> {
        Ok(RedisArgs {
            redis_url: REDIS_URL_FILE.resolve(self.redis_url.as_ref(), self.redis_url_file.as_ref())?,
            redis_url_file: None,
            redis_password: REDIS_PASSWORD_FILE
                .resolve(self.redis_password.as_ref(), self.redis_password_file.as_ref())?,
            redis_password_file: None,
            redis_sentinel_password: REDIS_SENTINEL_PASSWORD_FILE
                .resolve(self.redis_sentinel_password.as_ref(), self.redis_sentinel_password_file.as_ref())?,
            redis_sentinel_password_file: None,
            ..self.clone()
        })
    }

    /// [`config`](Self::config) once the secret files are read.
    fn config_given(&self) -> Result<Option<RedisConfig>, StorageError> {
        let set = |v: &Option<String>| v.as_deref().is_some_and(|v| !v.is_empty());
        let bad = |m: &str| Err(StorageError::Config(m.to_string()));
        let sentinel_only = [
            ("--redis-sentinel-master (PRESA_REDIS_SENTINEL_MASTER)", set(&self.redis_sentinel_master)),
            ("--redis-sentinel-username (PRESA_REDIS_SENTINEL_USERNAME)", set(&self.redis_sentinel_username)),
            (
                "--redis-sentinel-password[-file] (PRESA_REDIS_SENTINEL_PASSWORD[_FILE])",
                set(&self.redis_sentinel_password),
            ),
            ("--redis-username (PRESA_REDIS_USERNAME)", set(&self.redis_username)),
            ("--redis-password[-file] (PRESA_REDIS_PASSWORD[_FILE])", set(&self.redis_password)),
            ("--redis-sentinel-tls (PRESA_REDIS_SENTINEL_TLS)", self.redis_sentinel_tls),
        ];
        let cfg = match (set(&self.redis_url), set(&self.redis_sentinels)) {
            (true, true) => {
                return bad(
                    "--redis-url[-file] (PRESA_REDIS_URL[_FILE]) and --redis-sentinels (PRESA_REDIS_SENTINELS) exclude each other: \
                     give the URL of one server, or the Sentinels that name the primary",
                );
            }
            (false, false) => {
                if let Some((flag, _)) = sentinel_only.iter().find(|(_, given)| *given) {
                    return Err(StorageError::Config(format!(
                        "{flag} needs --redis-sentinels (PRESA_REDIS_SENTINELS)"
                    )));
                }
                if self.durability == DurabilityLevel::Replicated {
                    return bad("--durability replicated (PRESA_DURABILITY) needs Redis with replicas \
                         (--redis-url or --redis-sentinels): the embedded store has none");
                }
                return Ok(None);
            }
            (true, false) => {
                if let Some((flag, _)) = sentinel_only.iter().find(|(_, given)| *given) {
                    return Err(StorageError::Config(format!(
                        "{flag} is for --redis-sentinels; with --redis-url, credentials go in the URL \
                         (redis://user:password@host:port) and TLS is rediss://"
                    )));
                }
                RedisConfig::new(self.redis_url.clone().unwrap_or_default()).with_cluster(self.redis_cluster)
            }
            (false, true) => {
                if self.redis_cluster {
                    return bad(
                        "--redis-sentinels (PRESA_REDIS_SENTINELS) and --redis-cluster (PRESA_REDIS_CLUSTER) exclude \
                         each other: Redis Cluster fails over by itself; give its nodes with --redis-url",
                    );
                }
                let Some(master) = self.redis_sentinel_master.clone().filter(|m| !m.is_empty()) else {
                    return bad("--redis-sentinels (PRESA_REDIS_SENTINELS) needs --redis-sentinel-master \
                         (PRESA_REDIS_SENTINEL_MASTER): the name the Sentinels monitor the primary by");
                };
                let sentinel = SentinelConfig {
                    sentinel_username: self.redis_sentinel_username.clone(),
                    sentinel_password: self.redis_sentinel_password.clone(),
                    username: self.redis_username.clone(),
                    password: self.redis_password.clone(),
                    tls: self.redis_sentinel_tls,
                    ..SentinelConfig::new(self.redis_sentinels.as_deref().unwrap_or_default(), master)
                };
                RedisConfig::sentinel(sentinel)
            }
        };
        let durability = match self.durability {
            DurabilityLevel::Primary => Durability::Primary,
            DurabilityLevel::Replicated => Durability::Replicated {
                replicas: self.durability_replicas,
                timeout: Duration::from_millis(self.durability_timeout_ms),
            },
        };
        let cfg = RedisConfig { durable_connections: self.durability_connections as usize, ..cfg };
        Ok(Some(
            cfg.with_durability(durability)
                .with_prefix(self.redis_prefix.clone())
                .with_partitions(self.partitions)
                .with_op_timeout(Duration::from_millis(self.redis_timeout_ms))
                .with_tls_ca_file(self.redis_tls_ca_file.clone())
                .with_dead_letter_ttl(self.dead_letter_ttl())
                .with_task_index(self.task_index == Switch::On)
                .with_batch_max(self.redis_batch_max as usize)
                .with_max_lease(Duration::from_millis(self.max_lease_ms)),
        ))
    }

    /// `--dead-letter-ttl-ms`.
    pub fn dead_letter_ttl(&self) -> Duration {
        Duration::from_millis(self.dead_letter_ttl_ms)
    }
}

#[cfg(test)]
mod tests;
