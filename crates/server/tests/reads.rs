//! What `tasks/cancel` costs the store: the task is read once (the scoped
//! `get` that checks its owner and its tool's scopes), and that read is the
//! update's first guess, so the write needs no second read (`load`).

use std::{
    fmt,
    sync::{Arc, Mutex},
};

mod common;

use presa_protocol::Method;
use presa_server::{Catalog, Core, Server, ServerConfig, StateCodec, TaskPolicy, Tool, ToolContext, ToolError};
use presa_store::{Backend, memory::MemoryStore};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tracing::{
    Subscriber,
    field::{Field, Visit},
    span::{Attributes, Id},
};
use tracing_subscriber::{
    Layer,
    layer::{Context, SubscriberExt},
};

#[derive(Debug, Deserialize, JsonSchema)]
struct Nothing {}

async fn never_run(_ctx: ToolContext, _args: Nothing) -> Result<String, ToolError> {
    Ok("ran".into())
}

/// The `presa.store.operation` of every store span opened while installed.
#[derive(Clone, Default)]
struct StoreOps(Arc<Mutex<Vec<String>>>);

impl StoreOps {
    fn count(&self, op: &str) -> usize {
        self.0.lock().unwrap().iter().filter(|o| *o == op).count()
    }
}

impl<S: Subscriber> Layer<S> for StoreOps {
    fn on_new_span(&self, attrs: &Attributes<'_>, _id: &Id, _ctx: Context<'_, S>) {
        struct Operation(Option<String>);
        impl Visit for Operation {
            fn record_str(&mut self, field: &Field, value: &str) {
                if field.name() == "presa.store.operation" {
                    self.0 = Some(value.to_string());
                }
            }
            fn record_debug(&mut self, _field: &Field, _value: &dyn fmt::Debug) {}
        }
        let mut op = Operation(None);
        attrs.record(&mut op);
        if let Some(op) = op.0 {
            self.0.lock().unwrap().push(op);
        }
    }
}

/// `method` from a client declaring the Tasks extension; its result.
async fn call(server: &Server, method: Method, params: Value) -> Value {
    let caps = json!({ "extensions": { "io.modelcontextprotocol/tasks": {} } });
    common::result(common::call(server, method, params, caps).await)
}

#[tokio::test]
async fn a_cancel_reads_its_task_once() {
    let catalog = Catalog::builder()
        .tool(Tool::typed("queued", "Only ever queued here (no worker).", never_run).policy(TaskPolicy::Required))
        .build()
        .unwrap();
    let core = Core::new(ServerConfig::default(), catalog, Backend::new(Arc::new(MemoryStore::new())));
    let server = Server::new(core, StateCodec::new(b"reads-tests"));
    let created = call(&server, Method::ToolsCall, json!({ "name": "queued", "arguments": {} })).await;
    let id = created["taskId"].as_str().expect("a task").to_string();

    let ops = StoreOps::default();
    let _installed = tracing::subscriber::set_default(tracing_subscriber::registry().with(ops.clone()));
    let cancelled = call(&server, Method::TasksCancel, json!({ "taskId": id })).await;
    assert_eq!(cancelled["resultType"], "complete", "{cancelled}");
    assert_eq!((ops.count("get"), ops.count("load")), (1, 0), "{:?}", ops.0.lock().unwrap());
    drop(_installed);

    let task = call(&server, Method::TasksGet, json!({ "taskId": id })).await;
    assert_eq!(task["status"], "cancelled", "{task}");
}
