//! The typed authoring API end to end through the dispatcher (no HTTP):
//! derived schemas in `tools/list`, decoding errors, `?` on an `io::Error`,
//! and `ctx.elicit::<T>` as MRTR in a plain call and as `input_required`
//! → `tasks/update` → `completed` in a task run by an in-process worker.

use std::{sync::Arc, time::Duration};

mod common;

use common::{call, result};
use presa_protocol::Method;
use presa_server::{
    Catalog, Core, Elicited, Json, Reply, Server, ServerConfig, StateCodec, TaskPolicy, Tool, ToolContext, ToolError,
    Worker, WorkerConfig,
};
use presa_store::{Backend, memory::MemoryStore};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Deserialize, JsonSchema)]
struct Archive {
    /// Files to pack.
    files: Vec<String>,
    /// Compression level.
    #[schemars(range(min = 1, max = 9))]
    level: u8,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Packed {
    count: usize,
    level: u8,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Confirm {
    /// Go ahead?
    proceed: bool,
    reason: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Path {
    path: String,
}

async fn pack(_ctx: ToolContext, args: Archive) -> Result<Json<Packed>, ToolError> {
    Ok(Json(Packed { count: args.files.len(), level: args.level }))
}

async fn read(_ctx: ToolContext, args: Path) -> Result<String, ToolError> {
    Ok(std::fs::read_to_string(&args.path)?)
}

async fn guarded(ctx: ToolContext, args: Path) -> Result<String, ToolError> {
    Ok(match ctx.elicit::<Confirm>("confirm", format!("Delete {}?", args.path)).await? {
        Elicited::Accept(Confirm { proceed: true, reason }) => {
            format!("deleted {} ({})", args.path, reason.unwrap_or_default())
        }
        Elicited::Accept(_) => "kept".to_string(),
        Elicited::Decline => "declined".to_string(),
        Elicited::Cancel => "cancelled".to_string(),
    })
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Nap {
    ms: u64,
}

async fn nap(ctx: ToolContext, args: Nap) -> Result<String, ToolError> {
    ctx.sleep(Duration::from_millis(args.ms)).await?;
    Ok(format!("slept {} ms", args.ms))
}

fn catalog() -> Catalog {
    Catalog::builder()
        // Its outputSchema comes from the return type, Json<Packed>.
        .tool(Tool::typed("pack", "Packs files.", pack))
        .tool(Tool::typed("read", "Reads a file.", read))
        .tool(Tool::typed("guarded_delete", "Deletes after asking.", guarded).policy(TaskPolicy::Optional))
        .tool(Tool::typed("nap", "Sleeps `ms`.", nap).policy(TaskPolicy::After(Duration::from_millis(500))))
        .tool(
            Tool::typed("guarded_nap", "Asks, then answers.", guarded)
                .policy(TaskPolicy::After(Duration::from_millis(500))),
        )
        .build()
        .expect("typed schemas compile")
}

fn setup() -> (Core, Server) {
    let core = Core::new(ServerConfig::default(), catalog(), Backend::new(Arc::new(MemoryStore::new())));
    (core.clone(), Server::new(core, StateCodec::new(b"typed-tests")))
}

#[tokio::test]
async fn derived_schemas_are_listed_and_valid_2020_12() {
    let (_, server) = setup();
    let list = result(call(&server, Method::ToolsList, json!({}), json!({})).await);
    let pack = list["tools"].as_array().unwrap().iter().find(|t| t["name"] == "pack").expect("pack is listed").clone();
    let input = &pack["inputSchema"];
    assert_eq!(input["type"], "object");
    assert_eq!(input["properties"]["files"]["type"], "array");
    assert_eq!(input["properties"]["files"]["description"], "Files to pack.");
    assert_eq!(input["properties"]["level"]["maximum"], 9);
    assert_eq!(input["required"], json!(["files", "level"]));
    assert_eq!(pack["outputSchema"]["properties"]["count"]["type"], "integer");
    for schema in [input, &pack["outputSchema"]] {
        jsonschema::draft202012::meta::validate(schema).expect("a valid JSON Schema 2020-12");
    }
}

#[tokio::test]
async fn typed_results_bad_arguments_and_io_errors() {
    let (_, server) = setup();
    let ok = result(
        call(
            &server,
            Method::ToolsCall,
            json!({ "name": "pack", "arguments": { "files": ["a", "b"], "level": 3 } }),
            json!({}),
        )
        .await,
    );
    assert_eq!(ok["structuredContent"], json!({ "count": 2, "level": 3 }));

    let bad = result(
        call(
            &server,
            Method::ToolsCall,
            json!({ "name": "pack", "arguments": { "files": "a", "level": 30 } }),
            json!({}),
        )
        .await,
    );
    assert_eq!(bad["isError"], true);
    let text = bad["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("/files") && text.contains("/level"), "names both fields: {text}");

    let missing = "/nonexistent/presa-typed-test/secret-name.txt";
    match call(&server, Method::ToolsCall, json!({ "name": "read", "arguments": { "path": missing } }), json!({})).await
    {
        Reply::Error(e) => {
            assert_eq!((e.code, e.message.as_str(), &e.data), (-32603, "Internal error", &None));
            assert!(!e.message.contains("secret-name"), "the io::Error's message is never sent");
        }
        other => panic!("expected an internal error, got {other:?}"),
    }
}

#[tokio::test]
async fn elicit_in_a_plain_call_is_mrtr() {
    let (_, server) = setup();
    let params = json!({ "name": "guarded_delete", "arguments": { "path": "x.txt" } });
    let first = result(call(&server, Method::ToolsCall, params.clone(), json!({ "elicitation": {} })).await);
    assert_eq!(first["resultType"], "input_required");
    let request = &first["inputRequests"]["confirm"];
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["message"], "Delete x.txt?");
    assert_eq!(
        request["params"]["requestedSchema"],
        json!({ "type": "object", "required": ["proceed"], "properties": {
            "proceed": { "type": "boolean", "description": "Go ahead?" }, "reason": { "type": "string" } } })
    );
    let mut answered = params.clone();
    answered["inputResponses"] =
        json!({ "confirm": { "action": "accept", "content": { "proceed": true, "reason": "old" } } });
    let done = result(call(&server, Method::ToolsCall, answered, json!({ "elicitation": {} })).await);
    assert_eq!(done["content"][0]["text"], "deleted x.txt (old)");

    let mut declined = params;
    declined["inputResponses"] = json!({ "confirm": { "action": "decline" } });
    let done = result(call(&server, Method::ToolsCall, declined, json!({ "elicitation": {} })).await);
    assert_eq!(done["content"][0]["text"], "declined");
}

#[tokio::test]
async fn elicit_in_a_task_parks_until_tasks_update() {
    let (core, server) = setup();
    let stop = CancellationToken::new();
    let config = WorkerConfig { claim_wait: Duration::from_millis(50), ..WorkerConfig::default() };
    let worker = tokio::spawn(Worker::new(core, config).run(stop.clone()));
    let caps = json!({ "elicitation": {}, "extensions": { "io.modelcontextprotocol/tasks": {} } });
    let created = result(
        call(
            &server,
            Method::ToolsCall,
            json!({ "name": "guarded_delete", "arguments": { "path": "y.txt" } }),
            caps.clone(),
        )
        .await,
    );
    assert_eq!(created["resultType"], "task");
    let id = created["taskId"].clone();
    let get = || call(&server, Method::TasksGet, json!({ "taskId": id }), caps.clone());
    let parked = poll(&get, |t| t["status"] == "input_required").await;
    assert_eq!(
        parked["inputRequests"]["confirm"]["params"]["requestedSchema"]["properties"]["proceed"]["type"],
        "boolean"
    );
    let answer = json!({ "taskId": id, "inputResponses": { "confirm": { "action": "accept", "content": { "proceed": false } } } });
    result(call(&server, Method::TasksUpdate, answer, caps.clone()).await);
    let done = poll(&get, |t| t["status"] == "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "kept");
    stop.cancel();
    worker.await.expect("the worker stops");
}

async fn poll<F, Fut>(get: &F, done: impl Fn(&Value) -> bool) -> Value
where
    F: Fn() -> Fut,
    Fut: Future<Output = Reply>,
{
    for _ in 0..200 {
        let task = result(get().await);
        if done(&task) {
            return task;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the task never reached the expected state");
}

/// `TaskPolicy::After`: a task from the start for a client that declared
/// Tasks, answered as a plain call when it ends in time, else (or when it
/// asks for input) with its handle; a plain call for other clients.
#[tokio::test]
async fn the_adaptive_policy_answers_fast_calls_plainly_and_slow_ones_with_a_task() {
    let (core, server) = setup();
    let stop = CancellationToken::new();
    let config = WorkerConfig {
        claim_wait: Duration::from_millis(50),
        grace: Duration::from_millis(100),
        ..WorkerConfig::default()
    };
    let worker = tokio::spawn(Worker::new(core.clone(), config).run(stop.clone()));
    let tasks = json!({ "elicitation": {}, "extensions": { "io.modelcontextprotocol/tasks": {} } });

    let fast = result(
        call(&server, Method::ToolsCall, json!({ "name": "nap", "arguments": { "ms": 10 } }), tasks.clone()).await,
    );
    assert_eq!(fast["resultType"], "complete", "{fast}");
    assert_eq!(fast["content"][0]["text"], "slept 10 ms", "{fast}");

    let slow = result(
        call(&server, Method::ToolsCall, json!({ "name": "nap", "arguments": { "ms": 1500 } }), tasks.clone()).await,
    );
    assert_eq!(slow["resultType"], "task", "{slow}");
    let id = slow["taskId"].as_str().unwrap().to_string();
    let mut done = Value::Null;
    for _ in 0..100 {
        done = result(call(&server, Method::TasksGet, json!({ "taskId": id }), tasks.clone()).await);
        if done["status"] == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(done["result"]["content"][0]["text"], "slept 1500 ms", "{done}");

    let asks = result(
        call(
            &server,
            Method::ToolsCall,
            json!({ "name": "guarded_nap", "arguments": { "path": "/x" } }),
            tasks.clone(),
        )
        .await,
    );
    assert_eq!(asks["resultType"], "task", "a question needs the handle: {asks}");

    // Without the Tasks extension: a plain call, however long.
    let plain =
        result(call(&server, Method::ToolsCall, json!({ "name": "nap", "arguments": { "ms": 700 } }), json!({})).await);
    assert_eq!(plain["content"][0]["text"], "slept 700 ms", "{plain}");
    stop.cancel();
    let _ = worker.await;
}
