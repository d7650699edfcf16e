//! The dispatcher without HTTP: [`call`] builds an [`Admitted`] request the
//! way the transport would and returns the reply with every notification the
//! handler streamed on the request's outbox.

use std::{sync::Arc, time::Duration};

use presa_protocol::{
    Method,
    jsonrpc::RequestId,
    meta::{LogLevel, RequestMeta, SERVER_INFO_KEY},
};
use presa_store::{Backend, Caller, Scope, memory::MemoryStore};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Admitted, Reply, Server};
use crate::{
    catalog::Catalog, config::ServerConfig, context::ToolContext, core::Core, output::ToolError, output::ToolOutput,
    state::StateCodec, tool::TaskPolicy, tool::Tool, tool::ToolHandler,
};

fn tool(name: &str, schema: Value, handler: impl ToolHandler) -> Tool {
    Tool::new(name, format!("The {name} tool."), schema, handler)
}

fn object() -> Value {
    json!({ "type": "object" })
}

fn catalog() -> Catalog {
    Catalog::builder()
        .tool(tool(
            "greet",
            json!({ "type": "object", "properties": { "who": { "type": "string" } }, "required": ["who"] }),
            |_ctx: ToolContext, args: Value| async move { Ok(ToolOutput::text(format!("hello {}", args["who"]))) },
        ))
        .tool(tool("explode", object(), |_ctx: ToolContext, _args: Value| async {
            if std::hint::black_box(true) {
                panic!("secret detail");
            }
            Ok(ToolOutput::text("unreachable"))
        }))
        .tool(tool("refuse", object(), |_ctx: ToolContext, _args: Value| async {
            Err::<ToolOutput, _>(ToolError::Rpc(presa_protocol::jsonrpc::ErrorObject::new(-32602, "No such city")))
        }))
        .tool(tool("fail", object(), |_ctx: ToolContext, _args: Value| async {
            Err::<ToolOutput, _>(ToolError::internal("database password is hunter2"))
        }))
        .tool(tool("ask", object(), |ctx: ToolContext, _args: Value| async move {
            let answer =
                ctx.input("name", json!({ "method": "elicitation/create", "params": { "message": "Name?" } })).await?;
            Ok(ToolOutput::text(format!("hi {}", answer["content"]["name"])))
        }))
        .tool(tool("count", object(), |ctx: ToolContext, _args: Value| async move {
            // Two rounds: the state sealed into `requestState` comes back on the retry.
            match ctx.request_state() {
                Some(state) => Ok(ToolOutput::text(format!("round {}", state["round"]))),
                None => {
                    Ok(ToolOutput::InputRequired { requests: Default::default(), state: Some(json!({"round": 2})) })
                }
            }
        }))
        .tool(tool("chatty", object(), |ctx: ToolContext, _args: Value| async move {
            ctx.progress(1.0, Some(2.0), Some("half"));
            ctx.log(LogLevel::Debug, "chatty", json!("too detailed"));
            ctx.log(LogLevel::Warning, "chatty", json!("careful"));
            Ok(ToolOutput::text("done"))
        }))
        .tool(
            tool("long", object(), |_ctx: ToolContext, _args: Value| async { Ok(ToolOutput::text("later")) })
                .policy(TaskPolicy::Required),
        )
        .tool(tool("hold", object(), |ctx: ToolContext, _args: Value| async move {
            // Runs until its request is cancelled (or its deadline passes), saying when it was.
            let cancelled = ctx.cancellation();
            cancelled.cancelled().await;
            CANCELLED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(ToolOutput::text("cancelled"))
        }))
        .build()
        .expect("a valid catalog")
}

/// How many `hold` handlers saw their cancellation.
static CANCELLED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn server() -> Server {
    server_with(ServerConfig::default())
}

fn server_with(config: ServerConfig) -> Server {
    let config = ServerConfig { version: "1.2.3".into(), ..config };
    let core = Core::new(config, catalog(), Backend::new(Arc::new(MemoryStore::new())));
    Server::new(core, StateCodec::new(b"unit-test-key"))
}

/// `_meta` with the given capabilities and extra keys.
fn meta(capabilities: Value, extra: Value) -> Value {
    let mut m = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        m[k] = v.clone();
    }
    m
}

/// Dispatch `method` with `params` (which must carry `_meta`) as `subject`.
async fn call_as(server: &Server, subject: &str, method: Method, params: Value) -> (Reply, Vec<Value>) {
    call_cancellable(server, subject, method, params, CancellationToken::new()).await
}

/// [`call_as`], cancelled (as when the client goes away) by `cancel`.
async fn call_cancellable(
    server: &Server,
    subject: &str,
    method: Method,
    params: Value,
    cancel: CancellationToken,
) -> (Reply, Vec<Value>) {
    let params = params.as_object().expect("params are an object").clone();
    let meta = RequestMeta::from_params(&params).expect("valid _meta");
    let scope = Scope { tenant: "unit".into(), subject: subject.into(), endpoint: None };
    let (tx, mut rx) = mpsc::channel(crate::context::OUTBOX_BOUND);
    let outbox = crate::context::Outbox::new(tx);
    let caller = Caller { scope, scopes: None };
    let req = Admitted { id: RequestId::Number(7), method, params, meta, caller, outbox, cancel, tool: None };
    let reply = server.handle(&req).await;
    let notes = std::iter::from_fn(|| rx.try_recv().ok()).collect();
    (reply, notes)
}

async fn call(server: &Server, method: Method, params: Value) -> (Reply, Vec<Value>) {
    call_as(server, "alice", method, params).await
}

async fn tool_call(server: &Server, name: &str, arguments: Value, meta: Value) -> Reply {
    call(server, Method::ToolsCall, json!({ "name": name, "arguments": arguments, "_meta": meta })).await.0
}

fn result(reply: Reply) -> Value {
    match reply {
        Reply::Result(v) => v,
        Reply::Written(w) => w.to_value().expect("a written result parses"),
        other => panic!("expected a result, got {other:?}"),
    }
}

fn error(reply: Reply) -> presa_protocol::jsonrpc::ErrorObject {
    match reply {
        Reply::Error(e) => e,
        other => panic!("expected an error, got {other:?}"),
    }
}

fn plain() -> Value {
    meta(json!({}), json!({}))
}

#[tokio::test]
async fn a_tool_result_is_enveloped_with_result_type_and_server_info() {
    let s = server();
    let r = result(tool_call(&s, "greet", json!({ "who": "Ada" }), plain()).await);
    assert_eq!(r["content"], json!([{ "type": "text", "text": "hello \"Ada\"" }]));
    assert_eq!(r["resultType"], "complete");
    assert_eq!(r["_meta"][SERVER_INFO_KEY], json!({ "name": "presa", "version": "1.2.3" }));
}

#[tokio::test]
async fn every_method_answers_without_http() {
    let s = server();
    for method in Method::ALL {
        let params = match method {
            Method::ToolsCall => json!({ "name": "greet", "arguments": { "who": "x" } }),
            Method::PromptsGet => json!({ "name": "nope" }),
            Method::ResourcesRead => json!({ "uri": "nope://x" }),
            Method::Complete => json!({ "ref": {}, "argument": {} }),
            Method::Listen => json!({ "notifications": {} }),
            Method::TasksGet | Method::TasksUpdate | Method::TasksCancel => json!({ "taskId": "p00.unknown" }),
            _ => json!({}),
        };
        let mut params = params;
        params["_meta"] = meta(json!({ "extensions": { "io.modelcontextprotocol/tasks": {} } }), json!({}));
        match call(&s, method, params).await.0 {
            Reply::Result(v) => assert!(v["_meta"][SERVER_INFO_KEY].is_object(), "{method}: {v}"),
            Reply::Written(w) => {
                assert!(w.to_value().unwrap()["_meta"][SERVER_INFO_KEY].is_object(), "{method}: {w:?}");
            }
            Reply::Error(e) => assert_eq!(e.code, -32602, "{method}: only bad names fail: {e:?}"),
            Reply::Stream(_) => assert_eq!(method, Method::Listen),
            other @ Reply::InsufficientScope { .. } => panic!("{method}: no scope is required: {other:?}"),
        }
    }
}

#[tokio::test]
async fn tool_call_errors() {
    let s = server();
    let e = error(tool_call(&s, "nope", json!({}), plain()).await);
    assert_eq!((e.code, e.message.as_str()), (-32602, "Unknown tool: nope"));
    let e = error(call(&s, Method::ToolsCall, json!({ "name": "greet", "arguments": [1], "_meta": plain() })).await.0);
    assert_eq!((e.code, e.message.as_str()), (-32602, "arguments must be an object"));
    let e = error(call(&s, Method::ToolsCall, json!({ "_meta": plain() })).await.0);
    assert_eq!((e.code, e.message.as_str()), (-32602, "name must be a string"));

    // A schema violation is the tool's error, not the protocol's.
    let r = result(tool_call(&s, "greet", json!({ "who": 5 }), plain()).await);
    assert_eq!(r["isError"], true);
    assert!(r["content"][0]["text"].as_str().unwrap().starts_with("Invalid arguments for tool greet: /who"), "{r}");

    // A handler's chosen JSON-RPC error goes out as is; an internal one leaks nothing.
    assert_eq!(error(tool_call(&s, "refuse", json!({}), plain()).await).message, "No such city");
    for name in ["fail", "explode"] {
        let e = error(tool_call(&s, name, json!({}), plain()).await);
        assert_eq!((e.code, e.message.as_str(), &e.data), (-32603, "Internal error", &None), "{name}");
    }
    // The dispatcher keeps serving after a handler panicked.
    assert_eq!(result(tool_call(&s, "greet", json!({ "who": "b" }), plain()).await)["resultType"], "complete");
}

#[tokio::test]
async fn mrtr_asks_then_takes_the_answer() {
    let s = server();
    let elicit = meta(json!({ "elicitation": {} }), json!({}));
    let r = result(tool_call(&s, "ask", json!({}), elicit.clone()).await);
    assert_eq!(r["resultType"], "input_required");
    assert_eq!(r["inputRequests"]["name"]["method"], "elicitation/create");
    assert!(r.get("requestState").is_none(), "no state was asked for");

    // Never ask what the client cannot answer.
    let e = error(tool_call(&s, "ask", json!({}), plain()).await);
    assert_eq!(e.code, -32021);
    assert_eq!(e.data.unwrap()["requiredCapabilities"], json!({ "elicitation": {} }));

    let answered = json!({ "name": "ask", "arguments": {}, "_meta": elicit,
        "inputResponses": { "name": { "action": "accept", "content": { "name": "Ada" } } } });
    let r = result(call(&s, Method::ToolsCall, answered).await.0);
    assert_eq!(r["content"][0]["text"], "hi \"Ada\"");

    let bad = json!({ "name": "ask", "arguments": {}, "_meta": plain(), "inputResponses": { "name": 1 } });
    assert_eq!(error(call(&s, Method::ToolsCall, bad).await.0).code, -32602);
}

#[tokio::test]
async fn request_state_is_sealed_to_the_caller_and_the_call() {
    let s = server();
    let r = result(tool_call(&s, "count", json!({}), plain()).await);
    let state = r["requestState"].as_str().expect("a sealed state").to_string();
    let retry = |args: Value, state: &str| json!({ "name": "count", "arguments": args, "requestState": state, "_meta": plain() });
    let r = result(call(&s, Method::ToolsCall, retry(json!({}), &state)).await.0);
    assert_eq!(r["content"][0]["text"], "round 2");

    let e = error(call_as(&s, "mallory", Method::ToolsCall, retry(json!({}), &state)).await.0);
    assert_eq!((e.code, e.message.as_str()), (-32602, "requestState does not belong to this request"));
    let e = error(call(&s, Method::ToolsCall, retry(json!({ "x": 1 }), &state)).await.0);
    assert_eq!(e.message, "requestState does not belong to this request");
    let e = error(call(&s, Method::ToolsCall, retry(json!({}), &format!("{state}x"))).await.0);
    assert_eq!(e.message, "requestState integrity check failed");
}

#[tokio::test]
async fn progress_and_logs_go_to_the_outbox_only_when_asked() {
    let s = server();
    let (reply, notes) = call(&s, Method::ToolsCall, json!({ "name": "chatty", "_meta": plain() })).await;
    assert_eq!(result(reply)["content"][0]["text"], "done");
    assert!(notes.is_empty(), "nothing was asked for: {notes:?}");

    let asked = meta(json!({}), json!({ "progressToken": "p1", "io.modelcontextprotocol/logLevel": "warning" }));
    let (reply, notes) = call(&s, Method::ToolsCall, json!({ "name": "chatty", "_meta": asked })).await;
    assert_eq!(result(reply)["content"][0]["text"], "done");
    assert_eq!(
        notes,
        vec![
            json!({ "jsonrpc": "2.0", "method": "notifications/progress",
                    "params": { "progressToken": "p1", "progress": 1.0, "total": 2.0, "message": "half" } }),
            json!({ "jsonrpc": "2.0", "method": "notifications/message",
                    "params": { "level": "warning", "logger": "chatty", "data": "careful" } }),
        ]
    );
}

#[tokio::test]
async fn a_required_task_needs_the_extension_and_belongs_to_its_caller() {
    let s = server();
    let e = error(tool_call(&s, "long", json!({}), plain()).await);
    assert_eq!(e.code, -32021);
    let tasks = meta(json!({ "extensions": { "io.modelcontextprotocol/tasks": {} } }), json!({}));
    let r = result(tool_call(&s, "long", json!({}), tasks.clone()).await);
    assert_eq!((r["resultType"].as_str(), r["status"].as_str()), (Some("task"), Some("working")));
    let id = r["taskId"].clone();

    let get = json!({ "taskId": id, "_meta": tasks });
    let mine = result(call(&s, Method::TasksGet, get.clone()).await.0);
    assert_eq!(mine["taskId"], id);
    for method in [Method::TasksGet, Method::TasksCancel] {
        let e = error(call_as(&s, "mallory", method, get.clone()).await.0);
        assert_eq!((e.code, e.message.as_str()), (-32602, "Unknown or inaccessible taskId"), "{method}");
    }
    assert_eq!(result(call(&s, Method::TasksCancel, get.clone()).await.0), {
        let mut ack = json!({ "resultType": "complete" });
        ack["_meta"] = json!({ SERVER_INFO_KEY: { "name": "presa", "version": "1.2.3" } });
        ack
    });
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(result(call(&s, Method::TasksGet, get).await.0)["status"], "cancelled");
}

/// Alice holding her whole in-request call share does not stop Bob's plain
/// call; her next one is refused retryably (-32023, retryAfterMs), and her
/// places come back when her calls end.
#[tokio::test]
async fn in_request_calls_are_capped_per_scope_and_in_all() {
    let config = ServerConfig { max_inflight_calls: 3, max_inflight_calls_per_scope: 2, ..ServerConfig::default() };
    let s = server_with(config);
    let hold = json!({ "name": "hold", "arguments": {}, "_meta": plain() });
    let stop = CancellationToken::new();
    let mut held = Vec::new();
    for _ in 0..2 {
        let (s, hold, stop) = (s.clone(), hold.clone(), stop.clone());
        held.push(tokio::spawn(async move { call_cancellable(&s, "alice", Method::ToolsCall, hold, stop).await }));
    }
    while s.inflight_calls() < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let e = error(call_as(&s, "alice", Method::ToolsCall, hold.clone()).await.0);
    assert_eq!(e.code, -32023, "{e:?}");
    assert_eq!(e.data.as_ref().unwrap()["limit"], "max_inflight_calls_per_scope");
    assert_eq!(e.data.as_ref().unwrap()["retryAfterMs"], crate::error::INFLIGHT_RETRY_AFTER_MS);
    assert_eq!(e.http_status(), 429);
    let greet = json!({ "name": "greet", "arguments": { "who": "Bob" }, "_meta": plain() });
    let bob = tokio::time::timeout(Duration::from_secs(5), call_as(&s, "bob", Method::ToolsCall, greet.clone()));
    assert_eq!(result(bob.await.expect("Bob is not kept waiting").0)["content"][0]["text"], "hello \"Bob\"");
    // Bob holds the pod's last place: Carol is refused by the pod-wide cap.
    let bob_hold = CancellationToken::new();
    let bob_call = tokio::spawn({
        let (s, hold, stop) = (s.clone(), hold.clone(), bob_hold.clone());
        async move { call_cancellable(&s, "bob", Method::ToolsCall, hold, stop).await }
    });
    while s.inflight_calls() < 3 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let e = error(call_as(&s, "carol", Method::ToolsCall, greet.clone()).await.0);
    assert_eq!(e.data.unwrap()["limit"], "max_inflight_calls");
    stop.cancel();
    bob_hold.cancel();
    for h in held {
        h.await.unwrap();
    }
    bob_call.await.unwrap();
    assert_eq!(s.inflight_calls(), 0, "every place given back");
    assert_eq!(result(call_as(&s, "alice", Method::ToolsCall, greet).await.0)["resultType"], "complete");
}

/// A handler that runs past `call_timeout` is cancelled and its call fails
/// with an error naming the limit.
#[tokio::test]
async fn an_in_request_call_past_its_deadline_is_cancelled() {
    let config = ServerConfig { call_timeout: Some(Duration::from_millis(200)), ..ServerConfig::default() };
    let s = server_with(config);
    let before = CANCELLED.load(std::sync::atomic::Ordering::SeqCst);
    let started = std::time::Instant::now();
    let hold = json!({ "name": "hold", "arguments": {}, "_meta": plain() });
    let reply = tokio::time::timeout(Duration::from_secs(10), call(&s, Method::ToolsCall, hold)).await;
    let e = error(reply.expect("the deadline ends the call").0);
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(e.code, -32603);
    assert!(e.message.contains("timed out") && e.message.contains("200 ms"), "{}", e.message);
    assert_eq!(e.data.unwrap(), json!({ "limit": "call_timeout", "timeoutMs": 200 }));
    assert_eq!(s.inflight_calls(), 0, "its place is given back");
    // The handler's own token fired (a handler that spawned work sees it stop).
    let cancelled = CANCELLED.load(std::sync::atomic::Ordering::SeqCst);
    assert!(cancelled >= before, "{cancelled}");
}

/// A listen stream whose client stops reading is ended once it falls
/// behind its bus queue: the last message is an error saying it lagged,
/// and what it held is bounded by the queue, not by what was published.
#[tokio::test]
async fn a_listen_stream_that_lags_ends_with_an_error() {
    use futures::StreamExt;
    let s = server();
    let listen = json!({ "notifications": { "toolsListChanged": true }, "_meta": plain() });
    let Reply::Stream(mut stream) = call(&s, Method::Listen, listen).await.0 else { panic!("a stream") };
    let ack = stream.next().await.expect("the acknowledgement");
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    let published = presa_store::BUS_QUEUE.max_items * 2;
    for _ in 0..published {
        s.core().bus().publish("notifications/tools/list_changed").await.unwrap();
    }
    let mut notifications = 0;
    let last = loop {
        let next = tokio::time::timeout(Duration::from_secs(5), stream.next()).await.expect("no hang");
        match next {
            Some(m) if m["method"] == "notifications/tools/list_changed" => notifications += 1,
            Some(m) => break m,
            None => panic!("ended without a last message"),
        }
    };
    assert!(notifications < published, "{notifications} of {published} delivered: it lagged");
    assert_eq!(last["id"], 7, "{last}");
    assert_eq!(last["error"]["data"]["lagged"], true, "{last}");
    assert!(last["error"]["message"].as_str().unwrap().contains("lagged"), "{last}");
    assert!(stream.next().await.is_none(), "the stream ends after it");
    drop(stream);
    assert_eq!(s.active_listeners(), 0, "its place is given back with the ended stream");
}

/// Dispatch on `server` as alice holding `scopes` (`None`: no authentication).
async fn as_holder(server: &Server, scopes: Option<&[&str]>, method: Method, params: Value) -> Reply {
    let params = params.as_object().expect("params are an object").clone();
    let meta = RequestMeta::from_params(&params).expect("valid _meta");
    let scopes = scopes.map(|s| s.iter().map(ToString::to_string).collect());
    let caller = Caller { scope: Scope::new("unit", "alice"), scopes };
    let (tx, _rx) = mpsc::channel(crate::context::OUTBOX_BOUND);
    let outbox = crate::context::Outbox::new(tx);
    let cancel = CancellationToken::new();
    server
        .handle(&Admitted { id: RequestId::Number(7), method, params, meta, caller, outbox, cancel, tool: None })
        .await
}

/// Two virtual servers over one core: each its own tools, identity and
/// required scopes; a task made on one is unknown on the other and at the
/// root, exactly like a random id, for get, update and cancel.
#[tokio::test]
async fn endpoints_serve_their_own_catalog_identity_scopes_and_tasks() {
    let greet = || tool("greet", object(), |_ctx: ToolContext, _args: Value| async { Ok(ToolOutput::text("hi")) });
    let long = || {
        tool("long", object(), |_ctx: ToolContext, _args: Value| async { Ok(ToolOutput::text("later")) })
            .policy(TaskPolicy::Required)
    };
    let only = |greeting: bool| {
        let b = Catalog::builder().tool(long());
        if greeting { b.tool(greet()) } else { b }.build().expect("a valid catalog")
    };
    let a = crate::Endpoint {
        name: "a".into(),
        catalog: only(true).into(),
        scopes: vec!["team-a".into()],
        title: Some("Team A".into()),
        instructions: Some("For team A.".into()),
    };
    let b = crate::Endpoint {
        name: "b".into(),
        catalog: only(false).into(),
        scopes: vec![],
        title: None,
        instructions: None,
    };
    let root = server().with_endpoints(crate::Endpoints::new(vec![a, b], true).unwrap());
    let (a, b) = (root.endpoint("a").unwrap(), root.endpoint("b").unwrap());
    assert!(root.endpoint("c").is_none());
    let team_a: Option<&[&str]> = Some(&["team-a"]);

    let discover = json!({ "_meta": plain() });
    let d = result(as_holder(&a, team_a, Method::Discover, discover.clone()).await);
    assert_eq!(d["instructions"], "For team A.");
    assert_eq!(d["_meta"][SERVER_INFO_KEY], json!({ "name": "a", "title": "Team A", "version": "1.2.3" }));
    let d = result(as_holder(&b, None, Method::Discover, discover.clone()).await);
    assert_eq!((d["_meta"][SERVER_INFO_KEY]["name"].as_str(), d.get("instructions")), (Some("b"), None));

    let names = |r: Value| r["tools"].as_array().unwrap().iter().map(|t| t["name"].clone()).collect::<Vec<_>>();
    let list = json!({ "_meta": plain() });
    let mut on_a = names(result(as_holder(&a, team_a, Method::ToolsList, list.clone()).await));
    on_a.sort_by_key(ToString::to_string);
    assert_eq!(on_a, ["greet", "long"]);
    assert_eq!(names(result(as_holder(&b, Some(&[][..]), Method::ToolsList, list.clone()).await)), ["long"]);
    assert!(names(result(as_holder(&root, None, Method::ToolsList, list.clone()).await)).len() > 2);

    match as_holder(&a, Some(&["team-b"][..]), Method::ToolsList, list.clone()).await {
        Reply::InsufficientScope { scopes, .. } => assert_eq!(scopes, ["team-a"]),
        other => panic!("a caller without team-a is refused: {other:?}"),
    }
    let greet = json!({ "name": "greet", "arguments": { "who": "x" }, "_meta": plain() });
    let e = error(as_holder(&b, None, Method::ToolsCall, greet.clone()).await);
    assert_eq!((e.code, e.message.as_str()), (-32602, "Unknown tool: greet"));
    assert!(matches!(as_holder(&a, team_a, Method::ToolsCall, greet).await, Reply::Result(_)));

    let tasks = meta(json!({ "extensions": { "io.modelcontextprotocol/tasks": {} } }), json!({}));
    let long = json!({ "name": "long", "arguments": {}, "_meta": tasks.clone() });
    let created = result(as_holder(&a, team_a, Method::ToolsCall, long).await);
    let id = created["taskId"].as_str().expect("a task").to_string();
    let get = |id: &str| json!({ "taskId": id, "_meta": tasks.clone() });
    // A result written as text is the endpoint's too (its serverInfo renamed).
    assert_eq!(created["_meta"][SERVER_INFO_KEY], json!({ "name": "a", "title": "Team A", "version": "1.2.3" }));
    let got = result(as_holder(&a, team_a, Method::TasksGet, get(&id)).await);
    assert_eq!((got["taskId"].as_str(), &got["_meta"][SERVER_INFO_KEY]["name"]), (Some(id.as_str()), &json!("a")));
    let random = error(as_holder(&b, None, Method::TasksGet, get("no-such-task")).await);
    for method in [Method::TasksGet, Method::TasksUpdate, Method::TasksCancel] {
        let mut params = get(&id);
        params["inputResponses"] = json!({ "k": { "action": "cancel" } });
        for (on, name) in [(&b, "b"), (&root, "the root")] {
            let e = error(as_holder(on, None, method, params.clone()).await);
            assert_eq!(
                (e.code, &e.message, &e.data),
                (random.code, &random.message, &random.data),
                "{method:?} on {name}"
            );
        }
    }
    assert!(matches!(as_holder(&a, team_a, Method::TasksCancel, get(&id)).await, Reply::Result(_)));
}
