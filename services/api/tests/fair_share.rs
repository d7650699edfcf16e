//! Fair shares between principals over real HTTP against the embedded server:
//! one principal's parked tasks, open connections or quota never stop another's work.

use std::time::{Duration, Instant};

use presa_server::ServerConfig;
use presa_testkit::*;
use serde_json::{Value, json};

fn task_id(created: &Value) -> String {
    assert_eq!(created["resultType"], "task", "{created}");
    created["taskId"].as_str().expect("taskId").to_string()
}

/// A's 64 tasks parked on input (as many as the worker's default
/// concurrency) do not hold the worker: B's 0-second task completes at once.
#[tokio::test]
async fn parked_tasks_do_not_hold_worker_slots() {
    let srv = embedded(ServerConfig::default()).await;
    let a = Client::new(&srv.url, tasks_caps()).with_scope("a");
    let mut parked = Vec::new();
    for i in 0..64 {
        parked.push(task_id(&a.call_tool("confirm_delete", json!({ "filename": format!("f{i}") })).await));
    }
    for id in &parked {
        a.wait_status(id, "input_required").await;
    }
    let b = Client::new(&srv.url, tasks_caps()).with_scope("b");
    let started = Instant::now();
    let id = task_id(&b.call_tool("slow_compute", json!({ "seconds": 0, "label": "b" })).await);
    let done = b.wait_task_for(&id, "completed", Duration::from_secs(5), |t| t["status"] == "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "Completed b");
    assert!(started.elapsed() < Duration::from_secs(5), "B waited behind A's parked tasks");
    // The parked tasks still resume when answered.
    let answer = json!({ "confirm-delete": { "action": "accept", "content": { "confirm": true } } });
    a.ok("tasks/update", json!({ "taskId": parked[0], "inputResponses": answer })).await;
    assert_eq!(a.wait_status(&parked[0], "completed").await["result"]["content"][0]["text"], "Delete confirmed: true");
}
