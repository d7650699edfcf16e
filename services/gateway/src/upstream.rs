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

// Sampling, roots and logging are deprecated in 2026-07-28 (SEP-2577), and
// the 2025-11-25 servers the gateway fronts still use them.
#![allow(deprecated)]

use std::{
    collections::BTreeMap,
    ffi::OsString,
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use rmcp::{
    ClientHandler, RoleClient,
    model::{
        ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
        ElicitResult, ErrorCode, Implementation, ListRootsResult, LoggingMessageNotificationParam,
        ProgressNotificationParam, ProtocolVersion,
    },
    service::RxJsonRpcMessage,
    service::{ClientLifecycleMode, NotificationContext, RequestContext, RunningService, serve_client_with_lifecycle},
    transport::async_rw::DEFAULT_MAX_LINE_LENGTH,
};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::config::{Endpoint, Protocol};

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
    /// Every connection stayed busy for as long as a request may wait (retryable).
    #[error("upstream {upstream:?} is busy: no connection was free within {waited:?}")]
    Busy {
        /// The upstream.
        upstream: String,
        /// How long the request waited.
        waited: Duration,
    },
}

/// What the upstream sent during a call, for the call.
#[derive(Debug)]
pub enum Event {
    /// `notifications/progress` for the call's progress token.
    Progress {
        /// Progress so far.
        progress: f64,
        /// The total, if known.
        total: Option<f64>,
        /// A message.
        message: Option<String>,
    },
    /// `notifications/message`.
    Log {
        /// The level (`info`, `warning`…).
        level: String,
        /// The data.
        data: Value,
    },
    /// A request to the client; the call answers on `reply`.
    Question {
        /// `elicitation/create`, `sampling/createMessage` or `roots/list`.
        method: &'static str,
        /// Its params.
        params: Value,
        /// The client's result, or an error for the upstream.
        reply: oneshot::Sender<Result<Value, String>>,
    },
}

/// The receiving end of a call's [`Event`]s.
pub type Events = mpsc::Receiver<Event>;

/// Events one call's channel holds before progress and log lines are dropped.
pub const EVENTS_BOUND: usize = 256;

/// The longest stderr line of a stdio child logged, in bytes; the rest of
/// the line is dropped.
pub const STDERR_LINE_MAX: usize = 2048;

/// The variables of the gateway's environment every stdio child gets (those
/// set), besides every `LC_*`: what a program needs to run, nothing secret.
const BASE_ENV: &[&str] = &["PATH", "HOME", "LANG", "TZ", "TMPDIR"];

#[derive(Debug, Default)]
struct Current {
    events: Option<mpsc::Sender<Event>>,
}

/// The rmcp client handler of one connection: routes what the upstream sends
/// to the call running on it, if any.
#[derive(Debug, Clone)]
pub struct Relay {
    current: Arc<Mutex<Current>>,
    /// Notified when the upstream says a list (tools, prompts, resources) changed.
    lists_changed: Arc<tokio::sync::Notify>,
}

impl Relay {
    fn sender(&self) -> Option<mpsc::Sender<Event>> {
        self.current.lock().ok()?.events.clone()
    }

    /// Hand progress or a log line to the current call, if any; dropped
    /// when its channel is full.
    fn tell(&self, event: Event) {
        if let Some(events) = self.sender() {
            let _ = events.try_send(event);
        }
    }

    async fn ask(&self, method: &'static str, params: Value) -> Option<Result<Value, rmcp::ErrorData>> {
        let events = self.sender()?;
        let (reply, answer) = oneshot::channel();
        // A question is never dropped: it waits for room.
        events.send(Event::Question { method, params, reply }).await.ok()?;
        Some(match answer.await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(message)) => Err(rmcp::ErrorData::new(ErrorCode::INTERNAL_ERROR, message, None)),
            Err(_) => Err(rmcp::ErrorData::new(ErrorCode::INTERNAL_ERROR, "the call ended before an answer", None)),
        })
    }
}

fn decode<T: serde::de::DeserializeOwned>(v: Value, what: &str) -> Result<T, rmcp::ErrorData> {
    serde_json::from_value(v).map_err(|e| {
        rmcp::ErrorData::new(ErrorCode::INVALID_PARAMS, format!("the client's {what} answer is malformed: {e}"), None)
    })
}

fn encode(v: &impl serde::Serialize) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

impl ClientHandler for Relay {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        match self.ask("elicitation/create", encode(&request)).await {
            Some(answer) => decode(answer?, "elicitation"),
            None => decode(serde_json::json!({ "action": "decline" }), "elicitation"),
        }
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, rmcp::ErrorData> {
        match self.ask("sampling/createMessage", encode(&params)).await {
            Some(answer) => decode(answer?, "sampling"),
            None => Err(rmcp::ErrorData::new(
                ErrorCode::INVALID_REQUEST,
                "sampling is only answered during a tool call",
                None,
            )),
        }
    }

    async fn list_roots(&self, _context: RequestContext<RoleClient>) -> Result<ListRootsResult, rmcp::ErrorData> {
        match self.ask("roots/list", serde_json::json!({})).await {
            Some(answer) => decode(answer?, "roots"),
            // Roots are a caller's; outside a call there is none. An error
            // (not an empty list) keeps an upstream that caches roots from
            // caching "none" and makes it ask again during the call that needs them.
            None => Err(rmcp::ErrorData::new(
                ErrorCode::INVALID_REQUEST,
                "roots are only answered during a tool call (they are the caller's)",
                None,
            )),
        }
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _context: NotificationContext<RoleClient>) {
        // One request at a time per connection: any progress is the current call's.
        self.tell(Event::Progress { progress: params.progress, total: params.total, message: params.message });
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let level = encode(&params.level).as_str().unwrap_or("info").to_string();
        self.tell(Event::Log { level, data: params.data });
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.lists_changed.notify_one();
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.lists_changed.notify_one();
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.lists_changed.notify_one();
    }

    fn get_info(&self) -> ClientConfig {
        // Every question is passed on to presa's caller, who answers it (or
        // not); an upstream that speaks Tasks may answer with a task, which the
        // gateway follows.
        let capabilities: ClientCapabilities = serde_json::from_value(serde_json::json!({
            "elicitation": {}, "sampling": {}, "roots": {},
            "extensions": { "io.modelcontextprotocol/tasks": {} },
        }))
        .unwrap_or_default();
        let mut info = ClientConfig::default();
        info.capabilities = capabilities;
        info.client_info = Implementation::new("presa-gateway", env!("CARGO_PKG_VERSION"));
        info
    }
}

/// The HTTP client of an upstream connection. rmcp's default turns
/// connection reuse off (`pool_max_idle_per_host(0)`, against delayed-ACK
/// stalls on bodies left unread), which costs a TCP connection per request:
/// presa-bench measured ~2 ms added to every proxied call. rmcp reads every
/// JSON and SSE body to its end, so keep-alive is safe here; TCP_NODELAY
/// avoids the delayed-ACK stall on small requests, and redirects are not
/// followed (a POST redirected elsewhere would replay the headers).
fn http_client() -> reqwest::Client {
    reqwest::Client::builder().tcp_nodelay(true).redirect(reqwest::redirect::Policy::none()).build().unwrap_or_default()
}

/// A live connection to one upstream.
#[derive(Debug)]
pub struct Connection {
    service: RunningService<RoleClient, Relay>,
    relay: Relay,
    /// A stdio upstream's process (killed when dropped).
    child: Option<tokio::process::Child>,
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
    /// [`Protocol`]). `lists_changed` is notified when the upstream says a list changed.
    pub async fn open(
        name: &str,
        endpoint: &Endpoint,
        protocol: Protocol,
        timeout: Duration,
        lists_changed: Arc<tokio::sync::Notify>,
    ) -> Result<Connection, UpstreamError> {
        let legacy = || ClientLifecycleMode::Initialize;
        let stateless = || ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
        match (protocol, endpoint) {
            (Protocol::Legacy, _) => Self::open_with(name, endpoint, legacy(), timeout, lists_changed).await,
            (Protocol::Stateless, _) => Self::open_with(name, endpoint, stateless(), timeout, lists_changed).await,
            (Protocol::Auto, Endpoint::Stdio { .. }) => {
                match Self::open_with(name, endpoint, legacy(), timeout, lists_changed.clone()).await {
                    Err(UpstreamError::Initialize(why)) => {
                        tracing::info!(error = %why, "the upstream refused initialize; trying server/discover");
                        Self::open_with(name, endpoint, stateless(), timeout, lists_changed).await
                    }
                    other => other,
                }
            }
            (Protocol::Auto, Endpoint::Http { .. }) => {
                let auto = ClientLifecycleMode::Auto {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                    legacy_version: Some(ProtocolVersion::V_2025_11_25),
                };
                Self::open_with(name, endpoint, auto, timeout, lists_changed).await
            }
        }
    }

    async fn open_with(
        name: &str,
        endpoint: &Endpoint,
        lifecycle: ClientLifecycleMode,
        timeout: Duration,
        lists_changed: Arc<tokio::sync::Notify>,
    ) -> Result<Connection, UpstreamError> {
        let relay = Relay { current: Arc::default(), lists_changed };
        // A stdio child, killed if it is dropped (a failed or late handshake included).
        let mut child: Option<tokio::process::Child> = None;
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
                Endpoint::Http { url, headers } => {
                    use rmcp::transport::{
                        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
                    };
                    let custom = headers
                        .iter()
                        .filter_map(|(k, v)| Some((k.parse().ok()?, v.parse().ok()?)))
                        .collect::<std::collections::HashMap<_, _>>();
                    let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom);
                    let transport = StreamableHttpClientTransport::with_client(http_client(), config);
                    serve_client_with_lifecycle(relay.clone(), transport, lifecycle).await
                }
            }
            .map_err(|e| UpstreamError::Initialize(e.to_string()))
        };
        let service =
            tokio::time::timeout(timeout, start).await.map_err(|_| UpstreamError::ConnectTimeout(timeout))??;
        Ok(Connection { service, relay, child })
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

/// A stdio child's environment: of the gateway's own `vars`, only
/// [`BASE_ENV`], `LC_*` and the names in `inherit` (a `PRESA_*` variable
/// only when named there); then `env`, which wins.
pub fn child_env(
    vars: impl Iterator<Item = (OsString, OsString)>,
    inherit: &[String],
    env: &BTreeMap<String, String>,
) -> Vec<(OsString, OsString)> {
    let mut out: Vec<(OsString, OsString)> = vars
        .filter(|(k, _)| {
            k.to_str()
                .is_some_and(|k| BASE_ENV.contains(&k) || k.starts_with("LC_") || inherit.iter().any(|name| name == k))
        })
        .filter(|(k, _)| !env.contains_key(k.to_str().unwrap_or_default()))
        .collect();
    out.extend(env.iter().map(|(k, v)| (k.into(), v.into())));
    out
}

/// Pass a stdio child's stdout on to rmcp line by line, screening the
/// answers: rmcp drops a line it cannot parse, so an answer to one of the
/// gateway's requests that is not a valid MCP message would leave that
/// request waiting out its whole timeout. Such an answer (a JSON object with
/// an `id`, a `result` or `error`, and no `method`) becomes an error response
/// for that request ([`screen_answer`]); other lines pass unchanged. A line
/// longer than rmcp's limit ends the connection (rmcp would drop it too, and
/// its request with it): the child goes, and the calls on it fail at once.
async fn screen_stdout(
    upstream: String,
    stdout: impl tokio::io::AsyncRead + Unpin,
    mut out: impl tokio::io::AsyncWrite + Unpin,
) {
    use tokio::io::AsyncWriteExt;
    screen_lines(&upstream, stdout, &mut out).await;
    // The child's stdout ended (or the connection's reader did): rmcp sees
    // the end of its stream and closes the connection.
    let _ = out.shutdown().await;
}

async fn screen_lines(
    upstream: &str,
    stdout: impl tokio::io::AsyncRead + Unpin,
    out: &mut (impl tokio::io::AsyncWrite + Unpin),
) {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    let mut reader = tokio::io::BufReader::new(stdout);
    let mut line = Vec::new();
    loop {
        line.clear();
        let limit = DEFAULT_MAX_LINE_LENGTH as u64 + 1;
        match (&mut reader).take(limit).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line.len() > DEFAULT_MAX_LINE_LENGTH {
            tracing::warn!(upstream = %upstream, bytes = line.len(),
                "the upstream sent a message over the size limit; closing its connection");
            return;
        }
        let replaced = screen_answer(&line);
        if replaced.is_some() {
            tracing::warn!(upstream = %upstream, "the upstream answered with an invalid message; failing that request");
        }
        if out.write_all(replaced.as_deref().unwrap_or(&line)).await.is_err() {
            return;
        }
    }
}

/// The error response that replaces `line`, when it is an answer to a
/// request that rmcp could not parse; `None` for anything else (a valid
/// message, a notification or request, a line that is no message at all:
/// rmcp skips or refuses those itself). An answer is a JSON object with an
/// `id` and a `result` or `error` and no `method`; one that is not even JSON
/// (cut short, a bad escape) counts when it starts like one (`{"jsonrpc"`,
/// no `"method"`) and its first `"id"` names a request.
pub fn screen_answer(line: &[u8]) -> Option<Vec<u8>> {
    const BOM: &[u8] = b"\xef\xbb\xbf";
    let line = line.trim_ascii();
    let line = line.strip_prefix(BOM).unwrap_or(line);
    let invalid = serde_json::from_slice::<RxJsonRpcMessage<RoleClient>>(line).err()?;
    let id = match serde_json::from_slice::<Value>(line) {
        Ok(Value::Object(message)) => {
            let answer = message.contains_key("result") || message.contains_key("error");
            if message.contains_key("method") || !answer {
                return None;
            }
            message.get("id").filter(|id| id.is_string() || id.is_number())?.clone()
        }
        Ok(_) => return None,
        Err(_) => {
            let text = std::str::from_utf8(line).ok()?;
            let looks_like_one = text.starts_with('{') && text.contains("\"jsonrpc\"");
            if !looks_like_one || text.contains("\"method\"") {
                return None;
            }
            first_id(text)?
        }
    };
    let error = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": ErrorCode::INTERNAL_ERROR.0,
            "message": format!("the upstream answered with a message that is not valid MCP: {invalid}"),
        },
    });
    let mut bytes = serde_json::to_vec(&error).ok()?;
    bytes.push(b'\n');
    Some(bytes)
}

/// The value of the first `"id":` in `text` when it is a number or a string.
fn first_id(text: &str) -> Option<Value> {
    let at = text.find("\"id\"")? + "\"id\"".len();
    let rest = text[at..].trim_start().strip_prefix(':')?;
    let id = serde_json::Deserializer::from_str(rest).into_iter::<Value>().next()?.ok()?;
    (id.is_string() || id.is_number()).then_some(id)
}

/// Log a stdio child's stderr, one line at a time: control characters
/// escaped, at most [`STDERR_LINE_MAX`] bytes of a line (the rest dropped),
/// so what a child prints can neither forge presa's log lines nor grow the
/// gateway's memory.
async fn log_stderr(upstream: String, stderr: impl tokio::io::AsyncRead + Unpin) {
    use tokio::io::AsyncReadExt;
    let mut stderr = stderr;
    let mut line: Vec<u8> = Vec::new();
    let mut cut = false;
    let mut buf = [0u8; 4096];
    let emit = |line: &[u8], cut: bool| {
        let text = escape_log_line(line);
        let more = if cut { " …(truncated)" } else { "" };
        tracing::info!(upstream = %upstream, "upstream stderr: {text}{more}");
    };
    loop {
        let n = match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
            if b == b'\n' {
                emit(&line, cut);
                line.clear();
                cut = false;
            } else if line.len() < STDERR_LINE_MAX {
                line.push(b);
            } else {
                cut = true;
            }
        }
    }
    if !line.is_empty() {
        emit(&line, cut);
    }
}

/// Bytes from a child as one log line: invalid UTF-8 replaced, control
/// characters (newlines, escapes, carriage returns) written as `\u{..}`.
pub fn escape_log_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::with_capacity(text.len());
    for c in text.trim_end_matches('\r').chars() {
        if c.is_control() && c != '\t' {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_child_gets_only_what_it_is_given() {
        let gateway = [
            ("PATH", "/usr/bin"),
            ("HOME", "/root"),
            ("LC_ALL", "C.UTF-8"),
            ("PRESA_STATE_SECRET", "s3cret"),
            ("PRESA_REDIS_URL", "redis://:pw@redis:6379"),
            ("HF_TOKEN", "hf"),
            ("PRESA_PASSED", "yes"),
            ("OTHER", "x"),
        ];
        let vars = || gateway.iter().map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let env = BTreeMap::from([("MODEL_DIR".to_string(), "/models".to_string()), ("HOME".into(), "/srv".into())]);
        let inherit = ["HF_TOKEN".to_string(), "PRESA_PASSED".to_string()];
        let got: BTreeMap<String, String> = child_env(vars(), &inherit, &env)
            .into_iter()
            .map(|(k, v)| (k.into_string().unwrap(), v.into_string().unwrap()))
            .collect();
        let expected = [
            ("HF_TOKEN", "hf"),
            ("HOME", "/srv"),
            ("LC_ALL", "C.UTF-8"),
            ("MODEL_DIR", "/models"),
            ("PATH", "/usr/bin"),
            ("PRESA_PASSED", "yes"),
        ];
        assert_eq!(got, expected.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        assert!(child_env(vars(), &[], &BTreeMap::new()).iter().all(|(k, _)| !k.to_string_lossy().contains("PRESA")));
    }

    #[test]
    fn an_unparseable_answer_becomes_an_error_for_its_request() {
        let cut = br#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"cut sho"#;
        let wrong = br#"{"jsonrpc":"1.0","id":"r-7","result":{}}"#;
        for (bad, id) in [(&cut[..], json!(7)), (&wrong[..], json!("r-7"))] {
            let error: Value = serde_json::from_slice(&screen_answer(bad).expect("replaced")).unwrap();
            assert_eq!(error["id"], id);
            assert_eq!(error["error"]["code"], -32603);
            assert!(error["error"]["message"].as_str().unwrap().contains("not valid MCP"), "{error}");
            let parsed: RxJsonRpcMessage<RoleClient> = serde_json::from_value(error).unwrap();
            assert!(matches!(parsed, rmcp::model::JsonRpcMessage::Error(_)));
        }
        assert_eq!(screen_answer(br#"{"jsonrpc":"2.0","id":7,"method":"elicitation/create","params":"#), None);
        // What rmcp parses, and what it skips on its own, pass unchanged.
        let good = br#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"ok"}]}}"#;
        assert_eq!(screen_answer(good), None);
        assert_eq!(screen_answer(b"not json at all\n"), None);
        assert_eq!(screen_answer(br#"{"jsonrpc":"2.0","method":"notifications/custom","params":{}}"#), None);
        assert_eq!(screen_answer(b"\n"), None);
    }

    #[test]
    fn stderr_lines_cannot_forge_log_lines() {
        let line = escape_log_line(b"boom\x1b[31m\rfake INFO line\r");
        assert_eq!(line, "boom\\u{1b}[31m\\u{d}fake INFO line");
        assert_eq!(escape_log_line(b"caf\xc3\xa9\tok"), "café\tok");
    }
}
