//! [`HttpConfig`]: the HTTP layer's settings, one part per concern: the
//! transport's own limits, who may call ([`Access`]), what the probes and
//! `/metrics` answer with ([`Probes`]), the 2025-11-25 era
//! ([`LegacyConfig`]) and the admin API ([`AdminConfig`]). Each is
//! `#[non_exhaustive]`: from outside this crate, start from `default()` and
//! change it with `with`.

use std::{sync::Arc, time::Duration};

use futures::future::BoxFuture;

use crate::{auth::Anonymous, auth::Authenticator, auth::Challenge, auth::metadata::ResourceMetadata};

/// Readiness probe: `true` when the process can serve (its store answers).
pub type ReadyCheck = Arc<dyn Fn() -> BoxFuture<'static, bool> + Send + Sync>;

/// What `/readyz` adds to its answer (for example a data loss the store
/// detected); `None`: nothing to say.
pub type ReadyDetail = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// Renders the process's metrics in the Prometheus text format (for
/// example `PrometheusHandle::render` of the recorder a binary installed).
pub type RenderMetrics = Arc<dyn Fn() -> String + Send + Sync>;

/// What `/metrics` brings up to date before rendering: the gauges that are
/// read from somewhere (open listen streams, the work queue), not counted.
pub type RefreshGauges = Arc<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>;

/// The default [`HttpConfig::max_token_bytes`]: 8 KiB, several times the
/// largest real access tokens (JWTs with many claims are 1–4 KiB).
pub const DEFAULT_MAX_TOKEN_BYTES: usize = 8 * 1024;

/// The default of [`LegacyConfig::max_sessions_per_scope`].
pub const DEFAULT_MAX_LEGACY_SESSIONS_PER_SCOPE: u64 = 50;
/// The default of [`LegacyConfig::max_sessions`]: room for
/// [`presa_server::FAIR_SHARE_SCOPES`] principals at their share.
pub const DEFAULT_MAX_LEGACY_SESSIONS: u64 =
    DEFAULT_MAX_LEGACY_SESSIONS_PER_SCOPE * presa_server::FAIR_SHARE_SCOPES as u64;

/// The HTTP layer's settings.
#[derive(Clone)]
#[non_exhaustive]
pub struct HttpConfig {
    /// Allowed `Origin` values: a hostname (`localhost`, any scheme and port)
    /// or a full origin (`https://app.example.com`). Requests without
    /// `Origin` are always accepted.
    pub allowed_origins: Vec<String>,
    /// Allowed `Host` values (`host` on any port, or `host:port`), against
    /// DNS rebinding. Empty (the default): every host.
    pub allowed_hosts: Vec<String>,
    /// Largest `Authorization` header value, bytes: a longer one is refused
    /// (401 `invalid_token`) before the authenticator sees it. Default 8 KiB.
    pub max_token_bytes: usize,
    /// Largest request body, bytes (413 beyond). Default 4 MiB.
    pub max_body_bytes: usize,
    /// SSE keep-alive comment interval. Default 15 s.
    pub keep_alive: Duration,
    /// Who may call.
    pub access: Access,
    /// What `/healthz`, `/readyz` and `/metrics` answer with.
    pub probes: Probes,
    /// The 2025-11-25 era (`initialize` clients, stateless sessions).
    pub legacy: LegacyConfig,
    /// The admin API (`/admin/v1`): on, and who may use it.
    pub admin: AdminConfig,
}

impl HttpConfig {
    /// These settings as `change` leaves them:
    /// `HttpConfig::default().with(|c| c.max_body_bytes = 1 << 20)`.
    pub fn with(mut self, change: impl FnOnce(&mut Self)) -> Self {
        change(&mut self);
        self
    }
}

impl std::fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpConfig")
            .field("allowed_origins", &self.allowed_origins)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("max_token_bytes", &self.max_token_bytes)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("keep_alive", &self.keep_alive)
            .field("access", &self.access)
            .field("probes", &self.probes)
            .field("legacy", &self.legacy)
            .field("admin", &self.admin)
            .finish()
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            allowed_origins: vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()],
            allowed_hosts: Vec::new(),
            max_token_bytes: DEFAULT_MAX_TOKEN_BYTES,
            max_body_bytes: 4 * 1024 * 1024,
            keep_alive: Duration::from_secs(15),
            access: Access::default(),
            probes: Probes::default(),
            legacy: LegacyConfig::default(),
            admin: AdminConfig::default(),
        }
    }
}

/// Who may call, and how a refusal says what is missing.
#[derive(Clone)]
#[non_exhaustive]
pub struct Access {
    /// Who is calling (default: everyone, anonymously).
    pub authenticator: Arc<dyn Authenticator>,
    /// Challenges for 403 `insufficient_scope` (the metadata URL, and the
    /// scopes every MCP request needs, also checked here).
    pub challenge: Challenge,
    /// RFC 9728 Protected Resource Metadata, served when set.
    pub resource_metadata: Option<ResourceMetadata>,
}

impl Access {
    /// Calls checked by `authenticator`, refused with `challenge`, and the
    /// RFC 9728 document to serve (if any).
    pub fn new(
        authenticator: Arc<dyn Authenticator>,
        challenge: Challenge,
        resource_metadata: Option<ResourceMetadata>,
    ) -> Self {
        Access { authenticator, challenge, resource_metadata }
    }
}

impl Default for Access {
    fn default() -> Self {
        Access { authenticator: Arc::new(Anonymous), challenge: Challenge::default(), resource_metadata: None }
    }
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("challenge", &self.challenge)
            .field("resource_metadata", &self.resource_metadata)
            .finish_non_exhaustive()
    }
}

/// What `/healthz`, `/readyz` and `/metrics` answer with.
#[derive(Clone)]
#[non_exhaustive]
pub struct Probes {
    /// Readiness probe for `/readyz`.
    pub ready: Option<ReadyCheck>,
    /// Detail appended to `/readyz`'s answer.
    pub ready_detail: Option<ReadyDetail>,
    /// Liveness probe for `/healthz` (`false`: 503, restart this process;
    /// `None`: always alive).
    pub live: Option<ReadyCheck>,
    /// Serve `GET /metrics` with this renderer.
    pub metrics: Option<RenderMetrics>,
    /// Whether `/metrics` reads the work queue gauges from the store (off on
    /// API pods whose workers report them, so the cluster reports them once).
    pub queue_metrics: bool,
}

impl Default for Probes {
    fn default() -> Self {
        Probes { ready: None, ready_detail: None, live: None, metrics: None, queue_metrics: true }
    }
}

impl std::fmt::Debug for Probes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probes")
            .field("ready", &self.ready.is_some())
            .field("live", &self.live.is_some())
            .field("metrics", &self.metrics.is_some())
            .field("queue_metrics", &self.queue_metrics)
            .finish_non_exhaustive()
    }
}

/// The 2025-11-25 (`initialize`) era on the same endpoint; see the `legacy` module.
///
/// A session costs the store nothing until it *holds state* (a log level,
/// a subscription, or the end mark `DELETE` leaves); from then until it
/// expires it counts for its principal and for the store, and what it
/// stores is counted and capped. Every limit: 0 is no limit.
#[derive(Debug, Clone)]
pub struct LegacyConfig {
    /// Serve `initialize` clients (`--legacy on`). Off: `initialize` is
    /// refused with an error naming the versions this server speaks.
    pub enabled: bool,
    /// How long a session id is valid (the client then initializes again).
    pub session_ttl: Duration,
    /// How long a call waits for the client's answer to a server request.
    pub answer_timeout: Duration,
    /// Longest URI `resources/subscribe` accepts, bytes. Default 1 KiB.
    pub max_subscription_uri_bytes: usize,
    /// Most resource subscriptions one session holds. Default 32.
    pub max_subscriptions_per_session: u64,
    /// Most bytes of state one session holds (field names plus values:
    /// subscribed URIs, the log level). Default 64 KiB.
    pub max_session_bytes: u64,
    /// Most sessions holding state one principal may have. Default 50.
    pub max_sessions_per_scope: u64,
    /// Most sessions holding state in the whole store (every pod's, with
    /// Redis). Default 5,000: 100 principals at their share.
    pub max_sessions: u64,
}

impl Default for LegacyConfig {
    fn default() -> Self {
        LegacyConfig {
            enabled: true,
            session_ttl: Duration::from_secs(24 * 3600),
            answer_timeout: Duration::from_secs(300),
            max_subscription_uri_bytes: 1024,
            max_subscriptions_per_session: 32,
            max_session_bytes: 64 * 1024,
            max_sessions_per_scope: DEFAULT_MAX_LEGACY_SESSIONS_PER_SCOPE,
            max_sessions: DEFAULT_MAX_LEGACY_SESSIONS,
        }
    }
}

/// The default [`AdminConfig::admin_scope`].
pub const DEFAULT_ADMIN_SCOPE: &str = "presa:admin";
/// The default [`AdminConfig::tenant_admin_scope`].
pub const DEFAULT_TENANT_ADMIN_SCOPE: &str = "presa:tenant-admin";

/// Who may use the admin API.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// Serve `/admin/v1` (and the console). Off: 404, as if it did not exist.
    pub enabled: bool,
    /// The OAuth scope of an admin of every tenant and the cluster.
    pub admin_scope: String,
    /// The OAuth scope of an admin of its own tenant only.
    pub tenant_admin_scope: String,
    /// Most admin event streams cluster admins may hold open at once on
    /// this process (503 past it); tenant admins have a pool of the same size.
    pub max_streams: usize,
    /// Most admin event streams one tenant's admins may hold open at once on
    /// this process (503 past it), so one tenant never takes every place.
    pub max_streams_per_tenant: usize,
    /// How long a tenant's `/usage` answer is reused (a scan reads up to
    /// 5,000 tasks; one runs at a time per process).
    pub usage_cache: Duration,
    /// How often this process samples the cluster's figures for
    /// `/admin/v1/history` (the console's charts).
    pub history_every: Duration,
    /// How far back `/admin/v1/history` reaches (points: this over
    /// [`AdminConfig::history_every`], at most
    /// [`MAX_HISTORY_POINTS`](presa_server::admin::MAX_HISTORY_POINTS)).
    pub history_window: Duration,
    /// Served on a listener of its own ([`crate::admin_router`]), not
    /// beside `/mcp` ([`router`](fn@crate::router) leaves it out).
    pub own_listener: bool,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            enabled: true,
            admin_scope: DEFAULT_ADMIN_SCOPE.into(),
            tenant_admin_scope: DEFAULT_TENANT_ADMIN_SCOPE.into(),
            max_streams: 16,
            max_streams_per_tenant: 2,
            usage_cache: presa_server::admin::DEFAULT_USAGE_CACHE,
            history_every: presa_server::admin::DEFAULT_HISTORY_EVERY,
            history_window: presa_server::admin::DEFAULT_HISTORY_WINDOW,
            own_listener: false,
        }
    }
}
