//! Where tasks live: the Redis flags ([`RedisArgs`]) and the storage a
//! process runs on ([`Storage`]): Redis (standalone, Cluster or Sentinel)
//! when the flags name one, else the in-memory store of the embedded mode,
//! each with the readiness and liveness probes `/readyz` and `/healthz` ask.

use std::{sync::Arc, time::Duration};

use futures::FutureExt;
use presa_http::{ReadyCheck, ReadyDetail};
use presa_store::{Backend, memory::MemoryStore};
use presa_store_redis::{RedisConfig, RedisStore, RedisStoreError};

mod flags;

pub use flags::{DurabilityLevel, RedisArgs, Switch};

/// The backend both store traits are served by, a readiness probe for it,
/// and whether it is durable.
pub struct Storage {
    /// The task store and event bus.
    pub backend: Backend,
    /// `true` while the backend answers.
    pub ready: ReadyCheck,
    /// What `/readyz` adds: a data loss the store detected.
    pub ready_detail: ReadyDetail,
    /// `false` once the backend has not answered for longer than
    /// `--store-liveness-ms` (the pod should be restarted).
    pub live: ReadyCheck,
    /// Whether tasks survive this process (Redis) or not (memory).
    pub durable: bool,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage").field("backend", &self.backend).field("durable", &self.durable).finish()
    }
}

/// Why the storage could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// Redis could not be reached or configured.
    #[error("connecting to Redis: {0}")]
    Redis(#[from] RedisStoreError),
    /// The Redis settings contradict each other (the message names the flags).
    #[error("invalid Redis settings: {0}")]
    Config(String),
    /// A `--redis-*-file` flag names a file that cannot be used.
    #[error(transparent)]
    SecretFile(#[from] crate::secret_file::SecretFileError),
}

impl Storage {
    /// The same storage, ready only while `extra` (a server's own readiness,
    /// e.g. presa-gateway's upstreams) is ready too.
    pub fn also_ready(mut self, extra: Option<ReadyCheck>) -> Self {
        if let Some(extra) = extra {
            let store = self.ready;
            self.ready = Arc::new(move || {
                let (store, extra) = (store(), extra());
                async move { store.await && extra.await }.boxed()
            });
        }
        self
    }

    /// The in-memory backend (not durable), holding at most `max_tasks` tasks
    /// and `max_bytes` bytes of task records (finished ones included, until their TTL).
    pub fn memory(max_tasks: usize, max_bytes: usize) -> Self {
        Self::memory_keeping(max_tasks, max_bytes, presa_store::dead::DEFAULT_DEAD_LETTER_TTL)
    }

    /// [`memory`](Self::memory), keeping dead letters `dead_letter_ttl` after their task died.
    pub fn memory_keeping(max_tasks: usize, max_bytes: usize, dead_letter_ttl: Duration) -> Self {
        let mem = Arc::new(
            MemoryStore::new()
                .with_max_tasks(max_tasks)
                .with_max_bytes(max_bytes)
                .with_dead_letter_ttl(dead_letter_ttl),
        );
        let always: ReadyCheck = Arc::new(|| async { true }.boxed());
        let ready_detail: ReadyDetail = Arc::new(|| None);
        Storage { backend: Backend::new(mem), ready: always.clone(), ready_detail, live: always, durable: false }
    }

    /// The Redis backend. Redis need not answer yet: the pod starts unready
    /// (`ready` false, requests fail retryably) and serves once it answers;
    /// only a bad configuration fails here.
    pub async fn redis(url: &str, args: &RedisArgs) -> Result<Self, StorageError> {
        let cfg = RedisConfig::new(url)
            .with_prefix(args.redis_prefix.clone())
            .with_partitions(args.partitions)
            .with_cluster(args.redis_cluster)
            .with_op_timeout(Duration::from_millis(args.redis_timeout_ms))
            .with_tls_ca_file(args.redis_tls_ca_file.clone())
            .with_dead_letter_ttl(args.dead_letter_ttl())
            .with_batch_max(args.redis_batch_max as usize)
            .with_max_lease(Duration::from_millis(args.max_lease_ms));
        Self::redis_with(cfg, args).await
    }

    /// The Redis backend of `cfg` (a URL, a cluster's seeds, or Sentinels),
    /// with `args`' epoch check and liveness settings: see [`redis`](Self::redis).
    pub async fn redis_with(cfg: RedisConfig, args: &RedisArgs) -> Result<Self, StorageError> {
        let redis = Arc::new(RedisStore::open(cfg)?);
        if let Err(e) = redis.ensure_groups().await {
            tracing::warn!(error = %e, "Redis does not answer yet: starting unready, serving once it does");
        }
        // Data-loss detection: the epoch is checked periodically and by
        // every readiness probe (the round trip it needs anyway).
        let watcher = Arc::downgrade(&redis);
        let every = Duration::from_millis(args.store_epoch_check_ms);
        tokio::spawn(async move {
            loop {
                let Some(r) = watcher.upgrade() else { break };
                if let Err(e) = r.check_epoch().await {
                    tracing::debug!(error = %e, "epoch check failed");
                }
                drop(r);
                tokio::time::sleep(every).await;
            }
        });
        let probe = redis.clone();
        let ready: ReadyCheck = Arc::new(move || {
            let r = probe.clone();
            // The epoch still ours (no data loss), and Redis accepting writes (not at maxmemory).
            async move { r.check_epoch().await.is_ok() && r.probe_write().await.is_ok() }.boxed()
        });
        let probe = redis.clone();
        // A detected data loss, else (Sentinel) why no primary is reachable:
        // a failover in progress, while every write fails.
        let ready_detail: ReadyDetail = Arc::new(move || {
            probe
                .lost()
                .map(|loss| format!("{loss}; tasks created before are gone"))
                .or_else(|| probe.failover_trouble().map(|why| format!("{why} (a Sentinel failover in progress?)")))
        });
        let probe = redis.clone();
        let limit = (args.store_liveness_ms > 0).then(|| Duration::from_millis(args.store_liveness_ms));
        let live: ReadyCheck = Arc::new(move || {
            let r = probe.clone();
            async move {
                match limit {
                    // Silent for too long: one last round trip decides.
                    Some(limit) if r.silent_for() > limit => {
                        let alive = r.ping().await.is_ok();
                        if !alive {
                            tracing::error!(
                                silent_ms = r.silent_for().as_millis() as u64,
                                "Redis has not answered for longer than --store-liveness-ms: /healthz fails"
                            );
                        }
                        alive
                    }
                    _ => true,
                }
            }
            .boxed()
        });
        Ok(Storage { backend: Backend::new(redis), ready, ready_detail, live, durable: true })
    }

    /// Redis when `args` name one (`--redis-url` or `--redis-sentinels`;
    /// see [`RedisArgs::config`]), else memory capped at `memory_max_tasks`
    /// tasks and `memory_max_bytes` bytes.
    pub async fn from_args(
        args: &RedisArgs,
        memory_max_tasks: usize,
        memory_max_bytes: usize,
    ) -> Result<Self, StorageError> {
        match args.config()? {
            Some(cfg) => Self::redis_with(cfg, args).await,
            None => Ok(Self::memory_keeping(memory_max_tasks, memory_max_bytes, args.dead_letter_ttl())),
        }
    }
}
