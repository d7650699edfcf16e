//! The API process (`presa-api`, or a user's server in its default mode):
//! its flags ([`ApiArgs`]) and its life: telemetry, storage, dispatcher, HTTP
//! server, the in-process worker pool when embedded, and the drain on SIGTERM.
//!
//! Without `--redis-url` one process is the whole system: an in-memory store
//! and an in-process worker pool (the embedded mode: not durable). With it,
//! this process is a stateless API pod and worker processes run the tools.

use std::{net::SocketAddr, path::PathBuf};

use clap::Parser;
use presa_telemetry::LogFormat;

mod configs;
mod run;

pub(crate) use run::run;

use crate::{
    auth::AuthArgs,
    secret_file::{SecretFileError, SecretFlag},
    storage::RedisArgs,
    storage::Switch,
};

/// `--state-secret-file`.
pub(crate) const STATE_SECRET_FILE: SecretFlag =
    SecretFlag { flag: "--state-secret-file", env: "PRESA_STATE_SECRET_FILE" };

/// The flags and environment of an API process (`presa-api`).
#[derive(Debug, Parser)]
#[command(version, about = "An MCP 2026-07-28 server that runs long tool calls as durable tasks.")]
pub struct ApiArgs {
    #[command(flatten)]
    redis: RedisArgs,

    #[command(flatten)]
    auth: AuthArgs,

    #[command(flatten)]
    artifacts: crate::artifacts::ArtifactArgs,

    /// Address to serve MCP (`/mcp`), `/healthz`, `/readyz` and `/metrics` on.
    #[arg(long, env = "PRESA_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,

    /// Allowed `Origin` values: hostnames (any scheme and port) or full
    /// origins, comma-separated. Requests without `Origin` are always accepted.
    #[arg(long, env = "PRESA_ALLOWED_ORIGINS", value_delimiter = ',', default_value = "localhost,127.0.0.1,[::1]")]
    allowed_origins: Vec<String>,

    /// Allowed `Host` header values against DNS rebinding, on `/mcp`, the
    /// admin API, the console and `/metrics`: hostnames (any port) or
    /// `host:port`, comma-separated; `*` is every host. Unset: the loopback
    /// names on a loopback listener, else every host.
    #[arg(long, env = "PRESA_ALLOWED_HOSTS", value_delimiter = ',')]
    allowed_hosts: Vec<String>,

    /// Largest `Authorization` header in bytes: a longer bearer token is
    /// refused (HTTP 401 `invalid_token`) before it is parsed.
    #[arg(long, env = "PRESA_MAX_TOKEN_BYTES", default_value_t = presa_http::DEFAULT_MAX_TOKEN_BYTES)]
    max_token_bytes: usize,

    /// Largest request body in bytes (HTTP 413 beyond).
    #[arg(long, env = "PRESA_MAX_BODY_BYTES", default_value_t = 4 * 1024 * 1024)]
    max_body_bytes: usize,

    /// A request's headers must arrive in full within this many ms (from the
    /// connection's accept, or the next request's first byte); else the connection is closed.
    #[arg(long, env = "PRESA_HEADER_READ_TIMEOUT_MS", default_value_t = 10_000)]
    header_read_timeout_ms: u64,

    /// A request's body must arrive in full within this many ms after its headers.
    #[arg(long, env = "PRESA_BODY_READ_TIMEOUT_MS", default_value_t = 30_000)]
    body_read_timeout_ms: u64,

    /// A kept-alive connection with no request is closed after this many ms
    /// (keep it above a proxy's idle upstream timeout, 60 s for nginx).
    #[arg(long, env = "PRESA_IDLE_TIMEOUT_MS", default_value_t = 75_000)]
    idle_timeout_ms: u64,

    /// Most HTTP connections served at once. At the limit a new connection
    /// closes an idle one (first one that has not sent a request yet); when
    /// every one has a request in flight, new ones wait in the listen backlog.
    #[arg(long, env = "PRESA_MAX_CONNECTIONS", default_value_t = 10_000)]
    max_connections: usize,

    /// Connections accepted past `--max-connections`, while every other one
    /// has a request in flight, for `/healthz`, `/readyz` and `/metrics`
    /// alone (another request on one waits up to about a second for a regular
    /// connection, then gets 503), so probes never wait behind the limit.
    #[arg(long, env = "PRESA_PROBE_CONNECTIONS", default_value_t = 16)]
    probe_connections: usize,

    /// Task lifetime from creation in ms, or `none` for tasks that never expire.
    #[arg(long, env = "PRESA_TASK_TTL_MS", default_value = "3600000", value_parser = parse_ttl)]
    task_ttl_ms: Ttl,

    /// Suggested polling interval for tasks, in ms.
    #[arg(long, env = "PRESA_POLL_INTERVAL_MS", default_value_t = 500)]
    poll_interval_ms: u64,

    /// Largest task input (arguments plus answers, or one tasks/update), in bytes.
    #[arg(long, env = "PRESA_MAX_TASK_INPUT_BYTES", default_value_t = 256 * 1024)]
    max_task_input_bytes: usize,

    /// Longest idempotency key a task-creating tools/call may carry
    /// (Idempotency-Key header or _meta "presa/idempotencyKey"), in bytes;
    /// a longer one is refused.
    #[arg(long, env = "PRESA_MAX_IDEMPOTENCY_KEY_BYTES", default_value_t = 255)]
    max_idempotency_key_bytes: usize,

    /// Largest stored task in bytes: arguments, client capabilities, answers,
    /// status message and result. A bigger task is refused (-32602), a bigger
    /// update is not stored.
    #[arg(long, env = "PRESA_MAX_TASK_BYTES", default_value_t = 2 * 1024 * 1024)]
    max_task_bytes: usize,

    /// Largest task result in bytes (embedded mode: with Redis the workers
    /// apply theirs); a bigger result ends the task failed, saying so.
    #[arg(long, env = "PRESA_MAX_RESULT_BYTES", default_value_t = 1024 * 1024)]
    max_result_bytes: usize,

    /// Most bytes of task records one caller scope may hold, each task at its
    /// current size (answers, status messages, results) from its creation
    /// until its TTL ends (0: no limit); a create or answer past it gets a
    /// retryable error (a worker's result is counted, never refused).
    #[arg(long, env = "PRESA_MAX_BYTES_PER_SCOPE", default_value_t = 256 * 1024 * 1024)]
    max_bytes_per_scope: u64,

    /// Most non-terminal tasks one caller scope may hold (0: no limit).
    #[arg(long, env = "PRESA_MAX_ACTIVE_TASKS_PER_SCOPE", default_value_t = 1000)]
    max_active_tasks_per_scope: u64,

    /// Most work items (queued or running) one work partition may hold (0: no
    /// limit); past it new tasks get -32023 with data.retryAfterMs (HTTP 429),
    /// so the queue stays bounded when creators outpace the workers.
    #[arg(long, env = "PRESA_MAX_QUEUED", default_value_t = presa_server::DEFAULT_MAX_QUEUED_PER_PARTITION)]
    max_queued: u64,

    /// Embedded mode: most tasks held in memory (a few KiB each). A finished
    /// task stays until its TTL or until room is needed: then the oldest
    /// finished task of the principal holding the most bytes goes first. Past
    /// it with every task running, new tasks get a retryable error.
    #[arg(long, env = "PRESA_MAX_TASKS", default_value_t = 100_000, value_parser = clap::value_parser!(usize))]
    max_tasks: usize,

    /// Embedded mode: most bytes of task records held in memory (serialised),
    /// finished tasks evicted as for `--max-tasks`. The default holds 4
    /// principals at the default `--max-bytes-per-scope`; the start-up log
    /// says how many the settings hold.
    #[arg(long, env = "PRESA_MAX_MEMORY_BYTES", default_value_t = 1024 * 1024 * 1024)]
    max_memory_bytes: usize,

    /// Most long-lived streams (`subscriptions/listen`, 2025-11-25 `GET`
    /// streams) open at once on this pod. The default is 100 times
    /// `--max-listen-streams-per-scope`: it takes 100 principals at their
    /// share to fill it, so fewer never lock out another.
    #[arg(long, env = "PRESA_MAX_LISTEN_STREAMS", default_value_t = presa_server::DEFAULT_MAX_LISTEN_STREAMS)]
    max_listen_streams: usize,

    /// Most long-lived streams one caller scope may hold open at once on this
    /// pod (0: no limit beyond `--max-listen-streams`).
    #[arg(
        long,
        env = "PRESA_MAX_LISTEN_STREAMS_PER_SCOPE",
        default_value_t = presa_server::DEFAULT_MAX_LISTEN_STREAMS_PER_SCOPE
    )]
    max_listen_streams_per_scope: usize,

    /// Most tool calls, prompts, resource reads and completions running in
    /// their request (not as tasks) at once on this pod; past it -32023 with data.retryAfterMs (HTTP 429).
    /// The default is 100 times `--max-inflight-calls-per-scope`: it takes 100
    /// principals at their share to fill it, so fewer never lock out another.
    #[arg(long, env = "PRESA_MAX_INFLIGHT_CALLS", default_value_t = presa_server::DEFAULT_MAX_INFLIGHT_CALLS)]
    max_inflight_calls: usize,

    /// Most in-request calls (tool calls, prompts, reads, completions) one caller scope may run
    /// at once on this pod (0: no limit beyond `--max-inflight-calls`); past
    /// it -32023 with data.retryAfterMs (HTTP 429).
    #[arg(
        long,
        env = "PRESA_MAX_INFLIGHT_CALLS_PER_SCOPE",
        default_value_t = presa_server::DEFAULT_MAX_INFLIGHT_CALLS_PER_SCOPE
    )]
    max_inflight_calls_per_scope: usize,

    /// Longest run of a tool or prompt handler in its request, in ms (0: no
    /// deadline); past it the handler is cancelled and the call fails with
    /// -32603 naming `call_timeout`. Long work belongs in tasks.
    #[arg(long, env = "PRESA_CALL_TIMEOUT_MS", default_value_t = presa_server::DEFAULT_CALL_TIMEOUT.as_millis() as u64)]
    call_timeout_ms: u64,

    /// Longest a tool call run in its request waits for a permit of its
    /// tool's concurrency limit, in ms (0: not at all); then it gets -32023
    /// (HTTP 429) with Retry-After and data.limit "tool_concurrency".
    #[arg(long, env = "PRESA_PERMIT_WAIT_MS", default_value_t = presa_server::DEFAULT_PERMIT_WAIT.as_millis() as u64)]
    permit_wait_ms: u64,

    #[command(flatten)]
    pool: crate::pool::PoolArgs,

    /// Grace period on SIGTERM/SIGINT for in-flight requests and running tasks, in ms.
    #[arg(long, env = "PRESA_GRACE_MS", default_value_t = 20_000)]
    grace_ms: u64,

    /// Log format: human-readable text or JSON lines.
    #[arg(long, env = "PRESA_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,

    /// Key for MRTR requestState and legacy session-id HMACs (at least 32
    /// bytes); every API pod must share it. When unset, a random per-process key is used.
    #[arg(long, env = "PRESA_STATE_SECRET", hide_env_values = true)]
    state_secret: Option<String>,

    /// `--state-secret` read from this file (a mounted Kubernetes Secret), so
    /// the key is in no environment variable; trailing line ends dropped
    #[arg(long, env = "PRESA_STATE_SECRET_FILE", value_name = "PATH", conflicts_with = "state_secret")]
    state_secret_file: Option<PathBuf>,

    /// Serve the admin API (`/admin/v1`) and the console (`/console`): `on`
    /// or `off`. Without authentication (`--auth none`) it is refused at start
    /// on a non-loopback address, whatever `--allow-anonymous` says.
    #[arg(long, env = "PRESA_ADMIN", value_enum, default_value_t = Switch::On)]
    admin: Switch,

    /// Serve the admin API (and the console) on this address instead of
    /// beside `/mcp` on `--listen` (for example a port only operators reach).
    #[arg(long, env = "PRESA_ADMIN_LISTEN")]
    admin_listen: Option<SocketAddr>,

    /// The OAuth scope of an admin of every tenant, the cluster and its queues.
    #[arg(long, env = "PRESA_ADMIN_SCOPE", default_value = presa_http::admin::DEFAULT_ADMIN_SCOPE)]
    admin_scope: String,

    /// The OAuth scope of an admin of its own tenant only (its tasks, dead
    /// letters and usage).
    #[arg(long, env = "PRESA_TENANT_ADMIN_SCOPE", default_value = presa_http::admin::DEFAULT_TENANT_ADMIN_SCOPE)]
    tenant_admin_scope: String,

    /// Most admin event streams (the console's live view) cluster admins
    /// may hold open at once on this pod, and tenant admins as many; past it
    /// they are refused with 503.
    #[arg(long, env = "PRESA_ADMIN_MAX_STREAMS", default_value_t = 16)]
    admin_max_streams: usize,

    /// Most admin event streams the admins of one tenant may hold open at
    /// once on this pod (503 past it), so no tenant takes every place.
    #[arg(long, env = "PRESA_ADMIN_MAX_STREAMS_PER_TENANT", default_value_t = 2)]
    admin_max_streams_per_tenant: usize,

    /// How long a tenant's `/admin/v1/usage` answer is reused, in ms: a scan
    /// reads up to 5,000 tasks, and one runs at a time per pod (0: scan every call).
    #[arg(long, env = "PRESA_ADMIN_USAGE_CACHE_MS", default_value_t = 5_000)]
    admin_usage_cache_ms: u64,

    /// How often this pod samples the cluster's queues and the registry's
    /// counters for `/admin/v1/history` (the console's charts), in ms.
    #[arg(long, env = "PRESA_ADMIN_HISTORY_INTERVAL_MS", default_value_t = 5_000)]
    admin_history_interval_ms: u64,

    /// How far back `/admin/v1/history` reaches, in ms (at most 2,000 points).
    #[arg(long, env = "PRESA_ADMIN_HISTORY_WINDOW_MS", default_value_t = 900_000)]
    admin_history_window_ms: u64,

    /// Serve 2025-11-25 clients (`initialize`, `Mcp-Session-Id`) on the same
    /// endpoint, statelessly: `on` or `off` (then `initialize` gets an error
    /// naming the supported versions).
    #[arg(long, env = "PRESA_LEGACY", value_enum, default_value_t = Switch::On)]
    legacy: Switch,

    /// How long a 2025-11-25 session id stays valid, in seconds (the client
    /// then gets 404 and initializes again).
    #[arg(long, env = "PRESA_LEGACY_SESSION_TTL_SECS", default_value_t = 86_400)]
    legacy_session_ttl_secs: u64,

    /// Longest URI a 2025-11-25 `resources/subscribe` accepts, in bytes (0: no
    /// limit); the URI must also name a listed resource or match a template.
    #[arg(long, env = "PRESA_MAX_SUBSCRIPTION_URI_BYTES", default_value_t = 1024)]
    max_subscription_uri_bytes: usize,

    /// Most resource subscriptions one 2025-11-25 session holds (0: no limit).
    #[arg(long, env = "PRESA_MAX_SUBSCRIPTIONS_PER_SESSION", default_value_t = 32)]
    max_subscriptions_per_session: u64,

    /// Most bytes of state one 2025-11-25 session stores (subscribed URIs,
    /// its log level; 0: no limit).
    #[arg(long, env = "PRESA_MAX_LEGACY_SESSION_BYTES", default_value_t = 64 * 1024)]
    max_legacy_session_bytes: u64,

    /// Most 2025-11-25 sessions holding state (a log level, a subscription,
    /// or the end mark DELETE leaves) one caller scope may have until they
    /// expire (0: no limit).
    #[arg(
        long,
        env = "PRESA_MAX_LEGACY_SESSIONS_PER_SCOPE",
        default_value_t = presa_http::DEFAULT_MAX_LEGACY_SESSIONS_PER_SCOPE
    )]
    max_legacy_sessions_per_scope: u64,

    /// Most 2025-11-25 sessions holding state in the store (this pod's
    /// memory, or the shared Redis; 0: no limit). The default is 100 times
    /// `--max-legacy-sessions-per-scope`: it takes 100 principals at their
    /// share to fill it, so fewer never lock out another.
    #[arg(long, env = "PRESA_MAX_LEGACY_SESSIONS", default_value_t = presa_http::DEFAULT_MAX_LEGACY_SESSIONS)]
    max_legacy_sessions: u64,
}

/// A task lifetime: milliseconds, or `none` for tasks that never expire.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ttl(Option<u64>);

fn parse_ttl(s: &str) -> Result<Ttl, String> {
    match s {
        "none" | "null" => Ok(Ttl(None)),
        n => match n.parse::<u64>() {
            Ok(0) => Err("must be positive, or `none`".into()),
            Ok(ms) => Ok(Ttl(Some(ms))),
            Err(_) => Err(format!("`{n}` is not a number of milliseconds or `none`")),
        },
    }
}

impl ApiArgs {
    /// The state key: `--state-secret`, else the content of
    /// `--state-secret-file`; `None` when neither is given (or it is empty).
    pub(crate) fn state_secret(&self) -> Result<Option<String>, SecretFileError> {
        let secret = STATE_SECRET_FILE.resolve(self.state_secret.as_ref(), self.state_secret_file.as_ref())?;
        Ok(secret.filter(|s| !s.is_empty()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret_file::tests::file_with;

    fn parse(args: &[&str]) -> Result<ApiArgs, clap::Error> {
        ApiArgs::try_parse_from(std::iter::once("presa-api").chain(args.iter().copied()))
    }

    #[test]
    fn the_state_secret_comes_from_its_file() {
        let file = file_with(b"a-state-key-of-at-least-32-bytes-long\n");
        let path = file.0.to_str().unwrap();
        let args = parse(&["--state-secret-file", path]).unwrap();
        assert_eq!(args.state_secret().unwrap().as_deref(), Some("a-state-key-of-at-least-32-bytes-long"));
        let args = parse(&["--state-secret", "given-directly"]).unwrap();
        assert_eq!(args.state_secret().unwrap().as_deref(), Some("given-directly"));
        assert_eq!(parse(&[]).unwrap().state_secret().unwrap(), None);
    }

    #[test]
    fn the_state_secret_and_its_file_conflict() {
        let file = file_with(b"key\n");
        let e = parse(&["--state-secret", "k", "--state-secret-file", file.0.to_str().unwrap()]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict, "{e}");
    }

    #[test]
    fn a_missing_state_secret_file_is_refused_by_flag_and_path() {
        let missing = std::env::temp_dir().join("presa-no-such-state-secret");
        let args = parse(&["--state-secret-file", missing.to_str().unwrap()]).unwrap();
        let e = args.state_secret().unwrap_err().to_string();
        let want = format!("--state-secret-file (PRESA_STATE_SECRET_FILE): cannot read {}: ", missing.display());
        assert!(e.starts_with(&want), "{e}");
    }
}
