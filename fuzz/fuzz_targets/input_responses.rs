//! `tasks/update` `inputResponses`, through the public path:
//! `presa_server::Server::handle` on an in-memory store, against a task that
//! waits for two answers. The input is the `inputResponses` value (JSON; any
//! other bytes are sent as a string) — or, when it is an object holding
//! `inputResponses`, the whole params (so `taskId` is fuzzed too).
#![no_main]

use std::{
    collections::BTreeMap,
    sync::{Arc, LazyLock},
};

use libfuzzer_sys::fuzz_target;
use presa_protocol::{Method, codes, jsonrpc::RequestId, meta::RequestMeta};
use presa_server::{Catalog, Core, Outbox, Reply, Server, ServerConfig, StateCodec, Tool, ToolContext, ToolOutput};
use presa_store::{Backend, Caller, CreateLimits, Scope, Writer, memory::MemoryStore};
use presa_tasks::{Event, NewTask, Status, Task, Work, apply};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

const ASKED: [&str; 2] = ["approve-1.4.0", "note"];

static RUNTIME: LazyLock<tokio::runtime::Runtime> =
    LazyLock::new(|| tokio::runtime::Builder::new_current_thread().build().expect("runtime"));

fn server() -> Server {
    let tool =
        Tool::new("deploy", "Asks twice.", json!({ "type": "object" }), |_ctx: ToolContext, _args: Value| async {
            Ok(ToolOutput::text("done"))
        });
    let catalog = Catalog::builder().tool(tool).build().expect("a valid catalog");
    let core = Core::new(ServerConfig::default(), catalog, Backend::new(Arc::new(MemoryStore::new())));
    Server::new(core, StateCodec::new(b"fuzz"))
}

fn scope() -> Scope {
    Scope { tenant: "fuzz".into(), subject: "alice".into(), endpoint: None }
}

/// A task parked on input with the two `ASKED` keys outstanding.
async fn waiting_task(server: &Server) -> Task {
    let store = server.core().store();
    let work = Work {
        tool: "deploy".into(),
        arguments: json!({}),
        client_capabilities: Map::new(),
        input_responses: None,
        trace: BTreeMap::new(),
        caller: None,
        replay_of: None,
        worker: None,
    };
    let new = NewTask { scope: scope(), work, ttl_ms: Some(60_000), poll_interval_ms: None, status_message: None };
    let task = store
        .create(new, CreateLimits { max_active_per_scope: None, max_bytes_per_scope: None, max_queued_per_partition: None })
        .await
        .expect("create");
    let asked = ASKED.iter().map(|k| (k.to_string(), json!({ "method": "elicitation/create", "params": {} })));
    let next =
        apply(&task, &Event::RequestInput(asked.collect()), task.updated_at_ms).expect("apply").expect("a change");
    store.transition(&next, Writer::Worker { attempt: next.attempt }).await.expect("transition");
    store.get(&scope(), &task.id).await.expect("get").expect("the task")
}

fuzz_target!(|data: &[u8]| {
    RUNTIME.block_on(async {
        let server = server();
        let task = waiting_task(&server).await;
        assert_eq!(task.status, Status::InputRequired);
        let value = serde_json::from_slice::<Value>(data).unwrap_or_else(|_| json!(String::from_utf8_lossy(data)));
        let mut params = match value {
            Value::Object(m) if m.contains_key("inputResponses") => m,
            v => Map::from_iter([("taskId".to_string(), json!(task.id.as_str())), ("inputResponses".to_string(), v)]),
        };
        params.insert(
            "_meta".into(),
            json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": { "extensions": { "io.modelcontextprotocol/tasks": {} } },
            }),
        );
        let meta = RequestMeta::from_params(&params).expect("valid _meta");
        let (tx, _rx) = tokio::sync::mpsc::channel(presa_server::context::OUTBOX_BOUND);
        let req = presa_server::Admitted {
            id: RequestId::Number(1),
            method: Method::TasksUpdate,
            params: params.clone(),
            meta,
            caller: Caller { scope: scope(), scopes: None },
            outbox: Outbox::new(tx),
            cancel: CancellationToken::new(),
            tool: None,
        };
        let reply = server.handle(&req).await;
        let after = server.core().store().get(&scope(), &task.id).await.expect("get").expect("still there");
        match reply {
            Reply::Result(v) => {
                assert_eq!(v["resultType"], "complete");
                // Only outstanding keys are taken, and only object answers.
                for (k, answer) in &after.input_responses {
                    assert!(ASKED.contains(&k.as_str()), "took {k:?}");
                    assert!(answer.is_object());
                }
                let answered = ASKED.iter().all(|k| after.input_responses.contains_key(*k));
                let expected = if answered { Status::Working } else { Status::InputRequired };
                assert_eq!(after.status, expected);
            }
            Reply::Error(e) => {
                assert_eq!(e.code, codes::INVALID_PARAMS, "{e:?}");
                assert_eq!(after.revision, task.revision, "a refused update changes nothing");
            }
            Reply::Stream(_) => panic!("tasks/update never streams"),
            // Only a create's and a tasks/get's results are written as text.
            Reply::Written(w) => panic!("tasks/update answers a value, not written text: {w:?}"),
            // The anonymous caller passes every scope check.
            Reply::InsufficientScope { .. } => panic!("tasks/update of the caller's own task refused for scope"),
        }
    });
});
