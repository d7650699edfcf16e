//! Catalog shaping (`expose`, `hide`, `[[upstream.tool]]`) in front of
//! `@modelcontextprotocol/server-filesystem` over stdio, embedded. The
//! upstream itself may read two directories, `data` and `other`; the
//! gateway serves only `list_directory` (renamed `ls`) and `directory_tree`,
//! both with `path` pinned to `data`, so only the gateway's shaping keeps a
//! caller out of `other`:
//!
//! - the pinned argument is not in the listed schema, a call that gives it
//!   anyway is refused with `-32602` before anything runs (no task either),
//!   and the pinned tool lists `data`, never `other`;
//! - hidden tools are not listed, and a call to one by name is refused
//!   exactly like a call to a tool that does not exist; so is the old name
//!   of a renamed tool;
//! - a result over `max_output_bytes` is a tool error instead;
//! - a pin the tool's schema does not have stops the gateway at start,
//!   naming the table;
//! - annotations a table overrides are what the retry policy reads (in
//!   front of the Python upstream, `tests/gateway/upstream.py`);
//! - the example of docs/gateway.md's "Shaping the catalog" starts and
//!   lists what it says;
//! - on Redis, a task of the pinned tool (stored without the pinned
//!   argument by an API pod) runs on a worker with it.

mod common;

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use common::{Cluster, fixtures, gateway_bin};
use presa_testkit::{Client, Pod, free_port, task_id, tasks_caps};
use serde_json::{Value, json};

/// The two directories server-filesystem may read, and the gateway's config file.
struct Setup {
    _dir: tempfile::TempDir,
    data: PathBuf,
    config: PathBuf,
}

/// `data` (a file `inside.txt` and `files` more) and `other` (`secret.txt`),
/// both given to server-filesystem; `shaping` after the upstream's `command`,
/// with `{data}` replaced by the data directory.
fn setup(files: usize, shaping: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let (data, other) = (root.join("data"), root.join("other"));
    std::fs::create_dir_all(&data).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(data.join("inside.txt"), "inside").unwrap();
    for i in 0..files {
        std::fs::write(data.join(format!("more-{i:02}.txt")), "more").unwrap();
    }
    std::fs::write(other.join("secret.txt"), "secret").unwrap();
    let command = format!("{} {} {}", fixtures().filesystem_stdio, data.display(), other.display());
    let shaping = shaping.replace("{data}", &data.display().to_string());
    let config = root.join("gateway.toml");
    std::fs::write(&config, format!("[[upstream]]\nname = \"fs\"\ncommand = {command:?}\n{shaping}")).unwrap();
    Setup { _dir: dir, data, config }
}

const SHAPING: &str = r#"
expose = ["list_*", "directory_tree"]
hide = ["list_directory_with_sizes", "list_allowed_directories"]

[[upstream.tool]]
match = "list_directory"
rename = "ls"
description = "Lists the data directory"
annotations = { idempotentHint = true }
pin = { path = "{data}" }

[[upstream.tool]]
match = "directory_tree"
pin = { path = "{data}" }
max_output_bytes = 300
"#;

fn text(result: &Value) -> String {
    result["content"].as_array().into_iter().flatten().filter_map(|c| c["text"].as_str()).collect()
}

/// The JSON-RPC error of a `tools/call` expected to be refused.
async fn refused(c: &Client, name: &str, arguments: Value) -> Value {
    let (_, error) = c.err("tools/call", json!({ "name": name, "arguments": arguments })).await;
    error
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_path_keeps_callers_in_one_directory_and_hidden_or_renamed_names_are_unknown() {
    let s = setup(0, SHAPING);
    let gw =
        Pod::start("gw", &gateway_bin(), free_port(), &["--gateway-config", s.config.to_str().unwrap()], &[]).await;
    let url = format!("{}/mcp", gw.base());
    let plain = Client::new(&url, json!({}));

    let tools = plain.ok("tools/list", json!({})).await["tools"].as_array().cloned().unwrap();
    let mut names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["directory_tree", "ls"], "{tools:?}");
    let ls = tools.iter().find(|t| t["name"] == "ls").unwrap();
    assert!(ls["inputSchema"]["properties"].get("path").is_none(), "the pinned argument is listed: {ls}");
    assert!(!ls["inputSchema"].to_string().contains("path"), "{ls}");
    assert_eq!(ls["description"], "Lists the data directory");
    assert_eq!(ls["annotations"]["idempotentHint"], true, "{ls}");
    assert_eq!(ls["annotations"]["readOnlyHint"], true, "the upstream's other annotations stay: {ls}");

    // The pinned tool lists the data directory, called without its path.
    let listed = plain.call_tool("ls", json!({})).await;
    assert!(listed["isError"].is_null(), "{listed}");
    let listing = text(&listed);
    assert!(listing.contains("inside.txt") && !listing.contains("secret"), "{listing}");

    // A path given anyway is refused, not overwritten, and runs nothing: not even a task.
    let other = s.data.with_file_name("other").display().to_string();
    for c in [&plain, &Client::new(&url, tasks_caps())] {
        let e = refused(c, "ls", json!({ "path": other })).await;
        assert_eq!(e["code"], -32602, "{e}");
        let message = e["message"].as_str().unwrap();
        assert!(message.contains("ls") && message.contains("may not be given (path)"), "{e}");
        assert!(!message.contains("secret"), "{e}");
    }

    // Hidden tools and the renamed tool's old name answer like a tool that does not exist.
    let unknown = refused(&plain, "no_such_tool", json!({})).await;
    assert_eq!(unknown["code"], -32602, "{unknown}");
    let secret = format!("{other}/secret.txt");
    for (name, args) in [
        ("read_text_file", json!({ "path": secret })),
        ("list_allowed_directories", json!({})),
        ("list_directory", json!({ "path": other })),
    ] {
        let e = refused(&plain, name, args).await;
        assert_eq!(e["code"], unknown["code"], "{name}: {e}");
        assert_eq!(e["message"], format!("Unknown tool: {name}"), "{name}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_over_max_output_bytes_is_a_tool_error() {
    let s = setup(12, SHAPING);
    let gw =
        Pod::start("gw", &gateway_bin(), free_port(), &["--gateway-config", s.config.to_str().unwrap()], &[]).await;
    let plain = Client::new(format!("{}/mcp", gw.base()), json!({}));
    // `ls` has no cap: its thirteen files are passed on...
    let listed = plain.call_tool("ls", json!({})).await;
    assert!(text(&listed).contains("more-11.txt"), "{listed}");
    // ...but their tree (as JSON, well over 300 bytes) is not.
    let tree = plain.call_tool("directory_tree", json!({})).await;
    assert_eq!(tree["isError"], true, "{tree}");
    let why = text(&tree);
    assert!(why.contains("directory_tree") && why.contains("max_output_bytes"), "{why}");
    assert!(!why.contains("inside.txt"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pin_the_tool_does_not_have_stops_the_gateway_at_start() {
    let s = setup(0, "[[upstream.tool]]\nmatch = \"list_directory\"\npin = { paht = \"{data}\" }\n");
    let (code, stderr) = run_to_exit(&gateway_bin(), &s.config, Duration::from_secs(60));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "upstream \"fs\": [[upstream.tool]] match = \"list_directory\": pin: the tool \"list_directory\" has no \
             argument \"paht\" in its inputSchema (it has: path)"
        ),
        "{stderr}"
    );
}

/// The Python upstream's `flaky_exit` says `idempotentHint` and exits
/// mid-call twice (a child that exits is tried again for such a tool, and
/// completes on the third call: retry.rs); a table saying it is not
/// idempotent makes the gateway treat it so: its task fails at once, the
/// upstream called once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overridden_annotations_are_what_the_retry_policy_reads() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gateway.toml");
    let command = common::python_upstream();
    std::fs::write(
        &config,
        format!(
            "[[upstream]]\nname = \"py\"\ncommand = {command:?}\ninherit_env = [\"PRESA_TEST_FLAKY_DIR\"]\n\
             expose = [\"flaky_exit\"]\n\n[[upstream.tool]]\nmatch = \"flaky_exit\"\n\
             annotations = {{ idempotentHint = false }}\n\n[[tool]]\nmatch = \"flaky_exit\"\npolicy = \"required\"\n\
             retry = {{ attempts = 4, initial_ms = 100, max_ms = 100 }}\n"
        ),
    )
    .unwrap();
    let flaky = dir.path().display().to_string();
    let args = ["--gateway-config", config.to_str().unwrap(), "--upstream-settle-ms", "0"];
    let gw = Pod::start("gw", &gateway_bin(), free_port(), &args, &[("PRESA_TEST_FLAKY_DIR", &flaky)]).await;
    let c = Client::new(format!("{}/mcp", gw.base()), tasks_caps());
    let tools = c.ok("tools/list", json!({})).await["tools"].clone();
    assert_eq!(tools[0]["annotations"]["idempotentHint"], false, "{tools}");
    let id = task_id(&c.call_tool("flaky_exit", json!({})).await);
    let done = c.wait_task_for(&id, "ended", Duration::from_secs(30), |t| t["status"] != "working").await;
    assert_eq!(done["status"], "failed", "{done}");
    let message = done["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("not marked idempotent or read-only, so it was not tried again"), "{done}");
    // Give a wrong second call the time it would need to show up.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let calls = std::fs::read_to_string(dir.path().join("flaky_exit.log")).unwrap_or_default();
    assert_eq!(calls.lines().count(), 1, "called once: {calls}");
}

/// The TOML example of docs/gateway.md's "Shaping the catalog", its
/// server-filesystem and `/srv/data` replaced by the fixture and `data`.
fn documented_example(data: &Path) -> String {
    let doc = std::fs::read_to_string(common::repo().join("docs/gateway.md")).unwrap();
    let section = doc.split("## Shaping the catalog").nth(1).expect("the section");
    let toml = section.split("```toml\n").nth(1).and_then(|b| b.split("```").next()).expect("its TOML");
    let data = data.display().to_string();
    let command = format!("{} {data}", fixtures().filesystem_stdio);
    let example = "command = \"node /opt/server-filesystem/dist/index.js /srv/data\"";
    assert!(toml.contains(example), "{toml}");
    toml.replace(example, &format!("command = {command:?}")).replace("/srv/data", &data)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_example_lists_what_it_says() {
    let s = setup(0, "");
    std::fs::write(&s.config, documented_example(&s.data)).unwrap();
    let gw =
        Pod::start("gw", &gateway_bin(), free_port(), &["--gateway-config", s.config.to_str().unwrap()], &[]).await;
    let c = Client::new(format!("{}/mcp", gw.base()), tasks_caps());
    let tools = c.ok("tools/list", json!({})).await["tools"].as_array().cloned().unwrap();
    let mut names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["directory_tree", "list_data", "list_directory_with_sizes", "read_text_file", "search_files"]);
    let tool = |name: &str| tools.iter().find(|t| t["name"] == name).unwrap().clone();
    let sizes = tool("list_directory_with_sizes");
    assert_eq!(sizes["inputSchema"]["properties"]["sortBy"]["default"], "size", "{sizes}");
    assert_eq!(tool("search_files")["annotations"]["idempotentHint"], true);
    assert_eq!(tool("search_files")["title"], "Search the data");
    // Its [[tool]] rule sees the new name: list_data is a plain call, even for a client with Tasks.
    let listed = c.call_tool("list_data", json!({})).await;
    assert_eq!(listed["resultType"], "complete", "{listed}");
    assert!(text(&listed).contains("inside.txt"), "{listed}");
    // A default fills sortBy only when the call leaves it out (the upstream's own default is "name").
    std::fs::write(s.data.join("a-small.txt"), "a").unwrap();
    std::fs::write(s.data.join("z-big.txt"), "z".repeat(1000)).unwrap();
    let plain = Client::new(format!("{}/mcp", gw.base()), json!({}));
    let order = |listing: String| (listing.find("z-big.txt"), listing.find("a-small.txt"));
    let (big, small) = order(text(&plain.call_tool("list_directory_with_sizes", json!({})).await));
    assert!(big.is_some() && big < small, "sorted by size, the biggest first");
    let by_name = json!({ "sortBy": "name" });
    let (big, small) = order(text(&plain.call_tool("list_directory_with_sizes", by_name).await));
    assert!(small.is_some() && small < big, "sorted by name, as the call asked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_a_worker_runs_the_pinned_tool_s_task_with_the_pinned_path() {
    let s = setup(0, SHAPING);
    let cluster = Cluster::new(&[]).await;
    let flags = ["--gateway-config", s.config.to_str().unwrap()];
    let (_api, url) = cluster.api(&flags).await;
    let _worker = cluster.worker("worker1", &flags).await;
    let c = Client::new(&url, tasks_caps());
    let id = task_id(&c.call_tool("ls", json!({})).await);
    let done = c.wait_task_for(&id, "completed", Duration::from_secs(30), |t| t["status"] == "completed").await;
    let listing = text(&done["result"]);
    assert!(listing.contains("inside.txt") && !listing.contains("secret"), "{done}");
    let other = s.data.with_file_name("other").display().to_string();
    assert_eq!(refused(&c, "ls", json!({ "path": other })).await["code"], -32602);
    assert_eq!(
        refused(&c, "list_directory", json!({ "path": other })).await["message"],
        "Unknown tool: list_directory"
    );
}

/// Run the gateway on `config` until it exits (killed after `limit`): its exit code and stderr.
fn run_to_exit(bin: &Path, config: &Path, limit: Duration) -> (Option<i32>, String) {
    let port = free_port().to_string();
    let mut child = std::process::Command::new(bin)
        .args(["--gateway-config", config.to_str().unwrap(), "--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}
