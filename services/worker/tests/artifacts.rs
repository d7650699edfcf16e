//! Big results across pods: 2 `presa-api` and 2 `presa-worker` processes on
//! one Redis, with a real S3-compatible server (`s3s-fs`) as the artifact
//! store, and bearer tokens for two principals. A 5 MB result created
//! through pod A completes with a `resource_link`; its owner reads identical
//! bytes through `resources/read` and the streamed download on pod B;
//! another principal gets what an unknown URI gets; once the task's TTL has
//! passed, its objects are gone from the bucket.

use std::{path::PathBuf, time::Duration};

use futures::StreamExt;
use presa_testkit::{Client, Pod, TestRedis, free_port, redis::unique_prefix, s3::S3sFs, task_id, tasks_caps};
use serde_json::json;
use sha2::{Digest, Sha256};

const FIVE_MB: usize = 5 * 1000 * 1000;

fn api_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_presa-worker")).with_file_name("presa-api")
}

fn hex(digest: impl AsRef<[u8]>) -> String {
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_result_crosses_pods_through_s3_for_its_owner_only() {
    let redis = TestRedis::start().await;
    let s3 = S3sFs::start();
    let prefix = unique_prefix();
    let dir = tempfile::tempdir().expect("dir");
    let tokens = dir.path().join("tokens");
    let line = |token: &str, subject: &str| format!("{} acme {subject}\n", hex(Sha256::digest(token.as_bytes())));
    std::fs::write(&tokens, line("alice-token", "alice") + &line("mallory-token", "mallory")).expect("tokens");
    let endpoint = s3.endpoint();
    let tokens = tokens.to_string_lossy().into_owned();
    let env = [
        ("PRESA_REDIS_URL", redis.url()),
        ("PRESA_REDIS_PREFIX", prefix.as_str()),
        ("PRESA_STATE_SECRET", "artifact-pods-test-secret-at-least-32-bytes"),
        ("PRESA_AUTH", "tokens"),
        ("PRESA_TOKENS_FILE", tokens.as_str()),
        ("PRESA_TASK_TTL_MS", "8000"),
        ("PRESA_ARTIFACT_URL", "s3://presa-test/pods"),
        ("PRESA_ARTIFACT_S3_ENDPOINT", endpoint.as_str()),
        ("PRESA_ARTIFACT_S3_ALLOW_HTTP", "true"),
        ("PRESA_ARTIFACT_S3_ACCESS_KEY_ID", presa_testkit::s3::ACCESS_KEY),
        ("PRESA_ARTIFACT_S3_SECRET_ACCESS_KEY", presa_testkit::s3::SECRET_KEY),
        ("PRESA_ARTIFACT_SWEEP_MS", "500"),
    ];
    let worker = PathBuf::from(env!("CARGO_BIN_EXE_presa-worker"));
    let a = Pod::start("api-a", &api_bin(), free_port(), &[], &env).await;
    let b = Pod::start("api-b", &api_bin(), free_port(), &[], &env).await;
    let _w1 = Pod::start("w1", &worker, free_port(), &[], &env).await;
    let _w2 = Pod::start("w2", &worker, free_port(), &[], &env).await;

    let on_a = Client::new(&a.url, tasks_caps()).with_bearer("alice-token");
    let on_b = Client::new(&b.url, tasks_caps()).with_bearer("alice-token");
    let id = task_id(&on_a.call_tool("big_result", json!({ "bytes": FIVE_MB })).await);
    let done = on_b.wait_status(&id, "completed").await;
    let link = done["result"]["content"][0].clone();
    assert_eq!(link["type"], "resource_link", "{done}");
    let expected = hex(Sha256::digest(presa_demo_pattern(FIVE_MB)));
    assert_eq!(link["_meta"]["io.presa/sha256"], expected.as_str());
    assert!(!s3.objects().is_empty(), "the artifact is in the bucket");

    let read = on_b.ok("resources/read", json!({ "uri": link["uri"] })).await;
    let text = read["contents"][0]["text"].as_str().expect("text");
    assert_eq!(hex(Sha256::digest(text.as_bytes())), expected);

    let path = link["_meta"]["io.presa/download"].as_str().expect("path");
    let url = reqwest::Url::parse(&b.url).and_then(|u| u.join(path)).expect("url");
    let get = |token: &'static str| reqwest::Client::new().get(url.clone()).bearer_auth(token).send();
    let resp = get("alice-token").await.expect("download");
    assert_eq!(resp.status(), 200, "{}", b.log());
    let mut hasher = Sha256::new();
    let mut body = resp.bytes_stream();
    while let Some(chunk) = body.next().await {
        hasher.update(chunk.expect("chunk"));
    }
    assert_eq!(hex(hasher.finalize()), expected);

    let mallory = Client::new(&b.url, tasks_caps()).with_bearer("mallory-token");
    let (_, refused) = mallory.err("resources/read", json!({ "uri": link["uri"] })).await;
    let unknown = format!("presa://artifacts/{id}/0000000000000000/0");
    let (_, missing) = on_b.err("resources/read", json!({ "uri": unknown })).await;
    assert_eq!(refused["code"], missing["code"], "{refused} vs {missing}");
    assert!(refused["message"].as_str().is_some_and(|m| m.starts_with("Resource not found")), "{refused}");
    assert_eq!(get("mallory-token").await.expect("download").status(), 404);

    // After the TTL (8 s) the task is gone; a sweep (every 500 ms) empties the bucket.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !s3.objects().is_empty() {
        assert!(std::time::Instant::now() < deadline, "still in the bucket: {:?}", s3.objects());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The demo's `big_result` text (`presa_demo::big::pattern`): byte `i` is `' ' + i % 95`.
fn presa_demo_pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| b' ' + (i % 95) as u8).collect()
}
