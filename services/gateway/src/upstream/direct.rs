//! The gateway's own POST of a `tools/call` on a Streamable HTTP upstream,
//! past rmcp's client: its service loop, transport worker, the typed parse of
//! the answer and the conversion back to JSON were about half the
//! instructions of a proxied call (presa-bench, callgrind).
//!
//! What it sends is what rmcp sent before on the same connection: rmcp's own
//! `tools/call` there is kept as a [`Template`] (the session id, the headers
//! with the negotiated `MCP-Protocol-Version`, and the client context a
//! 2026-07-28 upstream wants in every request's `_meta`), so the gateway
//! negotiates nothing itself; a connection with no template yet (its first
//! call) goes through rmcp. Only the SEP-2243 `Mcp-Method` and `Mcp-Name`
//! headers are made here, for a plain tool name (`Mcp-Param-*` headers come
//! from a tool's schema annotations: such a tool always goes through rmcp).
//!
//! What the upstream answers:
//! - `application/json`: parsed here; a complete result goes straight into
//!   the JSON presa returns ([`Answer::Complete`]), anything else through
//!   rmcp's model as before;
//! - an SSE stream (progress, log lines and questions may come on it): handed
//!   to rmcp ([`Shared::hand_off`]). The call then goes through rmcp, whose POST
//!   is answered with this stream instead of being sent: nothing is sent twice,
//!   and every notification and question reaches the call's relay exactly as
//!   on rmcp's own path; the final answer's id is rewritten to rmcp's;
//! - HTTP 404 on a session (it expired): the upstream did not take the call,
//!   which goes through rmcp as rmcp sends its own (it opens a new session first);
//! - other failures: the errors rmcp gives for them, so the retry rules and
//!   messages do not change; a 401 is signed again once (`http.rs`).
//!
//! To a plain `http://` upstream that no proxy setting intercepts, the POST
//! goes on an HTTP/1 connection of hyper's own ([`Plain`]) rather than
//! through reqwest: reqwest's own layers (its redirect policy parses the URL
//! again on every request, then its response the URL once more, its retry and
//! proxy layers) were about a sixth of a proxied call's instructions, and
//! hyper's pooled client after them another 12,000 and two task wakeups a
//! call. The connection is run by the call that uses it (a gateway connection
//! runs one call at a time), and kept between calls. A connection that cannot
//! be opened there is tried once through reqwest (nothing was sent), so its
//! failure reads as before; `https://` and proxied upstreams use reqwest.

use std::{
    borrow::Cow,
    pin::Pin,
    str::FromStr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use bytes::Bytes;
use futures::{StreamExt, stream::BoxStream};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use http_body::Body as _;
use http_body_util::{BodyDataStream, BodyExt, Full, combinators::BoxBody};
use hyper::{
    body::Incoming,
    client::conn::http1::{Connection, SendRequest},
};
use hyper_util::rt::TokioIo;
use rmcp::{
    RoleClient,
    model::{ErrorData, RequestId, RequestMetaObject, ServerResult},
    service::ServiceError,
    transport::{
        DynamicTransportError, StreamableHttpClientTransport,
        common::http_header::{
            BASE64_HEADER_PREFIX, EVENT_STREAM_MIME_TYPE, HEADER_MCP_METHOD, HEADER_MCP_NAME, HEADER_MCP_PARAM_PREFIX,
            HEADER_SESSION_ID, JSON_MIME_TYPE,
        },
        streamable_http_client::{
            AuthRequiredError, HttpStatusError, InsufficientScopeError, SseError, StreamableHttpError,
            StreamableHttpPostResponse, StreamableHttpResponseLimits,
        },
    },
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::net::TcpStream;

use super::http::{HttpError, UpstreamHttp};

/// The `_meta` keys the MCP specification reserves for itself: what rmcp puts
/// there (a 2026-07-28 upstream's client context) is sent again as it was.
const PROTOCOL_META_PREFIX: &str = "io.modelcontextprotocol/";

/// How a `tools/call` goes on one connection, learnt from rmcp's own.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    /// The session (none on a stateless upstream).
    session: Option<Arc<str>>,
    /// The headers rmcp sent (the configured ones and `MCP-Protocol-Version`),
    /// without the per-request SEP-2243 ones.
    headers: Vec<(HeaderName, HeaderValue)>,
    /// Whether rmcp sent SEP-2243 headers (`Mcp-Method`): this one sends them too.
    standard_headers: bool,
    /// The protocol's own `_meta` keys rmcp sent (a 2026-07-28 upstream's client context).
    context: Map<String, Value>,
    /// The headers every call's POST carries on this connection (all but
    /// `Mcp-Name` and a bearer token), made once: built per call, they
    /// were ~2,000 instructions of hashing and checking each time.
    base: HeaderMap,
    /// Each of `context`'s entries as JSON (`"key":value`), in its order:
    /// written into every call's body as they are, not cloned and serialised
    /// again each call.
    context_json: Vec<String>,
}

impl Template {
    /// What rmcp's `tools/call` with these `headers`, `session` and `meta` says of the next.
    fn learn(
        session: Option<&Arc<str>>,
        headers: &std::collections::HashMap<HeaderName, HeaderValue>,
        meta: Option<&RequestMetaObject>,
    ) -> Template {
        let per_request = |name: &HeaderName| {
            let n = name.as_str();
            n.eq_ignore_ascii_case(HEADER_MCP_METHOD)
                || n.eq_ignore_ascii_case(HEADER_MCP_NAME)
                || n.len() >= HEADER_MCP_PARAM_PREFIX.len()
                    && n[..HEADER_MCP_PARAM_PREFIX.len()].eq_ignore_ascii_case(HEADER_MCP_PARAM_PREFIX)
        };
        let method = HeaderName::from_static("mcp-method");
        let context: Map<String, Value> = meta
            .map(|m| {
                m.0.0.iter().filter(|(k, _)| k.starts_with(PROTOCOL_META_PREFIX)).map(|(k, v)| (k.clone(), v.clone()))
            })
            .into_iter()
            .flatten()
            .collect();
        let context_json = context
            .iter()
            .map(|(k, v)| {
                let mut entry = Vec::new();
                write_entry(&mut entry, k, v);
                String::from_utf8(entry).expect("serde_json writes UTF-8")
            })
            .collect();
        let mut template = Template {
            session: session.cloned(),
            headers: headers.iter().filter(|(n, _)| !per_request(n)).map(|(n, v)| (n.clone(), v.clone())).collect(),
            standard_headers: headers.contains_key(&method),
            base: HeaderMap::new(),
            context,
            context_json,
        };
        template.base = template.base_headers();
        template
    }

    /// The headers of every call's POST after this template (see `base`).
    fn base_headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::with_capacity(self.headers.len() + 6);
        headers.insert(header::ACCEPT, HeaderValue::from_static("text/event-stream, application/json"));
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(JSON_MIME_TYPE));
        for (k, v) in &self.headers {
            headers.append(k, v.clone());
        }
        if let Some(session) = &self.session
            && let Ok(v) = HeaderValue::from_str(session)
        {
            headers.insert(HEADER_SESSION_ID, v);
        }
        if self.standard_headers {
            headers.insert(HEADER_MCP_METHOD, HeaderValue::from_static("tools/call"));
        }
        headers
    }

    /// The body of `call` as request `id` on this connection: byte for byte
    /// what serialising rmcp's `CallToolRequestParams` of the same call (its
    /// `_meta` the call's own entries and this template's context) in a
    /// JSON-RPC request wrote, without building those params: the context
    /// goes in as it was serialised when learnt, and the arguments are
    /// written from where they are, never cloned (building and serialising
    /// the params was ~10,000 instructions a call, callgrind).
    pub fn call_body(&self, id: &RequestId, call: &CallBody<'_>) -> Vec<u8> {
        let mut out = Vec::with_capacity(192 + self.context_json.iter().map(String::len).sum::<usize>());
        out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
        write_json(&mut out, id);
        out.extend_from_slice(br#","method":"tools/call","params":{"#);
        // `_meta` first and its keys in order, as rmcp's params and a
        // `serde_json::Map` (a `BTreeMap`) serialise: the call's entries and
        // the context merged (the context's keys carry the protocol's
        // prefix, the call's never do; a key in both is the context's, as
        // extending the call's map with the context made it).
        if !call.meta.is_empty() || !self.context.is_empty() {
            out.extend_from_slice(br#""_meta":{"#);
            let mut own = call.meta.iter().peekable();
            let mut context = self.context.keys().zip(&self.context_json).peekable();
            let mut first = true;
            loop {
                let own_first = match (own.peek(), context.peek()) {
                    (None, None) => break,
                    (Some((k, _)), Some((c, _))) => k < c,
                    (left, _) => left.is_some(),
                };
                if !std::mem::take(&mut first) {
                    out.push(b',');
                }
                if own_first {
                    if let Some((k, v)) = own.next() {
                        write_entry(&mut out, k, v);
                    }
                } else if let Some((key, entry)) = context.next() {
                    own.next_if(|(k, _)| *k == key);
                    out.extend_from_slice(entry.as_bytes());
                }
            }
            out.extend_from_slice(b"},");
        }
        out.extend_from_slice(br#""name":"#);
        write_json(&mut out, call.name);
        if let Some(arguments) = call.arguments {
            out.extend_from_slice(br#","arguments":"#);
            write_json(&mut out, arguments);
        }
        if let Some(responses) = call.input_responses {
            out.extend_from_slice(br#","inputResponses":"#);
            write_json(&mut out, responses);
        }
        if let Some(state) = call.request_state {
            out.extend_from_slice(br#","requestState":"#);
            write_json(&mut out, state);
        }
        out.extend_from_slice(b"}}");
        out
    }

    /// The protocol's `_meta` keys every request carries on this connection.
    pub fn context(&self) -> &Map<String, Value> {
        &self.context
    }
}

/// One `tools/call` as the gateway's own POST sends it ([`Template::call_body`]).
#[derive(Debug, Clone, Copy)]
pub struct CallBody<'a> {
    /// The tool's upstream name.
    pub name: &'a str,
    /// Its arguments (`None`: the call gave none).
    pub arguments: Option<&'a Map<String, Value>>,
    /// An MRTR retry's answers.
    pub input_responses: Option<&'a Map<String, Value>>,
    /// An MRTR retry's `requestState`.
    pub request_state: Option<&'a str>,
    /// The call's own `_meta` entries (its trace, the caller, the progress
    /// token); the template's context is added.
    pub meta: &'a Map<String, Value>,
}

/// Put `id` in a call's `_meta` as its progress token, as rmcp's
/// `RequestMetaObject::set_progress_token` does (the upstream's progress for
/// the call comes under it).
pub fn set_progress_token(meta: &mut Map<String, Value>, id: &RequestId) {
    // The value a `ProgressToken` of `id` serialises to, made without
    // serialising it (nor formatting the `Arc<str>`: `to_string` would).
    let token = match id {
        RequestId::String(s) => Value::String(String::from(&**s)),
        RequestId::Number(n) => Value::from(*n),
    };
    meta.insert("progressToken".into(), token);
}

/// `presa-gw-<n>`, the text of the gateway's `n`th request id, written on
/// the stack: `format!` and the `String` it made before the id's `Arc<str>`
/// were ~400 instructions of every call (callgrind).
fn request_id(mut n: u64) -> Arc<str> {
    const PREFIX: &[u8] = b"presa-gw-";
    let mut text = [0u8; PREFIX.len() + 20];
    text[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 20];
    let mut first = digits.len();
    loop {
        first -= 1;
        digits[first] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let end = PREFIX.len() + digits.len() - first;
    text[PREFIX.len()..end].copy_from_slice(&digits[first..]);
    Arc::from(std::str::from_utf8(&text[..end]).expect("ASCII"))
}

/// `value` as JSON onto `out` (JSON values, strings and ids always serialise).
fn write_json(out: &mut Vec<u8>, value: &(impl Serialize + ?Sized)) {
    serde_json::to_writer(out, value).expect("JSON values, strings and ids serialise");
}

/// A map entry `"key":value` as JSON onto `out`.
fn write_entry(out: &mut Vec<u8>, key: &str, value: &Value) {
    write_json(out, key);
    out.push(b':');
    write_json(out, value);
}

/// An SSE answer to the gateway's own POST, waiting for rmcp's POST of the same call.
struct Handoff {
    /// The id the upstream knows the call by.
    ours: RequestId,
    stream: BoxStream<'static, Result<sse_stream::Sse, SseError>>,
}

/// What a connection's [`UpstreamHttp`] and the gateway's own POST share.
#[derive(Default)]
pub struct Shared {
    template: Mutex<Option<Arc<Template>>>,
    handoff: Mutex<Option<Handoff>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("template", &self.template).finish_non_exhaustive()
    }
}

impl Shared {
    /// rmcp is about to POST `tools/call` `theirs` (with these `session`,
    /// `headers` and `meta`): the stream of a call handed off, its answer's id
    /// rewritten to `theirs`, if there is one (the POST is then not sent);
    /// otherwise the POST is kept as the template of the next call.
    pub(super) fn rmcp_posts_call(
        &self,
        theirs: &RequestId,
        session: Option<&Arc<str>>,
        headers: &std::collections::HashMap<HeaderName, HeaderValue>,
        meta: Option<&RequestMetaObject>,
    ) -> Option<StreamableHttpPostResponse> {
        if let Some(Handoff { ours, stream }) = self.handoff.lock().ok()?.take() {
            let theirs = theirs.clone();
            let stream = stream.map(move |event| {
                event.map(|mut sse| {
                    if let Some(data) = sse.data.as_mut() {
                        rewrite_answer_id(data, &ours, &theirs);
                    }
                    sse
                })
            });
            return Some(StreamableHttpPostResponse::Sse(stream.boxed(), session.map(ToString::to_string)));
        }
        let learnt = Template::learn(session, headers, meta);
        if let Ok(mut t) = self.template.lock()
            && t.as_deref() != Some(&learnt)
        {
            *t = Some(Arc::new(learnt));
        }
        None
    }

    /// The template of the next call, once rmcp sent one on this connection.
    pub fn template(&self) -> Option<Arc<Template>> {
        self.template.lock().ok()?.clone()
    }

    /// Forget a stream not taken (rmcp's POST of its call never came).
    pub fn clear_handoff(&self) {
        if let Ok(mut h) = self.handoff.lock() {
            h.take();
        }
    }

    fn hand_off(&self, handoff: Handoff) {
        if let Ok(mut h) = self.handoff.lock() {
            *h = Some(handoff);
        }
    }
}

/// In an SSE event's `data`: the answer to `ours` made the answer to `theirs`.
fn rewrite_answer_id(data: &mut String, ours: &RequestId, theirs: &RequestId) {
    let RequestId::String(tag) = ours else { return };
    if !data.contains(tag.as_ref()) {
        return;
    }
    let Ok(mut message) = serde_json::from_str::<Map<String, Value>>(data) else { return };
    let is_answer = message.contains_key("result") || message.contains_key("error");
    if is_answer && message.get("id").and_then(Value::as_str) == Some(tag.as_ref()) {
        message.insert("id".into(), serde_json::to_value(theirs).unwrap_or(Value::Null));
        *data = Value::Object(message).to_string();
    }
}

/// How the gateway's own POST of a call ended.
#[derive(Debug)]
pub enum Sent {
    /// The upstream answered (a result or its error: the call is over there).
    Answered(Result<Answer, ErrorData>),
    /// It answers with a stream: send the call through rmcp, which takes the
    /// stream instead of sending it again.
    HandedOff,
    /// The upstream did not take it (its session expired): send it through rmcp.
    NotTaken,
}

/// A `tools/call` result.
#[derive(Debug)]
pub enum Answer {
    /// A complete result, as presa returns it (`resultType` removed).
    Complete(Value),
    /// Another kind of result (input required, an upstream task), in rmcp's model.
    Other(Box<ServerResult>),
}

/// The JSON-RPC envelope of an answer, its result left as JSON.
#[derive(Deserialize)]
struct Envelope {
    id: Option<RequestId>,
    result: Option<Map<String, Value>>,
    error: Option<ErrorData>,
}

/// The JSON-RPC request rmcp's model makes of a call: what
/// [`Template::call_body`] writes without it (its tests compare the two).
#[cfg(test)]
#[derive(Serialize)]
struct Request<'a> {
    jsonrpc: &'static str,
    id: &'a RequestId,
    method: &'static str,
    params: &'a rmcp::model::CallToolRequestParams,
}

/// An answer's body, from either client.
type Body = BoxBody<Bytes, BoxError>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long hyper's connection may sit idle between calls before it is
/// closed rather than used (what the pooled client it replaced kept).
const PLAIN_IDLE: Duration = Duration::from_secs(90);

/// A plain `http://` upstream that no proxy intercepts (see the module
/// docs): one HTTP/1 keep-alive connection of hyper's, driven by the call
/// that uses it rather than by a task of its own. A gateway connection runs
/// one call at a time, so it needs no pool: hyper's pooled client checked
/// the connection out and back in, set `Host` from the URL and handed the
/// request to the connection's task and the answer back, two task wakeups
/// and about 12,000 instructions a call (callgrind). TCP_NODELAY, as the
/// reqwest client of the connection (`http_client`).
pub(super) struct Plain {
    /// `host:port` to connect to.
    addr: String,
    /// The request's target (origin-form) and `Host`, as the pooled client made them.
    path: http::Uri,
    host: HeaderValue,
    /// The connection between calls, and since when it is idle (shared
    /// with the body of the answer being read, which puts it back).
    idle: IdleSlot,
}

impl std::fmt::Debug for Plain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plain").field("addr", &self.addr).field("path", &self.path).finish_non_exhaustive()
    }
}

/// hyper's HTTP/1 connection: what sends requests on it, and what runs it.
/// Boxed wherever it is kept: its state (read and write buffers, the
/// dispatcher) is most of a kilobyte, and it moves between the idle slot,
/// the call and the answer's body several times a call (each move a copy
/// of all of it, ~1,000 instructions a call, callgrind).
struct Http1 {
    send: SendRequest<Full<Bytes>>,
    conn: Connection<TokioIo<TcpStream>, Full<Bytes>>,
}

/// Why hyper's POST failed.
#[derive(Debug)]
enum PlainError {
    /// No connection could be opened (nothing was sent): reqwest tries,
    /// and its failure is the one reported.
    Connect,
    /// The request failed on its connection.
    Http(hyper::Error),
}

impl Plain {
    /// For `url`, unless it is `https://`, carries a user or password, or
    /// the environment's proxy settings (`HTTP_PROXY`, `NO_PROXY`… read as
    /// reqwest reads them) send it through a proxy: reqwest takes those.
    pub(super) fn for_url(url: &reqwest::Url) -> Option<Box<Plain>> {
        // reqwest turns a URL's user and password into Basic auth: it keeps those.
        if url.scheme() != "http" || !url.username().is_empty() || url.password().is_some() {
            return None;
        }
        let uri: http::Uri = url.as_str().parse().ok()?;
        if hyper_util::client::proxy::matcher::Matcher::from_system().intercept(&uri).is_some() {
            return None;
        }
        let authority = uri.authority()?;
        // `Host` as hyper's pooled client set it: the port only when it is not 80.
        let host = match uri.port_u16() {
            Some(port) if port != 80 => format!("{}:{port}", authority.host()),
            _ => authority.host().to_string(),
        };
        let path = match uri.path_and_query() {
            Some(path) if path.as_str() != "/" => http::Uri::from_str(path.as_str()).ok()?,
            _ => http::Uri::default(),
        };
        Some(Box::new(Plain {
            addr: format!("{}:{}", authority.host(), uri.port_u16().unwrap_or(80)),
            path,
            host: HeaderValue::from_str(&host).ok()?,
            idle: Arc::default(),
        }))
    }

    /// The idle connection, unless it was idle too long. Whether the
    /// upstream closed it meanwhile (nothing polls it between calls) is
    /// seen by the first poll of [`Plain::post`], which then opens another.
    fn take_idle(&self) -> Option<Box<Http1>> {
        let (http1, since) = self.idle.lock().ok()?.take()?;
        (since.elapsed() < PLAIN_IDLE).then_some(http1)
    }

    async fn connect(&self) -> Result<Box<Http1>, PlainError> {
        let stream = TcpStream::connect(self.addr.as_str()).await.map_err(|_| PlainError::Connect)?;
        stream.set_nodelay(true).map_err(|_| PlainError::Connect)?;
        let (send, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(PlainError::Http)?;
        Ok(Box::new(Http1 { send, conn }))
    }

    /// POST `body` with `headers` on the idle connection, else on a new one;
    /// a request the idle connection did not take (it closed before the
    /// request was written) goes once more on a new one, as the pooled
    /// client retried it. The answer's body runs the connection while it is
    /// read, and gives it back for the next call once read to its end.
    async fn post(&self, headers: HeaderMap, body: Bytes) -> Result<http::Response<Body>, PlainError> {
        let mut request = http::Request::new(Full::new(body));
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = self.path.clone();
        *request.headers_mut() = headers;
        request.headers_mut().insert(header::HOST, self.host.clone());
        let mut reused = self.take_idle();
        loop {
            let fresh = reused.is_none();
            let mut http1 = match reused.take() {
                Some(http1) => http1,
                None => self.connect().await?,
            };
            // Run the connection until it can take a request (or ended).
            let ended = std::future::poll_fn(|cx| match Pin::new(&mut http1.conn).poll(cx) {
                Poll::Ready(_) => Poll::Ready(true),
                Poll::Pending => http1.send.poll_ready(cx).map(|ready| ready.is_err()),
            })
            .await;
            if ended && !fresh {
                continue;
            }
            let mut response = std::pin::pin!(http1.send.try_send_request(request));
            let mut running = !ended;
            let answer = std::future::poll_fn(|cx| {
                if running && Pin::new(&mut http1.conn).poll(cx).is_ready() {
                    running = false;
                }
                response.as_mut().poll(cx)
            })
            .await;
            match answer {
                Ok(response) => {
                    let (home, http1) = (self.idle.clone(), running.then_some(http1));
                    return Ok(response.map(|body| BodyExt::boxed(DrivenBody { body, http1, home })));
                }
                Err(mut e) => match e.take_message() {
                    // Never written: once more on a new connection.
                    Some(again) if !fresh => request = again,
                    _ => return Err(PlainError::Http(e.into_error())),
                },
            }
        }
    }
}

/// A [`Plain`]'s connection between calls and since when it is idle, shared
/// with the [`DrivenBody`] that puts it back.
type IdleSlot = Arc<Mutex<Option<(Box<Http1>, Instant)>>>;

/// The body of an answer on hyper's connection, running the connection
/// while it is read (nothing else does), then putting it back for the next
/// call; dropped before its end, it closes the connection.
struct DrivenBody {
    body: Incoming,
    http1: Option<Box<Http1>>,
    home: IdleSlot,
}

impl http_body::Body for DrivenBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Some(http1) = &mut this.http1
            && Pin::new(&mut http1.conn).poll(cx).is_ready()
        {
            this.http1 = None;
        }
        let frame = std::task::ready!(Pin::new(&mut this.body).poll_frame(cx));
        if frame.is_none()
            && let Some(http1) = this.http1.take()
            && let Ok(mut idle) = this.home.lock()
        {
            *idle = Some((http1, Instant::now()));
        }
        Poll::Ready(frame.map(|f| f.map_err(BoxError::from)))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A connection's own way to POST `tools/call`.
#[derive(Debug)]
pub struct Direct {
    pub(super) http: UpstreamHttp,
    /// The upstream's URL, parsed once (reqwest parses a `&str` on every request).
    pub(super) url: reqwest::Url,
    /// hyper's client, when the upstream is plain `http://` with no proxy
    /// (boxed: a call's futures move their connection, this one inside, several times).
    pub(super) plain: Option<Box<Plain>>,
    pub(super) shared: Arc<Shared>,
    pub(super) next_id: AtomicU64,
}

impl Direct {
    /// The template of the next call, if rmcp already sent one on this
    /// connection and a call of `tool` can go without rmcp (its name fits a
    /// header as it is).
    pub fn template(&self, tool: &str) -> Option<Arc<Template>> {
        let plain =
            !tool.is_empty() && !tool.starts_with(BASE64_HEADER_PREFIX) && tool.bytes().all(|b| b.is_ascii_graphic());
        plain.then(|| self.shared.template()).flatten()
    }

    /// A new request id (a string rmcp's numbers never collide with).
    pub fn next_id(&self) -> RequestId {
        RequestId::String(request_id(self.next_id.fetch_add(1, Ordering::Relaxed)))
    }

    /// Forget a stream rmcp did not take.
    pub fn clear_handoff(&self) {
        self.shared.clear_handoff();
    }

    /// The headers of a `tools/call` POST after `template` (`name`: the
    /// tool's, for `Mcp-Name`), with `token` as its bearer token.
    fn headers(&self, template: &Template, name: Option<&HeaderValue>, token: Option<&str>) -> HeaderMap {
        let mut headers = template.base.clone();
        if template.standard_headers
            && let Some(name) = name
        {
            headers.insert(HEADER_MCP_NAME, name.clone());
        }
        if let Some(token) = token
            && let Ok(mut v) = HeaderValue::from_str(&format!("Bearer {token}"))
        {
            v.set_sensitive(true);
            headers.insert(header::AUTHORIZATION, v);
        }
        headers
    }

    /// POST `body` with `headers()`: through hyper's client to a plain
    /// upstream (through reqwest when it cannot connect: nothing was sent,
    /// and the failure then reads as it always did), else through reqwest.
    async fn post(&self, headers: impl Fn() -> HeaderMap, body: Bytes) -> Result<http::Response<Body>, HttpError> {
        if let Some(plain) = &self.plain {
            match plain.post(headers(), body.clone()).await {
                Ok(response) => return Ok(response),
                Err(PlainError::Connect) => {}
                Err(PlainError::Http(e)) => return Err(StreamableHttpError::Io(std::io::Error::other(e))),
            }
        }
        let response = self.http.client().post(self.url.clone()).headers(headers()).body(body).send().await?;
        Ok(http::Response::from(response).map(|b| b.map_err(BoxError::from).boxed()))
    }

    /// POST `body` ([`Template::call_body`]), `tools/call` of the tool
    /// `name` as request `id`, after `template`.
    pub async fn call(
        &self,
        template: &Template,
        id: &RequestId,
        name: &str,
        body: Vec<u8>,
    ) -> Result<Sent, ServiceError> {
        let name = HeaderValue::from_str(name).ok();
        let name = name.as_ref();
        let limits = StreamableHttpResponseLimits::default();
        let send = |token: Option<String>, body: Bytes| async move {
            let headers = || self.headers(template, name, token.as_deref());
            answer_status(self.post(headers, body).await?, limits).await
        };
        let response = match self.http.signed(None, Bytes::from(body), send).await.map_err(transport_error)? {
            Status::Read(response) => response,
            Status::Rpc(error) => return Ok(Sent::Answered(Err(error))),
        };
        let status = response.status();
        if status == StatusCode::NOT_FOUND {
            if template.session.is_some() {
                return Ok(Sent::NotTaken);
            }
            let body = read_bounded(response, limits.max_error_response_size).await.unwrap_or_default();
            return Err(transport_error(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&body)
            )))));
        }
        let is = |mime: &str| {
            let content_type = response.headers().get(header::CONTENT_TYPE);
            content_type.is_some_and(|ct| media_type_is(ct.as_bytes(), mime))
        };
        // JSON first: what a plain call's answer mostly is.
        if !is(JSON_MIME_TYPE) {
            if is(EVENT_STREAM_MIME_TYPE) {
                let stream = bounded_sse(response, limits.max_sse_event_size);
                self.shared.hand_off(Handoff { ours: id.clone(), stream });
                return Ok(Sent::HandedOff);
            }
            let ct = response.headers().get(header::CONTENT_TYPE);
            let ct = ct.map(|ct| String::from_utf8_lossy(ct.as_bytes()).into_owned());
            return Err(transport_error(StreamableHttpError::UnexpectedContentType(ct)));
        }
        let body = read_bounded(response, limits.max_json_response_size).await.map_err(transport_error)?;
        let envelope: Envelope = serde_json::from_slice(&body).map_err(|e| {
            transport_error(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!(
                "the upstream's answer to tools/call is not JSON-RPC: {e}"
            ))))
        })?;
        if let Some(error) = envelope.error {
            return Ok(Sent::Answered(Err(error)));
        }
        match (envelope.id, envelope.result) {
            (Some(answered), Some(result)) if &answered == id => Ok(Sent::Answered(Ok(answer(result)?))),
            _ => Err(transport_error(StreamableHttpError::UnexpectedServerResponse(Cow::Borrowed(
                "the upstream answered tools/call with something else than its answer",
            )))),
        }
    }
}

/// A result as presa returns it when it is a complete one (rmcp's rule: no
/// `resultType` or `complete`, and `content`, `structuredContent` or `isError`);
/// otherwise in rmcp's model.
fn answer(mut result: Map<String, Value>) -> Result<Answer, ServiceError> {
    let complete = match result.get("resultType") {
        None => true,
        Some(t) => t == "complete",
    };
    let content_ok = result.get("content").is_none_or(Value::is_array);
    let known = ["content", "structuredContent", "isError"].iter().any(|k| result.contains_key(*k));
    if complete && content_ok && known {
        result.remove("resultType");
        return Ok(Answer::Complete(Value::Object(result)));
    }
    serde_json::from_value::<ServerResult>(Value::Object(result)).map(|r| Answer::Other(Box::new(r))).map_err(|e| {
        transport_error(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!(
            "the upstream's result of tools/call is not valid MCP: {e}"
        ))))
    })
}

/// Whether `value` (a `Content-Type`) is `mime`, parameters aside.
fn media_type_is(value: &[u8], mime: &str) -> bool {
    let end = value.iter().position(|b| *b == b';').unwrap_or(value.len());
    value[..end].trim_ascii().eq_ignore_ascii_case(mime.as_bytes())
}

/// What a POST's status leaves to read.
enum Status {
    /// A 2xx, or a 404 (a session gone): the body is read by the caller.
    Read(http::Response<Body>),
    /// A JSON-RPC error the upstream sent with a failing status: the call's answer.
    Rpc(ErrorData),
}

/// A response as rmcp's client takes its status: 2xx and 404 are read on
/// ([`Status::Read`]); 401/403 with a challenge, 429 and 5xx (with
/// `Retry-After`) are its errors for them; a JSON-RPC error in the body of
/// another failure (not an unchallenged 401/403) is the upstream's answer;
/// the rest fail with a prefix of their body.
async fn answer_status(
    response: http::Response<Body>,
    limits: StreamableHttpResponseLimits,
) -> Result<Status, HttpError> {
    let status = response.status();
    if status.is_success() || status == StatusCode::NOT_FOUND {
        return Ok(Status::Read(response));
    }
    let headers = response.headers();
    let challenge = headers.get(header::WWW_AUTHENTICATE).and_then(|h| h.to_str().ok()).map(str::to_string);
    match (status, challenge) {
        (StatusCode::UNAUTHORIZED, Some(h)) => {
            return Err(StreamableHttpError::AuthRequired(AuthRequiredError::new(h)));
        }
        (StatusCode::FORBIDDEN, Some(h)) => {
            let scope = scope_of(&h);
            return Err(StreamableHttpError::InsufficientScope(InsufficientScopeError::new(h, scope)));
        }
        _ => {}
    }
    let retry_after = headers.get(header::RETRY_AFTER).and_then(|v| v.to_str().ok()).map(str::to_string);
    let http_status = (status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error())
        .then(|| HttpStatusError::new(status.as_u16(), retry_after));
    let json = headers.get(header::CONTENT_TYPE).is_some_and(|ct| media_type_is(ct.as_bytes(), JSON_MIME_TYPE));
    let auth = matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN);
    match http_status {
        Some(e) if !json || status == StatusCode::TOO_MANY_REQUESTS => return Err(e.into()),
        _ => {}
    }
    let max = if json && !auth { limits.max_json_response_size } else { limits.max_error_response_size };
    let body = match read_bounded(response, max).await {
        Ok(body) => body,
        Err(e @ StreamableHttpError::ResponseBodyTooLarge { .. }) if json && !auth => {
            return Err(http_status.map_or(e, StreamableHttpError::from));
        }
        Err(_) => Vec::new(),
    };
    if json
        && !auth
        && let Ok(Envelope { error: Some(error), .. }) = serde_json::from_slice::<Envelope>(&body)
    {
        return Ok(Status::Rpc(error));
    }
    if let Some(e) = http_status {
        return Err(e.into());
    }
    let shown = &body[..body.len().min(limits.max_error_response_size)];
    Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!(
        "HTTP {status}: {}",
        String::from_utf8_lossy(shown)
    ))))
}

/// The `scope` of a `WWW-Authenticate` challenge.
fn scope_of(challenge: &str) -> Option<String> {
    let at = challenge.find("scope=")? + "scope=".len();
    let rest = &challenge[at..];
    let value = match rest.strip_prefix('"') {
        Some(quoted) => &quoted[..quoted.find('"').unwrap_or(quoted.len())],
        None => &rest[..rest.find([',', ' ']).unwrap_or(rest.len())],
    };
    Some(value.to_string())
}

/// A body read to its end, refused past `max` bytes.
async fn read_bounded(response: http::Response<Body>, max: usize) -> Result<Vec<u8>, HttpError> {
    let mut body = response.into_body();
    let length = body.size_hint().exact();
    if length.is_some_and(|n| n > max as u64) {
        return Err(StreamableHttpError::ResponseBodyTooLarge { max_size: max });
    }
    let mut read = Vec::with_capacity(length.map_or(0, |n| n as usize));
    while let Some(frame) = body.frame().await {
        let Ok(chunk) = frame.map_err(body_error)?.into_data() else { continue };
        if read.len() + chunk.len() > max {
            return Err(StreamableHttpError::ResponseBodyTooLarge { max_size: max });
        }
        read.extend_from_slice(&chunk);
    }
    Ok(read)
}

/// A body that failed mid-way, as rmcp's client reports it: reqwest's
/// error as such, hyper's as an I/O error (both read as a lost connection).
fn body_error(e: BoxError) -> HttpError {
    match e.downcast::<reqwest::Error>() {
        Ok(e) => StreamableHttpError::Client(*e),
        Err(e) => StreamableHttpError::Io(std::io::Error::other(e)),
    }
}

/// A failed POST as rmcp's client reports its own (so `retry` and `answer` read it alike).
fn transport_error(e: HttpError) -> ServiceError {
    ServiceError::TransportSend(DynamicTransportError::new::<StreamableHttpClientTransport<UpstreamHttp>, RoleClient>(
        e,
    ))
}

/// An SSE event over its size limit (`StreamableHttpResponseLimits::max_sse_event_size`).
#[derive(Debug, thiserror::Error)]
enum SseBodyError {
    #[error("{0}")]
    Body(BoxError),
    #[error("an SSE event exceeded the maximum size of {0} bytes")]
    EventTooLarge(usize),
}

/// A response body as SSE events, each at most `max` bytes (counted between
/// blank lines, line ends aside).
fn bounded_sse(response: http::Response<Body>, max: usize) -> BoxStream<'static, Result<sse_stream::Sse, SseError>> {
    let (mut line, mut event, mut failed) = (0usize, 0usize, false);
    let bytes = BodyDataStream::new(response.into_body()).map(move |chunk| {
        let chunk = chunk.map_err(SseBodyError::Body)?;
        if failed {
            return Err(SseBodyError::EventTooLarge(max));
        }
        for b in &chunk {
            match b {
                b'\n' if line == 0 => event = 0,
                b'\n' => line = 0,
                b'\r' => {}
                _ => {
                    line += 1;
                    event += 1;
                }
            }
            if event > max {
                failed = true;
                return Err(SseBodyError::EventTooLarge(max));
            }
        }
        Ok(chunk)
    });
    sse_stream::SseStream::from_bytes_stream(bytes).boxed()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use rmcp::model::ProgressToken;
    use serde_json::json;

    use super::*;

    #[test]
    fn a_template_keeps_the_session_headers_and_context_of_rmcps_call_not_its_per_call_parts() {
        let headers: HashMap<HeaderName, HeaderValue> = [
            ("mcp-protocol-version", "2026-07-28"),
            ("x-api-key", "k"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "echo"),
            ("mcp-param-region", "eu"),
        ]
        .into_iter()
        .map(|(k, v)| (HeaderName::from_static(k), HeaderValue::from_static(v)))
        .collect();
        let meta: RequestMetaObject = json!({
            "progressToken": 3, "traceparent": "00-x",
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        })
        .as_object()
        .cloned()
        .unwrap()
        .into();
        let t = Template::learn(Some(&Arc::from("s1")), &headers, Some(&meta));
        assert_eq!(t.session.as_deref(), Some("s1"));
        assert!(t.standard_headers);
        let mut names: Vec<&str> = t.headers.iter().map(|(k, _)| k.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["mcp-protocol-version", "x-api-key"]);
        // What every call's POST carries: the kept headers, the session and `Mcp-Method` (its `Mcp-Name` is the call's).
        let mut base: Vec<(&str, &str)> = t.base.iter().map(|(k, v)| (k.as_str(), v.to_str().unwrap())).collect();
        base.sort_unstable();
        assert_eq!(
            base,
            [
                ("accept", "text/event-stream, application/json"),
                ("content-type", "application/json"),
                ("mcp-method", "tools/call"),
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-session-id", "s1"),
                ("x-api-key", "k"),
            ]
        );
        assert_eq!(
            Value::Object(t.context.clone()),
            json!({ "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {} })
        );
        let legacy = Template::learn(None, &HashMap::new(), None);
        assert!(!legacy.standard_headers && legacy.context.is_empty() && legacy.session.is_none());
    }

    #[test]
    fn a_calls_body_is_byte_for_byte_what_rmcps_params_serialise_to() {
        // What the gateway sent before `call_body`: rmcp's params (the call's
        // `_meta` extended with the template's context, then the progress
        // token) in a JSON-RPC request.
        fn through_rmcp(
            template: &Template,
            id: &RequestId,
            name: &str,
            arguments: &Value,
            retry: Option<&crate::convert::Retry>,
            own: &Map<String, Value>,
        ) -> String {
            let mut meta = own.clone();
            meta.extend(template.context().iter().map(|(k, v)| (k.clone(), v.clone())));
            let mut params = crate::convert::call_params(name, arguments.clone(), retry, meta).unwrap();
            params.meta.get_or_insert_default().set_progress_token(ProgressToken(id.clone()));
            let request = Request { jsonrpc: "2.0", id, method: "tools/call", params: &params };
            String::from_utf8(serde_json::to_vec(&request).unwrap()).unwrap()
        }
        let meta: RequestMetaObject = json!({
            "progressToken": 3, "traceparent": "00-x",
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": { "roots": {}, "extensions": { "x": { "a": [1, "\u{e9}\n\"", null] } } },
            "io.modelcontextprotocol/clientInfo": { "name": "presa \"gw\" \u{1F600}", "version": "1.0" },
        })
        .as_object()
        .cloned()
        .unwrap()
        .into();
        let stateful = Template::learn(Some(&Arc::from("s1")), &HashMap::new(), Some(&meta));
        let legacy = Template::learn(None, &HashMap::new(), None);
        let traced = json!({ "baggage": "k=v", "traceparent": "00-abc-def-01", "tracestate": "a=b",
            "dev.presa/caller": { "tenant": "t\u{e9}", "subject": "s\"1" } });
        let retry = crate::convert::Retry {
            input_responses: Map::from_iter([
                ("q2".into(), json!({ "action": "accept" })),
                ("q1".into(), json!([1.5, -2])),
            ]),
            request_state: Some("st\u{e9}te\n".into()),
        };
        let arguments =
            [json!({ "text": "h\u{e9}llo \"w\"\t", "n": 1e300, "deep": { "z": [], "a": {} } }), json!({}), Value::Null];
        for template in [&stateful, &legacy] {
            for own in [Map::new(), traced.as_object().cloned().unwrap()] {
                for args in &arguments {
                    for retry in [None, Some(&retry)] {
                        for (n, name) in ["echo", "na\"me/\u{e9}"].into_iter().enumerate() {
                            let id = RequestId::String(format!("presa-gw-{n}").into());
                            let mut meta = own.clone();
                            set_progress_token(&mut meta, &id);
                            let body = template.call_body(
                                &id,
                                &CallBody {
                                    name,
                                    arguments: crate::convert::call_arguments(args).unwrap(),
                                    input_responses: retry.map(|r| &r.input_responses),
                                    request_state: retry.and_then(|r| r.request_state.as_deref()),
                                    meta: &meta,
                                },
                            );
                            assert_eq!(
                                String::from_utf8(body).unwrap(),
                                through_rmcp(template, &id, name, args, retry, &own)
                            );
                        }
                    }
                }
            }
        }
        // A number id (rmcp's own) serialises as rmcp's did too.
        let id = RequestId::Number(42);
        let mut meta = Map::new();
        set_progress_token(&mut meta, &id);
        let call = CallBody { name: "echo", arguments: None, input_responses: None, request_state: None, meta: &meta };
        let body = String::from_utf8(stateful.call_body(&id, &call)).unwrap();
        assert_eq!(body, through_rmcp(&stateful, &id, "echo", &Value::Null, None, &Map::new()));
    }

    #[test]
    fn request_ids_are_the_gateways_prefix_and_a_number() {
        for n in [0, 7, 10, 4_294_967_296, u64::MAX] {
            assert_eq!(*request_id(n), format!("presa-gw-{n}"));
        }
    }

    #[test]
    fn only_the_answer_to_the_gateways_id_is_given_rmcps() {
        let ours = RequestId::String("presa-gw-7".into());
        let theirs = RequestId::Number(3);
        let mut answer = json!({ "jsonrpc": "2.0", "id": "presa-gw-7", "result": { "content": [] } }).to_string();
        rewrite_answer_id(&mut answer, &ours, &theirs);
        assert_eq!(serde_json::from_str::<Value>(&answer).unwrap()["id"], json!(3));
        // A server request (its own id) and a notification mentioning the id stay as they are.
        for other in [
            json!({ "jsonrpc": "2.0", "id": "presa-gw-7", "method": "elicitation/create", "params": {} }),
            json!({ "jsonrpc": "2.0", "method": "notifications/progress", "params": { "progressToken": "presa-gw-7" } }),
            json!({ "jsonrpc": "2.0", "id": "presa-gw-70", "result": {} }),
        ] {
            let mut data = other.to_string();
            rewrite_answer_id(&mut data, &ours, &theirs);
            assert_eq!(serde_json::from_str::<Value>(&data).unwrap(), other);
        }
    }

    #[test]
    fn a_complete_result_is_kept_as_json_and_others_go_through_rmcps_model() {
        let complete = json!({ "resultType": "complete", "content": [{ "type": "text", "text": "hi", "x": 1 }] });
        let Ok(Answer::Complete(v)) = answer(complete.as_object().cloned().unwrap()) else { panic!("complete") };
        assert_eq!(v, json!({ "content": [{ "type": "text", "text": "hi", "x": 1 }] }));
        let legacy = json!({ "content": [], "isError": true });
        assert!(matches!(answer(legacy.as_object().cloned().unwrap()), Ok(Answer::Complete(v)) if v == legacy));
        let task = json!({ "resultType": "task", "taskId": "t1", "status": "working",
            "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttlMs": null });
        assert!(matches!(
            answer(task.as_object().cloned().unwrap()),
            Ok(Answer::Other(r)) if matches!(*r, ServerResult::CreateTaskResult(_))
        ));
        // Not a complete result: rmcp's model takes it (and the call refuses what it makes of it).
        let odd = json!({ "content": "not a list" });
        assert!(!matches!(answer(odd.as_object().cloned().unwrap()), Ok(Answer::Complete(_))));
    }

    /// A plain HTTP/1.1 upstream answering every POST with `{}` (closing
    /// each connection after `per_connection` answers): the connections it accepted.
    async fn counting_upstream(per_connection: usize) -> (reqwest::Url, Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap()).parse().unwrap();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    for _ in 0..per_connection {
                        // A request: its head, then `content-length` bytes.
                        let (head, length) = loop {
                            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                                let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                                let length = head
                                    .lines()
                                    .find_map(|l| l.strip_prefix("content-length:"))
                                    .map_or(0, |n| n.trim().parse::<usize>().unwrap());
                                break (end + 4, length);
                            }
                            let mut chunk = [0u8; 4096];
                            match socket.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        };
                        while buf.len() < head + length {
                            let mut chunk = [0u8; 4096];
                            match socket.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        buf.drain(..head + length);
                        let answer =
                            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
                        if socket.write_all(answer).await.is_err() {
                            return;
                        }
                    }
                    // Closed after its last answer (the client may hold it idle meanwhile).
                });
            }
        });
        (url, accepted)
    }

    #[tokio::test]
    async fn hypers_connection_is_kept_between_calls_and_replaced_once_closed() {
        async fn post(plain: &Plain) -> Result<http::Response<Body>, PlainError> {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(JSON_MIME_TYPE));
            plain.post(headers, Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)).await
        }
        let read = |response: http::Response<Body>| async move {
            assert_eq!(response.status(), StatusCode::OK);
            read_bounded(response, 64).await.unwrap()
        };
        let (url, accepted) = counting_upstream(3).await;
        let Some(plain) = Plain::for_url(&url) else { return }; // a proxy setting in the environment
        for _ in 0..3 {
            assert_eq!(read(post(&plain).await.unwrap()).await, b"{}");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "one connection for three calls");
        // The upstream closed it after its third answer: the next call opens another.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(read(post(&plain).await.unwrap()).await, b"{}");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        // An answer not read to its end closes its connection (its rest would be read as the next answer).
        drop(post(&plain).await.unwrap());
        assert_eq!(read(post(&plain).await.unwrap()).await, b"{}");
        assert_eq!(accepted.load(Ordering::SeqCst), 3);
        // Nothing listening: a connect failure (the caller tries reqwest).
        let closed =
            format!("http://{}/mcp", tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap());
        let refused = Plain::for_url(&closed.parse().unwrap()).unwrap();
        assert!(matches!(post(&refused).await, Err(PlainError::Connect)));
    }

    #[tokio::test]
    async fn only_a_plain_http_upstream_goes_through_hyper() {
        assert!(Plain::for_url(&"https://up.example/mcp".parse().unwrap()).is_none());
        assert!(Plain::for_url(&"http://user:secret@127.0.0.1:9/mcp".parse().unwrap()).is_none());
        let proxied =
            ["ALL_PROXY", "all_proxy", "HTTP_PROXY", "http_proxy"].iter().any(|v| std::env::var_os(v).is_some());
        assert_eq!(Plain::for_url(&"http://127.0.0.1:9/mcp".parse().unwrap()).is_some(), !proxied);
    }

    #[tokio::test]
    async fn answers_are_read_up_to_their_bound_whatever_their_length_says() {
        let full =
            |b: &'static [u8]| http::Response::new(Full::new(Bytes::from_static(b)).map_err(BoxError::from).boxed());
        assert_eq!(read_bounded(full(b"{}"), 64).await.unwrap(), b"{}");
        let too_long = read_bounded(full(&[b'x'; 65]), 64).await;
        assert!(matches!(too_long, Err(StreamableHttpError::ResponseBodyTooLarge { max_size: 64 })));
        // A body of unknown length (chunked) is cut at the bound as it comes.
        let chunks = futures::stream::iter(
            (0..10).map(|_| Ok::<_, BoxError>(http_body::Frame::data(Bytes::from_static(&[b'y'; 10])))),
        );
        let chunked = http::Response::new(BodyExt::boxed(http_body_util::StreamBody::new(chunks)));
        assert!(matches!(read_bounded(chunked, 64).await, Err(StreamableHttpError::ResponseBodyTooLarge { .. })));
        // hyper's failure mid-body reads as a lost connection (an I/O error), as reqwest's did.
        assert!(matches!(body_error(Box::new(std::io::Error::other("reset"))), StreamableHttpError::Io(_)));
    }

    #[test]
    fn media_types_and_challenge_scopes_read_as_rmcp_reads_them() {
        assert!(media_type_is(b"application/json; charset=utf-8", JSON_MIME_TYPE));
        assert!(media_type_is(b"Text/Event-Stream", EVENT_STREAM_MIME_TYPE));
        assert!(!media_type_is(b"application/jsonx", JSON_MIME_TYPE));
        assert_eq!(scope_of(r#"Bearer error="insufficient_scope", scope="mcp admin""#).as_deref(), Some("mcp admin"));
        assert_eq!(scope_of("Bearer scope=mcp, realm=x").as_deref(), Some("mcp"));
        assert_eq!(scope_of("Bearer realm=x"), None);
    }
}
