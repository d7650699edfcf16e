//! The shapes a Tasks client handles: task snapshots (`DetailedTask`, as
//! returned by `tasks/get`, the `tools/call` task result and
//! `notifications/tasks`), their status (`presa-protocol`'s [`Status`]), and
//! the outcomes of `tools/call`.

use std::time::Duration;

use presa_protocol::{ResultType, Status};
use serde_json::{Map, Value};

/// One snapshot of a task, kept as the JSON the server sent (so nothing is
/// lost when it is printed), with typed accessors.
#[derive(Debug, Clone, PartialEq)]
pub struct Task(pub Value);

impl Task {
    /// A snapshot from a JSON object that has a `taskId` and a `status`.
    pub fn from_value(v: Value) -> Result<Task, crate::error::Error> {
        if v.get("taskId").and_then(Value::as_str).is_none() || v.get("status").and_then(Value::as_str).is_none() {
            return Err(crate::error::Error::Protocol(format!("not a task (no taskId or status): {v}")));
        }
        Ok(Task(v))
    }

    /// `taskId`.
    pub fn id(&self) -> &str {
        self.0["taskId"].as_str().unwrap_or_default()
    }

    /// `status` (an unknown status reads as `working`: not terminal, keep following).
    pub fn status(&self) -> Status {
        self.0["status"].as_str().and_then(Status::parse).unwrap_or(Status::Working)
    }

    /// `statusMessage`.
    pub fn status_message(&self) -> Option<&str> {
        self.0["statusMessage"].as_str()
    }

    /// `ttlMs`: how long after its creation the server keeps the task
    /// (`None`: absent or null, kept until deleted).
    pub fn ttl(&self) -> Option<Duration> {
        self.0["ttlMs"].as_u64().map(Duration::from_millis)
    }

    /// `pollIntervalMs` (1 s when absent), at least 100 ms.
    pub fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.0["pollIntervalMs"].as_u64().unwrap_or(1000).max(100))
    }

    /// `inputRequests`, when the task waits for input.
    pub fn input_requests(&self) -> Option<&Map<String, Value>> {
        self.0["inputRequests"].as_object().filter(|m| !m.is_empty())
    }

    /// `result` (the `CallToolResult` of a completed task).
    pub fn result(&self) -> Option<&Value> {
        self.0.get("result").filter(|r| !r.is_null())
    }

    /// `error` (the JSON-RPC error of a failed task).
    pub fn error(&self) -> Option<&Value> {
        self.0.get("error").filter(|r| !r.is_null())
    }

    /// The snapshot without `_meta` (the transport's bookkeeping), to tell
    /// whether two snapshots differ in substance.
    pub fn substance(&self) -> Value {
        let mut v = self.0.clone();
        if let Value::Object(m) = &mut v {
            m.remove("_meta");
            m.remove("resultType");
        }
        v
    }
}

/// What `tools/call` answered.
#[derive(Debug, Clone)]
pub enum CallOutcome {
    /// The `CallToolResult`, at once.
    Complete(Value),
    /// A task was created: follow it.
    Task(Task),
    /// MRTR: answer `input_requests` and send the same call again with
    /// `inputResponses` and this `request_state`.
    InputRequired {
        /// The questions, by key.
        input_requests: Map<String, Value>,
        /// Opaque state to send back unchanged.
        request_state: Option<Value>,
    },
}

impl CallOutcome {
    /// Classify a `tools/call` result by its `resultType`.
    pub fn from_result(result: Value) -> Result<CallOutcome, crate::error::Error> {
        match ResultType::of(&result) {
            Some(ResultType::Task) => Ok(CallOutcome::Task(Task::from_value(result)?)),
            Some(ResultType::InputRequired) => Ok(CallOutcome::InputRequired {
                input_requests: result["inputRequests"].as_object().cloned().unwrap_or_default(),
                request_state: result.get("requestState").filter(|s| !s.is_null()).cloned(),
            }),
            _ => Ok(CallOutcome::Complete(result)),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn classifies_call_results() {
        let t = CallOutcome::from_result(json!({ "resultType": "task", "taskId": "a", "status": "working" })).unwrap();
        assert!(matches!(t, CallOutcome::Task(ref t) if t.id() == "a" && t.status() == Status::Working));
        let i = CallOutcome::from_result(json!({ "resultType": "input_required",
            "inputRequests": { "k": {} }, "requestState": "s" }))
        .unwrap();
        assert!(
            matches!(i, CallOutcome::InputRequired { ref request_state, .. } if request_state == &Some(json!("s")))
        );
        let c = CallOutcome::from_result(json!({ "content": [] })).unwrap();
        assert!(matches!(c, CallOutcome::Complete(_)));
        assert!(CallOutcome::from_result(json!({ "resultType": "task" })).is_err());
    }

    #[test]
    fn substance_ignores_meta() {
        let a = Task(json!({ "taskId": "a", "status": "working", "_meta": { "x": 1 } }));
        let b = Task(json!({ "taskId": "a", "status": "working", "_meta": { "x": 2 } }));
        assert_eq!(a.substance(), b.substance());
        assert!(Status::Cancelled.is_terminal() && !Status::InputRequired.is_terminal());
    }
}
