//! [`HttpConfig`]: the HTTP layer's settings, one part per concern: the
//! transport's own limits, who may call ([`Access`]), what the probes and
//! `/metrics` answer with ([`Probes`]), the 2025-11-25 era
//! ([`LegacyConfig`]) and the admin API ([`AdminConfig`]). Each is
//! `#[non_exhaustive]`: from outside this crate, start from `default()` and
//! change it with `with`.

use std::{sync::Arc, time::Duration};

use crate::{
    DEFAULT_MAX_TOKEN_BYTES, LegacyConfig, ReadyCheck, ReadyDetail, RenderMetrics, ResourceMetadata,
    admin::AdminConfig, auth::Anonymous, auth::Authenticator, auth::Challenge,
};

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
