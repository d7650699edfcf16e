//! The `presa` binary against an embedded `presa-api`: results, task
//! following, input answering, cancellation, JSON output, exit codes and
//! error messages.

mod common;

use common::{command, detached, embedded, fake_server, presa, without_listen};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_follows_a_task_and_prints_the_result() {
    let api = embedded().await;
    let out = presa(&api.url, &["call", "slow_compute", "seconds=1"]).await;
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.stdout, "Completed job\n", "{out}");
    // Not a terminal: plain status lines on stderr, ending with the terminal status.
    assert!(out.stderr.contains("working: Computing job for 1 s"), "{out}");
    assert!(out.stderr.contains("completed"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_with_an_answer_completes() {
    let api = embedded().await;
    let out = presa(
        &api.url,
        &[
            "call",
            "deploy_release",
            "version=1.0",
            "step_seconds=0",
            "--answer",
            r#"approve-1.0={"action":"accept","content":{"approve":true}}"#,
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.starts_with("Released 1.0 to production\n"), "{out}");
    // structuredContent, pretty-printed.
    assert!(out.stdout.contains("\"environment\": \"production\""), "{out}");
    assert!(out.stderr.contains("input_required: Waiting for approval to release 1.0 to production"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_input_exits_5_with_the_task_id_and_question_then_answer_and_watch_finish_it() {
    let api = embedded().await;
    let out = presa(&api.url, &["call", "deploy_release", "version=1.0", "step_seconds=0", "--no-input"]).await;
    assert_eq!(out.code, 5, "{out}");
    let first = out.stdout.lines().next().unwrap_or_default();
    let id =
        first.strip_prefix("Task ").and_then(|r| r.strip_suffix(" needs input:")).unwrap_or_else(|| panic!("{out}"));
    assert!(out.stdout.contains("approve-1.0: Release 1.0 to production?"), "{out}");
    assert!(out.stdout.contains("approve (boolean, required)"), "{out}");
    assert!(out.stdout.contains(&format!("answer {id} approve-1.0='")), "{out}");

    // The hint works: answer, then follow to the end.
    let answered =
        presa(&api.url, &["answer", id, r#"approve-1.0={"action":"accept","content":{"approve":true}}"#]).await;
    assert_eq!(answered.code, 0, "{answered}");
    let watched = presa(&api.url, &["watch", id]).await;
    assert_eq!(watched.code, 0, "{watched}");
    assert!(watched.stdout.contains("Released 1.0 to production"), "{watched}");

    // --json: the snapshot, with the id and the question.
    let out =
        presa(&api.url, &["call", "deploy_release", "version=2.0", "step_seconds=0", "--no-input", "--json"]).await;
    assert_eq!(out.code, 5, "{out}");
    let task: Value = serde_json::from_str(out.stdout.trim()).unwrap_or_else(|_| panic!("{out}"));
    assert_eq!(task["status"], "input_required");
    assert!(task["inputRequests"]["approve-2.0"].is_object(), "{task}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_error_exits_1_and_failed_task_exits_3() {
    let api = embedded().await;
    let out = presa(&api.url, &["call", "failing_job"]).await;
    assert_eq!(out.code, 1, "{out}");
    assert!(out.stderr.contains("The task job failed."), "{out}");
    let out = presa(&api.url, &["call", "protocol_error_job"]).await;
    assert_eq!(out.code, 3, "{out}");
    assert!(out.stderr.contains("failed: Internal error (-32603)"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_then_get_shows_cancelled() {
    let api = embedded().await;
    let id = detached(&api.url, &["slow_compute", "seconds=60"]).await;
    let out = presa(&api.url, &["cancel", &id]).await;
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.stdout.trim(), format!("Task {id} cancelled"));
    let out = presa(&api.url, &["get", &id]).await;
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("status   cancelled"), "{out}");
    // Following a cancelled task exits 4.
    let out = presa(&api.url, &["watch", &id]).await;
    assert_eq!(out.code, 4, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_output_parses() {
    let api = embedded().await;
    let out = presa(&api.url, &["--json", "call", "slow_compute", "seconds=0.2", "label=json"]).await;
    assert_eq!(out.code, 0, "{out}");
    let result: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|_| panic!("{out}"));
    assert_eq!(result["content"][0]["text"], "Completed json");
    assert!(out.stderr.is_empty(), "no status lines with --json: {out}");

    let id = detached(&api.url, &["slow_compute", "seconds=0.3"]).await;
    let out = presa(&api.url, &["--json", "watch", &id]).await;
    assert_eq!(out.code, 0, "{out}");
    let snapshots: Vec<Value> = out.stdout.lines().map(|l| serde_json::from_str(l).expect(l)).collect();
    assert_eq!(snapshots.last().unwrap()["status"], "completed", "{out}");
    assert!(snapshots.iter().all(|s| s["taskId"] == id.as_str()), "{out}");

    for args in [vec!["--json", "get", id.as_str()], vec!["--json", "tools"], vec!["--json", "discover"]] {
        let out = presa(&api.url, &args).await;
        assert_eq!(out.code, 0, "{out}");
        let _: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|_| panic!("{out}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_follows_two_tasks_to_the_end() {
    let api = embedded().await;
    let a = detached(&api.url, &["slow_compute", "seconds=1.5", "label=first"]).await;
    let b = detached(&api.url, &["slow_compute", "seconds=0.5", "label=second"]).await;
    let out = presa(&api.url, &["watch", &a, &b]).await;
    assert_eq!(out.code, 0, "{out}");
    for id in [&a, &b] {
        assert!(out.stdout.contains(&format!("{id} completed")), "{out}");
    }
    assert!(out.stdout.contains("Completed first") && out.stdout.contains("Completed second"), "{out}");
    // b finished first, and watch said so as it happened.
    let pos = |s: &str| out.stdout.find(s).unwrap();
    assert!(pos(&format!("{b} completed")) < pos(&format!("{a} completed")), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discover_tools_mrtr_and_images() {
    let api = embedded().await;
    let out = presa(&api.url, &["discover"]).await;
    assert!(out.stdout.contains("extensions    io.modelcontextprotocol/tasks"), "{out}");
    let out = presa(&api.url, &["tools"]).await;
    assert!(out.stdout.contains("    version       string, required  The version to deploy"), "{out}");
    assert!(out.stdout.contains("    step_seconds  number  Seconds each step takes; default 1.0; 0..60"), "{out}");
    // MRTR over two rounds, answered from --answer.
    let out = presa(
        &api.url,
        &[
            "call",
            "test_input_required_result_multi_round",
            "--answer",
            r#"step1={"action":"accept","content":{"name":"Ann"}}"#,
            "--answer",
            r#"step2={"action":"accept","content":{"color":"blue"}}"#,
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.stdout, "Multi-round complete for Ann who likes blue\n");
    // MRTR without an answer and no terminal: exit 5 with the question.
    let out = presa(&api.url, &["call", "test_input_required_result_elicitation"]).await;
    assert_eq!(out.code, 5, "{out}");
    assert!(out.stdout.contains("user_name: What is your name?"), "{out}");
    // Images are saved to files.
    let dir = tempfile::tempdir().unwrap();
    let out = presa(&api.url, &["call", "test_image_content", "--output-dir", dir.path().to_str().unwrap()]).await;
    assert_eq!(out.code, 0, "{out}");
    let saved = dir.path().join("test_image_content-1.png");
    assert!(out.stdout.contains(&format!("image (image/png) saved to {}", saved.display())), "{out}");
    assert_eq!(std::fs::read(&saved).unwrap()[1..4], *b"PNG");
    // --args @file.
    let file = dir.path().join("args.json");
    std::fs::write(&file, r#"{"seconds":0,"label":"from-file"}"#).unwrap();
    let at = format!("@{}", file.display());
    let out = presa(&api.url, &["call", "slow_compute", "--args", &at]).await;
    assert_eq!(out.stdout, "Completed from-file\n", "{out}");
    // --args JSON with key=value on top.
    let out = presa(&api.url, &["call", "slow_compute", "--args", r#"{"seconds":0,"label":"x"}"#, "label=y"]).await;
    assert_eq!(out.stdout, "Completed y\n", "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_in_words_with_their_exit_codes() {
    let api = embedded().await;
    let out = presa(&api.url, &["get", "p00.no-such-task"]).await;
    assert_eq!(out.code, 2, "{out}");
    assert!(out.stderr.contains("unknown task p00.no-such-task"), "{out}");
    let out = presa(&api.url, &["call", "slow_compute", "seconds=soon"]).await;
    assert_eq!(out.code, 2, "{out}");
    assert!(out.stderr.contains("seconds: expected a number"), "{out}");
    let out = presa(&api.url, &["call", "no_such_tool", "a=1"]).await;
    assert_eq!(out.code, 2, "{out}");
    let out = presa(&api.url, &["frobnicate"]).await;
    assert_eq!(out.code, 2, "{out}");

    let closed = format!("http://127.0.0.1:{}/mcp", presa_testkit::free_port());
    let out = presa(&closed, &["tools"]).await;
    assert_eq!(out.code, 6, "{out}");
    assert!(out.stderr.contains(&format!("cannot reach the MCP server at {closed}")), "{out}");
    assert!(out.stderr.contains("is the server running"), "{out}");

    let (url, _) = fake_server(
        "401 Unauthorized",
        &[r#"www-authenticate: Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource""#],
        "",
    )
    .await;
    let out = presa(&url, &["tools"]).await;
    assert_eq!(out.code, 6, "{out}");
    assert!(
        out.stderr.contains("requires authentication (HTTP 401)")
            && out.stderr.contains("https://mcp.example.com/.well-known/oauth-protected-resource"),
        "{out}"
    );

    let (url, seen) = fake_server(
        "403 Forbidden",
        &[r#"www-authenticate: Bearer error="insufficient_scope", scope="tasks:write tools:call""#],
        "",
    )
    .await;
    let out = presa(&url, &["--token", "t0k", "call", "slow_compute"]).await;
    assert_eq!(out.code, 6, "{out}");
    assert!(out.stderr.contains("lacks the scope(s) tasks:write tools:call"), "{out}");
    // What went on the wire: the bearer token, the MCP headers and `_meta`.
    let request = seen.lock().unwrap()[0].clone();
    for line in [
        "authorization: bearer t0k",
        "mcp-protocol-version: 2026-07-28",
        "mcp-method: tools/call",
        "mcp-name: slow_compute",
    ] {
        assert!(request.lines().any(|l| l == line), "no {line:?} in\n{request}");
    }
    let body: Value = serde_json::from_str(request.split("\n\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"], "2026-07-28");
    assert!(body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]["extensions"]["io.modelcontextprotocol/tasks"].is_object());

    let (url, _) = fake_server(
        "400 Bad Request",
        &[],
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"Unsupported protocol version","data":{"supported":["2025-11-25","2025-06-18"],"requested":"2026-07-28"}}}"#,
    )
    .await;
    let out = presa(&url, &["tools"]).await;
    assert_eq!(out.code, 6, "{out}");
    assert!(
        out.stderr.contains("does not support protocol version 2026-07-28; it supports: 2025-11-25, 2025-06-18"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_listen_the_cli_polls_to_the_end() {
    let api = embedded().await;
    let url = without_listen(&api.url).await;
    let out = presa(
        &url,
        &[
            "--verbose",
            "call",
            "deploy_release",
            "version=3.0",
            "step_seconds=0.2",
            "--answer",
            r#"approve-3.0={"action":"accept","content":{"approve":true}}"#,
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.starts_with("Released 3.0 to production"), "{out}");
    assert!(out.stderr.contains("the server does not offer subscriptions/listen"), "{out}");
    assert!(!out.stderr.contains("subscribed to task notifications"), "{out}");
    // --poll never tries.
    let out = presa(&api.url, &["--verbose", "--poll", "call", "slow_compute", "seconds=0.5"]).await;
    assert_eq!(out.code, 0, "{out}");
    assert!(!out.stderr.contains("subscri"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_tools_print_at_once_and_sigint_without_a_terminal_leaves_the_task_running() {
    let api = embedded().await;
    let out = presa(&api.url, &["call", "greet", "name=Ann"]).await;
    assert_eq!((out.code, out.stdout.as_str(), out.stderr.as_str()), (0, "Hello, Ann!\n", ""), "{out}");

    let child = command(&api.url, &["call", "slow_compute", "seconds=30", "label=bg"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    presa_testkit::redis::signal(child.id().unwrap(), "INT");
    let out =
        tokio::time::timeout(std::time::Duration::from_secs(10), child.wait_with_output()).await.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    let id = stderr.split("watch ").nth(1).map_or_else(|| panic!("{stderr}"), str::trim);
    let get = presa(&api.url, &["get", id]).await;
    assert!(get.stdout.contains("status   working"), "{get}");
}

/// `presa call` sends a task-creating call under an idempotency key and,
/// when its answer is lost (the server made the task, the proxy answered
/// 502), sends it again with the same key: the server returns the same task,
/// which the CLI follows to its result. One task, not two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_answer_was_lost_is_retried_under_its_key() {
    let api = embedded().await;
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (url, forwarded) = common::proxy(&api.url, move |method| match method {
        Some("tools/call") if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 => common::Hook::LoseAnswer,
        _ => common::Hook::Forward,
    })
    .await;
    let out = presa(&url, &["call", "slow_compute", "seconds=0", "label=once"]).await;
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.stdout, "Completed once\n", "{out}");
    assert!(out.stderr.contains("sending the call again with the same idempotency key"), "{out}");
    let created: Vec<Value> = forwarded
        .lock()
        .unwrap()
        .iter()
        .filter(|(method, ..)| method == "tools/call")
        .map(|(_, _, body)| serde_json::from_str(body).unwrap())
        .collect();
    assert_eq!(created.len(), 2, "the lost try and the retry: {created:?}");
    let ids: Vec<&str> = created.iter().map(|v| v["result"]["taskId"].as_str().unwrap_or_default()).collect();
    assert!(!ids[0].is_empty() && ids[0] == ids[1], "the retry returned the first task: {ids:?}");
}

/// A task the server no longer knows although its TTL has not run out (what
/// a Redis failover under `--durability primary` can do to a create it
/// acknowledged): `presa call` says it was lost and exits 7, instead of
/// calling the id unknown. The proxy plays the server that lost it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_the_server_lost_is_reported_as_lost() {
    let api = embedded().await;
    let unknown = r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"Unknown or inaccessible taskId"}}"#;
    let no_listen = r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"Method not found"}}"#;
    let (url, _) = common::proxy(&api.url, move |method| match method {
        Some("tasks/get") => common::Hook::Answer(200, unknown.to_string()),
        Some("subscriptions/listen") => common::Hook::Answer(404, no_listen.to_string()),
        _ => common::Hook::Forward,
    })
    .await;
    let out = presa(&url, &["call", "slow_compute", "seconds=5"]).await;
    assert_eq!(out.code, 7, "{out}");
    assert!(out.stderr.contains("was lost") && out.stderr.contains("Run the call again"), "{out}");

    // An id the caller names itself is only unknown (exit 2), never "lost".
    let out = presa(&url, &["watch", "p00.AAAAAAAAAAAAAAAAAAAAAA"]).await;
    assert_eq!(out.code, 2, "{out}");
    assert!(!out.stderr.contains("was lost"), "{out}");
}

/// A big result comes back as an artifact link; `--output-dir` streams it to a file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_artifact_is_saved_to_the_output_dir() {
    let api = embedded().await;
    let dir = tempfile::tempdir().expect("dir");
    let out_dir = dir.path().to_string_lossy().into_owned();
    let out = presa(&api.url, &["call", "big_result", "bytes=3000000", "--output-dir", &out_dir]).await;
    assert_eq!(out.code, 0, "{out}");
    let saved: Vec<_> = std::fs::read_dir(dir.path()).expect("dir").flatten().map(|e| e.path()).collect();
    assert_eq!(saved.len(), 1, "{saved:?}\n{out}");
    assert!(out.stdout.contains(&format!("(3000000 bytes) saved to {}", saved[0].display())), "{out}");
    let bytes = std::fs::read(&saved[0]).expect("saved");
    let expected: Vec<u8> = (0..3_000_000u64).map(|i| b' ' + (i % 95) as u8).collect();
    assert!(bytes == expected, "the saved file holds the tool's bytes");
}
