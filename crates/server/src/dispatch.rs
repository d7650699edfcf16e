//! The MCP dispatcher: one stateless request in, one reply out.
//!
//! [`Server::handle`] routes a validated request to its method. It knows MCP
//! (methods, capabilities, MRTR, tasks, subscriptions) but not HTTP: the
//! transport validates headers and turns a [`Reply`] into JSON or SSE.

use std::{
    collections::{BTreeMap, HashMap},
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use futures::{Stream, StreamExt, future::ready, stream};
use presa_protocol::{
    PROTOCOL_VERSION, SUPPORTED_VERSIONS, TASKS_EXTENSION,
    jsonrpc::{self, ErrorObject, Request},
    meta::{RequestMeta, SERVER_INFO_KEY, SUBSCRIPTION_ID_KEY},
};
use presa_store::{CreateLimits, EventBus, NewTask, Scope, TaskId, TaskStore, Writer, util::now_ms};
use presa_tasks::{Event, Work, id::MAX_TASK_ID_LEN, wire};
use presa_telemetry::metrics;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::{
    catalog::Catalog,
    config::ServerConfig,
    context::{CallDetails, Outbox, ToolContext},
    error::ServerError,
    ops::{Trace, Updated, store_call, store_call_traced, update_task},
    state::{Binding, StateCodec, digest},
    tool::{CallInfo, TaskPolicy, ToolError, ToolHandler, ToolOutput, run_handler},
};

/// A stream of complete JSON-RPC messages (notifications, then maybe a response).
pub type MessageStream = Pin<Box<dyn Stream<Item = Value> + Send>>;

/// What [`Server::handle`] produces.
pub enum Reply {
    /// A result object (the transport wraps it in a response).
    Result(Value),
    /// A JSON-RPC error.
    Error(ErrorObject),
    /// A long-lived stream (`subscriptions/listen`): messages to send as SSE.
    Stream(MessageStream),
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Result(v) => f.debug_tuple("Result").field(v).finish(),
            Reply::Error(e) => f.debug_tuple("Error").field(e).finish(),
            Reply::Stream(_) => f.write_str("Stream(..)"),
        }
    }
}

/// Every method this server answers. Anything else is `-32601` (HTTP 404).
pub const METHODS: &[&str] = &[
    "server/discover",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "subscriptions/listen",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
];

/// The most task ids one `subscriptions/listen` may watch.
pub const MAX_LISTEN_TASK_IDS: usize = 100;

struct Inner {
    config: ServerConfig,
    catalog: Catalog,
    store: Arc<dyn TaskStore>,
    bus: Arc<dyn EventBus>,
    state: StateCodec,
    shutdown: CancellationToken,
    listeners: AtomicUsize,
}

/// The dispatcher. Cheap to clone; share one per process.
#[derive(Clone)]
pub struct Server {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("name", &self.inner.config.name).field("catalog", &self.inner.catalog).finish()
    }
}

fn ok<T>(v: T) -> Result<T, ServerError> {
    Ok(v)
}

impl Server {
    /// Assemble a server.
    pub fn new(
        config: ServerConfig,
        catalog: Catalog,
        store: Arc<dyn TaskStore>,
        bus: Arc<dyn EventBus>,
        state: StateCodec,
    ) -> Self {
        let inner = Inner {
            config,
            catalog,
            store,
            bus,
            state,
            shutdown: CancellationToken::new(),
            listeners: AtomicUsize::new(0),
        };
        Server { inner: Arc::new(inner) }
    }

    /// The settings.
    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    /// The catalog.
    pub fn catalog(&self) -> &Catalog {
        &self.inner.catalog
    }

    /// The task store.
    pub fn store(&self) -> &Arc<dyn TaskStore> {
        &self.inner.store
    }

    /// The event bus.
    pub fn bus(&self) -> &Arc<dyn EventBus> {
        &self.inner.bus
    }

    /// Cancelled when the server shuts down: listen streams then end with
    /// their graceful-closure result.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.inner.shutdown.clone()
    }

    /// Open `subscriptions/listen` streams right now.
    pub fn active_listeners(&self) -> usize {
        self.inner.listeners.load(Ordering::Relaxed)
    }

    /// Bring the gauges `/metrics` reports up to date: open listen streams
    /// and, with `queue`, the work queue of every partition (from the store;
    /// a failure is logged and leaves the previous values).
    pub async fn refresh_metrics(&self, queue: bool) {
        metrics::listen_streams(self.active_listeners());
        if !queue {
            return;
        }
        match store_call_traced(Trace::Debug, "work_stats", self.inner.store.work_stats()).await {
            Ok(stats) => {
                for p in stats {
                    let age = p.oldest_pending_age_ms.map(std::time::Duration::from_millis);
                    metrics::work_queue(p.partition, p.queued, p.pending, age);
                }
            }
            Err(e) => tracing::warn!(error = %e, "reading work queue statistics failed"),
        }
    }

    /// Whether `method` exists.
    pub fn knows_method(method: &str) -> bool {
        METHODS.contains(&method)
    }

    /// Whether `version` is supported.
    pub fn supports_version(version: &str) -> bool {
        SUPPORTED_VERSIONS.contains(&version)
    }

    /// `-32022` for an unsupported version.
    pub fn unsupported_version(requested: &str) -> ErrorObject {
        ErrorObject::with_data(
            presa_protocol::codes::UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version",
            json!({ "supported": SUPPORTED_VERSIONS, "requested": requested }),
        )
    }

    /// Handle one request whose `_meta` and headers were validated.
    /// `cancel` fires when the client goes away.
    pub async fn handle(
        &self,
        req: &Request,
        meta: &RequestMeta,
        scope: &Scope,
        outbox: Outbox,
        cancel: CancellationToken,
    ) -> Reply {
        let p = &req.params;
        let result = match req.method.as_str() {
            "server/discover" => ok(self.discover()),
            "tools/list" => ok(self.list("tools", self.catalog().tools().map(|t| t.tool.descriptor.clone()).collect())),
            "resources/list" => {
                ok(self.list("resources", self.catalog().resources().iter().map(|r| r.descriptor.clone()).collect()))
            }
            "resources/templates/list" => ok(self
                .list("resourceTemplates", self.catalog().templates().iter().map(|t| t.descriptor.clone()).collect())),
            "prompts/list" => {
                ok(self.list("prompts", self.catalog().prompts().iter().map(|p| p.descriptor.clone()).collect()))
            }
            "resources/read" => self.read_resource(p),
            "prompts/get" => self.get_prompt(req, meta, scope, outbox, cancel).await,
            "completion/complete" => self.complete(p),
            "tools/call" => self.call_tool(req, meta, scope, outbox, cancel).await,
            "tasks/get" | "tasks/update" | "tasks/cancel" => self.task_method(req, meta, scope).await,
            "subscriptions/listen" => {
                return match self.listen(req, meta, scope).await {
                    Ok(s) => Reply::Stream(s),
                    Err(e) => Reply::Error(e.to_error_object()),
                };
            }
            other => Err(ServerError::MethodNotFound(other.to_string())),
        };
        match result {
            Ok(v) => Reply::Result(self.envelope(v)),
            Err(e) => Reply::Error(e.to_error_object()),
        }
    }

    /// Add `resultType` (when missing) and `_meta.serverInfo` to a result.
    fn envelope(&self, mut result: Value) -> Value {
        if let Value::Object(m) = &mut result {
            m.entry("resultType").or_insert_with(|| json!("complete"));
            let meta = m.entry("_meta").or_insert_with(|| json!({}));
            if let Value::Object(meta) = meta {
                meta.insert(SERVER_INFO_KEY.into(), self.server_info());
            }
        }
        result
    }

    fn server_info(&self) -> Value {
        json!({ "name": self.inner.config.name, "version": self.inner.config.version })
    }

    fn discover(&self) -> Value {
        let mut r = json!({
            "supportedVersions": [PROTOCOL_VERSION],
            "capabilities": {
                "tools": { "listChanged": true },
                "prompts": { "listChanged": true },
                "resources": { "listChanged": true },
                "completions": {},
                "logging": {},
                "extensions": { TASKS_EXTENSION: {} },
            },
            "ttlMs": self.inner.config.list_ttl_ms,
            "cacheScope": "public",
        });
        if let Some(i) = &self.inner.config.instructions {
            r["instructions"] = json!(i);
        }
        r
    }

    fn list(&self, key: &str, items: Vec<Value>) -> Value {
        json!({ key: items, "ttlMs": self.inner.config.list_ttl_ms, "cacheScope": "public" })
    }

    fn read_resource(&self, p: &Map<String, Value>) -> Result<Value, ServerError> {
        let uri = required_str(p, "uri")?;
        match self.catalog().read(uri) {
            Some(Ok(contents)) => Ok(json!({
                "contents": contents, "ttlMs": self.inner.config.read_ttl_ms, "cacheScope": "private",
            })),
            Some(Err(e)) => Err(e),
            None => Err(ServerError::InvalidParamsData {
                message: format!("Resource not found: {uri}"),
                data: json!({ "uri": uri }),
            }),
        }
    }

    fn complete(&self, p: &Map<String, Value>) -> Result<Value, ServerError> {
        let r#ref = p.get("ref").filter(|v| v.is_object()).ok_or_else(|| invalid("ref must be an object"))?;
        let argument =
            p.get("argument").filter(|v| v.is_object()).ok_or_else(|| invalid("argument must be an object"))?;
        let mut completion = match self.catalog().completer() {
            Some(f) => f(r#ref, argument),
            None => json!({ "values": [] }),
        };
        if let Some(values) = completion.get_mut("values").and_then(Value::as_array_mut) {
            values.truncate(100);
        }
        Ok(json!({ "completion": completion }))
    }

    /// What a handler sees of an MRTR-capable request: its capabilities, its
    /// `inputResponses` (validated) and the state of its `requestState` (verified).
    fn call_details(
        &self,
        p: &Map<String, Value>,
        binding: &Binding,
        meta: &RequestMeta,
    ) -> Result<CallDetails, ServerError> {
        let input_responses = match p.get("inputResponses") {
            None => None,
            Some(v) => Some(input_responses(v)?),
        };
        let request_state = match p.get("requestState") {
            None => None,
            Some(Value::String(token)) => Some(
                self.inner
                    .state
                    .open(token, binding, now_ms())
                    .map_err(|e| ServerError::InvalidParams(e.to_string()))?,
            ),
            Some(_) => return Err(invalid("requestState must be a string")),
        };
        Ok(CallDetails { client_capabilities: meta.client_capabilities.clone(), input_responses, request_state })
    }

    /// Turn a handler output of a sync call into a result.
    fn sync_output(
        &self,
        out: Result<ToolOutput, ToolError>,
        binding: &Binding,
        meta: &RequestMeta,
    ) -> Result<Value, ServerError> {
        match out {
            Ok(ToolOutput::Complete(v)) => Ok(v),
            Ok(ToolOutput::InputRequired { requests, state }) => self.input_required(requests, state, binding, meta),
            Err(ToolError::NeedInput(requests)) => self.input_required(requests, None, binding, meta),
            Err(e) => Err(tool_error(e)),
        }
    }

    fn input_required(
        &self,
        requests: BTreeMap<String, Value>,
        state: Option<Value>,
        binding: &Binding,
        meta: &RequestMeta,
    ) -> Result<Value, ServerError> {
        // Never ask for input the client cannot give (MRTR: only declared capabilities).
        let missing: Map<String, Value> = requests
            .values()
            .filter_map(|r| capability_for(r["method"].as_str().unwrap_or_default()))
            .filter(|cap| !meta.has_capability(cap))
            .map(|cap| (cap.to_string(), json!({})))
            .collect();
        if !missing.is_empty() {
            return Err(ServerError::MissingCapability(Value::Object(missing)));
        }
        let mut r = json!({ "resultType": "input_required" });
        if !requests.is_empty() {
            r["inputRequests"] = json!(requests);
        }
        if let Some(state) = state {
            let expires = now_ms() + self.inner.config.request_state_ttl.as_millis() as u64;
            r["requestState"] = json!(self.inner.state.seal(binding, state, expires));
        }
        if r.get("inputRequests").is_none() && r.get("requestState").is_none() {
            return Err(ServerError::Internal("an InputRequiredResult needs inputRequests or requestState".into()));
        }
        Ok(r)
    }

    async fn get_prompt(
        &self,
        req: &Request,
        meta: &RequestMeta,
        scope: &Scope,
        outbox: Outbox,
        cancel: CancellationToken,
    ) -> Result<Value, ServerError> {
        let p = &req.params;
        let name = required_str(p, "name")?;
        let prompt = self.catalog().prompt(name).ok_or_else(|| invalid(&format!("Unknown prompt: {name}")))?;
        let arguments = match p.get("arguments") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(a)) if a.values().all(Value::is_string) => a.clone(),
            Some(_) => return Err(invalid("arguments must be an object of strings")),
        };
        for arg in prompt.descriptor["arguments"].as_array().into_iter().flatten() {
            let arg_name = arg["name"].as_str().unwrap_or_default();
            if arg["required"] == true && !arguments.contains_key(arg_name) {
                return Err(invalid(&format!("Missing required argument: {arg_name}")));
            }
        }
        let arguments = Value::Object(arguments);
        let binding = self.binding(scope, &req.method, &json!({ "name": name, "arguments": arguments }));
        let call = self.call_details(p, &binding, meta)?;
        self.run_in_request(prompt.handler.as_ref(), arguments, call, &binding, meta, outbox, cancel).await
    }

    /// Run a handler inside its request and shape its output (a result, an
    /// `InputRequiredResult` with sealed state, or an error).
    #[allow(clippy::too_many_arguments)]
    async fn run_in_request(
        &self,
        handler: &dyn ToolHandler,
        arguments: Value,
        call: CallDetails,
        binding: &Binding,
        meta: &RequestMeta,
        outbox: Outbox,
        cancel: CancellationToken,
    ) -> Result<Value, ServerError> {
        let ctx = ToolContext::for_request(
            call,
            outbox,
            meta.progress_token.clone(),
            meta.log_level,
            cancel,
            self.inner.bus.clone(),
        );
        let out = run_handler(handler, ctx, arguments).await;
        self.sync_output(out, binding, meta)
    }

    fn binding(&self, scope: &Scope, method: &str, salient: &Value) -> Binding {
        Binding { principal: scope.key(), method: method.to_string(), digest: digest(salient) }
    }

    async fn call_tool(
        &self,
        req: &Request,
        meta: &RequestMeta,
        scope: &Scope,
        outbox: Outbox,
        cancel: CancellationToken,
    ) -> Result<Value, ServerError> {
        let p = &req.params;
        let name = required_str(p, "name")?;
        let arguments = match p.get("arguments") {
            None | Some(Value::Null) => json!({}),
            Some(v @ Value::Object(_)) => v.clone(),
            Some(_) => return Err(invalid("arguments must be an object")),
        };
        let tool = self.catalog().tool(name).ok_or_else(|| invalid(&format!("Unknown tool: {name}")))?;
        let binding = self.binding(scope, &req.method, &json!({ "name": name, "arguments": arguments }));
        let call = self.call_details(p, &binding, meta)?;
        if let Err(problems) = tool.validate(&arguments) {
            return Ok(ToolOutput::error(format!("Invalid arguments for tool {name}: {problems}")).into_value());
        }
        let info = CallInfo { arguments: &arguments, input_responses: call.input_responses.as_ref() };
        let as_task = match (tool.tool.policy.resolve(&info), meta.declares_tasks()) {
            (TaskPolicy::Required, false) => return Err(ServerError::tasks_required()),
            (TaskPolicy::Required | TaskPolicy::Optional, true) => true,
            _ => false,
        };
        if as_task {
            return self.create_task(name, arguments, call.input_responses, meta, scope).await;
        }
        self.run_in_request(tool.tool.handler.as_ref(), arguments, call, &binding, meta, outbox, cancel).await
    }

    async fn create_task(
        &self,
        tool: &str,
        arguments: Value,
        request_inputs: Option<Map<String, Value>>,
        meta: &RequestMeta,
        scope: &Scope,
    ) -> Result<Value, ServerError> {
        let cfg = &self.inner.config;
        let request_inputs = request_inputs.map(Value::Object);
        let size = serde_json::to_vec(&arguments).map_or(0, |v| v.len())
            + request_inputs.as_ref().and_then(|v| serde_json::to_vec(v).ok()).map_or(0, |v| v.len());
        if size > cfg.max_task_input_bytes {
            return Err(invalid(&format!("Task input is larger than {} bytes", cfg.max_task_input_bytes)));
        }
        // The worker joins this trace as a child of the current (request)
        // span. Without an OpenTelemetry layer, pass the client's context on.
        let mut trace = presa_telemetry::propagation::inject_current();
        if trace.is_empty() {
            trace = presa_telemetry::propagation::KEYS
                .into_iter()
                .filter_map(|k| meta.raw.get(k).and_then(Value::as_str).map(|v| (k.to_string(), v.to_string())))
                .collect();
        }
        let work = Work {
            tool: tool.to_string(),
            arguments,
            client_capabilities: Value::Object(meta.client_capabilities.clone()),
            request_inputs,
            trace,
        };
        let new = NewTask {
            scope: scope.clone(),
            work,
            ttl_ms: cfg.task_ttl_ms,
            poll_interval_ms: cfg.poll_interval_ms,
            status_message: Some("Task accepted".into()),
        };
        let limits = CreateLimits { max_active_per_scope: cfg.max_active_tasks_per_scope };
        let task = store_call("create", self.inner.store.create(new, limits)).await?;
        metrics::task_created();
        tracing::Span::current().record("presa.task.id", tracing::field::display(&task.id));
        tracing::info!(task_id = %task.id, tool, "task created");
        Ok(Value::Object(wire::create_result(&task)))
    }

    async fn task_method(&self, req: &Request, meta: &RequestMeta, scope: &Scope) -> Result<Value, ServerError> {
        if !meta.declares_tasks() {
            return Err(ServerError::tasks_required());
        }
        let p = &req.params;
        let id = match p.get("taskId") {
            Some(Value::String(s)) if !s.is_empty() && s.len() <= MAX_TASK_ID_LEN => TaskId::from_wire(s.clone()),
            Some(Value::String(s)) if s.len() > MAX_TASK_ID_LEN => {
                return Err(invalid(&format!("taskId is longer than {MAX_TASK_ID_LEN} bytes")));
            }
            _ => return Err(invalid("A non-empty taskId is required")),
        };
        let responses = if req.method == "tasks/update" {
            let v = p.get("inputResponses").ok_or_else(|| invalid("tasks/update requires an inputResponses object"))?;
            let responses = input_responses(v)?;
            let size = serde_json::to_vec(v).map_or(0, |b| b.len());
            if size > self.inner.config.max_task_input_bytes {
                return Err(invalid(&format!(
                    "inputResponses is larger than {} bytes",
                    self.inner.config.max_task_input_bytes
                )));
            }
            Some(responses)
        } else {
            None
        };
        let unknown = || invalid("Unknown or inaccessible taskId");
        let task = store_call("get", self.inner.store.get(scope, &id)).await?.ok_or_else(unknown)?;
        let event = match (req.method.as_str(), responses) {
            ("tasks/get", _) => return Ok(Value::Object(wire::get_result(&task))),
            ("tasks/update", Some(r)) => Event::ProvideInput(r.into_iter().collect()),
            _ => Event::Cancel,
        };
        match update_task(self.inner.store.as_ref(), &id, Writer::Client, &event).await {
            Ok(Updated::Gone) => Err(unknown()),
            Ok(_) => Ok(json!({ "resultType": "complete" })),
            Err(crate::ops::UpdateError::Store(e)) => Err(e.into()),
            Err(e) => Err(ServerError::Internal(e.to_string())),
        }
    }

    async fn listen(&self, req: &Request, meta: &RequestMeta, scope: &Scope) -> Result<MessageStream, ServerError> {
        if self.active_listeners() >= self.inner.config.max_listen_streams {
            return Err(ServerError::Capacity("max_listen_streams"));
        }
        let filter = match req.params.get("notifications") {
            Some(Value::Object(f)) => f,
            _ => return Err(invalid("notifications must be an object")),
        };
        let flag = |k: &str| filter.get(k).and_then(Value::as_bool).unwrap_or(false);
        let mut honoured = Map::new();
        let mut methods = Vec::new();
        for (key, method) in [
            ("toolsListChanged", "notifications/tools/list_changed"),
            ("promptsListChanged", "notifications/prompts/list_changed"),
            ("resourcesListChanged", "notifications/resources/list_changed"),
        ] {
            if flag(key) {
                honoured.insert(key.into(), json!(true));
                methods.push(method);
            }
        }
        let mut accepted: Vec<TaskId> = Vec::new();
        if let Some(ids) = filter.get("taskIds") {
            if !meta.declares_tasks() {
                return Err(ServerError::tasks_required());
            }
            let ids = ids.as_array().ok_or_else(|| invalid("taskIds must be an array of strings"))?;
            if ids.len() > MAX_LISTEN_TASK_IDS {
                return Err(invalid(&format!("taskIds holds more than {MAX_LISTEN_TASK_IDS} ids")));
            }
            for id in ids {
                let id = id
                    .as_str()
                    .filter(|s| !s.is_empty() && s.len() <= MAX_TASK_ID_LEN)
                    .ok_or_else(|| invalid("taskIds must hold non-empty strings of at most 256 bytes"))?;
                let id = TaskId::from_wire(id);
                if !accepted.contains(&id) && store_call("get", self.inner.store.get(scope, &id)).await?.is_some() {
                    accepted.push(id);
                }
            }
            if !accepted.is_empty() {
                honoured.insert("taskIds".into(), json!(accepted));
            }
        }
        let sub_id = req.id.to_value();
        // Subscribe before acknowledging, so nothing published after the ack is missed.
        let events = self.inner.bus.subscribe().await?;
        let tasks = if accepted.is_empty() {
            stream::empty().boxed()
        } else {
            // Watch first, then read: each task's current state goes out right
            // after the ack, and every later change follows. Snapshots at or
            // below a revision already sent are dropped (duplicates, reordering).
            let changes = store_call("watch", self.inner.store.watch(&accepted)).await?;
            let mut current = Vec::with_capacity(accepted.len());
            for id in &accepted {
                current.extend(store_call("get", self.inner.store.get(scope, id)).await?);
            }
            let mut sent: HashMap<TaskId, u64> = HashMap::new();
            stream::iter(current)
                .chain(changes)
                .filter(move |t| {
                    let newer = sent.get(&t.id).is_none_or(|&r| t.revision > r);
                    if newer {
                        sent.insert(t.id.clone(), t.revision);
                    }
                    ready(newer)
                })
                .boxed()
        };
        let ack = jsonrpc::notification(
            "notifications/subscriptions/acknowledged",
            json!({ "_meta": { SUBSCRIPTION_ID_KEY: sub_id }, "notifications": honoured }),
        );
        let id = sub_id.clone();
        let list_changes = events.filter_map(move |method| {
            let wanted = methods.contains(&method.as_str());
            ready(wanted.then(|| jsonrpc::notification(&method, json!({ "_meta": { SUBSCRIPTION_ID_KEY: id } }))))
        });
        let id = sub_id.clone();
        let task_changes = tasks.map(move |task| {
            jsonrpc::notification("notifications/tasks", Value::Object(wire::notification_params(&task, &id)))
        });
        let closing = jsonrpc::success(
            &req.id,
            self.envelope(json!({ "resultType": "complete", "_meta": { SUBSCRIPTION_ID_KEY: sub_id } })),
        );
        let guard = ListenerGuard::new(self.inner.clone());
        let body = stream::select(list_changes, task_changes)
            .take_until(self.inner.shutdown.clone().cancelled_owned())
            .chain(stream::once(ready(closing)));
        let with_guard = stream::once(ready(ack)).chain(body).map(move |m| {
            let _keep = &guard;
            m
        });
        Ok(with_guard.boxed())
    }
}

/// Counts open listen streams while alive.
struct ListenerGuard(Arc<Inner>);

impl ListenerGuard {
    fn new(inner: Arc<Inner>) -> Self {
        inner.listeners.fetch_add(1, Ordering::Relaxed);
        ListenerGuard(inner)
    }
}

impl Drop for ListenerGuard {
    fn drop(&mut self) {
        self.0.listeners.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ToolOutput {
    /// The output as a JSON value (`InputRequired` becomes its wire shape without state).
    pub fn into_value(self) -> Value {
        match self {
            ToolOutput::Complete(v) => v,
            ToolOutput::InputRequired { requests, .. } => {
                json!({ "resultType": "input_required", "inputRequests": requests })
            }
        }
    }
}

/// The JSON-RPC error for a handler error (sync calls).
pub(crate) fn tool_error(e: ToolError) -> ServerError {
    match e {
        ToolError::Rpc(e) => ServerError::Rpc(e),
        ToolError::Internal(cause) => ServerError::Internal(cause),
        ToolError::Cancelled => ServerError::Internal("request cancelled".into()),
        ToolError::NeedInput(_) => ServerError::Internal("input requested outside MRTR".into()),
    }
}

/// The client capability an input request needs.
fn capability_for(method: &str) -> Option<&'static str> {
    match method {
        "elicitation/create" => Some("elicitation"),
        "sampling/createMessage" => Some("sampling"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

fn invalid(msg: &str) -> ServerError {
    ServerError::InvalidParams(msg.to_string())
}

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
