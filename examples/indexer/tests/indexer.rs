//! The example server as its users run it: the `indexer` binary embedded
//! (a plain call answered by MRTR, and a task answered with `tasks/update`),
//! and as a cluster (`indexer` API pod + `indexer worker` on Redis).

use std::{path::Path, time::Duration};

use presa_testkit::{Client, Pod, TestRedis, free_port, tasks_caps};
use serde_json::{Value, json};

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_indexer"))
}

/// A small tree: three visible files (two `.txt`), one hidden.
fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temp dir");
    std::fs::write(dir.path().join("a.txt"), "alpha").unwrap();
    std::fs::write(dir.path().join("b.rs"), "fn main() {}\n").unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/c.txt"), "gamma gamma").unwrap();
    std::fs::write(dir.path().join(".hidden"), "secret").unwrap();
    dir
}

fn args(dir: &Path) -> Value {
    json!({ "path": dir.to_string_lossy(), "confirm_over": 1 })
}

fn check_report(report: &Value) {
    assert_eq!(report["files"], 3, "{report}");
    assert_eq!(report["bytes"], 5 + 13 + 11);
    assert_eq!(report["by_extension"]["txt"], json!({ "files": 2, "bytes": 16 }));
    assert_eq!(report["largest"][0], json!({ "path": "b.rs", "bytes": 13 }));
    assert_eq!(report["fingerprint"].as_str().map(str::len), Some(64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_plain_call_asks_by_mrtr() {
    let port = free_port();
    let _api = Pod::start("indexer", binary(), port, &[], &[]).await;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let dir = tree();
    let c = Client::new(&url, json!({ "elicitation": {} }));
    let first = c.call_tool("index_tree", args(dir.path())).await;
    assert_eq!(first["resultType"], "input_required", "{first}");
    let question = &first["inputRequests"]["proceed-hashing"];
    assert_eq!(question["params"]["requestedSchema"]["properties"]["proceed"]["type"], "boolean");
    let mut answered = json!({ "name": "index_tree", "arguments": args(dir.path()) });
    answered["inputResponses"] = json!({ "proceed-hashing": { "action": "accept", "content": { "proceed": true } } });
    let done = c.ok("tools/call", answered).await;
    check_report(&done["structuredContent"]);

    let bad = c.call_tool("index_tree", json!({ "path": dir.path().join("a.txt").to_string_lossy() })).await;
    assert_eq!(bad["isError"], true, "{bad}");
    let listed = c.ok("tools/list", json!({})).await;
    let tool = &listed["tools"][0];
    assert_eq!(tool["inputSchema"]["required"], json!(["path"]));
    assert_eq!(tool["outputSchema"]["properties"]["fingerprint"]["type"], "string");
}

/// As a task: parks on the question, resumes on `tasks/update`.
async fn run_as_task(c: &Client, dir: &Path) -> Value {
    let created = c.call_tool("index_tree", args(dir)).await;
    assert_eq!(created["resultType"], "task", "{created}");
    let id = created["taskId"].as_str().unwrap().to_string();
    let parked = c.wait_status(&id, "input_required").await;
    assert!(parked["inputRequests"]["proceed-hashing"].is_object(), "{parked}");
    let answer = json!({ "proceed-hashing": { "action": "accept", "content": { "proceed": true } } });
    c.ok("tasks/update", json!({ "taskId": id, "inputResponses": answer })).await;
    c.wait_task_for(&id, "completed", Duration::from_secs(20), |t| t["status"] == "completed").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_task_parks_and_resumes() {
    let port = free_port();
    let _api = Pod::start("indexer", binary(), port, &[], &[]).await;
    let dir = tree();
    let c = Client::new(format!("http://127.0.0.1:{port}/mcp"), tasks_caps());
    let done = run_as_task(&c, dir.path()).await;
    check_report(&done["result"]["structuredContent"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_api_and_worker_on_redis() {
    let redis = TestRedis::start().await;
    let prefix = presa_testkit::redis::unique_prefix();
    let redis_args = ["--redis-url", redis.url(), "--redis-prefix", prefix.as_str()];
    let port = free_port();
    let _api = Pod::start("indexer-api", binary(), port, &redis_args, &[]).await;
    let worker_args: Vec<&str> = ["worker"].into_iter().chain(redis_args).collect();
    let _worker = Pod::start("indexer-worker", binary(), free_port(), &worker_args, &[]).await;
    let dir = tree();
    let c = Client::new(format!("http://127.0.0.1:{port}/mcp"), tasks_caps());
    let done = run_as_task(&c, dir.path()).await;
    check_report(&done["result"]["structuredContent"]);
    assert_eq!(done["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "indexer");
}
