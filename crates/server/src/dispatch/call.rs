//! `tools/call` and `prompts/get`: the calls that run a handler.
//!
//! Both share one prologue ([`Server::prepare`]): the call is bound to its
//! caller, method, name and arguments (what an MRTR `requestState` is sealed
//! to), its `inputResponses` are validated and its `requestState` opened.
//! A tool call is then offered to its handler's `check_arguments` (a refusal is
//! `-32602`), checked against the tool's input schema (a violation
//! is a tool error, `isError: true`) and its [`TaskPolicy`] decides: a task
//! stored for the workers ([`Server::create_task`]), or the handler run here,
//! inside the request, where it may answer with an `InputRequiredResult`.
//!
//! A handler run in its request takes a place in the in-request call pool
//! (`max_inflight_calls`, `max_inflight_calls_per_scope`: past either a
//! retryable `-32023` with `retryAfterMs`) and runs at most `call_timeout`:
//! past it, it is cancelled and the call fails saying so
//! ([`Server::in_request`], which resource reads and completions share).

use std::collections::BTreeMap;

use futures::StreamExt;
use presa_protocol::{
    ResultType,
    meta::RequestMeta,
    result::{InputRequiredResult, into_value},
};
use presa_store::{Created, Idempotency, Limit, NewTask, StoreError, util::now_ms};
use presa_tasks::{Status, Task, Work, json_len, wire};
use presa_telemetry::{metrics, propagation};
use serde_json::{Map, Value, json};

use super::{Admitted, Answer, Server, authorize_scopes, input_responses, invalid, required_str};
use crate::{
    context::{Invocation, ToolContext},
    core::Outcome,
    error::INFLIGHT_RETRY_AFTER_MS,
    error::ServerError,
    output::ToolOutput,
    prompt::AsTool,
    state::{Binding, digest},
    store_io::store_call,
    tool::{PolicyInput, TaskPolicy, ToolHandler},
};

/// A call after the shared prologue.
struct Prepared {
    /// The arguments the handler runs with.
    arguments: Value,
    /// What the handler sees besides its arguments.
    invocation: Invocation,
}

impl Server {
    pub(super) async fn call_tool(&self, req: &Admitted) -> Result<Answer, ServerError> {
        let p = &req.params;
        let name = required_str(p, "name")?;
        let arguments = match p.get("arguments") {
            None | Some(Value::Null) => json!({}),
            Some(v @ Value::Object(_)) => v.clone(),
            Some(_) => return Err(invalid("arguments must be an object")),
        };
        let tool = match &req.tool {
            Some(tool) => tool.clone(),
            None => self.catalog().tool_ref(name).ok_or_else(|| invalid(&format!("Unknown tool: {name}")))?,
        };
        authorize_scopes(&req.caller, tool.scopes())?;
        let call = self.prepare(req, name, arguments)?;
        tool.handler().check_arguments(&call.arguments).map_err(|why| invalid(&why.0))?;
        if let Err(problems) = tool.validate(&call.arguments) {
            return Ok(ToolOutput::error(format!("Invalid arguments for tool {name}: {problems}")).into_value().into());
        }
        let decision =
            PolicyInput { arguments: &call.arguments, input_responses: call.invocation.input_responses.as_ref() };
        match (tool.policy().resolve(&decision), req.meta.declares_tasks()) {
            (TaskPolicy::Required, false) => Err(ServerError::tasks_required()),
            (TaskPolicy::Required | TaskPolicy::Optional, true) => {
                // Written as text: no `Map` built, serialised and dropped.
                Ok(Answer::Written(wire::create_result_written(&self.create_task(req, name, call).await?)))
            }
            (TaskPolicy::After(wait), true) => {
                let created = self.create_task(req, name, call).await?;
                self.result_within(&created, wait).await.map(Answer::from)
            }
            _ => {
                let (_permit, guard) = self.admit_in_request(&tool, name, req, &call.arguments).await?;
                self.run_in_request(tool.handler(), name, call, req, guard).await.map(Answer::from)
            }
        }
    }

    pub(super) async fn get_prompt(&self, req: &Admitted) -> Result<Value, ServerError> {
        let p = &req.params;
        let name = required_str(p, "name")?;
        let catalog = self.catalog();
        let prompt = catalog.prompt(name).ok_or_else(|| invalid(&format!("Unknown prompt: {name}")))?;
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
        let call = self.prepare(req, name, Value::Object(arguments))?;
        self.run_in_request(&AsTool(prompt.handler.clone()), name, call, req, None).await
    }

    /// The prologue of every handler call: bind it, validate its
    /// `inputResponses`, open its `requestState` (tampered, expired or
    /// rebound state is `-32602`).
    fn prepare(&self, req: &Admitted, name: &str, arguments: Value) -> Result<Prepared, ServerError> {
        let p = &req.params;
        let input_responses = p.get("inputResponses").map(input_responses).transpose()?;
        let request_state = match p.get("requestState") {
            None => None,
            Some(Value::String(token)) => Some(
                self.inner
                    .state
                    .open(token, &bind(req, name), now_ms())
                    .map_err(|e| ServerError::InvalidParams(e.to_string()))?,
            ),
            Some(_) => return Err(invalid("requestState must be a string")),
        };
        let invocation = Invocation {
            client_capabilities: req.meta.client_capabilities.clone(),
            input_responses,
            request_state,
            caller: req.caller.clone(),
            checkpoint: None,
        };
        Ok(Prepared { arguments, invocation })
    }

    /// Run a handler inside its request, within the in-request call pool
    /// and `call_timeout` (telling `guard`'s circuit breaker how it ended),
    /// and shape its outcome: a result, an `InputRequiredResult` with sealed
    /// state, or an error.
    async fn run_in_request(
        &self,
        handler: &dyn ToolHandler,
        name: &str,
        call: Prepared,
        req: &Admitted,
        guard: Option<crate::breaker::Guard>,
    ) -> Result<Value, ServerError> {
        let Prepared { arguments, invocation } = call;
        let meta = &req.meta;
        // Its own token: cancelled with the request, or at the deadline.
        let cancel = req.cancel.child_token();
        let ctx = ToolContext::for_request(
            invocation,
            req.outbox.clone(),
            meta.progress_token.clone(),
            meta.log_level,
            cancel.clone(),
            self.bus().clone(),
        );
        let output =
            self.in_request(req, crate::breaker::run(guard, handler, ctx, arguments)).await.inspect_err(|e| {
                if matches!(e, ServerError::CallTimeout(_)) {
                    cancel.cancel();
                }
            })?;
        match Outcome::from(output) {
            Outcome::Result(v) => Ok(v),
            Outcome::NeedsInput { requests, state } => self.input_required(requests, state, &bind(req, name), meta),
            Outcome::Error(e) => Err(ServerError::Rpc(e)),
            Outcome::Failed(cause) => Err(ServerError::Internal(cause)),
            Outcome::Cancelled => Err(ServerError::Internal("request cancelled".into())),
            Outcome::Retry(retry) => Err(ServerError::Rpc(retry.error_object())),
        }
    }

    /// Run `work` the way everything run inside its request runs (a handler,
    /// a resource read, a completion): with a place in the in-request call
    /// pool (`max_inflight_calls`, `max_inflight_calls_per_scope`: past either
    /// a retryable `-32023` with `retryAfterMs`, and `work` is never started)
    /// and for at most `call_timeout` (past it `work` is dropped and the call
    /// fails naming the limit).
    pub(super) async fn in_request<T>(&self, req: &Admitted, work: impl Future<Output = T>) -> Result<T, ServerError> {
        let _place = self
            .inner
            .calls
            .admit(&req.caller.scope)
            .map_err(|limit| ServerError::RateLimited { limit, retry_after_ms: INFLIGHT_RETRY_AFTER_MS })?;
        match self.config().call_timeout {
            None => Ok(work.await),
            Some(limit) => tokio::time::timeout(limit, work).await.map_err(|_| {
                metrics::refusal(Limit::CallTimeout);
                ServerError::CallTimeout(limit)
            }),
        }
    }

    /// An MRTR `InputRequiredResult`, asking only what the client declared it can answer.
    fn input_required(
        &self,
        requests: BTreeMap<String, Value>,
        state: Option<Value>,
        binding: &Binding,
        meta: &RequestMeta,
    ) -> Result<Value, ServerError> {
        let missing: Map<String, Value> = requests
            .values()
            .filter_map(|r| capability_for(r["method"].as_str().unwrap_or_default()))
            .filter(|cap| !meta.has_capability(cap))
            .map(|cap| (cap.to_string(), json!({})))
            .collect();
        if !missing.is_empty() {
            return Err(ServerError::MissingCapability(Value::Object(missing)));
        }
        let request_state = state.map(|state| {
            let expires = now_ms() + self.config().request_state_ttl.as_millis() as u64;
            self.inner.state.seal(binding, state, expires)
        });
        let r = InputRequiredResult { result_type: ResultType::InputRequired, input_requests: requests, request_state };
        if !r.is_valid() {
            return Err(ServerError::Internal("an InputRequiredResult needs inputRequests or requestState".into()));
        }
        Ok(into_value(r))
    }

    /// [`TaskPolicy::After`]: the task's outcome as a plain call's if it
    /// ends within `wait`, else (or as soon as it asks for input) `created`,
    /// its `CreateTaskResult`.
    async fn result_within(&self, created: &Task, wait: std::time::Duration) -> Result<Value, ServerError> {
        let id = created.id.clone();
        let deadline = tokio::time::Instant::now() + wait;
        let ids = std::slice::from_ref(&id);
        // Watch first, then read: an outcome committed in between is not missed.
        let Ok(mut changes) = store_call("watch", self.store().watch(ids)).await else {
            return Ok(created_result(created));
        };
        let mut task = store_call("load", self.store().load(&id)).await?;
        loop {
            match &task {
                Some(t) if t.status == Status::Completed => {
                    let mut detailed = wire::detailed(t);
                    return Ok(detailed.remove("result").unwrap_or_else(|| json!({ "content": [] })));
                }
                Some(t) if t.status == Status::Failed => {
                    let error = t.error.clone().and_then(|e| serde_json::from_value(e).ok());
                    return Err(error.map_or_else(|| ServerError::Internal("task failed".into()), ServerError::Rpc));
                }
                // Waiting for input (only its handle can answer it), cancelled, or gone.
                Some(t) if t.status != Status::Working => return Ok(created_result(created)),
                None => return Ok(created_result(created)),
                Some(_) => {}
            }
            tokio::select! {
                next = changes.next() => match next {
                    Some(t) => task = Some(t),
                    None => return Ok(created_result(created)),
                },
                _ = tokio::time::sleep_until(deadline) => {
                    // One last read: the watch is best effort.
                    let last = store_call("load", self.store().load(&id)).await?;
                    return match last {
                        Some(t) if t.status.is_terminal() && t.status != Status::Cancelled => {
                            Box::pin(self.result_within(created, std::time::Duration::ZERO)).await
                        }
                        _ => Ok(created_result(created)),
                    };
                }
            }
        }
    }

    /// Store a task and its work item for the workers; answer with its `CreateTaskResult`.
    async fn create_task(&self, req: &Admitted, tool: &str, call: Prepared) -> Result<Task, ServerError> {
        let cfg = self.config();
        let Invocation { client_capabilities, input_responses, .. } = call.invocation;
        let size = json_len(&call.arguments) + input_responses.as_ref().map_or(0, json_len);
        if size > cfg.max_task_input_bytes {
            metrics::refusal(Limit::MaxTaskInputBytes);
            return Err(invalid(&format!("Task input is larger than {} bytes", cfg.max_task_input_bytes)));
        }
        let work = Work {
            tool: tool.to_string(),
            arguments: call.arguments,
            client_capabilities,
            input_responses,
            // The worker's span joins this request's trace.
            trace: propagation::for_continuation(RequestMeta::object_of(&req.params).unwrap_or(&Map::new())),
            caller: Some(req.caller.clone()),
            replay_of: None,
            worker: None,
        };
        // Arguments, client capabilities and answers: what the record starts with.
        let size = json_len(&work);
        if size > cfg.max_task_bytes {
            metrics::refusal(Limit::MaxTaskBytes);
            return Err(invalid(&format!("Task is larger than {} bytes (max_task_bytes)", cfg.max_task_bytes)));
        }
        let idempotency = idempotency_key(&req.meta, cfg.max_idempotency_key_bytes)?
            .map(|key| Idempotency::new(&req.caller.scope, key, &work));
        let new = NewTask {
            scope: req.caller.scope.clone(),
            work,
            ttl_ms: cfg.task_ttl_ms,
            poll_interval_ms: cfg.poll_interval_ms,
            status_message: Some("Task accepted".into()),
        };
        let limits = cfg.create_limits();
        let created = self.store().create_idempotent(new, limits, idempotency.as_ref());
        let created = store_call("create", created).await.inspect_err(|e| match e {
            StoreError::Capacity { limit } => metrics::refusal(*limit),
            StoreError::QueueFull => metrics::refusal(Limit::MaxQueued),
            StoreError::KeyReused => metrics::refusal(Limit::IdempotencyKeyReused),
            _ => {}
        })?;
        let task = match created {
            Created::New(task) => {
                metrics::task_created();
                self.core().count_created();
                tracing::debug!(task_id = %task.id, tool, "task created");
                task
            }
            Created::Replayed(task) => {
                tracing::info!(task_id = %task.id, tool, "idempotent retry: the task its key made before");
                task
            }
        };
        tracing::Span::current().record("presa.task.id", tracing::field::display(&task.id));
        Ok(task)
    }
}

/// What a `requestState` of `req`, a call of `name`, is bound to: its
/// caller's principal, its method and a digest of `{"name", "arguments"}`
/// (the arguments as the request has them, absent or null read as `{}`).
/// Made only when a state is opened or sealed: most calls do neither (a call
/// that creates a task never seals one), and the digest (a canonical
/// re-encoding and SHA-256) was several percent of an API pod's CPU.
fn bind(req: &Admitted, name: &str) -> Binding {
    let empty = Value::Object(Map::new());
    let arguments = match req.params.get("arguments") {
        None | Some(Value::Null) => &empty,
        Some(v) => v,
    };
    let mut call = Map::new();
    call.insert("name".into(), Value::String(name.into()));
    call.insert("arguments".into(), arguments.clone());
    Binding {
        principal: req.caller.scope.key(),
        method: req.method.as_str().to_string(),
        digest: digest(&Value::Object(call)),
    }
}

/// The `CreateTaskResult` that answers the call that created `task`.
fn created_result(task: &Task) -> Value {
    Value::Object(wire::create_result(task))
}

/// The idempotency key a task-creating call carries in `_meta` (the HTTP
/// layer copies `Idempotency-Key` there): 1 to `max` bytes of printable
/// ASCII, else -32602.
fn idempotency_key(meta: &RequestMeta, max: usize) -> Result<Option<&str>, ServerError> {
    let Some(key) = &meta.idempotency_key else {
        return Ok(None);
    };
    match key.as_str() {
        Some(k) if !k.is_empty() && k.len() <= max && k.bytes().all(|b| (0x20..=0x7e).contains(&b)) => Ok(Some(k)),
        _ => {
            metrics::refusal(Limit::MaxIdempotencyKeyBytes);
            Err(invalid(&format!(
                "The idempotency key must be a string of 1 to {max} printable ASCII characters (max_idempotency_key_bytes)"
            )))
        }
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
