//! What the catalog answers without running a tool or prompt handler: the
//! four lists, `resources/read` and `completion/complete`. Reads and
//! completions are async and run like a handler in its request: a place in
//! the in-request call pool, at most `call_timeout`, stopped when the client
//! goes away.

use presa_protocol::result::{CacheScope, CompleteResult, List, ListResult, ReadResult};
use serde_json::{Value, json};

use super::{Admitted, Server, invalid, required_str};
use crate::{artifacts::ArtifactsError, catalog::ResourceError, error::ServerError};

/// The most values one `completion/complete` answer carries (the spec's cap).
const MAX_COMPLETION_VALUES: usize = 100;

impl Server {
    pub(super) fn list_tools(&self) -> ListResult {
        self.list(List::Tools, self.catalog().tools().map(|t| t.descriptor().clone()).collect())
    }

    pub(super) fn list_resources(&self) -> ListResult {
        self.list(List::Resources, self.catalog().resources().iter().map(|r| r.descriptor.clone()).collect())
    }

    pub(super) fn list_resource_templates(&self) -> ListResult {
        self.list(List::ResourceTemplates, self.catalog().templates().iter().map(|t| t.descriptor.clone()).collect())
    }

    pub(super) fn list_prompts(&self) -> ListResult {
        self.list(List::Prompts, self.catalog().prompts().iter().map(|p| p.descriptor.clone()).collect())
    }

    /// A list result: the items, cacheable by anyone for the list TTL.
    fn list(&self, list: List, items: Vec<Value>) -> ListResult {
        ListResult { list, items, ttl_ms: self.config().list_ttl_ms }
    }

    /// `resources/read`: the reader runs inside the request's bounds
    /// ([`Server::in_request`]: the in-request call pool and `call_timeout`)
    /// and stops when the client goes away.
    pub(super) async fn read_resource(&self, req: &Admitted) -> Result<ReadResult, ServerError> {
        let uri = required_str(&req.params, "uri")?;
        let not_found = || ServerError::InvalidParamsData {
            message: format!("Resource not found: {uri}"),
            data: json!({ "uri": uri }),
        };
        if let (Some(artifacts), Some(_)) = (self.core().artifacts(), crate::artifacts::key_of(uri)) {
            let read = artifacts.read(self.store().as_ref(), &req.caller.scope, uri);
            return match self.in_request(req, until_cancelled(req, read)).await?? {
                Ok(Some(item)) => Ok(ReadResult {
                    contents: Value::Array(vec![item]),
                    ttl_ms: self.config().read_ttl_ms,
                    cache_scope: CacheScope::Private,
                }),
                Ok(None) => Err(not_found()),
                Err(e @ ArtifactsError::TooBig { .. }) => Err(ServerError::InvalidParams(e.to_string())),
                Err(e) if e.is_retryable() => Err(ServerError::Unavailable(e.to_string())),
                Err(e) => Err(ServerError::Internal(e.to_string())),
            };
        }
        let Some(read) = self.catalog().read(uri) else {
            return Err(not_found());
        };
        match self.in_request(req, until_cancelled(req, read)).await?? {
            Ok(contents) => {
                Ok(ReadResult { contents, ttl_ms: self.config().read_ttl_ms, cache_scope: CacheScope::Private })
            }
            Err(ResourceError::NotFound) => Err(not_found()),
            Err(e) => Err(resource_error(e)),
        }
    }

    /// `completion/complete`: the provider runs inside the request's bounds,
    /// as a resource read does; at most [`MAX_COMPLETION_VALUES`] values.
    pub(super) async fn complete(&self, req: &Admitted) -> Result<CompleteResult, ServerError> {
        let p = &req.params;
        let r#ref = p.get("ref").filter(|v| v.is_object()).ok_or_else(|| invalid("ref must be an object"))?;
        let argument =
            p.get("argument").filter(|v| v.is_object()).ok_or_else(|| invalid("argument must be an object"))?;
        let none = || json!({ "values": [] });
        let mut completion = match self.catalog().completer() {
            Some(f) => match self.in_request(req, until_cancelled(req, f(r#ref.clone(), argument.clone()))).await?? {
                Ok(c) => c,
                Err(ResourceError::NotFound) => none(),
                Err(e) => return Err(resource_error(e)),
            },
            None => none(),
        };
        if let Some(values) = completion.get_mut("values").and_then(Value::as_array_mut) {
            values.truncate(MAX_COMPLETION_VALUES);
        }
        Ok(CompleteResult { completion })
    }
}

/// `work`, given up when the request's client goes away.
async fn until_cancelled<T>(req: &Admitted, work: impl Future<Output = T>) -> Result<T, ServerError> {
    tokio::select! {
        out = work => Ok(out),
        () = req.cancel.cancelled() => Err(ServerError::Internal("request cancelled".into())),
    }
}

/// A reader's or completer's failure as the error sent.
fn resource_error(e: ResourceError) -> ServerError {
    match e {
        ResourceError::Rpc(e) => ServerError::Rpc(e),
        other => ServerError::Internal(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use presa_protocol::{Method, jsonrpc::RequestId, meta::RequestMeta};
    use presa_store::{Backend, Caller, Scope, memory::MemoryStore};
    use serde_json::{Value, json};
    use tokio::sync::{Notify, mpsc};
    use tokio_util::sync::CancellationToken;

    use crate::{
        catalog::Catalog,
        catalog::ResourceError,
        config::ServerConfig,
        core::Core,
        dispatch::Server,
        dispatch::{Admitted, Reply},
        state::StateCodec,
    };

    /// A catalog with a synchronous and an asynchronous resource, a template
    /// read asynchronously, one resource that never answers, and an async completer.
    fn catalog(stuck: Arc<Notify>) -> Catalog {
        Catalog::builder()
            .resource(json!({ "uri": "test://sync", "name": "sync" }), |uri, _| {
                Ok(json!([{ "uri": uri, "text": "read at once" }]))
            })
            .resource_async(json!({ "uri": "test://async", "name": "async" }), |uri, _| async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok(json!([{ "uri": uri, "text": "read later" }]))
            })
            .template_async(json!({ "uriTemplate": "test://item/{id}", "name": "item" }), |uri, vars| async move {
                match vars["id"].as_str() {
                    "gone" => Err(ResourceError::NotFound),
                    "busy" => Err(ResourceError::Rpc(presa_protocol::jsonrpc::ErrorObject::with_data(
                        -32603,
                        "busy",
                        json!({ "retryable": true }),
                    ))),
                    id => Ok(json!([{ "uri": uri, "text": format!("item {id}") }])),
                }
            })
            .resource_async(json!({ "uri": "test://stuck", "name": "stuck" }), move |_, _| {
                let stuck = stuck.clone();
                async move {
                    // Never answers; says when it was dropped.
                    let _dropped = Dropped(stuck);
                    std::future::pending::<()>().await;
                    Ok(Value::Null)
                }
            })
            .completion_async(|r#ref, argument| async move {
                tokio::task::yield_now().await;
                let value = argument["value"].as_str().unwrap_or_default().to_string();
                match r#ref["name"].as_str() {
                    Some("nothing") => Err(ResourceError::NotFound),
                    _ => Ok(json!({ "values": [format!("{value}-1"), format!("{value}-2")] })),
                }
            })
            .build()
            .expect("a valid catalog")
    }

    struct Dropped(Arc<Notify>);
    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.notify_one();
        }
    }

    fn server(config: ServerConfig, stuck: Arc<Notify>) -> Server {
        let core = Core::new(config, catalog(stuck), Backend::new(Arc::new(MemoryStore::new())));
        Server::new(core, StateCodec::new(b"unit-test-key"))
    }

    fn request(method: Method, mut params: Value, subject: &str, cancel: CancellationToken) -> Admitted {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        });
        let params = params.as_object().expect("an object").clone();
        let meta = RequestMeta::from_params(&params).expect("valid _meta");
        let caller =
            Caller { scope: Scope { tenant: "unit".into(), subject: subject.into(), endpoint: None }, scopes: None };
        // The receiver goes at once: what a handler streams is dropped, as for a client gone.
        let (tx, _rx) = mpsc::channel(crate::context::OUTBOX_BOUND);
        Admitted {
            id: RequestId::Number(1),
            method,
            params,
            meta,
            caller,
            outbox: crate::context::Outbox::new(tx),
            cancel,
            tool: None,
        }
    }

    async fn read(s: &Server, uri: &str) -> Reply {
        s.handle(&request(Method::ResourcesRead, json!({ "uri": uri }), "alice", CancellationToken::new())).await
    }

    #[tokio::test]
    async fn sync_and_async_readers_and_completers_answer() {
        let s = server(ServerConfig::default(), Arc::default());
        for (uri, text) in
            [("test://sync", "read at once"), ("test://async", "read later"), ("test://item/7", "item 7")]
        {
            let Reply::Result(r) = read(&s, uri).await else { panic!("{uri} is read") };
            assert_eq!(r["contents"][0]["text"], text, "{r}");
            assert_eq!(r["contents"][0]["uri"], uri, "{r}");
        }
        for uri in ["test://item/gone", "test://nothing"] {
            let Reply::Error(e) = read(&s, uri).await else { panic!("{uri} is not found") };
            assert_eq!((e.code, e.data), (-32602, Some(json!({ "uri": uri }))));
        }
        let Reply::Error(e) = read(&s, "test://item/busy").await else { panic!("busy is an error") };
        assert_eq!((e.code, e.message.as_str(), e.data), (-32603, "busy", Some(json!({ "retryable": true }))));
        let complete = |name: &str| {
            request(
                Method::Complete,
                json!({ "ref": { "type": "ref/prompt", "name": name }, "argument": { "name": "a", "value": "x" } }),
                "alice",
                CancellationToken::new(),
            )
        };
        let Reply::Result(r) = s.handle(&complete("p")).await else { panic!("completed") };
        assert_eq!(r["completion"]["values"], json!(["x-1", "x-2"]));
        let Reply::Result(r) = s.handle(&complete("nothing")).await else { panic!("completed") };
        assert_eq!(r["completion"]["values"], json!([]));
        assert_eq!(s.inflight_calls(), 0, "every place given back");
    }

    /// A reader that never answers is dropped at `call_timeout`, and the
    /// read fails naming the limit.
    #[tokio::test]
    async fn a_reader_past_call_timeout_fails_and_is_dropped() {
        let stuck = Arc::new(Notify::new());
        let config = ServerConfig { call_timeout: Some(Duration::from_millis(100)), ..ServerConfig::default() };
        let s = server(config, stuck.clone());
        let dropped = stuck.notified();
        let started = std::time::Instant::now();
        let reply = tokio::time::timeout(Duration::from_secs(10), read(&s, "test://stuck")).await;
        let Reply::Error(e) = reply.expect("the deadline ends the read") else { panic!("an error") };
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert_eq!(e.code, -32603);
        assert_eq!(e.data, Some(json!({ "limit": "call_timeout", "timeoutMs": 100 })));
        tokio::time::timeout(Duration::from_secs(1), dropped).await.expect("the reader's future was dropped");
        assert_eq!(s.inflight_calls(), 0, "its place is given back");
    }

    /// Reads count against the in-request call pool: past a scope's share a
    /// retryable -32023, while another scope is still served; a read whose
    /// client went away stops and gives its place back.
    #[tokio::test]
    async fn reads_are_capped_per_scope_and_stop_when_the_client_goes() {
        let stuck = Arc::new(Notify::new());
        let config = ServerConfig { max_inflight_calls_per_scope: 2, ..ServerConfig::default() };
        let s = server(config, stuck.clone());
        let gone = CancellationToken::new();
        let held: Vec<_> = (0..2)
            .map(|_| {
                let (s, gone) = (s.clone(), gone.clone());
                tokio::spawn(async move {
                    s.handle(&request(Method::ResourcesRead, json!({ "uri": "test://stuck" }), "alice", gone)).await
                })
            })
            .collect();
        while s.inflight_calls() < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let Reply::Error(e) = read(&s, "test://sync").await else { panic!("refused") };
        assert_eq!(e.code, -32023, "{e:?}");
        let data = e.data.expect("data");
        assert_eq!(
            (data["limit"].as_str(), data["retryable"].as_bool()),
            (Some("max_inflight_calls_per_scope"), Some(true))
        );
        assert!(data["retryAfterMs"].as_u64().is_some(), "{data}");
        let bob = request(Method::ResourcesRead, json!({ "uri": "test://sync" }), "bob", CancellationToken::new());
        assert!(matches!(s.handle(&bob).await, Reply::Result(_)), "another scope is served");
        gone.cancel();
        for h in held {
            assert!(matches!(h.await.expect("joined"), Reply::Error(_)));
        }
        assert_eq!(s.inflight_calls(), 0, "every place given back");
        assert!(matches!(read(&s, "test://sync").await, Reply::Result(_)));
    }
}
