//! Wire projections of a [`Task`] (SEP-2663).
//!
//! - [`create_result`]: the flat `CreateTaskResult` (`resultType: "task"`),
//!   with no payload keys at all.
//! - [`detailed`]: the `DetailedTask` fields, with exactly the one payload
//!   the status allows: `inputRequests`, `result` or `error`.
//! - [`get_result`]: `tasks/get`'s result (`resultType: "complete"`).
//! - [`notification_params`]: `notifications/tasks` params for one subscription.
//!
//! `requestState`, `ttl`, `pollInterval` and the v1 `related-task` meta never appear.

use std::time::{Duration, UNIX_EPOCH};

use presa_protocol::meta::{RELATED_TASK_KEY, SUBSCRIPTION_ID_KEY};
use serde_json::{Map, Value, json};

use crate::{Status, Task};

/// An ISO 8601 UTC timestamp with milliseconds, e.g. `2026-11-30T12:00:00.123Z`.
pub fn iso8601(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

fn base(task: &Task) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("taskId".into(), json!(task.id.as_str()));
    m.insert("status".into(), json!(task.status.as_str()));
    if let Some(msg) = &task.status_message {
        m.insert("statusMessage".into(), json!(msg));
    }
    m.insert("createdAt".into(), json!(iso8601(task.created_at_ms)));
    m.insert("lastUpdatedAt".into(), json!(iso8601(task.updated_at_ms)));
    m.insert("ttlMs".into(), task.ttl_ms.map_or(Value::Null, Value::from));
    if let Some(p) = task.poll_interval_ms {
        m.insert("pollIntervalMs".into(), json!(p));
    }
    m
}

/// The `CreateTaskResult` for a freshly created task.
pub fn create_result(task: &Task) -> Map<String, Value> {
    let mut m = base(task);
    m.insert("resultType".into(), json!("task"));
    m
}

/// The `DetailedTask` fields for the task's current status.
pub fn detailed(task: &Task) -> Map<String, Value> {
    let mut m = base(task);
    match task.status {
        Status::InputRequired => {
            let reqs: Map<String, Value> = task.input_requests.clone().into_iter().collect();
            m.insert("inputRequests".into(), Value::Object(reqs));
        }
        Status::Completed => {
            let mut result = task.result.clone().unwrap_or_else(|| json!({"content": []}));
            if let Some(meta) = result.get_mut("_meta").and_then(Value::as_object_mut) {
                meta.remove(RELATED_TASK_KEY);
            }
            m.insert("result".into(), result);
        }
        Status::Failed => {
            let error = task.error.clone().unwrap_or_else(|| json!({"code": -32603, "message": "Internal error"}));
            m.insert("error".into(), error);
        }
        Status::Working | Status::Cancelled => {}
    }
    m
}

/// The result of `tasks/get`.
pub fn get_result(task: &Task) -> Map<String, Value> {
    let mut m = detailed(task);
    m.insert("resultType".into(), json!("complete"));
    m
}

/// `notifications/tasks` params: the DetailedTask tagged with the subscription id.
pub fn notification_params(task: &Task, subscription_id: &Value) -> Map<String, Value> {
    let mut m = detailed(task);
    m.insert("_meta".into(), json!({ SUBSCRIPTION_ID_KEY: subscription_id }));
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Event, NewTask, Scope, TaskId, Work, apply};
    use std::collections::BTreeMap;

    fn task() -> Task {
        Task::new(
            TaskId::from_random(3, [1; 16]),
            NewTask {
                scope: Scope::anonymous(),
                work: Work::default(),
                ttl_ms: Some(3_600_000),
                poll_interval_ms: Some(100),
                status_message: Some("Task accepted".into()),
            },
            1_764_504_000_123,
        )
    }

    const PAYLOADS: [&str; 3] = ["inputRequests", "result", "error"];

    #[test]
    fn create_result_is_flat_and_payload_free() {
        let m = create_result(&task());
        assert_eq!(m["resultType"], "task");
        assert_eq!(m["status"], "working");
        assert_eq!(m["ttlMs"], 3_600_000);
        assert_eq!(m["createdAt"], "2025-11-30T12:00:00.123Z");
        for k in PAYLOADS.iter().chain(&["task", "requestState", "ttl", "pollInterval"]) {
            assert!(!m.contains_key(*k), "{k}");
        }
    }

    #[test]
    fn null_ttl_is_present_as_null() {
        let mut t = task();
        t.ttl_ms = None;
        assert_eq!(create_result(&t)["ttlMs"], Value::Null);
    }

    #[test]
    fn each_status_carries_exactly_its_payload() {
        let req = BTreeMap::from([("k".to_string(), json!({"method": "elicitation/create", "params": {}}))]);
        let cases = [
            (Event::SetMessage("x".into()), None),
            (Event::RequestInput(req), Some("inputRequests")),
            (
                Event::Complete(json!({"content": [{"type": "text", "text": "ok"}], "_meta": {RELATED_TASK_KEY: {}}})),
                Some("result"),
            ),
            (Event::Fail(json!({"code": -32603, "message": "Internal error"})), Some("error")),
            (Event::Cancel, None),
        ];
        for (event, payload) in cases {
            let t = apply(&task(), &event, 1_764_504_001_000).unwrap().unwrap();
            let g = get_result(&t);
            assert_eq!(g["resultType"], "complete");
            assert!(!g.contains_key("requestState"));
            for k in PAYLOADS {
                assert_eq!(g.contains_key(k), payload == Some(k), "{:?} {k}", t.status);
            }
            if t.status == Status::Completed {
                assert!(g["result"]["_meta"].get(RELATED_TASK_KEY).is_none());
            }
            let n = notification_params(&t, &json!(42));
            assert_eq!(n["_meta"][SUBSCRIPTION_ID_KEY], 42);
            assert!(!n.contains_key("resultType"));
        }
    }
}
