//! The dispatcher's typed insufficient-scope refusal on the wire, in both
//! eras: a caller without a tool's scope gets 403 with `WWW-Authenticate:
//! Bearer error="insufficient_scope", scope="…"` naming every scope the call
//! needs, and the dispatcher's JSON-RPC error as the body, byte for byte.

use std::sync::Arc;

use axum::{
    Router,
    body::Body,
    http::{Request, StatusCode, header, request::Parts},
};
use http_body_util::BodyExt;
use presa_http::{Authenticator, Caller, Challenge, HttpConfig, Refusal};
use presa_server::{Core, Server, ServerConfig, StateCodec};
use presa_store::{Backend, memory::MemoryStore};
use serde_json::{Value, json};
use tower::ServiceExt;

const METADATA: &str = "https://h.example/.well-known/oauth-protected-resource/mcp";
const CHALLENGE: &str = "Bearer error=\"insufficient_scope\", error_description=\"the token lacks a required scope\", \
     scope=\"mcp deploy\", resource_metadata=\"https://h.example/.well-known/oauth-protected-resource/mcp\"";

/// Every caller holds the required `mcp` scope and nothing else (not `deploy`).
struct McpOnly;

#[async_trait::async_trait]
impl Authenticator for McpOnly {
    async fn authenticate(&self, _parts: &Parts) -> Result<Caller, Refusal> {
        Ok(Caller::new("acme", "alice", vec!["mcp".into()]))
    }
}

fn app() -> Router {
    let backend = Backend::new(Arc::new(MemoryStore::new()));
    let core = Core::new(ServerConfig::default(), presa_demo::catalog().unwrap(), backend);
    let config = HttpConfig::default().with(|c| {
        c.access.authenticator = Arc::new(McpOnly);
        c.access.challenge = Challenge::new(Some(METADATA.into()), vec!["mcp".into()]);
    });
    presa_http::router(Server::new(core, StateCodec::new(b"test")), config)
}

struct Answer {
    status: StatusCode,
    challenge: Option<String>,
    session: Option<String>,
    body: String,
}

async fn post(app: &Router, headers: &[(&str, &str)], body: &Value) -> Answer {
    let mut req = Request::post("/mcp")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = app.clone().oneshot(req.body(Body::from(body.to_string())).unwrap()).await.unwrap();
    let header = |name: &str| resp.headers().get(name).map(|v| v.to_str().unwrap().to_string());
    let (challenge, session) = (header("www-authenticate"), header("mcp-session-id"));
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    Answer { status, challenge, session, body: String::from_utf8(bytes.to_vec()).unwrap() }
}

/// The refusal's body for request `id`: the dispatcher's error as is.
fn refusal_body(id: u64) -> String {
    format!(
        r#"{{"error":{{"code":-32600,"data":{{"requiredScopes":["deploy"]}},"message":"Insufficient scope"}},"id":{id},"jsonrpc":"2.0"}}"#
    )
}

#[tokio::test]
async fn a_modern_call_without_the_tools_scope_is_403_with_its_challenge() {
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": { "extensions": { "io.modelcontextprotocol/tasks": {} } },
        "io.modelcontextprotocol/clientInfo": { "name": "scope-tests", "version": "1.0.0" },
    });
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": { "name": "deploy_release", "arguments": { "version": "1.0" }, "_meta": meta } });
    let headers =
        [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call"), ("mcp-name", "deploy_release")];
    let r = post(&app(), &headers, &body).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    assert_eq!(r.challenge.as_deref(), Some(CHALLENGE));
    assert_eq!(r.body, refusal_body(1));
}

#[tokio::test]
async fn a_legacy_call_without_the_tools_scope_is_403_too_not_a_200_error() {
    let app = app();
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "scope-tests", "version": "1" } } });
    let r = post(&app, &[], &init).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let session = r.session.expect("a session id");
    let call = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": { "name": "deploy_release", "arguments": { "version": "1.0" } } });
    let r = post(&app, &[("mcp-session-id", &session)], &call).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    assert_eq!(r.challenge.as_deref(), Some(CHALLENGE));
    assert_eq!(r.body, refusal_body(2));
}
