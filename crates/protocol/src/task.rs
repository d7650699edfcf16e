//! The words a result and a task are told apart by on the wire: a task's
//! [`Status`] (`tasks/get`, `notifications/tasks`, a `CreateTaskResult`)
//! and a result's [`ResultType`] (`resultType`, SEP-2322). The server, the
//! client, the transport and the gateway all use these two, never the strings.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A task's status on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The work is running (or queued to run).
    Working,
    /// The work is parked until the client answers `inputRequests` (with `tasks/update`).
    InputRequired,
    /// Finished with a result (which may carry `isError: true`). Terminal.
    Completed,
    /// Finished with a JSON-RPC error. Terminal.
    Failed,
    /// Cancelled by the client. Terminal.
    Cancelled,
}

impl Status {
    /// Every status, for exhaustive tests.
    pub const ALL: [Status; 5] =
        [Status::Working, Status::InputRequired, Status::Completed, Status::Failed, Status::Cancelled];

    /// Terminal statuses never change again.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Cancelled)
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Working => "working",
            Status::InputRequired => "input_required",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }

    /// Parse a wire name.
    pub fn parse(s: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What kind of result a request got (`resultType`): the answer itself, a
/// request for input (MRTR), or a task that will produce it. A result
/// without the field is `complete`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultType {
    /// The answer.
    Complete,
    /// The client must answer `inputRequests` and send the request again.
    InputRequired,
    /// A `CreateTaskResult`: follow the task.
    Task,
}

impl ResultType {
    /// Every result type, for exhaustive tests.
    pub const ALL: [ResultType; 3] = [ResultType::Complete, ResultType::InputRequired, ResultType::Task];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ResultType::Complete => "complete",
            ResultType::InputRequired => "input_required",
            ResultType::Task => "task",
        }
    }

    /// Parse a wire name.
    pub fn parse(s: &str) -> Option<ResultType> {
        ResultType::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// The result type of `result`: its `resultType`, `complete` when it has
    /// none; `None` for a name this revision does not know.
    pub fn of(result: &serde_json::Value) -> Option<ResultType> {
        match result.get("resultType") {
            None | Some(serde_json::Value::Null) => Some(ResultType::Complete),
            Some(t) => t.as_str().and_then(ResultType::parse),
        }
    }
}

impl fmt::Display for ResultType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<ResultType> for serde_json::Value {
    fn from(t: ResultType) -> Self {
        serde_json::Value::String(t.as_str().to_string())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn wire_names_round_trip_through_serde_and_parse() {
        for s in Status::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), json!(s.as_str()));
            assert_eq!(Status::parse(s.as_str()), Some(s));
            assert_eq!(s.to_string(), s.as_str());
        }
        for t in ResultType::ALL {
            assert_eq!(serde_json::to_value(t).unwrap(), json!(t.as_str()));
            assert_eq!(serde_json::Value::from(t), json!(t.as_str()));
            assert_eq!(ResultType::parse(t.as_str()), Some(t));
        }
        assert_eq!(Status::parse("done"), None);
        assert!(Status::Cancelled.is_terminal() && !Status::InputRequired.is_terminal());
    }

    #[test]
    fn a_result_without_a_result_type_is_complete() {
        assert_eq!(ResultType::of(&json!({ "content": [] })), Some(ResultType::Complete));
        assert_eq!(ResultType::of(&json!({ "resultType": "task" })), Some(ResultType::Task));
        assert_eq!(ResultType::of(&json!({ "resultType": "later" })), None);
    }
}
