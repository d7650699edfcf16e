//! Between rmcp's model (what the gateway speaks with an upstream, in
//! `upstream`) and presa's (what it serves, `presa-server`'s catalog and
//! tool outputs, `presa-protocol`'s vocabulary): every conversion the
//! gateway makes, typed, in this one module. Elsewhere the gateway builds
//! rmcp requests with rmcp's constructors and never goes through JSON.
//!
//! What still crosses as JSON does so here, and only where one side holds
//! JSON on purpose: presa's catalog keeps descriptors, resource contents,
//! completions and prompt messages as JSON; a caller's answer to an
//! upstream's question arrives as the JSON the caller sent; a tool's
//! arguments are the JSON presa validated against its `inputSchema`.

// Logging is deprecated in 2026-07-28 (SEP-2577); the 2025-11-25 servers the gateway fronts still log.
#![allow(deprecated)]

use presa_protocol::{Status, TASKS_EXTENSION, meta::LogLevel};
use presa_server::{ToolError, ToolOutput, prompt::PromptOutput};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, CompleteRequestParams, CompleteResult, ErrorCode,
    GetPromptRequestParams, GetPromptResult, GetTaskResult, InputRequests, JsonObject, LoggingLevel,
    ReadResourceResult, ServerCapabilities, TaskPayload, TaskStatus,
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Map, Value, json};

/// `value` as JSON; `null` if it cannot be (rmcp's model types always can).
pub(crate) fn to_json(value: &impl Serialize) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// An rmcp type from JSON presa holds.
fn from_json<T: DeserializeOwned>(value: Value) -> Result<T, serde_json::Error> {
    serde_json::from_value(value)
}

/// Listed items (tools, prompts, resources, templates) as the descriptors presa's catalog keeps.
pub(crate) fn descriptors<T: Serialize>(items: Vec<T>) -> Vec<Value> {
    items.iter().map(to_json).collect()
}

/// What an upstream says it offers, from its capabilities (`None`: it sent none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Offers {
    pub(crate) tools: bool,
    pub(crate) prompts: bool,
    pub(crate) resources: bool,
    pub(crate) completions: bool,
}

impl Offers {
    pub(crate) fn of(capabilities: Option<&ServerCapabilities>) -> Offers {
        capabilities.map_or_else(Offers::default, |c| Offers {
            tools: c.tools.is_some(),
            prompts: c.prompts.is_some(),
            resources: c.resources.is_some(),
            completions: c.completions.is_some(),
        })
    }
}

/// What the gateway tells an upstream it can do as a client: every question
/// is passed on to presa's caller, and an upstream that speaks Tasks may
/// answer with a task, which the gateway follows.
pub(crate) fn client_capabilities() -> ClientCapabilities {
    from_json(json!({
        "elicitation": {}, "sampling": {}, "roots": {},
        "extensions": { TASKS_EXTENSION: {} },
    }))
    .unwrap_or_default()
}

/// A caller's answer to an upstream's question (`what`: elicitation, sampling, roots) as rmcp's result.
pub(crate) fn client_answer<T: DeserializeOwned>(answer: Value, what: &str) -> Result<T, rmcp::ErrorData> {
    from_json(answer).map_err(|e| {
        rmcp::ErrorData::new(ErrorCode::INVALID_PARAMS, format!("the client's {what} answer is malformed: {e}"), None)
    })
}

/// An upstream's log level as presa's.
pub(crate) fn log_level(level: LoggingLevel) -> LogLevel {
    match level {
        LoggingLevel::Debug => LogLevel::Debug,
        LoggingLevel::Info => LogLevel::Info,
        LoggingLevel::Notice => LogLevel::Notice,
        LoggingLevel::Warning => LogLevel::Warning,
        LoggingLevel::Error => LogLevel::Error,
        LoggingLevel::Critical => LogLevel::Critical,
        LoggingLevel::Alert => LogLevel::Alert,
        LoggingLevel::Emergency => LogLevel::Emergency,
    }
}

/// A 2026-07-28 upstream's `inputRequests` as presa input requests by the upstream's keys.
pub(crate) fn input_requests(requests: Option<&InputRequests>) -> Map<String, Value> {
    requests.iter().flat_map(|r| r.iter()).map(|(k, v)| (k.clone(), to_json(v))).collect()
}

/// The answers of an MRTR round, to send with the retried call.
#[derive(Debug, Clone, Default)]
pub(crate) struct Retry {
    /// The caller's answers by the upstream's keys.
    pub(crate) input_responses: Map<String, Value>,
    /// The upstream's `requestState`, sent back unchanged.
    pub(crate) request_state: Option<String>,
}

/// `tools/call` params: the tool's upstream name, the arguments presa
/// validated, a retry's answers, and `_meta` (when not empty). Arguments
/// that are not an object (nor absent) are refused.
pub(crate) fn call_params(
    name: &str,
    arguments: Value,
    retry: Option<&Retry>,
    meta: Map<String, Value>,
) -> Result<CallToolRequestParams, serde_json::Error> {
    let mut params = CallToolRequestParams::new(name.to_string());
    // Moved in as they are (deserialising a map from a `Value` rebuilds it entry by entry).
    params.arguments = match arguments {
        Value::Object(map) => Some(map),
        other => call_arguments(&other)?.cloned(),
    };
    if let Some(retry) = retry {
        params.input_responses = Some(retry.input_responses.clone().into_iter().collect());
        params.request_state = retry.request_state.clone();
    }
    if !meta.is_empty() {
        params.meta = Some(meta.into());
    }
    Ok(params)
}

/// A call's arguments as `tools/call` sends them: an object, none for
/// `null`; anything else is refused, in serde's words for what was given.
pub(crate) fn call_arguments(arguments: &Value) -> Result<Option<&JsonObject>, serde_json::Error> {
    match arguments {
        Value::Object(map) => Ok(Some(map)),
        Value::Null => Ok(None),
        other => from_json::<Option<JsonObject>>(other.clone()).map(|_| None),
    }
}

/// A `CallToolResult` (or an upstream task's `result`) as presa returns it
/// (presa adds `resultType` itself).
pub(crate) fn tool_output(result: &impl Serialize) -> ToolOutput {
    let mut v = serde_json::to_value(result).unwrap_or_else(|_| json!({ "content": [] }));
    if let Some(o) = v.as_object_mut() {
        o.remove("resultType");
    }
    ToolOutput::Complete(v)
}

/// An upstream task's status in presa's vocabulary (a status this revision
/// of rmcp does not know reads as `working`: keep following).
pub(crate) fn status(status: TaskStatus) -> Status {
    match status {
        TaskStatus::InputRequired => Status::InputRequired,
        TaskStatus::Completed => Status::Completed,
        TaskStatus::Failed => Status::Failed,
        TaskStatus::Cancelled => Status::Cancelled,
        _ => Status::Working,
    }
}

/// What one `tasks/get` of an upstream task said, in presa's vocabulary.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TaskReport {
    pub(crate) status: Status,
    pub(crate) status_message: Option<String>,
    pub(crate) poll_interval_ms: Option<u64>,
    /// `inputRequests` (input_required, by the upstream's keys), `result`
    /// (completed) or `error` (failed); `null` for the other statuses.
    pub(crate) payload: Value,
}

impl From<GetTaskResult> for TaskReport {
    fn from(got: GetTaskResult) -> TaskReport {
        let task = got.task;
        let payload = match task.payload {
            TaskPayload::InputRequired { input_requests: r } => Value::Object(input_requests(Some(&r))),
            TaskPayload::Completed { result } => Value::Object(result),
            TaskPayload::Failed { error } => Value::Object(error),
            _ => Value::Null,
        };
        TaskReport {
            status: status(task.task.status),
            status_message: task.task.status_message,
            poll_interval_ms: task.task.poll_interval_ms,
            payload,
        }
    }
}

/// `resources/read`'s answer as the `contents` presa's catalog returns.
pub(crate) fn read_contents(result: &ReadResourceResult) -> Value {
    to_json(&result.contents)
}

/// `completion/complete` params from the reference and argument presa's caller sent.
pub(crate) fn complete_params(reference: Value, argument: Value) -> Result<CompleteRequestParams, serde_json::Error> {
    from_json(json!({ "ref": reference, "argument": argument }))
}

/// `completion/complete`'s answer as the `completion` presa returns.
pub(crate) fn completion_info(result: &CompleteResult) -> Value {
    to_json(&result.completion)
}

/// `prompts/get` params: the upstream's name, the arguments when there are any.
pub(crate) fn prompt_params(name: &str, arguments: Value) -> GetPromptRequestParams {
    let params = GetPromptRequestParams::new(name);
    match arguments {
        Value::Object(a) if !a.is_empty() => params.with_arguments(a),
        _ => params,
    }
}

/// `prompts/get`'s answer as presa's prompt output.
pub(crate) fn prompt_output(result: &GetPromptResult) -> PromptOutput {
    PromptOutput::Messages { description: result.description.clone(), messages: descriptors(result.messages.clone()) }
}

/// A tool error for params that did not convert (`what` says which).
pub(crate) fn bad_params(what: &str, e: &serde_json::Error) -> ToolError {
    ToolError::invalid_params(format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use rmcp::model::{DetailedTask, Task};

    use super::*;

    #[test]
    fn upstream_task_statuses_are_presa_statuses() {
        let report = |payload| TaskReport::from(GetTaskResult::new(DetailedTask::new(Task::default(), payload)));
        let done = report(TaskPayload::Completed { result: Map::from_iter([("content".into(), json!([]))]) });
        assert_eq!((done.status, done.payload), (Status::Completed, json!({ "content": [] })));
        assert_eq!(report(TaskPayload::Working).status, Status::Working);
        assert_eq!(report(TaskPayload::Cancelled).payload, Value::Null);
        let failed = report(TaskPayload::Failed { error: Map::from_iter([("code".into(), json!(-1))]) });
        assert_eq!((failed.status, failed.payload["code"].clone()), (Status::Failed, json!(-1)));
        assert_eq!(
            report(TaskPayload::InputRequired { input_requests: InputRequests::new() }).status,
            Status::InputRequired
        );
    }

    #[test]
    fn call_params_carry_a_retry_and_meta_and_refuse_non_object_arguments() {
        let retry =
            Retry { input_responses: Map::from_iter([("k".into(), json!(1))]), request_state: Some("s".into()) };
        let meta = Map::from_iter([("traceparent".into(), json!("00-x"))]);
        let p = to_json(&call_params("t", json!({ "a": 1 }), Some(&retry), meta).unwrap());
        assert_eq!(
            p,
            json!({ "name": "t", "arguments": { "a": 1 }, "inputResponses": { "k": 1 }, "requestState": "s",
                "_meta": { "traceparent": "00-x" } })
        );
        assert_eq!(to_json(&call_params("t", Value::Null, None, Map::new()).unwrap()), json!({ "name": "t" }));
        assert!(call_params("t", json!("x"), None, Map::new()).is_err());
        assert!(matches!(tool_output(&json!({ "content": [], "resultType": "complete" })),
            ToolOutput::Complete(v) if v == json!({ "content": [] })));
    }
}
