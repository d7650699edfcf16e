//! presa-gateway's retries in front of a Python server written with the
//! official `mcp` SDK (`tests/gateway/upstream.py`), whose flaky tools log
//! every call they receive, with its time, to a directory the test gives:
//!
//! - a tool whose child exits mid-call (a transport failure; the tool says
//!   `idempotentHint`), one that answers `isError: true` and one that answers
//!   JSON-RPC error -32001 (each under its `[[tool]]` rule) fail their first
//!   calls: the task completes, and the upstream's own log shows exactly the
//!   calls expected, spaced by the backoff the task announced in its
//!   `statusMessage` ("attempt 1 of 4 failed (…); next in 212 ms"), within
//!   the rule's bounds;
//! - a tool not marked idempotent whose child exits mid-call is not tried
//!   again: its task fails at once with the error that says why, and the
//!   upstream's log shows one call;
//! - the same server over Streamable HTTP answering a tool's first calls
//!   with 429 and 503 (`Retry-After: 1`): the call could not have reached
//!   the tool, so even a tool not marked idempotent is tried again, each
//!   time after the second the upstream asked for;
//! - on a cluster (Redis, an API pod and a worker pod), the same: a try put
//!   off waits on Redis's delayed queue and comes back to the worker;
//! - a rule's `rate` spaces the calls the upstream receives.

mod common;

use std::{
    collections::BTreeMap,
    path::Path,
    time::{Duration, Instant},
};

use common::{Cluster, fixtures, gateway_bin, python_over_http, repo};
use presa_testkit::{Client, Pod, free_port, task_id, tasks_caps};
use serde_json::{Value, json};

/// Every flaky tool's rule: 4 tries, backing off from 300 ms up to 1.2 s.
const ATTEMPTS: u32 = 4;
const INITIAL_MS: u64 = 300;
const MAX_MS: u64 = 1200;

/// The most a next call may come after the delay the task announced: a
/// claim of the delayed work, and for a child that exited, a new Python
/// process started (the interpreter and the SDK imported) on a busy machine.
const SLACK_RESTART: Duration = Duration::from_secs(4);
const SLACK: Duration = Duration::from_millis(1500);
/// On Redis a try that came due is queued again within a second (the
/// store's promotion period) by a worker that did not hear of it.
const PROMOTION: Duration = Duration::from_secs(1);

/// The backoff's cap after the `failed`th failed try: min(max, initial × 2^(failed-1)).
fn cap(failed: u32) -> Duration {
    Duration::from_millis((INITIAL_MS << (failed - 1)).min(MAX_MS))
}

/// The Python upstream's command line.
fn upstream_command() -> String {
    format!("{} {}", fixtures().python, repo().join("tests/gateway/upstream.py").display())
}

/// A gateway (embedded) in front of the Python upstream over stdio, with a rule per flaky tool.
async fn gateway(dir: &Path) -> (Pod, String) {
    let command = serde_json::to_string(&upstream_command()).unwrap();
    gateway_with(dir, &format!("command = {command}\ninherit_env = [\"PRESA_TEST_FLAKY_DIR\"]")).await
}

/// A gateway (embedded) in front of the upstream `how` says (the rest of its
/// `[[upstream]]` table, named "py"), with a rule per flaky tool.
async fn gateway_with(dir: &Path, how: &str) -> (Pod, String) {
    let (args, env) = write_config(dir, how);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let pod = Pod::start("gw", &gateway_bin(), free_port(), &args, &[("PRESA_TEST_FLAKY_DIR", env.as_str())]).await;
    let url = format!("{}/mcp", pod.base());
    (pod, url)
}

/// Write the gateway's configuration (see [`gateway_with`]) into `dir`, and
/// make the directory the flaky tools log their calls to; the gateway's
/// flags, and that directory (for `PRESA_TEST_FLAKY_DIR`).
fn write_config(dir: &Path, how: &str) -> (Vec<String>, String) {
    let retry = format!("retry = {{ attempts = {ATTEMPTS}, initial_ms = {INITIAL_MS}, max_ms = {MAX_MS} }}");
    let config = format!(
        r#"
[[upstream]]
name = "py"
{how}

[[tool]]
match = "flaky_exit"
policy = "required"
{retry}

[[tool]]
match = "flaky_error"
policy = "required"
{retry}
retry_on_tool_error = true

[[tool]]
match = "flaky_rpc"
policy = "required"
{retry}
retry_on_codes = [-32001]

[[tool]]
match = "exit_unsafe"
policy = "required"
{retry}

[[tool]]
match = "http_refused"
policy = "required"
{retry}

[[tool]]
match = "metered"
policy = "required"
rate = {{ per_second = 4.0, burst = 2 }}
"#
    );
    let path = dir.join("gateway.toml");
    std::fs::write(&path, config).unwrap();
    let flaky_dir = dir.join("calls");
    std::fs::create_dir_all(&flaky_dir).unwrap();
    let args = ["--gateway-config", path.to_str().unwrap(), "--upstream-settle-ms", "0"];
    (args.map(str::to_string).to_vec(), flaky_dir.to_str().unwrap().to_string())
}

/// The calls `tool` received, from its log, in order: when (unix seconds) and in which process.
fn log(dir: &Path, tool: &str) -> Vec<(f64, u32)> {
    let text = std::fs::read_to_string(dir.join("calls").join(format!("{tool}.log"))).unwrap_or_default();
    text.lines()
        .enumerate()
        .map(|(i, line)| {
            let fields: Vec<&str> = line.split(' ').collect();
            let [n, t, pid] = fields[..] else { panic!("a log line is `<n> <time> <pid>`: {line:?}") };
            assert_eq!(n.parse::<usize>().unwrap(), i + 1, "calls are numbered in order: {text}");
            (t.parse().unwrap(), pid.parse().unwrap())
        })
        .collect()
}

/// When (unix seconds) the calls `tool` received came, in order.
fn calls(dir: &Path, tool: &str) -> Vec<f64> {
    log(dir, tool).into_iter().map(|(t, _)| t).collect()
}

/// How many processes the calls `tool` received ran in.
fn processes(dir: &Path, tool: &str) -> usize {
    log(dir, tool).into_iter().map(|(_, pid)| pid).collect::<std::collections::BTreeSet<_>>().len()
}

/// From a status message like "attempt 2 of 4 failed (…); next in 212 ms":
/// the attempt's number and the least the delay announced can be (a delay
/// of a second or more is announced rounded to whole seconds).
fn announced(message: &str) -> Option<(u32, Duration)> {
    let rest = message.strip_prefix("attempt ")?;
    let (n, rest) = rest.split_once(' ')?;
    let of = format!("of {ATTEMPTS} failed (");
    rest.strip_prefix(&of)?;
    let (amount, unit) = message.rsplit_once("; next in ")?.1.split_once(' ')?;
    let amount: u64 = amount.parse().ok()?;
    let delay = match unit {
        "ms" => Duration::from_millis(amount),
        "s" => Duration::from_millis((amount * 1000).saturating_sub(500).max(1000)),
        _ => return None,
    };
    Some((n.parse().ok()?, delay))
}

/// Run `tool` as a task to its end, polling it closely; the task as it
/// ended, and each attempt's announced delay (from its status messages).
async fn run(c: &Client, tool: &str, arguments: Value) -> (Value, BTreeMap<u32, Duration>, Vec<String>) {
    let id = task_id(&c.call_tool(tool, arguments).await);
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut delays = BTreeMap::new();
    let mut messages: Vec<String> = Vec::new();
    loop {
        let t = c.get_task(&id).await;
        if let Some(m) = t["statusMessage"].as_str()
            && messages.last().map(String::as_str) != Some(m)
        {
            messages.push(m.to_string());
            if let Some((n, delay)) = announced(m) {
                delays.insert(n, delay);
            }
        }
        if ["completed", "failed", "cancelled"].contains(&t["status"].as_str().unwrap_or_default()) {
            return (t, delays, messages);
        }
        assert!(Instant::now() < deadline, "{tool}'s task never ended: {t}\n{messages:#?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The upstream received exactly `expected` calls of `tool`, each after the
/// delay the task announced for the try before it (when the poll saw it),
/// within the backoff's cap for that try plus `slack`.
fn assert_spacing(dir: &Path, tool: &str, expected: usize, delays: &BTreeMap<u32, Duration>, slack: Duration) {
    let times = calls(dir, tool);
    assert_eq!(times.len(), expected, "{tool}: the upstream received {times:?}");
    for (i, pair) in times.windows(2).enumerate() {
        let failed = i as u32 + 1;
        let gap = Duration::from_secs_f64((pair[1] - pair[0]).max(0.0));
        assert!(pair[1] >= pair[0], "{tool}: call {} came before call {failed}: {times:?}", failed + 1);
        assert!(
            gap <= cap(failed) + slack,
            "{tool}: call {} came {gap:?} after call {failed}: over the cap",
            failed + 1
        );
        if let Some(&delay) = delays.get(&failed) {
            assert!(delay <= cap(failed), "{tool}: announced {delay:?} after try {failed}, over {:?}", cap(failed));
            // The delay runs from the failure, which came after the call began.
            assert!(
                gap + Duration::from_millis(5) >= delay,
                "{tool}: call {} came {gap:?} after call {failed}, \
                 before the {delay:?} announced",
                failed + 1
            );
            assert!(
                gap <= delay + slack,
                "{tool}: call {} came {gap:?} after call {failed}, announced {delay:?}",
                failed + 1
            );
        }
    }
    eprintln!("{tool}: calls at {times:?}, announced delays {delays:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_failures_are_tried_again_with_backoff_until_the_task_completes() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, url) = gateway(dir.path()).await;
    let c = Client::new(&url, tasks_caps());

    // A transport failure: the child exits mid-call twice, then answers.
    let (done, delays, messages) = run(&c, "flaky_exit", json!({ "fail_times": 2 })).await;
    assert_eq!(done["status"], "completed", "{done}\n{messages:#?}\n{}", gw.log());
    assert_eq!(done["result"]["content"][0]["text"], "ok after 3 calls", "{done}");
    assert!(
        messages.iter().any(|m| m.starts_with("attempt 1 of 4 failed (upstream \"py\" went away during the call)")),
        "the wait shows in tasks/get: {messages:#?}"
    );
    assert_spacing(dir.path(), "flaky_exit", 3, &delays, SLACK_RESTART);
    assert_eq!(processes(dir.path(), "flaky_exit"), 3, "each try in a new child");

    // An isError result under retry_on_tool_error: three times, then an answer.
    let (done, delays, messages) = run(&c, "flaky_error", json!({ "fail_times": 3 })).await;
    assert_eq!(done["status"], "completed", "{done}\n{messages:#?}");
    assert_eq!(done["result"]["content"][0]["text"], "ok after 4 calls", "{done}");
    assert!(messages.iter().any(|m| m.contains("answered an error result: ") && m.contains("busy, ")), "{messages:#?}");
    assert_spacing(dir.path(), "flaky_error", 4, &delays, SLACK);
    assert_eq!(processes(dir.path(), "flaky_error"), 1, "one child answered every try");

    // A JSON-RPC error the rule names.
    let (done, delays, messages) = run(&c, "flaky_rpc", json!({ "fail_times": 1 })).await;
    assert_eq!(done["status"], "completed", "{done}\n{messages:#?}");
    assert_eq!(done["result"]["content"][0]["text"], "ok after 2 calls", "{done}");
    assert_spacing(dir.path(), "flaky_rpc", 2, &delays, SLACK);
    // An answer, even an error, leaves the child in the pool: no restart per try.
    assert_eq!(processes(dir.path(), "flaky_rpc"), 1, "one child answered every try");

    // Past its attempts a task fails, saying after how many and why.
    let (done, _, messages) = run(&c, "flaky_error", json!({ "fail_times": 100 })).await;
    assert_eq!(done["status"], "failed", "{done}\n{messages:#?}");
    let message = done["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("attempt 4 of 4") && message.contains("busy, 8"), "{done}");
    assert_eq!(calls(dir.path(), "flaky_error").len(), 4 + 4, "four more calls, no fifth");

    let metrics = reqwest::get(format!("{}/metrics", gw.base())).await.unwrap().text().await.unwrap();
    let retries = |reason: &str| {
        let line = format!("presa_gateway_upstream_retries_total{{reason=\"{reason}\",upstream=\"py\"}} ");
        let alt = format!("presa_gateway_upstream_retries_total{{upstream=\"py\",reason=\"{reason}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&line).or_else(|| l.strip_prefix(&alt)))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    assert_eq!(retries("exited"), Some(2), "{metrics}");
    assert_eq!(retries("tool_error"), Some(3 + 4), "{metrics}");
    assert_eq!(retries("rpc_error"), Some(1), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_not_safe_to_repeat_is_not_tried_again_after_its_child_exited_mid_call() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, url) = gateway(dir.path()).await;
    let c = Client::new(&url, tasks_caps());
    let started = Instant::now();
    let (done, _, messages) = run(&c, "exit_unsafe", json!({})).await;
    assert_eq!(done["status"], "failed", "{done}\n{messages:#?}\n{}", gw.log());
    let message = done["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("\"exit_unsafe\" failed after the upstream may have received it")
            && message.contains("not marked idempotent or read-only, so it was not tried again")
            && message.contains("rerun = \"always\""),
        "{done}"
    );
    assert!(started.elapsed() < Duration::from_secs(10), "at once: {:?}", started.elapsed());
    // Give a wrong second call the time it would need to show up.
    tokio::time::sleep(cap(1) + SLACK_RESTART).await;
    assert_eq!(calls(dir.path(), "exit_unsafe").len(), 1, "called once");
    assert!(!messages.iter().any(|m| m.contains("next in")), "never put off: {messages:#?}");
}

/// A `[[tool]]` rule's rate (4 a second, bursts of 2) spaces a tool's
/// calls: 10 tasks created at once all complete, and the upstream's own log
/// shows their calls spread over at least (10 - 2) / 4 = 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rules_rate_spaces_the_calls_the_upstream_receives() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, url) = gateway(dir.path()).await;
    let c = Client::new(&url, tasks_caps());
    let mut ids = Vec::new();
    for _ in 0..10 {
        ids.push(task_id(&c.call_tool("metered", json!({})).await));
    }
    for id in &ids {
        let done = c.wait_task_for(id, "completed", Duration::from_secs(30), |t| t["status"] != "working").await;
        assert_eq!(done["status"], "completed", "{done}\n{}", gw.log());
    }
    let at = calls(dir.path(), "metered");
    assert_eq!(at.len(), 10, "each task called once: {at:?}");
    let span = at[9] - at[0];
    assert!(span >= 1.9, "10 calls at 4/s in bursts of 2 take 2 s, not {span:.2} s: {at:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_upstream_s_429_and_503_are_tried_again_after_its_retry_after_for_any_tool() {
    let dir = tempfile::tempdir().unwrap();
    let flaky_dir = dir.path().join("calls");
    std::fs::create_dir_all(&flaky_dir).unwrap();
    let port = free_port();
    let _upstream = python_over_http(port, &flaky_dir).await;
    let (gw, url) = gateway_with(dir.path(), &format!("url = \"http://127.0.0.1:{port}/mcp\"")).await;
    let c = Client::new(&url, tasks_caps());

    let (done, delays, messages) = run(&c, "http_refused", json!({})).await;
    assert_eq!(done["status"], "completed", "{done}\n{messages:#?}\n{}", gw.log());
    assert_eq!(done["result"]["content"][0]["text"], "ok after 3 calls", "{done}");
    for (n, status) in [(1, 429), (2, 503)] {
        let said = format!("attempt {n} of 4 failed (upstream \"py\" answered HTTP {status}); next in 1 s");
        assert!(messages.contains(&said), "{said:?} in {messages:#?}");
    }
    // Retry-After, not the backoff (whose caps are 300 and 600 ms), spaced the calls.
    let times = calls(dir.path(), "http_refused");
    assert_eq!(times.len(), 3, "two refused, then the call: {times:?}");
    for pair in times.windows(2) {
        let gap = Duration::from_secs_f64((pair[1] - pair[0]).max(0.0));
        assert!(gap >= Duration::from_millis(995) && gap <= Duration::from_secs(1) + SLACK, "{times:?}");
    }
    assert_eq!(delays.len(), 2, "{messages:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_try_put_off_waits_on_redis_and_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let command = serde_json::to_string(&upstream_command()).unwrap();
    let (args, flaky_dir) =
        write_config(dir.path(), &format!("command = {command}\ninherit_env = [\"PRESA_TEST_FLAKY_DIR\"]"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let cluster = Cluster::new(&[("PRESA_TEST_FLAKY_DIR", &flaky_dir)]).await;
    let (_api, url) = cluster.api(&args).await;
    let worker = cluster.worker("w1", &args).await;
    let c = Client::new(&url, tasks_caps());

    let (done, delays, messages) = run(&c, "flaky_exit", json!({ "fail_times": 2 })).await;
    assert_eq!(done["status"], "completed", "{done}\n{messages:#?}\n{}", worker.log());
    assert_eq!(done["result"]["content"][0]["text"], "ok after 3 calls", "{done}");
    assert_spacing(dir.path(), "flaky_exit", 3, &delays, SLACK_RESTART + PROMOTION);
    assert_eq!(processes(dir.path(), "flaky_exit"), 3, "each try in a new child");

    let (done, delays, messages) = run(&c, "flaky_error", json!({ "fail_times": 2 })).await;
    assert_eq!(done["status"], "completed", "{done}\n{messages:#?}\n{}", worker.log());
    assert_spacing(dir.path(), "flaky_error", 3, &delays, SLACK + PROMOTION);

    let (done, _, messages) = run(&c, "exit_unsafe", json!({})).await;
    assert_eq!(done["status"], "failed", "{done}\n{messages:#?}");
    assert!(done["error"]["message"].as_str().unwrap_or_default().contains("not tried again"), "{done}");
    assert_eq!(calls(dir.path(), "exit_unsafe").len(), 1, "called once");
}
