//! The tool API for library users: a [`Tool`] is a name, a description, a
//! JSON Schema 2020-12 `inputSchema`, a [`TaskPolicy`] and a [`ToolHandler`].
//!
//! A handler is the same code whether it runs inside the request (sync) or
//! as a task on a worker: the [`ToolContext`] it gets knows which.

use std::{collections::BTreeMap, fmt, panic::AssertUnwindSafe, sync::Arc};

use futures::FutureExt;

use presa_protocol::{ResultType, jsonrpc::ErrorObject};
use serde_json::{Map, Value, json};

use crate::context::ToolContext;

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

/// What a handler returns.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutput {
    /// A `CallToolResult` (`content`, optional `structuredContent`, `isError`).
    Complete(Value),
    /// MRTR: ask the client for input and retry (sync calls only). `state`
    /// is signed into `requestState` and handed back on the retry.
    InputRequired {
        /// The input requests, by key.
        requests: BTreeMap<String, Value>,
        /// Opaque tool state to get back on the retry.
        state: Option<Value>,
    },
}

impl ToolOutput {
    /// A result with one text item.
    pub fn text(text: impl Into<String>) -> Self {
        ToolOutput::Complete(json!({ "content": [{ "type": "text", "text": text.into() }] }))
    }

    /// A tool-level error: `isError: true` with one text item. Tasks end `completed`.
    pub fn error(text: impl Into<String>) -> Self {
        ToolOutput::Complete(json!({ "content": [{ "type": "text", "text": text.into() }], "isError": true }))
    }

    /// A result from a `content` array.
    pub fn content(content: Value) -> Self {
        ToolOutput::Complete(json!({ "content": content }))
    }

    /// The output as a JSON value (`InputRequired` becomes its wire shape without state).
    pub fn into_value(self) -> Value {
        match self {
            ToolOutput::Complete(v) => v,
            ToolOutput::InputRequired { requests, .. } => {
                json!({ "resultType": ResultType::InputRequired, "inputRequests": requests })
            }
        }
    }
}

/// Why a handler did not produce an output.
///
/// Any `std::error::Error + Send + Sync + 'static` converts into
/// [`ToolError::Internal`] (its message is logged, never sent), so `?` on an
/// `io::Error` or a client library's error works in a handler. For that
/// reason `ToolError` itself is not a `std::error::Error` (like `anyhow::Error`).
#[derive(Debug)]
#[non_exhaustive]
pub enum ToolError {
    /// A JSON-RPC error to send as is (e.g. `-32602`, `-32021`). In a task it
    /// ends the task `failed` with this error.
    Rpc(ErrorObject),
    /// The handler failed. Sent as `-32603 Internal error`; the cause is logged only.
    Internal(String),
    /// The work was cancelled (the task was cancelled or the request went away).
    Cancelled,
    /// The handler needs input it does not have yet (raised by
    /// [`ToolContext::input`] in a sync call; becomes an `InputRequiredResult`).
    NeedInput(BTreeMap<String, Value>),
    /// The try failed in a way worth trying again ([`ToolError::transient`],
    /// [`ToolError::retry_after`]): a task is tried again under its tool's
    /// [`RetryPolicy`](crate::RetryPolicy) (the work waits, holding no
    /// worker); a sync call answers a retryable error.
    Retry(crate::Retry),
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolError::Rpc(e) => f.write_str(&e.message),
            ToolError::Internal(cause) => f.write_str(cause),
            ToolError::Cancelled => f.write_str("cancelled"),
            ToolError::NeedInput(_) => f.write_str("input required"),
            ToolError::Retry(r) => write!(f, "worth trying again: {r}"),
        }
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for ToolError {
    fn from(e: E) -> Self {
        ToolError::Internal(e.to_string())
    }
}

impl ToolError {
    /// An internal failure with a cause to log.
    pub fn internal(cause: impl fmt::Display) -> Self {
        ToolError::Internal(cause.to_string())
    }

    /// `-32602 Invalid params` with `message` (sent to the client as is).
    pub fn invalid_params(message: impl Into<String>) -> Self {
        ToolError::Rpc(ErrorObject::new(presa_protocol::codes::INVALID_PARAMS, message))
    }
}

/// A tool's implementation.
#[async_trait::async_trait]
pub trait ToolHandler: Send + Sync + 'static {
    /// Run the tool with validated `arguments`.
    async fn call(&self, ctx: ToolContext, arguments: Value) -> Result<ToolOutput, ToolError>;
}

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
    pub retry: Option<crate::RetryPolicy>,
    /// How often it may be called across the cluster (`None`: no bound).
    pub rate: Option<crate::ToolRate>,
    /// How many of its runs may go on at once across the cluster (`None`: no bound).
    pub concurrency: Option<crate::ToolConcurrency>,
}

impl fmt::Debug for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.name())
            .field("policy", &self.policy)
            .field("scopes", &self.scopes)
            .field("retry", &self.retry)
            .field("rate", &self.rate)
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
            concurrency: None,
        }
    }

    /// Run at most `concurrency.limit` of it at once across the cluster: a
    /// task past it waits in line, in creation order (no try counted, no
    /// worker held), a call run inside its request waits up to
    /// `--permit-wait-ms`, then is refused with `-32023` and `Retry-After`.
    pub fn concurrency(mut self, concurrency: crate::ToolConcurrency) -> Self {
        self.concurrency = Some(concurrency);
        self
    }

    /// Call it at most at `rate` across the cluster: a task past it waits
    /// its turn (no try counted), a call run inside its request is refused
    /// with `-32023` and `Retry-After`.
    pub fn rate(mut self, rate: crate::ToolRate) -> Self {
        self.rate = Some(rate);
        self
    }

    /// Try its tasks' transient failures ([`ToolError::transient`]) again
    /// under `policy` instead of the worker's default.
    pub fn retry(mut self, policy: crate::RetryPolicy) -> Self {
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
