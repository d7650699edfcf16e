//! The tool API for library users: a [`Tool`] is a name, a description, a
//! JSON Schema 2020-12 `inputSchema`, a [`TaskPolicy`] and a [`ToolHandler`].
//!
//! A handler is the same code whether it runs inside the request (sync) or
//! as a task on a worker: the [`ToolContext`] it gets knows which.

use std::{fmt, panic::AssertUnwindSafe, sync::Arc};

use futures::FutureExt;

use serde_json::{Map, Value, json};

use crate::{
    context::ToolContext,
    output::{ToolError, ToolOutput},
};

/// Whether a tool call becomes a task (SEP-2663 is server-directed: the
/// server decides per call, from the request's own capabilities).
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum TaskPolicy {
    /// Always runs inside the request.
    #[default]
    Sync,
    /// A task when the client declared the Tasks extension, else sync.
    Optional,
    /// A task; clients without the extension get `-32021`.
    Required,
    /// Adaptive: for a client that declared Tasks, a task from the start,
    /// answered with its result as a plain call if it ends within this
    /// long, else with the task handle (also at once when it asks for input);
    /// other clients get the plain result, as with `Optional`. Fast calls
    /// stay plain, slow ones never time the client out.
    After(std::time::Duration),
    /// Decided per call from the call itself (arguments, `inputResponses`…).
    Dynamic(Arc<dyn Fn(&PolicyInput<'_>) -> TaskPolicy + Send + Sync>),
}

impl fmt::Debug for TaskPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TaskPolicy::Sync => f.write_str("Sync"),
            TaskPolicy::Optional => f.write_str("Optional"),
            TaskPolicy::Required => f.write_str("Required"),
            TaskPolicy::After(d) => write!(f, "After({d:?})"),
            TaskPolicy::Dynamic(_) => f.write_str("Dynamic(..)"),
        }
    }
}

/// What a [`TaskPolicy::Dynamic`] decision sees of the call.
#[derive(Debug)]
pub struct PolicyInput<'a> {
    /// The tool arguments.
    pub arguments: &'a Value,
    /// MRTR `inputResponses` carried by this call, if any.
    pub input_responses: Option<&'a Map<String, Value>>,
}

impl TaskPolicy {
    /// The static policy for this call (resolving `Dynamic`).
    pub fn resolve(&self, call: &PolicyInput<'_>) -> TaskPolicy {
        match self {
            TaskPolicy::Dynamic(f) => match f(call) {
                TaskPolicy::Dynamic(_) => TaskPolicy::Sync,
                p => p,
            },
            p => p.clone(),
        }
    }
}

/// A tool's implementation.
#[async_trait::async_trait]
pub trait ToolHandler: Send + Sync + 'static {
    /// Run the tool with validated `arguments`.
    async fn call(&self, ctx: ToolContext, arguments: Value) -> Result<ToolOutput, ToolError>;

    /// Refuse a call at the door, before it runs or a task is stored: the
    /// caller gets JSON-RPC `-32602` (invalid params) saying why. Checked
    /// after the caller's scopes, before the input schema (whose violations
    /// are `isError` results instead). For a rule of the server's own the
    /// schema cannot say, such as an argument the caller may not set
    /// (presa-gateway's pinned arguments). Default: every call passes.
    fn check_arguments(&self, _arguments: &Value) -> Result<(), ArgumentsRefused> {
        Ok(())
    }
}

/// Why a handler refuses a call's arguments at the door
/// ([`ToolHandler::check_arguments`]): the message the caller's `-32602` says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ArgumentsRefused(pub String);

/// Any async closure `Fn(ToolContext, Value) -> Future<Result<ToolOutput, ToolError>>` is a handler.
#[async_trait::async_trait]
impl<F, Fut> ToolHandler for F
where
    F: Fn(ToolContext, Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
{
    async fn call(&self, ctx: ToolContext, arguments: Value) -> Result<ToolOutput, ToolError> {
        self(ctx, arguments).await
    }
}

/// A registered tool.
#[derive(Clone)]
pub struct Tool {
    /// The descriptor sent in `tools/list` (`name`, `description`, `inputSchema`, …).
    pub descriptor: Value,
    /// When the call becomes a task.
    pub policy: TaskPolicy,
    /// The implementation.
    pub handler: Arc<dyn ToolHandler>,
    /// The OAuth scopes a caller needs to call it or act on its tasks
    /// (checked only when authentication is configured).
    pub scopes: Vec<String>,
    /// How its tasks' failed tries are tried again (`None`: the worker's
    /// default, `WorkerConfig::retry`).
    pub retry: Option<crate::retry::RetryPolicy>,
    /// How often it may be called across the cluster (`None`: no bound).
    pub rate: Option<crate::flow::ToolRate>,
    /// The circuit breaker on what it calls (`None`: none).
    pub breaker: Option<crate::tool_breaker::ToolBreaker>,
    /// How many of its runs may go on at once across the cluster (`None`: no bound).
    pub concurrency: Option<crate::concurrency::ToolConcurrency>,
}

impl fmt::Debug for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.name())
            .field("policy", &self.policy)
            .field("scopes", &self.scopes)
            .field("retry", &self.retry)
            .field("rate", &self.rate)
            .field("breaker", &self.breaker)
            .field("concurrency", &self.concurrency)
            .finish()
    }
}

impl Tool {
    /// A tool with an object `inputSchema`.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
        handler: impl ToolHandler,
    ) -> Self {
        Tool {
            descriptor: json!({ "name": name.into(), "description": description.into(), "inputSchema": input_schema }),
            policy: TaskPolicy::Sync,
            handler: Arc::new(handler),
            scopes: Vec::new(),
            retry: None,
            rate: None,
            breaker: None,
            concurrency: None,
        }
    }

    /// Put a circuit breaker on what it calls: after its failures within
    /// its window (transient errors, or `ToolContext::upstream_failed`) no
    /// call goes through it for a cool-down, across the cluster; a task
    /// waits meanwhile (no try counted), a call run inside its request is
    /// refused with a retryable `-32603` (HTTP 503) and `Retry-After`.
    pub fn breaker(mut self, breaker: crate::tool_breaker::ToolBreaker) -> Self {
        self.breaker = Some(breaker);
        self
    }

    /// Run at most `concurrency.limit` of it at once across the cluster: a
    /// task past it waits in line, in creation order (no try counted, no
    /// worker held), a call run inside its request waits up to
    /// `--permit-wait-ms`, then is refused with `-32023` and `Retry-After`.
    pub fn concurrency(mut self, concurrency: crate::concurrency::ToolConcurrency) -> Self {
        self.concurrency = Some(concurrency);
        self
    }

    /// Call it at most at `rate` across the cluster: a task past it waits
    /// its turn (no try counted), a call run inside its request is refused
    /// with `-32023` and `Retry-After`.
    pub fn rate(mut self, rate: crate::flow::ToolRate) -> Self {
        self.rate = Some(rate);
        self
    }

    /// Try its tasks' transient failures ([`ToolError::transient`]) again
    /// under `policy` instead of the worker's default.
    pub fn retry(mut self, policy: crate::retry::RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// Require these OAuth scopes to call the tool or act on its tasks
    /// (`403 insufficient_scope` otherwise, when authentication is on).
    pub fn scopes<S: Into<String>>(mut self, scopes: impl IntoIterator<Item = S>) -> Self {
        self.scopes = scopes.into_iter().map(Into::into).collect();
        self
    }

    /// Set the task policy.
    pub fn policy(mut self, policy: TaskPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Add a descriptor field (`title`, `annotations`, `outputSchema`…).
    pub fn with(mut self, key: &str, value: Value) -> Self {
        self.descriptor[key] = value;
        self
    }

    /// The tool name.
    pub fn name(&self) -> &str {
        self.descriptor["name"].as_str().unwrap_or_default()
    }

    /// The input schema.
    pub fn input_schema(&self) -> &Value {
        &self.descriptor["inputSchema"]
    }
}

/// Run `handler`, containing a panic: it becomes [`ToolError::Internal`]
/// (logged by whoever reports the error, never sent to the client), so a
/// buggy handler fails its call or task instead of a connection or a worker.
pub(crate) async fn run_handler(
    handler: &dyn ToolHandler,
    ctx: ToolContext,
    arguments: Value,
) -> Result<ToolOutput, ToolError> {
    match AssertUnwindSafe(handler.call(ctx, arguments)).catch_unwind().await {
        Ok(out) => out,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(ToString::to_string)
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string payload".into());
            Err(ToolError::Internal(format!("handler panicked: {what}")))
        }
    }
}
