//! [`Core`]: what the dispatcher ([`crate::Server`]) and the worker pool
//! ([`crate::Worker`]) share: the catalog they run, the backend they run it
//! on, the settings, and the one place a handler's output becomes a protocol
//! result (`Outcome` and `Core::envelope`), so a tool answers the same
//! bytes whether it ran inside its request or as a task on a worker pod.

use std::{
    collections::BTreeMap,
    fmt,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use presa_protocol::{ResultType, jsonrpc::ErrorObject, meta::SERVER_INFO_KEY, written::Written};
use presa_store::{Backend, EventBus, TaskStore};
use serde_json::{Map, Value, json};

use crate::{
    artifacts::Artifacts,
    catalog::{Catalog, CatalogCell},
    config::ServerConfig,
    output::{ToolError, ToolOutput},
    store_io::{Verbosity, store_call_at},
};
use presa_telemetry::metrics;

#[derive(Clone)]
struct Inner {
    config: ServerConfig,
    catalog: CatalogCell,
    backend: Backend,
    artifacts: Option<Artifacts>,
    /// Tasks created through this core since the process started (shared
    /// by every clone, so the node's heartbeat reports the dispatcher's).
    created: Arc<AtomicU64>,
    /// The `_meta` [`Core::envelope`] gives a result, as JSON text (for
    /// results written as text, [`Core::envelope_written`]).
    meta_text: Arc<[u8]>,
}

/// The catalog, the backend and the settings, shared by a [`crate::Server`]
/// and a [`crate::Worker`]. Cheap to clone.
#[derive(Clone)]
pub struct Core {
    inner: Arc<Inner>,
}

impl fmt::Debug for Core {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Core")
            .field("name", &self.inner.config.name)
            .field("catalog", &self.inner.catalog)
            .field("store", &self.inner.backend.store)
            .field("artifacts", &self.inner.artifacts.as_ref().map(|a| a.store().name()))
            .finish()
    }
}

impl Core {
    /// Bundle what a server and its workers run: a [`Catalog`], or a
    /// [`CatalogCell`] whose catalog may be replaced while it is served.
    pub fn new(config: ServerConfig, catalog: impl Into<CatalogCell>, backend: Backend) -> Self {
        let created = Arc::new(AtomicU64::new(0));
        let meta_text = serde_json::to_vec(&Self::meta_of(&config)).unwrap_or_else(|_| b"{}".to_vec()).into();
        let inner = Inner { config, catalog: catalog.into(), backend, artifacts: None, created, meta_text };
        Core { inner: Arc::new(inner) }
    }

    /// Spill big task results into `artifacts` and serve them back to their
    /// owners (see [`crate::artifacts`]). Without it, a result over
    /// `max_result_bytes` fails its task.
    pub fn with_artifacts(self, artifacts: Artifacts) -> Self {
        let mut inner = Arc::unwrap_or_clone(self.inner);
        inner.artifacts = Some(artifacts);
        Core { inner: Arc::new(inner) }
    }

    /// Where big results go, when an artifact store is configured.
    pub fn artifacts(&self) -> Option<&Artifacts> {
        self.inner.artifacts.as_ref()
    }

    /// Tasks created through this core since the process started: what
    /// its node's heartbeat reports as `created` (the admin history's
    /// creations a second are these, summed over the registry).
    pub fn tasks_created(&self) -> u64 {
        self.inner.created.load(Ordering::Relaxed)
    }

    /// A task was created through this core.
    pub(crate) fn count_created(&self) {
        self.inner.created.fetch_add(1, Ordering::Relaxed);
    }

    /// The settings.
    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    /// The catalog now (it may be replaced between two requests).
    pub fn catalog(&self) -> Arc<Catalog> {
        self.inner.catalog.load()
    }

    /// The cell the catalog lives in.
    pub fn catalog_cell(&self) -> &CatalogCell {
        &self.inner.catalog
    }

    /// The task store (the records).
    pub fn store(&self) -> &Arc<dyn TaskStore> {
        &self.inner.backend.store
    }

    /// The work queue workers claim from ([`presa_store::WorkQueue`]).
    pub fn work(&self) -> &Arc<dyn presa_store::WorkQueue> {
        &self.inner.backend.work
    }

    /// The dead letters of poison tasks ([`presa_store::DeadLetters`]).
    pub fn dead_letters(&self) -> &Arc<dyn presa_store::DeadLetters> {
        &self.inner.backend.dead
    }

    /// The event bus.
    pub fn bus(&self) -> &Arc<dyn EventBus> {
        &self.inner.backend.bus
    }

    /// The rates that span the cluster (a tool's, `Tool::rate`).
    pub fn rates(&self) -> &Arc<dyn presa_store::Rates> {
        &self.inner.backend.rates
    }

    /// The circuit breakers that span the cluster (a tool's, `Tool::breaker`).
    pub fn breakers(&self) -> &Arc<dyn presa_store::Breakers> {
        &self.inner.backend.breakers
    }

    /// The concurrency permits that span the cluster (a tool's, `Tool::concurrency`).
    pub fn permits(&self) -> &Arc<dyn presa_store::Permits> {
        &self.inner.backend.permits
    }

    /// The admin reads and the process registry ([`presa_store::AdminStore`]).
    pub fn admin(&self) -> &Arc<dyn presa_store::AdminStore> {
        &self.inner.backend.admin
    }

    /// The shared state of legacy (2025-11-25) sessions ([`presa_store::SessionStore`]).
    pub fn sessions(&self) -> &Arc<dyn presa_store::SessionStore> {
        &self.inner.backend.sessions
    }

    /// Update the work queue gauges `/metrics` reports, for every partition,
    /// from the store (a failure is logged and leaves the previous values).
    pub async fn refresh_queue_metrics(&self) {
        match store_call_at(Verbosity::Debug, "work_stats", self.work().work_stats()).await {
            Ok(stats) => {
                for p in stats {
                    let age = |ms: Option<u64>| ms.map(std::time::Duration::from_millis);
                    let gauges = metrics::QueueGauges {
                        queued: p.queued,
                        pending: p.pending,
                        delayed: p.delayed,
                        oldest_pending_age: age(p.oldest_pending_age_ms),
                        oldest_queued_age: age(p.oldest_queued_age_ms),
                        oldest_due_age: age(p.oldest_due_age_ms),
                    };
                    metrics::work_queue(p.partition, gauges);
                }
            }
            Err(e) => tracing::warn!(error = %e, "reading work queue statistics failed"),
        }
        crate::breaker::refresh_gauges(self.breakers().as_ref(), &self.catalog()).await;
    }

    /// Make `result` a complete protocol result: an object (a bare value
    /// becomes one text content item), with `resultType` (`complete` unless
    /// set) and `_meta.serverInfo` from this server's settings. Every result
    /// presa sends or stores goes through here.
    pub(crate) fn envelope(&self, result: Value) -> Value {
        let mut result = match result {
            Value::Object(m) => m,
            other => Map::from_iter([("content".to_string(), json!([{ "type": "text", "text": other.to_string() }]))]),
        };
        result.entry("resultType").or_insert_with(|| ResultType::Complete.into());
        let info = Self::server_info(&self.inner.config);
        match result.entry("_meta").or_insert_with(|| json!({})) {
            Value::Object(meta) => {
                meta.insert(SERVER_INFO_KEY.into(), info);
            }
            other => *other = json!({ SERVER_INFO_KEY: info }),
        }
        Value::Object(result)
    }

    /// [`envelope`](Self::envelope) of a result written as JSON text by
    /// presa itself: an object that has its `resultType` and no `_meta` (a
    /// task's `CreateTaskResult` or `tasks/get` result). It gets the same
    /// `_meta` at the same place, so the bytes are those of the enveloped value.
    pub(crate) fn envelope_written(&self, result: Written) -> Written {
        result.with_first("_meta", &self.inner.meta_text)
    }

    /// The `serverInfo` every result carries.
    fn server_info(config: &ServerConfig) -> Value {
        json!({ "name": config.name, "version": config.version })
    }

    /// The `_meta` of a result that had none.
    fn meta_of(config: &ServerConfig) -> Value {
        json!({ SERVER_INFO_KEY: Self::server_info(config) })
    }
}

/// What a handler's run means for the protocol, decided once for both places
/// a handler runs (inside its request, or as a task on a worker).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    /// A `CallToolResult` (or `GetPromptResult`), tool errors (`isError`) included.
    Result(Value),
    /// MRTR: the handler needs these answers first (only meaningful in a
    /// request; `state` is sealed into `requestState`).
    NeedsInput {
        /// The input requests, by key.
        requests: BTreeMap<String, Value>,
        /// Opaque tool state to get back on the retry.
        state: Option<Value>,
    },
    /// A JSON-RPC error the handler chose, sent (or stored) as is.
    Error(ErrorObject),
    /// The handler failed: the cause is logged, the client sees `-32603 Internal error`.
    Failed(String),
    /// The work was cancelled (request gone, task cancelled, claim lost).
    Cancelled,
    /// The try failed in a way worth trying again.
    Retry(crate::retry::Retry),
}

impl From<Result<ToolOutput, ToolError>> for Outcome {
    fn from(out: Result<ToolOutput, ToolError>) -> Self {
        match out {
            Ok(ToolOutput::Complete(v)) => Outcome::Result(v),
            Ok(ToolOutput::InputRequired { requests, state }) => Outcome::NeedsInput { requests, state },
            Err(ToolError::NeedInput(requests)) => Outcome::NeedsInput { requests, state: None },
            Err(ToolError::Rpc(e)) => Outcome::Error(e),
            Err(ToolError::Internal(cause)) => Outcome::Failed(cause),
            Err(ToolError::Cancelled) => Outcome::Cancelled,
            Err(ToolError::Retry(r)) => Outcome::Retry(r),
        }
    }
}

/// The JSON-RPC error object of a failed task or call whose cause stays private.
pub(crate) fn internal_error() -> ErrorObject {
    ErrorObject::new(presa_protocol::codes::INTERNAL_ERROR, "Internal error")
}

#[cfg(test)]
mod tests {
    use super::*;
    use presa_store::memory::MemoryStore;

    fn core() -> Core {
        let config = ServerConfig { name: "unit".into(), version: "9.9.9".into(), ..ServerConfig::default() };
        Core::new(config, Catalog::default(), Backend::new(Arc::new(MemoryStore::new())))
    }

    #[test]
    fn envelope_adds_result_type_and_server_info() {
        let info = json!({ "name": "unit", "version": "9.9.9" });
        assert_eq!(
            core().envelope(json!({ "content": [] })),
            json!({ "content": [], "resultType": "complete", "_meta": { SERVER_INFO_KEY: info } })
        );
        let kept = core().envelope(json!({ "resultType": "input_required", "_meta": { "x": 1 } }));
        assert_eq!(kept, json!({ "resultType": "input_required", "_meta": { "x": 1, SERVER_INFO_KEY: info } }));
        let bare = core().envelope(json!(42));
        assert_eq!(bare["content"], json!([{ "type": "text", "text": "42" }]));
        assert_eq!(core().envelope(json!({ "_meta": 7 }))["_meta"], json!({ SERVER_INFO_KEY: info }));
    }

    #[test]
    fn a_written_result_gets_the_same_envelope_as_its_value() {
        for result in [json!({ "resultType": "task", "status": "working" }), json!({ "resultType": "complete" })] {
            let object = result.as_object().unwrap();
            let written = core().envelope_written(Written::of(object));
            let enveloped = core().envelope(result.clone());
            assert_eq!(written.as_bytes(), serde_json::to_vec(&enveloped).unwrap());
        }
    }

    #[test]
    fn outcomes_cover_every_handler_result() {
        let requests = BTreeMap::from([("k".to_string(), json!({}))]);
        assert_eq!(Outcome::from(Ok(ToolOutput::text("hi"))), Outcome::Result(ToolOutput::text("hi").into_value()));
        assert_eq!(
            Outcome::from(Err(ToolError::NeedInput(requests.clone()))),
            Outcome::NeedsInput { requests, state: None }
        );
        assert_eq!(Outcome::from(Err(ToolError::internal("boom"))), Outcome::Failed("boom".into()));
        assert_eq!(Outcome::from(Err(ToolError::Cancelled)), Outcome::Cancelled);
        let e = ErrorObject::new(-32602, "no");
        assert_eq!(Outcome::from(Err(ToolError::Rpc(e.clone()))), Outcome::Error(e));
    }
}
