//! Big results end to end on the embedded server with a local-directory
//! artifact store: a 5 MB result completes with a `resource_link` instead of
//! failing; its owner reads identical bytes back through `resources/read`
//! and the streamed download (whole and by range); anyone else is answered
//! exactly as for an unknown URI; a tool streams an artifact itself; and
//! once the task expires the sweeper removes its objects.

use std::time::Duration;

use base64::Engine;
use futures::StreamExt;
use presa_artifacts::ArtifactConfig;
use presa_server::{ServerConfig, artifacts::Artifacts};
use presa_testkit::*;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const FIVE_MB: u64 = 5 * 1000 * 1000;

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

async fn server(dir: &std::path::Path, config: ServerConfig) -> Embedded {
    let store = ArtifactConfig::new(format!("file://{}", dir.display())).open().expect("artifact store");
    embedded_artifacts(config, Artifacts::new(store).with_sweep_every(Duration::from_millis(200))).await
}

/// `GET` an artifact's download path (relative to the MCP URL) as `scope`, with an optional `Range`.
async fn download(mcp: &str, path: &str, scope: &str, range: Option<&str>) -> reqwest::Response {
    let url = reqwest::Url::parse(mcp).and_then(|u| u.join(path)).expect("download url");
    let mut req = reqwest::Client::new().get(url).header("x-test-scope", scope);
    if let Some(r) = range {
        req = req.header("range", r);
    }
    req.send().await.expect("download")
}

async fn files_under(dir: &std::path::Path) -> usize {
    walk(dir).len()
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() { out.extend(walk(&p)) } else { out.push(p) }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_five_megabyte_result_becomes_a_link_only_its_owner_reads() {
    let dir = tempfile::tempdir().expect("dir");
    let srv = server(dir.path(), ServerConfig::default()).await;
    let owner = Client::new(&srv.url, tasks_caps()).with_scope("alice");
    let id = task_id(&owner.call_tool("big_result", json!({ "bytes": FIVE_MB })).await);
    let done = owner.wait_status(&id, "completed").await;
    let content = done["result"]["content"].as_array().expect("content").clone();
    assert_eq!(content.len(), 1, "{content:?}");
    let link = &content[0];
    assert_eq!(link["type"], "resource_link", "{link}");
    assert_eq!(link["size"], FIVE_MB);
    assert_eq!(link["mimeType"], "text/plain; charset=utf-8");
    let expected = presa_demo::big::pattern(0, FIVE_MB as usize);
    assert_eq!(link["_meta"]["io.presa/sha256"], sha256(&expected));
    let uri = link["uri"].as_str().expect("uri").to_owned();
    assert!(uri.starts_with(&format!("presa://artifacts/{id}/")), "{uri}");

    // resources/read: the same bytes.
    let read = owner.ok("resources/read", json!({ "uri": uri })).await;
    let text = read["contents"][0]["text"].as_str().expect("text contents");
    assert_eq!(sha256(text.as_bytes()), sha256(&expected));

    // The streamed download: whole, then a range.
    let path = link["_meta"]["io.presa/download"].as_str().expect("download path");
    let whole = download(&srv.url, path, "alice", None).await;
    assert_eq!(whole.status(), 200);
    assert_eq!(whole.headers()["content-length"], FIVE_MB.to_string().as_str());
    assert_eq!(whole.headers()["content-disposition"], "attachment; filename=\"0\"");
    assert_eq!(whole.headers()["x-content-type-options"], "nosniff");
    let mut body = whole.bytes_stream();
    let mut hasher = Sha256::new();
    while let Some(chunk) = body.next().await {
        hasher.update(chunk.expect("chunk"));
    }
    assert_eq!(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect::<String>(), sha256(&expected));
    let part = download(&srv.url, path, "alice", Some("bytes=1000-1099")).await;
    assert_eq!(part.status(), 206);
    assert_eq!(part.headers()["content-range"], format!("bytes 1000-1099/{FIVE_MB}").as_str());
    assert_eq!(part.bytes().await.expect("range").as_ref(), &expected[1000..1100]);
    let past = download(&srv.url, path, "alice", Some(&format!("bytes={FIVE_MB}-"))).await;
    assert_eq!(past.status(), 416);
    assert_eq!(past.headers()["content-range"], format!("bytes */{FIVE_MB}").as_str());

    // Another principal: exactly what an unknown URI gets.
    let mallory = Client::new(&srv.url, tasks_caps()).with_scope("mallory");
    let (status, refused) = mallory.err("resources/read", json!({ "uri": uri })).await;
    let unknown_uri = format!("presa://artifacts/{id}/ffffffffffffffff/0");
    let (unknown_status, unknown) = owner.err("resources/read", json!({ "uri": unknown_uri })).await;
    assert_eq!(status, unknown_status);
    assert_eq!(refused["code"], -32602, "{refused}");
    assert_eq!(refused["code"], unknown["code"]);
    assert_eq!(
        refused["message"].as_str().map(|m| m.replace(&uri, "URI")),
        unknown["message"].as_str().map(|m| m.replace(&unknown_uri, "URI")),
    );
    let stolen = download(&srv.url, path, "mallory", None).await;
    let missing = download(&srv.url, &format!("artifacts/{id}/ffffffffffffffff/0"), "alice", None).await;
    assert_eq!((stolen.status(), missing.status()), (reqwest::StatusCode::NOT_FOUND, reqwest::StatusCode::NOT_FOUND));
    assert_eq!(stolen.text().await.ok(), missing.text().await.ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_and_structured_content_spill_and_stay_readable() {
    let dir = tempfile::tempdir().expect("dir");
    let srv = server(dir.path(), ServerConfig::default()).await;
    let c = Client::new(&srv.url, tasks_caps());
    let id = task_id(&c.call_tool("big_result", json!({ "bytes": 400_000, "kind": "image" })).await);
    let done = c.wait_status(&id, "completed").await;
    let link = &done["result"]["content"][0];
    assert_eq!((link["type"].as_str(), link["mimeType"].as_str()), (Some("resource_link"), Some("image/png")));
    let read = c.ok("resources/read", json!({ "uri": link["uri"] })).await;
    let blob = read["contents"][0]["blob"].as_str().expect("a binary artifact reads as a blob");
    let bytes = base64::engine::general_purpose::STANDARD.decode(blob).expect("base64");
    assert_eq!(bytes, presa_demo::big::pattern(0, 400_000));

    let id = task_id(&c.call_tool("big_result", json!({ "bytes": 600_000, "kind": "json" })).await);
    let done = c.wait_status(&id, "completed").await;
    let result = &done["result"];
    assert!(result.get("structuredContent").is_none(), "{result}");
    let structured_uri = &result["_meta"]["io.presa/structuredContent"];
    let links: Vec<&Value> = result["content"].as_array().expect("content").iter().collect();
    assert!(links.iter().all(|l| l["type"] == "resource_link"), "{links:?}");
    assert_eq!(&links[1]["uri"], structured_uri);
    let read = c.ok("resources/read", json!({ "uri": structured_uri })).await;
    let json: Value = serde_json::from_str(read["contents"][0]["text"].as_str().expect("json text")).expect("json");
    assert_eq!(json["data"].as_str().map(str::len), Some(600_000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_streams_its_own_artifact_and_it_goes_with_its_task() {
    let dir = tempfile::tempdir().expect("dir");
    let config = ServerConfig::default().with(|c| {
        c.task_ttl_ms = Some(3_000);
    });
    let srv = server(dir.path(), config).await;
    let c = Client::new(&srv.url, tasks_caps());
    let id = task_id(&c.call_tool("export_dataset", json!({ "mebibytes": 8 })).await);
    let done = c.wait_status(&id, "completed").await;
    let link = &done["result"]["content"][1];
    assert_eq!(link["name"], "dataset.csv");
    assert_eq!(link["size"], 8 * 1024 * 1024);
    let expected = presa_demo::big::pattern(0, 8 * 1024 * 1024);
    assert_eq!(link["_meta"]["io.presa/sha256"], sha256(&expected));
    let path = link["_meta"]["io.presa/download"].as_str().expect("path");
    let got = download(&srv.url, path, "anonymous", None).await.bytes().await.expect("bytes");
    assert_eq!(sha256(&got), sha256(&expected));
    assert!(files_under(dir.path()).await >= 2, "the data and its sidecar");

    // Past its TTL the task is gone, and the sweeper (every 200 ms here) removes its objects.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while files_under(dir.path()).await > 0 {
        assert!(std::time::Instant::now() < deadline, "still there: {:?}", walk(dir.path()));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_, gone) = c.err("resources/read", json!({ "uri": link["uri"] })).await;
    let message = gone["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("Resource not found"), "{gone}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_export_leaves_no_object_behind() {
    let dir = tempfile::tempdir().expect("dir");
    let srv = server(dir.path(), ServerConfig::default()).await;
    let c = Client::new(&srv.url, tasks_caps());
    let id = task_id(&c.call_tool("export_dataset", json!({ "mebibytes": 4000 })).await);
    c.wait_task(&id, "some of it written", |t| t["statusMessage"].as_str().is_some_and(|m| m.contains("MiB written")))
        .await;
    c.ok("tasks/cancel", json!({ "taskId": id })).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while files_under(dir.path()).await > 0 {
        assert!(std::time::Instant::now() < deadline, "left behind: {:?}", walk(dir.path()));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_call_still_returns_its_big_result_inline() {
    let dir = tempfile::tempdir().expect("dir");
    let srv = server(dir.path(), ServerConfig::default()).await;
    let c = Client::new(&srv.url, json!({}));
    let r = c.ok("tools/call", json!({ "name": "big_result", "arguments": { "bytes": 2_000_000 } })).await;
    assert_eq!(r["content"][0]["text"].as_str().map(str::len), Some(2_000_000));
    assert_eq!(files_under(dir.path()).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_store_fails_the_task_with_a_retryable_error_naming_it() {
    use presa_artifacts::S3Options;
    let port = free_port(); // nothing listens there
    let s3 = S3Options::default()
        .with_endpoint(format!("http://127.0.0.1:{port}"))
        .with_allow_http(true)
        .with_credentials("k", "s")
        .with_retries(0, Duration::from_secs(1))
        .with_timeouts(Duration::from_millis(500), Duration::from_secs(1));
    let store = ArtifactConfig::new("s3://nowhere/x").with_s3(s3).open().expect("a store, unreachable");
    let srv = embedded_artifacts(ServerConfig::default(), Artifacts::new(store)).await;
    let c = Client::new(&srv.url, tasks_caps());
    let id = task_id(&c.call_tool("big_result", json!({ "bytes": 500_000 })).await);
    let failed = c.wait_task_for(&id, "failed", Duration::from_secs(30), |t| t["status"] == "failed").await;
    let error = &failed["error"];
    assert_eq!(error["code"], -32603, "{failed}");
    assert_eq!(error["data"]["retryable"], true, "{failed}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("s3://nowhere/x"), "the message names the store: {message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_s_artifacts_are_held_to_their_own_quota() {
    let dir = tempfile::tempdir().expect("dir");
    let store = ArtifactConfig::new(format!("file://{}", dir.path().display())).open().expect("store");
    let artifacts = Artifacts::new(store).with_max_bytes_per_scope(Some(1_000_000));
    let srv = embedded_artifacts(ServerConfig::default(), artifacts).await;
    let alice = Client::new(&srv.url, tasks_caps()).with_scope("alice");
    let first = task_id(&alice.call_tool("big_result", json!({ "bytes": 600_000 })).await);
    alice.wait_status(&first, "completed").await;
    let second = task_id(&alice.call_tool("big_result", json!({ "bytes": 600_000 })).await);
    let failed = alice.wait_task_for(&second, "failed", Duration::from_secs(20), |t| t["status"] == "failed").await;
    let message = failed["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("max_artifact_bytes_per_scope (1000000)"), "{failed}");
    assert_eq!(failed["error"]["data"]["retryable"], true, "{failed}");
    // Another principal's quota is its own.
    let bob = Client::new(&srv.url, tasks_caps()).with_scope("bob");
    let theirs = task_id(&bob.call_tool("big_result", json!({ "bytes": 600_000 })).await);
    bob.wait_status(&theirs, "completed").await;
}
