//! Dispatcher settings: identity, cache hints, task limits, and the pools
//! shared between scopes (listen streams, in-request calls): each process
//! cap defaults to [`FAIR_SHARE_SCOPES`] times its per-scope cap, so it
//! takes that many scopes at their cap to fill the pool.

use std::time::Duration;

/// The default of [`ServerConfig::max_queued_per_partition`].
pub const DEFAULT_MAX_QUEUED_PER_PARTITION: u64 = 10_000;

/// How many scopes at their per-scope cap it takes to fill a pod-wide pool
/// with the default settings (listen streams, in-request calls, legacy
/// sessions): until that many scopes hold their whole share, the next scope
/// still gets a place.
pub const FAIR_SHARE_SCOPES: usize = 100;

/// The default of [`ServerConfig::max_listen_streams_per_scope`].
pub const DEFAULT_MAX_LISTEN_STREAMS_PER_SCOPE: usize = 10;
/// The default of [`ServerConfig::max_listen_streams`].
pub const DEFAULT_MAX_LISTEN_STREAMS: usize = DEFAULT_MAX_LISTEN_STREAMS_PER_SCOPE * FAIR_SHARE_SCOPES;
/// The default of [`ServerConfig::max_inflight_calls_per_scope`].
pub const DEFAULT_MAX_INFLIGHT_CALLS_PER_SCOPE: usize = 10;
/// The default of [`ServerConfig::max_inflight_calls`].
pub const DEFAULT_MAX_INFLIGHT_CALLS: usize = DEFAULT_MAX_INFLIGHT_CALLS_PER_SCOPE * FAIR_SHARE_SCOPES;
/// The default of [`ServerConfig::call_timeout`].
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// The default of [`ServerConfig::permit_wait`].
pub const DEFAULT_PERMIT_WAIT: Duration = Duration::from_secs(10);

/// Settings of a [`crate::Server`]. `Default` gives sane values for a first
/// run; outside this crate, change them with [`ServerConfig::with`] (new
/// settings can be added without breaking anyone).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerConfig {
    /// `serverInfo.name`.
    pub name: String,
    /// `serverInfo.version`.
    pub version: String,
    /// `server/discover` instructions.
    pub instructions: Option<String>,
    /// Task lifetime from creation; `None` never expires. Default 1 h.
    pub task_ttl_ms: Option<u64>,
    /// Suggested polling interval for tasks. Default 500 ms.
    pub poll_interval_ms: Option<u64>,
    /// Largest task input (arguments plus MRTR answers, or one `tasks/update`), serialised. Default 256 KiB.
    pub max_task_input_bytes: usize,
    /// Largest stored task (arguments, client capabilities, answers, status
    /// message and result, serialised). Default 2 MiB.
    pub max_task_bytes: usize,
    /// Largest task result (a bigger one ends the task `failed`). Default 1 MiB.
    pub max_result_bytes: usize,
    /// Longest idempotency key a task-creating `tools/call` may carry
    /// (`Idempotency-Key`, or `_meta["presa/idempotencyKey"]`). Default 255.
    pub max_idempotency_key_bytes: usize,
    /// Most bytes of task records one scope may hold (each task at its
    /// current size, from its creation until it expires). Default 256 MiB.
    pub max_bytes_per_scope: Option<u64>,
    /// Most non-terminal tasks one scope may hold. Default 1000.
    pub max_active_tasks_per_scope: Option<u64>,
    /// Most work items (queued or running) one work partition may hold;
    /// creates beyond it are refused with `-32023` (HTTP 429) and
    /// `retryAfterMs`, so the queue stays bounded when creators outpace
    /// workers. Default 10,000.
    pub max_queued_per_partition: Option<u64>,
    /// How long an MRTR `requestState` stays valid. Default 10 min.
    pub request_state_ttl: Duration,
    /// `ttlMs` on list results and `server/discover`. Default 5 min.
    pub list_ttl_ms: u64,
    /// `ttlMs` on `resources/read`. Default 5 min.
    pub read_ttl_ms: u64,
    /// How often a parked handler re-reads its task even without a wake-up. Default 1 s.
    pub input_tick: Duration,
    /// Most `subscriptions/listen` streams open at once in this process. Default 1000.
    pub max_listen_streams: usize,
    /// Most `subscriptions/listen` streams one scope may hold open at once in
    /// this process (0: no limit beyond `max_listen_streams`). Default 10.
    pub max_listen_streams_per_scope: usize,
    /// Most tool calls, prompts, resource reads and completions running in
    /// their request (not as a task) at once in this process; past it `-32023` (HTTP 429) with
    /// `retryAfterMs`. Default 1000.
    pub max_inflight_calls: usize,
    /// The same per scope (0: no limit beyond `max_inflight_calls`). Default 10.
    pub max_inflight_calls_per_scope: usize,
    /// Longest run of a handler in its request; past it the handler is
    /// cancelled and the call fails with `-32603` naming the limit (`None`:
    /// no deadline). Default 120 s.
    pub call_timeout: Option<Duration>,
    /// Longest a call run inside its request waits for a permit of its
    /// tool's concurrency limit (`Tool::concurrency`) before it is refused
    /// with `-32023` (HTTP 429). Default 10 s.
    pub permit_wait: Duration,
}

impl ServerConfig {
    /// These settings as `change` leaves them:
    /// `ServerConfig::default().with(|c| c.max_task_bytes = 1 << 20)`.
    pub fn with(mut self, change: impl FnOnce(&mut Self)) -> Self {
        change(&mut self);
        self
    }

    /// The limits every create is held to (a `tools/call` that becomes a
    /// task, a dead letter's replay).
    pub fn create_limits(&self) -> presa_store::CreateLimits {
        presa_store::CreateLimits {
            max_active_per_scope: self.max_active_tasks_per_scope,
            max_bytes_per_scope: self.max_bytes_per_scope,
            max_queued_per_partition: self.max_queued_per_partition,
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            name: "presa".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            instructions: None,
            task_ttl_ms: Some(3_600_000),
            poll_interval_ms: Some(500),
            max_task_input_bytes: 256 * 1024,
            max_idempotency_key_bytes: 255,
            max_task_bytes: 2 * 1024 * 1024,
            max_result_bytes: 1024 * 1024,
            max_bytes_per_scope: Some(256 * 1024 * 1024),
            max_active_tasks_per_scope: Some(1000),
            max_queued_per_partition: Some(DEFAULT_MAX_QUEUED_PER_PARTITION),
            request_state_ttl: Duration::from_secs(600),
            list_ttl_ms: 300_000,
            read_ttl_ms: 300_000,
            input_tick: Duration::from_secs(1),
            max_listen_streams: DEFAULT_MAX_LISTEN_STREAMS,
            max_listen_streams_per_scope: DEFAULT_MAX_LISTEN_STREAMS_PER_SCOPE,
            max_inflight_calls: DEFAULT_MAX_INFLIGHT_CALLS,
            max_inflight_calls_per_scope: DEFAULT_MAX_INFLIGHT_CALLS_PER_SCOPE,
            call_timeout: Some(DEFAULT_CALL_TIMEOUT),
            permit_wait: DEFAULT_PERMIT_WAIT,
        }
    }
}
