//! The MCP dispatcher: one admitted request in, one [`Reply`] out.
//!
//! [`Server::handle`] matches the request's [`Method`] and hands it to the
//! module of its family, which parses its own params and runs it:
//!
//! - `discover`: `server/discover`.
//! - `catalog`: the lists, `resources/read` and `completion/complete`.
//! - `call`: `tools/call` and `prompts/get`: one prologue (lookup,
//!   `requestState`, binding), schema validation and the task policy, then a
//!   handler run in the request (MRTR) or a task created for the workers.
//! - `tasks`: `tasks/get`, `tasks/update`, `tasks/cancel`.
//! - `listen`: `subscriptions/listen`, a stream of notifications.
//!
//! The dispatcher knows MCP but not HTTP: the transport admits the request
//! (headers, `_meta`, the caller) and turns the [`Reply`] into JSON or SSE.

mod admit;
mod call;
mod catalog;
mod discover;
mod listen;
pub use listen::StreamPermit;
mod tasks;
#[cfg(test)]
mod tests;

use std::{pin::Pin, sync::Arc};

use futures::Stream;
use presa_protocol::{
    Method,
    jsonrpc::{ErrorObject, RequestId},
    meta::RequestMeta,
    result::into_value,
    written::Written,
};
use presa_store::{Caller, EventBus, Limit, TaskStore};
use presa_telemetry::metrics;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::{
    catalog::Catalog,
    config::ServerConfig,
    context::Outbox,
    core::Core,
    endpoint::{Endpoint, Endpoints},
    error::ServerError,
    pools::ScopedPool,
    state::StateCodec,
};

/// A stream of complete JSON-RPC messages (notifications, then maybe a response).
pub type MessageStream = Pin<Box<dyn Stream<Item = Value> + Send>>;

/// What [`Server::handle`] produces.
pub enum Reply {
    /// A result object (the transport wraps it in a response).
    Result(Value),
    /// A result object already written as JSON text, the same bytes as the
    /// [`Reply::Result`] it stands for (a task's `CreateTaskResult` and its
    /// `tasks/get` result: the transport copies it into the response).
    Written(Written),
    /// A JSON-RPC error.
    Error(ErrorObject),
    /// A long-lived stream (`subscriptions/listen`): messages to send as SSE.
    Stream(MessageStream),
    /// The caller lacks scopes the call needs: the transport refuses it
    /// (HTTP 403 with a `WWW-Authenticate: Bearer error="insufficient_scope"`
    /// challenge naming `scopes`), with `error` as the body.
    InsufficientScope {
        /// The JSON-RPC error sent (`-32600`, its `data` lists the scopes too).
        error: ErrorObject,
        /// Every scope the call needs.
        scopes: Vec<String>,
    },
}

impl Reply {
    /// The reply for a failed request: [`Reply::InsufficientScope`] for a
    /// missing scope, else [`Reply::Error`].
    pub fn failure(e: &ServerError) -> Self {
        match e {
            ServerError::InsufficientScope { scopes } => {
                Reply::InsufficientScope { error: e.to_error_object(), scopes: scopes.clone() }
            }
            e => Reply::Error(e.to_error_object()),
        }
    }
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Result(v) => f.debug_tuple("Result").field(v).finish(),
            Reply::Written(w) => f.debug_tuple("Written").field(w).finish(),
            Reply::Error(e) => f.debug_tuple("Error").field(e).finish(),
            Reply::Stream(_) => f.write_str("Stream(..)"),
            Reply::InsufficientScope { error, scopes } => {
                f.debug_struct("InsufficientScope").field("error", error).field("scopes", scopes).finish()
            }
        }
    }
}

/// A request the transport admitted: its envelope parsed, its method known,
/// its `_meta` and headers validated, its caller authenticated; with the
/// channels of its reply.
#[derive(Debug, Clone)]
pub struct Admitted {
    /// The JSON-RPC id, echoed in the reply.
    pub id: RequestId,
    /// The method.
    pub method: Method,
    /// The params object (`_meta` included).
    pub params: Map<String, Value>,
    /// The validated `_meta`.
    pub meta: RequestMeta,
    /// Who is calling: its scope owns the tasks this request creates, and may
    /// act only on those; its granted scopes gate tools that need some. Its
    /// `scope.endpoint` is the endpoint the request came to (`None`: the
    /// root), set by the transport, and by [`Server::handle`] on an endpoint.
    pub caller: Caller,
    /// Where the notifications a handler streams go (the request's own response).
    pub outbox: Outbox,
    /// Fires when the client goes away: the request's work stops.
    pub cancel: CancellationToken,
    /// The tool a `tools/call` names, looked up once by whoever admitted
    /// the request ([`Catalog::tool_ref`](crate::Catalog::tool_ref): the
    /// HTTP layer does, for its span and `Mcp-Param-*` checks); `None`
    /// when it did not, and the dispatcher looks it up.
    pub tool: Option<crate::catalog::ToolRef>,
}

struct Inner {
    core: Core,
    state: StateCodec,
    shutdown: CancellationToken,
    /// Open long-lived streams (`max_listen_streams`, `max_listen_streams_per_scope`).
    listeners: Arc<ScopedPool>,
    /// Handlers running in their request (`max_inflight_calls`, `max_inflight_calls_per_scope`).
    calls: Arc<ScopedPool>,
}

/// The dispatcher. Cheap to clone; share one per process.
///
/// With virtual servers ([`Server::with_endpoints`]), [`Server::endpoint`]
/// is the same dispatcher bound to one of them: its catalog, identity and
/// required scopes, and its tasks.
#[derive(Clone)]
pub struct Server {
    inner: Arc<Inner>,
    endpoints: Arc<Endpoints>,
    /// The endpoint this dispatcher serves (`None`: the root, `/mcp`).
    endpoint: Option<Arc<Endpoint>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let endpoint = self.endpoint.as_ref().map(|e| e.name.as_str());
        f.debug_struct("Server").field("core", &self.inner.core).field("endpoint", &endpoint).finish_non_exhaustive()
    }
}

impl Server {
    /// A dispatcher over `core`, sealing MRTR `requestState` with `state`
    /// (every API process of a deployment must share its key).
    pub fn new(core: Core, state: StateCodec) -> Self {
        let config = core.config();
        let listeners = ScopedPool::new(
            config.max_listen_streams,
            config.max_listen_streams_per_scope,
            (Limit::MaxListenStreams, Limit::MaxListenStreamsPerScope),
        );
        let calls = ScopedPool::new(
            config.max_inflight_calls,
            config.max_inflight_calls_per_scope,
            (Limit::MaxInflightCalls, Limit::MaxInflightCallsPerScope),
        );
        let inner = Inner { core, state, shutdown: CancellationToken::new(), listeners, calls };
        Server { inner: Arc::new(inner), endpoints: Arc::default(), endpoint: None }
    }

    /// Also serve `endpoints` (before the server is shared: clones made
    /// earlier do not see them).
    pub fn with_endpoints(mut self, endpoints: Endpoints) -> Self {
        self.endpoints = Arc::new(endpoints);
        self
    }

    /// The endpoints this server serves besides the root.
    pub fn endpoints(&self) -> &Endpoints {
        &self.endpoints
    }

    /// This dispatcher bound to the endpoint called `name`, if it serves one.
    pub fn endpoint(&self, name: &str) -> Option<Server> {
        let endpoint = self.endpoints.get(name)?.clone();
        Some(Server { inner: self.inner.clone(), endpoints: self.endpoints.clone(), endpoint: Some(endpoint) })
    }

    /// The name of the endpoint this dispatcher is bound to (`None`: the root).
    pub fn endpoint_name(&self) -> Option<&str> {
        self.endpoint.as_deref().map(|e| e.name.as_str())
    }

    /// What this server shares with its workers.
    pub fn core(&self) -> &Core {
        &self.inner.core
    }

    /// The settings.
    pub fn config(&self) -> &ServerConfig {
        self.inner.core.config()
    }

    /// The codec sealing MRTR `requestState` with the deployment's shared
    /// key; the transport seals legacy session ids with it too.
    pub fn state_codec(&self) -> &StateCodec {
        &self.inner.state
    }

    /// The catalog this dispatcher serves: its endpoint's, else the whole one.
    pub fn catalog(&self) -> Arc<Catalog> {
        match &self.endpoint {
            Some(e) => e.catalog.load(),
            None => self.inner.core.catalog(),
        }
    }

    fn store(&self) -> &Arc<dyn TaskStore> {
        self.inner.core.store()
    }

    fn bus(&self) -> &Arc<dyn EventBus> {
        self.inner.core.bus()
    }

    /// Cancelled when the server shuts down: listen streams then end with
    /// their graceful-closure result.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.inner.shutdown.clone()
    }

    /// Open `subscriptions/listen` streams right now.
    pub fn active_listeners(&self) -> usize {
        self.inner.listeners.open()
    }

    /// Handlers running in their request right now (tool calls and prompts
    /// that are not tasks).
    pub fn inflight_calls(&self) -> usize {
        self.inner.calls.open()
    }

    /// Bring the gauges `/metrics` reports up to date: open listen streams
    /// and, with `queue`, the work queue of every partition.
    pub async fn refresh_metrics(&self, queue: bool) {
        metrics::listen_streams(self.active_listeners());
        if queue {
            self.inner.core.refresh_queue_metrics().await;
        }
    }

    /// Handle one admitted request. On an endpoint, the caller must hold its
    /// required scopes, and its scope is the endpoint's (set here when the
    /// transport did not), so the tasks it creates and reads are that endpoint's.
    pub async fn handle(&self, req: &Admitted) -> Reply {
        let bound;
        let req = match &self.endpoint {
            None => req,
            Some(e) => {
                if !req.caller.missing(&e.scopes).is_empty() {
                    return Reply::failure(&ServerError::InsufficientScope { scopes: e.scopes.clone() });
                }
                if req.caller.scope.endpoint.as_deref() == Some(e.name.as_str()) {
                    req
                } else {
                    let mut r = req.clone();
                    r.caller.scope.endpoint = Some(e.name.clone());
                    bound = r;
                    &bound
                }
            }
        };
        let result = match req.method {
            Method::Discover => Ok(into_value(self.discover()).into()),
            Method::ToolsList => Ok(into_value(self.list_tools()).into()),
            Method::ResourcesList => Ok(into_value(self.list_resources()).into()),
            Method::ResourceTemplatesList => Ok(into_value(self.list_resource_templates()).into()),
            Method::PromptsList => Ok(into_value(self.list_prompts()).into()),
            Method::ResourcesRead => self.read_resource(req).await.map(|r| into_value(r).into()),
            Method::Complete => self.complete(req).await.map(|r| into_value(r).into()),
            Method::ToolsCall => self.call_tool(req).await,
            Method::PromptsGet => self.get_prompt(req).await.map(Answer::from),
            Method::TasksGet | Method::TasksUpdate | Method::TasksCancel => self.task_method(req).await,
            Method::Listen => {
                return match self.listen(req).await {
                    Ok(s) => Reply::Stream(s),
                    Err(e) => Reply::failure(&e),
                };
            }
        };
        match result {
            Ok(Answer::Value(v)) => Reply::Result(self.identify(self.inner.core.envelope(v))),
            // The root's text as it is; an endpoint renames its serverInfo in the value.
            Ok(Answer::Written(w)) if self.endpoint.is_none() => Reply::Written(self.inner.core.envelope_written(w)),
            Ok(Answer::Written(w)) => match w.to_value() {
                Ok(v) => Reply::Result(self.identify(self.inner.core.envelope(v))),
                Err(e) => Reply::failure(&ServerError::Internal(format!("a written result does not parse: {e}"))),
            },
            Err(e) => Reply::failure(&e),
        }
    }

    /// A result as this endpoint's: its `serverInfo` names the endpoint (and
    /// its title); the root's is left as the core made it.
    fn identify(&self, mut result: Value) -> Value {
        if let Some(e) = &self.endpoint
            && let Some(info) = result.get_mut("_meta").and_then(|m| m.get_mut(presa_protocol::meta::SERVER_INFO_KEY))
        {
            info["name"] = Value::String(e.name.clone());
            if let Some(title) = &e.title {
                info["title"] = Value::String(title.clone());
            }
        }
        result
    }
}

/// What a method answers, before [`Core::envelope`]: a value, or an
/// object presa wrote as JSON text itself (a task's `CreateTaskResult` and
/// `tasks/get` result), which skips building and serialising the value.
enum Answer {
    /// A result value.
    Value(Value),
    /// A result object written as text, with its `resultType` and no `_meta`.
    Written(Written),
}

impl From<Value> for Answer {
    fn from(v: Value) -> Self {
        Answer::Value(v)
    }
}

/// `-32602` with `msg`.
fn invalid(msg: &str) -> ServerError {
    ServerError::InvalidParams(msg.to_string())
}

/// The string param `key`, or `-32602`.
fn required_str<'a>(p: &'a Map<String, Value>, key: &str) -> Result<&'a str, ServerError> {
    p.get(key).and_then(Value::as_str).ok_or_else(|| invalid(&format!("{key} must be a string")))
}

/// `inputResponses` must be an object whose keys are non-empty and whose values are objects.
fn input_responses(v: &Value) -> Result<Map<String, Value>, ServerError> {
    match v {
        Value::Object(m) if m.iter().all(|(k, v)| !k.is_empty() && v.is_object()) => Ok(m.clone()),
        _ => Err(invalid("inputResponses must be an object whose values are objects")),
    }
}

impl Server {
    /// Refuse `caller` unless it holds every scope tool `name` needs (a tool
    /// the catalog does not know needs none: its own error comes later).
    pub(super) fn authorize_tool(&self, caller: &Caller, name: &str) -> Result<(), ServerError> {
        let catalog = self.catalog();
        let Some(tool) = catalog.tool(name) else {
            return Ok(());
        };
        authorize_scopes(caller, tool.scopes())
    }
}

/// Refuse `caller` unless it holds every one of `scopes` (a tool's).
fn authorize_scopes(caller: &Caller, scopes: &[String]) -> Result<(), ServerError> {
    if caller.missing(scopes).is_empty() {
        Ok(())
    } else {
        Err(ServerError::InsufficientScope { scopes: scopes.to_vec() })
    }
}
