//! Virtual servers (`[[server]]`, served at `/mcp/<name>`), embedded, in
//! front of two upstreams: the Python server written with the official `mcp`
//! SDK (`tests/gateway/upstream.py`) twice over stdio, as `a` (prefix `a_`)
//! and `b` (prefix `b_`).
//!
//! Server `alpha` serves upstream `a` without `a_add`, needs scope
//! `team-a`; server `beta` serves `b`'s tools and `a_slow_idempotent`,
//! needs `team-b`. Their `tools/list` differ, each `server/discover` says
//! its own identity, a token without a server's scope gets 403
//! `insufficient_scope`, a tool hidden from a server is an unknown tool
//! there, an unknown server is 404, and a task created on `alpha` is unknown
//! (the same error as a random id) on `beta` and on `/mcp` for
//! `tasks/get`, `tasks/update` and `tasks/cancel`, while `alpha` still
//! reads and cancels it.

mod common;

use common::{gateway_toml, gateway_with_tokens, python_upstream};
use presa_testkit::{Client, task_id, tasks_caps};
use serde_json::{Value, json};

/// Three tokens of one principal (tenant `acme`, `alice`): with scope
/// `team-a`, with `team-b`, with both.
fn tokens(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("tokens");
    let lines = [("a-token", "team-a"), ("b-token", "team-b"), ("ab-token", "team-a team-b")]
        .map(|(token, scopes)| format!("{} acme alice {scopes}\n", presa_auth::tokens::token_digest(token)))
        .concat();
    std::fs::write(&path, lines).unwrap();
    path
}

fn names(list: &Value) -> Vec<String> {
    let mut n: Vec<String> =
        list["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str().map(str::to_string)).collect();
    n.sort();
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_virtual_servers_have_their_own_catalog_identity_scopes_and_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let command = serde_json::to_string(&python_upstream()).unwrap();
    let config = format!(
        r#"
[[upstream]]
name = "a"
command = {command}
prefix = "a_"
pool = 2

[[upstream]]
name = "b"
command = {command}
prefix = "b_"
pool = 2

[[server]]
name = "alpha"
upstreams = ["a"]
hide = ["a_add"]
scopes = ["team-a"]
title = "Alpha tools"
instructions = "Alpha: the a upstream, without add."

[[server]]
name = "beta"
upstreams = ["a", "b"]
tools = ["b_*", "a_slow_idempotent"]
scopes = ["team-b"]
title = "Beta tools"
"#
    );
    let gw = gateway_with_tokens(&gateway_toml(dir.path(), &config), &tokens, &[]).await;
    let at = |path: &str| format!("{}{path}", gw.base());
    let client = |path: &str, token: &str| Client::new(at(path), tasks_caps()).with_bearer(token);
    let (alpha, beta, root) =
        (client("/mcp/alpha", "ab-token"), client("/mcp/beta", "ab-token"), client("/mcp", "ab-token"));

    // Different catalogs, drawn from their upstreams, under the gateway's names.
    let on_alpha = names(&alpha.ok("tools/list", json!({})).await);
    let on_beta = names(&beta.ok("tools/list", json!({})).await);
    let on_root = names(&root.ok("tools/list", json!({})).await);
    assert!(on_alpha.iter().all(|n| n.starts_with("a_")) && on_alpha.contains(&"a_slow_idempotent".into()));
    assert!(!on_alpha.contains(&"a_add".into()), "hidden from alpha: {on_alpha:?}");
    assert!(on_beta.contains(&"b_add".into()) && on_beta.contains(&"a_slow_idempotent".into()), "{on_beta:?}");
    assert!(on_beta.iter().all(|n| n.starts_with("b_") || n == "a_slow_idempotent"), "{on_beta:?}");
    assert!(on_root.contains(&"a_add".into()) && on_root.len() > on_alpha.len().max(on_beta.len()), "{on_root:?}");
    let prompts = beta.ok("prompts/list", json!({})).await;
    assert_eq!(prompts["prompts"].as_array().map(Vec::len), Some(2), "both upstreams' prompts on beta: {prompts}");

    // Each its own identity.
    let d = alpha.ok("server/discover", json!({})).await;
    assert_eq!(d["instructions"], "Alpha: the a upstream, without add.", "{d}");
    let info = &d["_meta"]["io.modelcontextprotocol/serverInfo"];
    assert_eq!((info["name"].as_str(), info["title"].as_str()), (Some("alpha"), Some("Alpha tools")), "{d}");
    let d = beta.ok("server/discover", json!({})).await;
    let info = &d["_meta"]["io.modelcontextprotocol/serverInfo"];
    assert_eq!(
        (info["name"].as_str(), info["title"].as_str(), d.get("instructions")),
        (Some("beta"), Some("Beta tools"), None)
    );
    let d = root.ok("server/discover", json!({})).await;
    assert_eq!(d["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "presa-gateway", "{d}");

    // Its scopes on every request.
    for (path, token, missing) in [("/mcp/alpha", "b-token", "team-a"), ("/mcp/beta", "a-token", "team-b")] {
        for method in ["tools/list", "server/discover"] {
            let (status, _, e) = client(path, token).refused(method, json!({})).await;
            assert_eq!(status, 403, "{path} {method} with {token}: {e}");
            assert_eq!(e["data"]["requiredScopes"], json!([missing]), "{e}");
        }
    }
    assert!(
        names(&client("/mcp/alpha", "a-token").ok("tools/list", json!({})).await).contains(&"a_slow_idempotent".into())
    );

    // A tool hidden from a server is unknown there, like a tool that does not exist.
    let call = |name: &str| json!({ "name": name, "arguments": { "a": 1, "b": 2 } });
    let (_, hidden) = alpha.err("tools/call", call("a_add")).await;
    let (_, unknown) = alpha.err("tools/call", call("no_such_tool")).await;
    assert_eq!(hidden["code"], unknown["code"], "{hidden}");
    assert_eq!(
        hidden["message"].as_str().unwrap().replace("a_add", "<t>"),
        unknown["message"].as_str().unwrap().replace("no_such_tool", "<t>")
    );
    let (_, not_beta) = beta.err("tools/call", call("a_add")).await;
    assert_eq!(not_beta["message"], "Unknown tool: a_add", "{not_beta}");
    let plain_root = Client::new(at("/mcp"), json!({})).with_bearer("ab-token");
    let added = plain_root.ok("tools/call", call("a_add")).await;
    assert_eq!(added["content"][0]["text"], "3", "/mcp serves everything: {added}");

    // An unknown server: 404 with a JSON-RPC error.
    let (status, body) = client("/mcp/gamma", "ab-token").send("tools/list", json!({})).await;
    assert_eq!(status, 404, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("/mcp/gamma"), "{body}");

    // A task created on alpha is alpha's.
    let id = task_id(&alpha.call_tool("a_slow_idempotent", json!({ "steps": 20, "step_ms": 200 })).await);
    assert_eq!(alpha.get_task(&id).await["taskId"], id.as_str());
    let params = |id: &str, method: &str| match method {
        "tasks/update" => json!({ "taskId": id, "inputResponses": { "k": { "action": "cancel" } } }),
        _ => json!({ "taskId": id }),
    };
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let (random_status, random) = beta.err(method, params("no-such-task-id", method)).await;
        for (elsewhere, on) in [(&beta, "beta"), (&root, "/mcp")] {
            let (status, e) = elsewhere.err(method, params(&id, method)).await;
            assert_eq!((status, &e), (random_status, &random), "{method} of alpha's task on {on}");
        }
    }
    assert_eq!(alpha.get_task(&id).await["status"], "working", "untouched by the others' cancels");
    alpha.ok("tasks/cancel", json!({ "taskId": id })).await;
    alpha.wait_status(&id, "cancelled").await;
}
