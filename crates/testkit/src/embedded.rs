//! An embedded presa (memory store, in-process worker) on a loopback port.

use std::{sync::Arc, time::Duration};

use presa_http::{Authenticated, Authenticator, Caller, HttpConfig, Refusal, ServeLimits};
use presa_server::{Core, Server, ServerConfig, StateCodec, Worker, WorkerConfig, artifacts::Artifacts};
use presa_store::{Backend, Scope, memory::MemoryStore};
use tokio_util::sync::CancellationToken;

/// An authenticator that takes the scope from the `x-test-scope` header, and
/// the credential's end from `x-test-expires-in-ms` (milliseconds from now;
/// none without it). Tests only: never trust a header for identity in production.
#[derive(Debug, Clone, Copy)]
pub struct HeaderScopes;

#[async_trait::async_trait]
impl Authenticator for HeaderScopes {
    async fn authenticate(&self, parts: &axum::http::request::Parts) -> Result<Caller, Refusal> {
        let subject = parts.headers.get("x-test-scope").and_then(|v| v.to_str().ok()).unwrap_or("anonymous");
        Ok(Caller { scope: Scope { tenant: "test".into(), subject: subject.into(), endpoint: None }, scopes: None })
    }

    async fn authenticate_until(&self, parts: &axum::http::request::Parts) -> Result<Authenticated, Refusal> {
        let expires_in = parts.headers.get("x-test-expires-in-ms").and_then(|v| v.to_str().ok()?.parse().ok());
        let expires_at = expires_in.map(|ms| std::time::SystemTime::now() + Duration::from_millis(ms));
        Ok(Authenticated { expires_at, ..Authenticated::new(self.authenticate(parts).await?) })
    }
}

/// An embedded server on 127.0.0.1 and an ephemeral port.
#[derive(Debug)]
pub struct Embedded {
    /// The MCP endpoint.
    pub url: String,
    /// The dispatcher it serves.
    pub server: Server,
    /// Its store and event bus (to look at what they hold).
    pub memory: Arc<MemoryStore>,
    /// Cancel to stop the server and its worker (dropping does it too).
    pub stop: CancellationToken,
}

impl Drop for Embedded {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Start an embedded server with the demo catalog, an in-process worker and
/// [`HeaderScopes`] as its authenticator.
pub async fn embedded(config: ServerConfig) -> Embedded {
    embedded_with(
        config,
        HttpConfig::default().with(|c| {
            c.access.authenticator = Arc::new(HeaderScopes);
        }),
        0,
    )
    .await
}

/// Start an embedded server with the demo catalog, an in-process worker and
/// `http`, on 127.0.0.1:`port` (0: any free port), with default connection limits.
pub async fn embedded_with(config: ServerConfig, http: HttpConfig, port: u16) -> Embedded {
    embedded_limited(config, http, port, ServeLimits::default()).await
}

/// [`embedded_with`] with explicit connection limits.
pub async fn embedded_limited(config: ServerConfig, http: HttpConfig, port: u16, limits: ServeLimits) -> Embedded {
    start(config, None, http, port, limits).await
}

/// [`embedded`] with big results spilled into `artifacts` (and served back).
pub async fn embedded_artifacts(config: ServerConfig, artifacts: Artifacts) -> Embedded {
    let http = HttpConfig::default().with(|c| {
        c.access.authenticator = Arc::new(HeaderScopes);
    });
    start(config, Some(artifacts), http, 0, ServeLimits::default()).await
}

async fn start(
    config: ServerConfig,
    artifacts: Option<Artifacts>,
    http: HttpConfig,
    port: u16,
    limits: ServeLimits,
) -> Embedded {
    let memory = Arc::new(MemoryStore::new());
    let backend = Backend::new(memory.clone());
    let mut core = Core::new(config, presa_demo::catalog().unwrap(), backend);
    if let Some(artifacts) = artifacts {
        core = core.with_artifacts(artifacts);
    }
    let server = Server::new(core.clone(), StateCodec::new(b"test-secret"));
    let stop = CancellationToken::new();
    let worker_cfg = WorkerConfig { claim_wait: Duration::from_millis(200), ..WorkerConfig::default() };
    tokio::spawn(Worker::new(core, worker_cfg).run(stop.clone()));
    let router = presa_http::router(server.clone(), http);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let shutdown = stop.clone();
    tokio::spawn(presa_http::serve_with(listener, router, limits, async move { shutdown.cancelled().await }));
    Embedded { url, server, memory, stop }
}
