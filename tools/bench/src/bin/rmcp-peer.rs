//! `rmcp-peer`: the peer of presa-bench's comparison rows, a minimal rmcp (the
//! Rust SDK) echo server in a process of its own, as an rmcp user would ship it
//! (the system allocator, no telemetry). presa-bench starts it, reads the URL
//! it prints on its first line, and stops it by closing its stdin.
//!
//! Stateless Streamable HTTP (`legacy_session_mode` off, so `2026-07-28`
//! requests need no `initialize`), JSON replies, TCP_NODELAY on every accepted
//! connection, one `echo` tool (listed, so presa-gateway can front it). It answers exactly the request presa's `echo`
//! rows send (same body, same headers), so both sides are driven by the same
//! load loops.

use std::sync::Arc;

use axum::serve::ListenerExt;
use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult, PaginatedRequestParams,
        ServerCapabilities, ServerConfig, Tool,
    },
    service::RequestContext,
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::never::NeverSessionManager,
    },
};
use tokio::io::AsyncReadExt;

/// The rmcp handler: `echo` returns its `text` argument.
#[derive(Debug, Clone, Copy)]
struct Echo;

impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = serde_json::json!({ "type": "object", "properties": { "text": { "type": "string" } } });
        let schema = schema.as_object().cloned().unwrap_or_default();
        Ok(ListToolsResult::with_all_items(vec![Tool::new("echo", "Echoes `text`.", Arc::new(schema))]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let text = request.arguments.as_ref().and_then(|a| a.get("text")?.as_str()).unwrap_or_default();
        Ok(CallToolResult::success(vec![ContentBlock::text(text.to_string())]).into())
    }
}

/// Serve on a loopback port, print the URL, stop when stdin closes.
#[tokio::main]
async fn main() {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None);
    let service: StreamableHttpService<Echo, NeverSessionManager> =
        StreamableHttpService::new(|| Ok(Echo), Arc::new(NeverSessionManager::default()), config);
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
    let url = format!("http://{}/mcp", listener.local_addr().expect("a bound listener"));
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    println!("{url}");
    let stdin_closed = async {
        let mut sink = Vec::new();
        let _ = tokio::io::stdin().read_to_end(&mut sink).await;
    };
    let _ = axum::serve(listener, router).with_graceful_shutdown(stdin_closed).await;
}
