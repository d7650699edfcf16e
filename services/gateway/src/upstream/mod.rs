//! One connection to an upstream MCP server ([`Connection`]): a stdio child
//! process or a Streamable HTTP session, spoken to with rmcp's client in
//! whatever revision the upstream speaks (2026-07-28 `server/discover` first,
//! else the 2025-11-25 `initialize` handshake).
//!
//! A connection runs one call at a time, so what the upstream sends while a
//! call runs belongs to that call: its `notifications/progress` and
//! `notifications/message`, and its requests to the client
//! (`elicitation/create`, `sampling/createMessage`, `roots/list`). The
//! connection's [`Relay`] hands them to the call's [`Events`] channel; a request
//! waits there for the call's answer. What arrives outside any call gets a
//! fixed answer (a declined elicitation, an error for sampling and roots),
//! never one from a client who did not see the question. The channel is
//! bounded ([`EVENTS_BOUND`]): past it progress and log lines are dropped
//! (a task's status takes at most one per interval anyway), a question waits.
//!
//! A stdio child gets a clean environment ([`child_env`]): what its
//! configuration names, plus `PATH`, `HOME`, the locale and `TMPDIR`, never
//! the gateway's own secrets. Its stderr is logged line by line, control
//! characters escaped and lines cut at [`STDERR_LINE_MAX`] bytes, so a child
//! cannot forge or flood presa's log lines. Its stdout is screened on its way
//! to rmcp ([`screen_answer`]): an answer rmcp could not parse fails its
//! request at once instead of leaving it to wait out its timeout.
//!
//! A Streamable HTTP upstream that needs sign-in gets an access token on
//! every request ([`UpstreamHttp`]), fetched, cached and refreshed by its
//! pool's one [`TokenSource`] (OAuth client credentials), and presents the
//! client certificate of its `tls` table (with `--features tls`).
//!
//! A `tools/call` on a Streamable HTTP connection goes as the gateway's own
//! POST ([`Direct`]) once rmcp sent one there to learn from; its SSE answers
//! are handed back to rmcp (see `direct`).
//!
//! By part: `relay` routes what the upstream sends to the running call,
//! `child` keeps a stdio child's environment, stderr and stdout in hand,
//! `oauth` holds an upstream's access token, `http` puts it on its requests,
//! `direct` sends a `tools/call` without rmcp.

use std::{
    process::Stdio,
    sync::{Arc, atomic::AtomicU64},
    time::Duration,
};

use rmcp::{
    RoleClient,
    model::ProtocolVersion,
    service::{ClientLifecycleMode, RunningService, serve_client_with_lifecycle},
};
use tokio::sync::mpsc;

use crate::config::{ClientTls, Endpoint, Protocol};

mod child;
mod direct;
mod http;
mod oauth;
mod relay;

pub use child::{INVALID_ANSWER, STDERR_LINE_MAX, child_env, escape_log_line, screen_answer};
use child::{log_stderr, screen_stdout};
pub use direct::{Answer, CallBody, Direct, Sent, Template, set_progress_token};
pub use http::{UpstreamHttp, auth_failure, token_error};
pub use oauth::TokenSource;
use relay::Current;
pub use relay::{EVENTS_BOUND, Event, Events, Relay};

/// Why an upstream could not be reached or answered badly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamError {
    /// Starting the child process failed (no such program, not executable…).
    #[error("starting {program:?}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// The handshake failed (the upstream exited, or answered with an error).
    #[error("initialising the upstream: {0}")]
    Initialize(String),
    /// The handshake did not finish in time.
    #[error("the upstream did not finish its handshake within {0:?}")]
    ConnectTimeout(Duration),
    /// A request failed after the handshake.
    #[error("{0}")]
    Request(String),
    /// A request failed on its connection: the upstream's error, a
    /// timeout, the connection lost.
    #[error(transparent)]
    Service(#[from] rmcp::service::ServiceError),
    /// No access token could be had for an upstream that needs sign-in (retryable).
    #[error("upstream {upstream:?} could not get an access token from {token_url}: {why}")]
    Token {
        /// The upstream.
        upstream: String,
        /// The token endpoint (a password in it redacted).
        token_url: String,
        /// What went wrong (the endpoint's status and OAuth error; never a secret).
        why: String,
    },
    /// Every connection stayed busy for as long as a request may wait (retryable).
    #[error("upstream {upstream:?} is busy: no connection was free within {waited:?}")]
    Busy {
        /// The upstream.
        upstream: String,
        /// How long the request waited.
        waited: Duration,
    },
    /// A reload removed or changed the upstream: its old pool takes no new
    /// call (retryable: a task tried again runs on what the new config serves).
    #[error("upstream {upstream:?} was removed or changed by a config reload")]
    Retired {
        /// The upstream.
        upstream: String,
    },
}

/// The HTTP client of an upstream connection. rmcp's default turns
/// connection reuse off (`pool_max_idle_per_host(0)`, against delayed-ACK
/// stalls on bodies left unread), which costs a TCP connection per request:
/// presa-bench measured ~2 ms added to every proxied call. rmcp reads every
/// JSON and SSE body to its end, so keep-alive is safe here; TCP_NODELAY
/// avoids the delayed-ACK stall on small requests, and redirects are not
/// followed (a POST redirected elsewhere would replay the headers). With
/// `tls` (and `--features tls`) it presents the client certificate and
/// trusts only the CA given.
fn http_client(tls: Option<&ClientTls>) -> Result<reqwest::Client, UpstreamError> {
    let builder = reqwest::Client::builder().tcp_nodelay(true).redirect(reqwest::redirect::Policy::none());
    #[cfg(feature = "tls")]
    let builder = match tls {
        Some(tls) => with_tls(builder, tls)?,
        None => builder,
    };
    #[cfg(not(feature = "tls"))]
    let _ = tls;
    builder.build().map_err(|e| UpstreamError::Initialize(format!("building the HTTP client: {e}")))
}

/// `builder` presenting `tls`'s client certificate and trusting only its CA, when given.
#[cfg(feature = "tls")]
fn with_tls(mut builder: reqwest::ClientBuilder, tls: &ClientTls) -> Result<reqwest::ClientBuilder, UpstreamError> {
    let bad = |what: &str| UpstreamError::Initialize(format!("the upstream's tls {what} could not be read"));
    if let Some(identity) = &tls.identity {
        builder = builder.identity(
            reqwest::Identity::from_pem(identity.expose().as_bytes()).map_err(|_| bad("client certificate"))?,
        );
    }
    if let Some(ca) = &tls.ca {
        builder =
            builder.tls_certs_only(reqwest::Certificate::from_pem_bundle(ca.as_bytes()).map_err(|_| bad("ca_file"))?);
    }
    Ok(builder)
}

/// A live connection to one upstream.
#[derive(Debug)]
pub struct Connection {
    service: RunningService<RoleClient, Relay>,
    relay: Relay,
    /// A stdio upstream's process (killed when dropped).
    child: Option<tokio::process::Child>,
    /// A Streamable HTTP upstream's own way to POST `tools/call`.
    direct: Option<Direct>,
}

/// Clears the connection's current call when dropped.
#[derive(Debug)]
pub struct CallScope<'a> {
    relay: &'a Relay,
}

impl Drop for CallScope<'_> {
    fn drop(&mut self) {
        if let Ok(mut c) = self.relay.current.lock() {
            *c = Current::default();
        }
    }
}

impl Connection {
    /// Start (stdio) or open (HTTP) a connection to the upstream `name` and
    /// finish the handshake in the revision `protocol` asks for (see
    /// [`Protocol`]). `lists_changed` is notified when the upstream says a
    /// list changed; `tokens` signs an HTTP upstream's requests in.
    pub async fn open(
        name: &str,
        endpoint: &Endpoint,
        protocol: Protocol,
        timeout: Duration,
        lists_changed: Arc<tokio::sync::Notify>,
        tokens: Option<Arc<TokenSource>>,
    ) -> Result<Connection, UpstreamError> {
        let open = |lifecycle, lists_changed| {
            Self::open_with(name, endpoint, lifecycle, timeout, lists_changed, tokens.clone())
        };
        let legacy = || ClientLifecycleMode::Initialize;
        let stateless = || ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
        match (protocol, endpoint) {
            (Protocol::Legacy, _) => open(legacy(), lists_changed).await,
            (Protocol::Stateless, _) => open(stateless(), lists_changed).await,
            (Protocol::Auto, Endpoint::Stdio { .. }) => match open(legacy(), lists_changed.clone()).await {
                Err(UpstreamError::Initialize(why)) => {
                    tracing::info!(error = %why, "the upstream refused initialize; trying server/discover");
                    open(stateless(), lists_changed).await
                }
                other => other,
            },
            (Protocol::Auto, Endpoint::Http { .. }) => {
                let auto = ClientLifecycleMode::Auto {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                    legacy_version: Some(ProtocolVersion::V_2025_11_25),
                };
                open(auto, lists_changed).await
            }
        }
    }

    async fn open_with(
        name: &str,
        endpoint: &Endpoint,
        lifecycle: ClientLifecycleMode,
        timeout: Duration,
        lists_changed: Arc<tokio::sync::Notify>,
        tokens: Option<Arc<TokenSource>>,
    ) -> Result<Connection, UpstreamError> {
        let relay = Relay { current: Arc::default(), lists_changed };
        // A stdio child, killed if it is dropped (a failed or late handshake included).
        let mut child: Option<tokio::process::Child> = None;
        let mut direct: Option<Direct> = None;
        let start = async {
            match endpoint {
                Endpoint::Stdio { argv, env, inherit, cwd } => {
                    let spawn_error = |source| UpstreamError::Spawn { program: argv[0].clone(), source };
                    let mut cmd = tokio::process::Command::new(&argv[0]);
                    cmd.args(&argv[1..])
                        .env_clear()
                        .envs(child_env(std::env::vars_os(), inherit, env))
                        .stdin(Stdio::piped())
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .kill_on_drop(true);
                    if let Some(dir) = cwd {
                        cmd.current_dir(dir);
                    }
                    let spawned = child.insert(cmd.spawn().map_err(spawn_error)?);
                    let (Some(stdin), Some(stdout), Some(stderr)) =
                        (spawned.stdin.take(), spawned.stdout.take(), spawned.stderr.take())
                    else {
                        return Err(spawn_error(std::io::Error::other("the child's stdio was not piped")));
                    };
                    tokio::spawn(log_stderr(name.to_string(), stderr));
                    // A duplex pipe: its reader sees the end once the screen
                    // stops, and the screen's writes fail once rmcp's reader is gone.
                    let (screened, messages) = tokio::io::duplex(64 * 1024);
                    tokio::spawn(screen_stdout(name.to_string(), stdout, screened));
                    serve_client_with_lifecycle(relay.clone(), (messages, stdin), lifecycle).await
                }
                Endpoint::Http { url, headers, auth: _, tls } => {
                    use rmcp::transport::{
                        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
                    };
                    let custom = headers
                        .iter()
                        .filter_map(|(k, v)| Some((k.parse().ok()?, v.parse().ok()?)))
                        .collect::<std::collections::HashMap<_, _>>();
                    let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom);
                    let shared = Arc::new(direct::Shared::default());
                    let client = UpstreamHttp::new(http_client(tls.as_ref())?, tokens, shared.clone());
                    direct = reqwest::Url::parse(url.as_str()).ok().map(|url| Direct {
                        http: client.clone(),
                        plain: direct::Plain::for_url(&url),
                        url,
                        shared,
                        next_id: AtomicU64::new(0),
                    });
                    let transport = StreamableHttpClientTransport::with_client(client, config);
                    serve_client_with_lifecycle(relay.clone(), transport, lifecycle).await
                }
            }
            .map_err(|e| {
                // No token: say so as such (a sign-in failure, not a broken upstream).
                let token = match &e {
                    rmcp::service::ClientInitializeError::TransportError { error, .. } => token_error(error),
                    _ => None,
                };
                token.unwrap_or_else(|| UpstreamError::Initialize(e.to_string()))
            })
        };
        let service =
            tokio::time::timeout(timeout, start).await.map_err(|_| UpstreamError::ConnectTimeout(timeout))??;
        Ok(Connection { service, relay, child, direct })
    }

    /// The gateway's own `tools/call` POST (a Streamable HTTP upstream).
    pub fn direct(&self) -> Option<&Direct> {
        self.direct.as_ref()
    }

    /// The rmcp peer, to send requests.
    pub fn peer(&self) -> &rmcp::Peer<RoleClient> {
        self.service.peer()
    }

    /// Whether the upstream went away (a child exited, a session closed).
    pub fn is_closed(&self) -> bool {
        self.service.is_closed() || self.service.peer().is_transport_closed()
    }

    /// The revision the upstream speaks.
    pub fn protocol_version(&self) -> Option<ProtocolVersion> {
        self.service.peer().peer_info().map(|i| i.protocol_version.clone())
    }

    /// Route what the upstream sends to a new call until the scope is dropped.
    pub fn begin_call(&self) -> (CallScope<'_>, Events) {
        let (tx, rx) = mpsc::channel(EVENTS_BOUND);
        if let Ok(mut c) = self.relay.current.lock() {
            *c = Current { events: Some(tx) };
        }
        (CallScope { relay: &self.relay }, rx)
    }

    /// Close the connection (a stdio child is asked to exit, then killed).
    pub async fn close(mut self) {
        // Closing the service closes the child's stdin: it is asked to exit, then killed.
        let _ = self.service.close_with_timeout(Duration::from_secs(2)).await;
        if let Some(mut child) = self.child.take()
            && tokio::time::timeout(Duration::from_secs(2), child.wait()).await.is_err()
        {
            let _ = child.kill().await;
        }
    }
}
