//! What the dispatcher tests share: one request through `Server::handle`,
//! as the transport would admit it (no HTTP), and its result.

use presa_protocol::{Method, jsonrpc::RequestId, meta::RequestMeta};
use presa_server::{Admitted, Outbox, Reply, Server};
use presa_store::Caller;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// `method` with `params` from the anonymous caller declaring `caps`.
pub(crate) async fn call(server: &Server, method: Method, mut params: Value, caps: Value) -> Reply {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
    });
    let params = params.as_object().expect("an object").clone();
    let meta = RequestMeta::from_params(&params).expect("valid _meta");
    let req = Admitted {
        id: RequestId::Number(1),
        method,
        params,
        meta,
        caller: Caller::anonymous(),
        outbox: Outbox::none(),
        cancel: CancellationToken::new(),
        tool: None,
    };
    server.handle(&req).await
}

/// The result of a reply that must be one.
pub(crate) fn result(reply: Reply) -> Value {
    match reply {
        Reply::Result(v) => v,
        Reply::Written(w) => w.to_value().expect("a written result parses"),
        other => panic!("expected a result, got {other:?}"),
    }
}
