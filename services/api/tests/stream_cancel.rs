//! Closing an SSE response stream cancels the request's work (Streamable
//! HTTP: "closing the SSE response stream MUST be treated as cancellation").

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use eventsource_stream::Eventsource;
use futures::StreamExt;
use presa_server::{Catalog, Core, Server, ServerConfig, StateCodec, Tool, ToolContext, ToolError, ToolOutput};
use presa_store::{Backend, memory::MemoryStore};
use serde_json::{Value, json};

struct StopFlag(Arc<AtomicBool>);

impl Drop for StopFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn closing_the_stream_cancels_the_handler() {
    let cancelled = Arc::new(AtomicBool::new(false));
    let seen = cancelled.clone();
    let catalog = Catalog::builder()
        .tool(Tool::new(
            "stream_forever",
            "Reports progress until cancelled.",
            json!({ "type": "object" }),
            move |ctx: ToolContext, _args: Value| {
                // Set when the handler stops, however it stops (dropped or returning).
                let stopped = StopFlag(seen.clone());
                async move {
                    let _stopped = stopped;
                    for i in 0.. {
                        ctx.progress(f64::from(i), None, None);
                        ctx.sleep(Duration::from_millis(50)).await?;
                    }
                    Ok::<_, ToolError>(ToolOutput::text("never"))
                }
            },
        ))
        .build()
        .unwrap();
    let core = Core::new(ServerConfig::default(), catalog, Backend::new(Arc::new(MemoryStore::new())));
    let server = Server::new(core, StateCodec::new(b"k"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(presa_http::serve(listener, presa_http::router(server, Default::default()), std::future::pending()));

    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "stream_forever",
        "_meta": { "progressToken": "t", "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                   "io.modelcontextprotocol/clientCapabilities": {} } } });
    let resp = reqwest::Client::new()
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "stream_forever")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    assert_eq!(resp.headers()["x-accel-buffering"], "no");
    let mut events = resp.bytes_stream().eventsource();
    for _ in 0..3 {
        let ev = tokio::time::timeout(Duration::from_secs(5), events.next()).await.unwrap().unwrap().unwrap();
        let v: Value = serde_json::from_str(&ev.data).unwrap();
        assert_eq!(v["method"], "notifications/progress");
    }
    assert!(!cancelled.load(Ordering::SeqCst));
    drop(events);
    for _ in 0..100 {
        if cancelled.load(Ordering::SeqCst) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the handler was not cancelled when the client closed the stream");
}
