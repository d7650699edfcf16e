//! The cross-principal scenario every deployment shape must pass (embedded,
//! on Redis with worker pods): a task belongs to its creator alone.

use serde_json::{Value, json};

use crate::{Client, next_within};

/// `alice` creates a `deploy_release` task; `bob` gets "unknown" on
/// `tasks/get`, `tasks/update` and `tasks/cancel` and sees nothing of it on
/// `subscriptions/listen`; `alice` still can, and the handler (wherever it
/// runs) saw `alice` as its caller: the result names her `subject` and `tenant`.
pub async fn tasks_stay_with_their_principal(alice: &Client, bob: &Client, tenant: &str, subject: &str) {
    let created = alice.call_tool("deploy_release", json!({ "version": "7.7.7", "step_seconds": 0 })).await;
    assert_eq!(created["resultType"], "task", "{created}");
    let id = created["taskId"].as_str().expect("a task id").to_string();
    let unknown = |e: &Value| assert_eq!(e["message"], "Unknown or inaccessible taskId", "{e}");
    let answer = json!({ "approve-7.7.7": { "action": "accept", "content": { "approve": true } } });
    for (method, params) in [
        ("tasks/get", json!({ "taskId": id })),
        ("tasks/update", json!({ "taskId": id, "inputResponses": answer })),
        ("tasks/cancel", json!({ "taskId": id })),
    ] {
        let (status, e) = bob.err(method, params).await;
        assert_eq!(status, 400, "{method}: {e}");
        unknown(&e);
    }
    let (status, mut theirs) = bob.listen(json!({ "taskIds": [id] })).await;
    assert_eq!(status, 200);
    let ack = next_within(&mut theirs, 5).await;
    let accepted = ack["params"]["notifications"]["taskIds"].as_array().cloned().unwrap_or_default();
    assert!(accepted.is_empty(), "{ack}");

    let (status, mut mine) = alice.listen(json!({ "taskIds": [id] })).await;
    assert_eq!(status, 200);
    let ack = next_within(&mut mine, 5).await;
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([id]), "{ack}");
    alice.wait_status(&id, "input_required").await;
    alice.ok("tasks/update", json!({ "taskId": id, "inputResponses": answer })).await;
    let done = alice.wait_status(&id, "completed").await;
    let by = &done["result"]["structuredContent"]["requestedBy"];
    assert_eq!((by["tenant"].as_str(), by["subject"].as_str()), (Some(tenant), Some(subject)), "{done}");
    // Bob's stream never carried Alice's task.
    let quiet =
        tokio::time::timeout(std::time::Duration::from_millis(300), futures::StreamExt::next(&mut theirs)).await;
    assert!(quiet.is_err(), "bob's stream carried {quiet:?}");
}
