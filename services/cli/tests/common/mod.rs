//! Helpers for the `presa` binary tests: the binaries, an embedded
//! `presa-api`, running `presa`, and a fake HTTP server for error answers.

#![allow(dead_code, unreachable_pub)]

use std::{
    path::PathBuf,
    process::Stdio,
    sync::{Arc, Mutex},
};

use presa_testkit::{Pod, free_port};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
};

/// The `presa` binary under test.
pub fn presa_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_presa"))
}

/// `presa-api`, next to `presa` in the target dir (built by `cargo test
/// --workspace`; with `-p presa-cli`, run `cargo build -p presa-api -p presa-worker` first).
pub fn api_bin() -> PathBuf {
    presa_bin().with_file_name("presa-api")
}

/// `presa-worker`, next to `presa`.
pub fn worker_bin() -> PathBuf {
    presa_bin().with_file_name("presa-worker")
}

/// An embedded `presa-api` (in-memory store, in-process workers).
pub async fn embedded() -> Pod {
    Pod::start("api", &api_bin(), free_port(), &[], &[]).await
}

pub use presa_testkit::cli::Out;

/// A `presa` command for `url` with no `PRESA_*` variables from the outside.
pub fn command(url: &str, args: &[&str]) -> tokio::process::Command {
    let mut c = tokio::process::Command::from(presa_testkit::cli::command(&presa_bin(), url, args));
    c.stdin(Stdio::null()).kill_on_drop(true);
    c
}

/// Run `presa --url URL ARGS…` to its end (60 s at most).
pub async fn presa(url: &str, args: &[&str]) -> Out {
    presa_testkit::cli::run(&presa_bin(), url, args).await
}

/// Create a task with `presa call … --detach`; its id.
pub async fn detached(url: &str, args: &[&str]) -> String {
    let mut all = vec!["call"];
    all.extend_from_slice(args);
    all.push("--detach");
    let out = presa(url, &all).await;
    assert_eq!(out.code, 0, "{out}");
    let id = out.stdout.trim().to_string();
    assert!(id.starts_with("p"), "{out}");
    id
}

/// Read one HTTP/1.1 request (head and `content-length` body) from `s`.
async fn read_request(s: &mut tokio::net::TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = vec![0u8; 65536];
    let mut got = Vec::new();
    loop {
        let n = s.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        got.extend_from_slice(&buf[..n]);
        let Some(head_end) = got.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
        let head = String::from_utf8_lossy(&got[..head_end]).into_owned();
        let len = head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0);
        if got.len() >= head_end + 4 + len {
            return Some((head, got[head_end + 4..head_end + 4 + len].to_vec()));
        }
    }
}

/// What [`proxy`] does with a request, by its `Mcp-Method` (`None` when absent).
pub enum Hook {
    /// Forward it and pass the answer on.
    Forward,
    /// Answer this (status, JSON body) without forwarding it.
    Answer(u16, String),
    /// Forward it (the server acts on it), then answer 502 as a proxy whose
    /// upstream died before answering would: the answer is lost.
    LoseAnswer,
}

/// A forwarded request's method, and the status and body the upstream answered.
pub type Forwarded = Arc<Mutex<Vec<(String, u16, String)>>>;

/// A proxy to `upstream` (an MCP URL) doing what `hook` says with each
/// request; its URL, and what it forwarded.
pub async fn proxy(upstream: &str, hook: impl Fn(Option<&str>) -> Hook + Send + Sync + 'static) -> (String, Forwarded) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let upstream = upstream.to_string();
    let http = reqwest::Client::new();
    let hook = Arc::new(hook);
    let forwarded: Forwarded = Arc::default();
    let log = forwarded.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let (upstream, http, hook, log) = (upstream.clone(), http.clone(), hook.clone(), log.clone());
            tokio::spawn(async move {
                while let Some((head, body)) = read_request(&mut s).await {
                    let headers: Vec<(String, String)> = head
                        .lines()
                        .skip(1)
                        .filter_map(|l| l.split_once(':'))
                        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
                        .collect();
                    let method = headers.iter().find(|(k, _)| k == "mcp-method").map(|(_, v)| v.clone());
                    let action = hook(method.as_deref());
                    let (status, content_type, reply) = match action {
                        Hook::Answer(status, body) => (status, "application/json".to_string(), body.into_bytes()),
                        Hook::Forward | Hook::LoseAnswer => {
                            let mut req = http.post(&upstream).body(body);
                            for (k, v) in &headers {
                                if k.starts_with("mcp-")
                                    || ["content-type", "accept", "authorization", "idempotency-key"]
                                        .contains(&k.as_str())
                                {
                                    req = req.header(k.as_str(), v.as_str());
                                }
                            }
                            let resp = req.send().await.unwrap();
                            let status = resp.status().as_u16();
                            let ct = resp
                                .headers()
                                .get("content-type")
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or("application/json")
                                .to_string();
                            let reply = resp.bytes().await.unwrap().to_vec();
                            let text = String::from_utf8_lossy(&reply).into_owned();
                            log.lock().unwrap().push((method.clone().unwrap_or_default(), status, text));
                            if matches!(action, Hook::LoseAnswer) {
                                (502, "text/html".to_string(), b"<html>502 Bad Gateway</html>".to_vec())
                            } else {
                                (status, ct, reply)
                            }
                        }
                    };
                    let head = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
                        reply.len()
                    );
                    if s.write_all(head.as_bytes()).await.is_err() || s.write_all(&reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, forwarded)
}

/// An MCP server without `subscriptions/listen`: a proxy to `upstream` (an
/// MCP URL) that answers `subscriptions/listen` with 404 `-32601` and
/// forwards every other request. Its URL.
pub async fn without_listen(upstream: &str) -> String {
    let e = r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}"#;
    proxy(upstream, move |method| match method {
        Some("subscriptions/listen") => Hook::Answer(404, e.to_string()),
        _ => Hook::Forward,
    })
    .await
    .0
}

/// A server answering every request with `status`, `headers` and `body`;
/// its URL, and the requests it received (head, then body, lower-cased head).
pub async fn fake_server(status: &str, headers: &[&str], body: &str) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let mut response =
        format!("HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n", body.len());
    for h in headers {
        response.push_str(h);
        response.push_str("\r\n");
    }
    response.push_str("connection: close\r\n\r\n");
    response.push_str(body);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            if let Some((head, body)) = read_request(&mut s).await {
                log.lock().unwrap().push(format!(
                    "{}\n\n{}",
                    head.to_ascii_lowercase(),
                    String::from_utf8_lossy(&body)
                ));
            }
            let _ = s.write_all(response.as_bytes()).await;
            let _ = s.shutdown().await;
        }
    });
    (url, seen)
}
