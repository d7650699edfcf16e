//! The worker pool: claims task work from the store and runs tool handlers.
//!
//! The same code runs in-process (embedded mode) and in `presa-worker` pods
//! (Redis mode). For each claim it renews the lease while the handler runs
//! (also while parked on input), aborts the handler when the task turns
//! terminal (cancel) or the claim is lost, and writes the outcome with the
//! claim's fencing attempt, so a worker that lost its claim cannot overwrite
//! the outcome of the one that took over. Work delivered more than
//! `max_deliveries` times ends `failed` (poison task).
//!
//! Shutdown: stop claiming, give running handlers `grace` to finish, then
//! hand the rest back to the store so another worker takes it at once.

use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use presa_protocol::meta::SERVER_INFO_KEY;
use presa_store::{Claim, TaskStore};
use presa_tasks::Event;
use presa_telemetry::{metrics, propagation};
use serde_json::{Map, Value, json};
use tokio::{sync::Semaphore, task::JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, field::Empty};

use crate::{
    Server,
    context::{CallDetails, ToolContext},
    ops::{Trace, Updated, store_call, store_call_traced, update_task},
    tool::{ToolError, ToolOutput, run_handler},
};

/// Worker pool settings.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// This worker's name (consumer name in Redis).
    pub id: String,
    /// Handlers run at once.
    pub concurrency: usize,
    /// Lease on claimed work; renewed every third of it.
    pub lease: Duration,
    /// Deliveries after which a task ends `failed`.
    pub max_deliveries: u64,
    /// How long one claim call may wait for work.
    pub claim_wait: Duration,
    /// How long running handlers may finish after shutdown starts.
    pub grace: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            id: format!("worker-{}", std::process::id()),
            concurrency: 64,
            lease: Duration::from_secs(30),
            max_deliveries: 5,
            claim_wait: Duration::from_secs(1),
            grace: Duration::from_secs(20),
        }
    }
}

/// A worker pool bound to a server's catalog and store.
#[derive(Debug, Clone)]
pub struct Worker {
    server: Server,
    config: WorkerConfig,
}

impl Worker {
    /// A pool running `server`'s tools.
    pub fn new(server: Server, config: WorkerConfig) -> Self {
        Worker { server, config }
    }

    /// Claim and run work until `shutdown` fires, then drain (see module docs).
    pub async fn run(self, shutdown: CancellationToken) {
        let slots = Arc::new(Semaphore::new(self.config.concurrency.max(1)));
        let hand_back = CancellationToken::new();
        let mut running = JoinSet::new();
        tracing::info!(worker = %self.config.id, concurrency = self.config.concurrency, "worker started");
        while !shutdown.is_cancelled() {
            while running.try_join_next().is_some() {}
            let acquired = tokio::select! {
                p = slots.clone().acquire_owned() => p,
                _ = shutdown.cancelled() => break,
            };
            let Ok(first) = acquired else { break };
            let free = slots.available_permits() + 1;
            let store = self.server.store().clone();
            let claim = store.claim(&self.config.id, free, self.config.lease, self.config.claim_wait);
            let claimed = tokio::select! {
                c = store_call_traced(Trace::Debug, "claim", claim) => c,
                _ = shutdown.cancelled() => break,
            };
            let claims = match claimed {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "claiming work failed; retrying");
                    drop(first);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            let mut permit = Some(first);
            for claim in claims {
                if claim.deliveries > 1 {
                    metrics::work_reclaimed();
                }
                let slot = match permit.take() {
                    Some(p) => p,
                    None => slots.clone().acquire_owned().await.expect("semaphore is never closed"),
                };
                let worker = self.clone();
                let hand_back = hand_back.clone();
                running.spawn(async move {
                    worker.execute(claim, hand_back).await;
                    drop(slot);
                });
            }
        }
        tracing::info!(worker = %self.config.id, running = running.len(), "worker draining");
        let drained =
            tokio::time::timeout(self.config.grace, async { while running.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            hand_back.cancel();
            while running.join_next().await.is_some() {}
        }
        tracing::info!(worker = %self.config.id, "worker stopped");
    }

    /// Run one claimed task to an outcome, inside its execution span: a
    /// consumer span named `execute_tool <tool>` whose parent is the trace
    /// context the work item carries (the creating request's span).
    async fn execute(&self, claim: Claim, hand_back: CancellationToken) {
        let task = &claim.task;
        let name = format!("execute_tool {}", task.work.tool);
        let span = tracing::info_span!(
            parent: None,
            "task",
            otel.name = name.as_str(),
            otel.kind = "consumer",
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %task.work.tool,
            task_id = %task.id,
            presa.task.attempt = task.attempt,
            presa.work.deliveries = claim.deliveries,
            presa.worker.id = %self.config.id,
            presa.task.status = Empty,
            trace_id = Empty,
            error.type = Empty,
            otel.status_code = Empty,
        );
        if let Some(parent) = propagation::from_map(&task.work.trace) {
            propagation::set_parent(&span, parent);
        }
        propagation::record_trace_id(&span);
        self.run_claim(claim, hand_back, span.clone()).instrument(span).await;
    }

    async fn run_claim(&self, claim: Claim, hand_back: CancellationToken, span: tracing::Span) {
        let store = self.server.store().clone();
        let task = &claim.task;
        if claim.deliveries > self.config.max_deliveries {
            tracing::warn!(deliveries = claim.deliveries, "poison task: giving up");
            metrics::poison_task();
            span.record("error.type", "poison");
            span.record("otel.status_code", "error");
            let error = json!({ "code": -32603, "message": "Task failed after repeated attempts" });
            self.conclude(&claim, Event::Fail(error)).await;
            return;
        }
        let Some(tool) = self.server.catalog().tool(&task.work.tool) else {
            tracing::error!("task names a tool this worker does not have");
            self.conclude(&claim, Event::Fail(internal_error())).await;
            return;
        };
        let cancel = CancellationToken::new();
        let call = CallDetails {
            client_capabilities: task.work.client_capabilities.as_object().cloned().unwrap_or_default(),
            input_responses: task.work.request_inputs.as_ref().and_then(Value::as_object).cloned(),
            request_state: None,
        };
        let ctx = ToolContext::for_task(
            call,
            store.clone(),
            task.id.clone(),
            claim.writer(),
            self.server.config().input_tick,
            cancel.clone(),
            self.server.bus().clone(),
        );
        let keeper = tokio::spawn(
            keep_lease(store.clone(), claim.clone(), self.config.lease, cancel.clone()).instrument(span.clone()),
        );
        let outcome = tokio::select! {
            out = run_handler(tool.tool.handler.as_ref(), ctx, task.work.arguments.clone()) => Some(out),
            _ = cancel.cancelled() => None,
            _ = hand_back.cancelled() => {
                keeper.abort();
                tracing::info!("handing unfinished work back");
                if let Err(e) = store_call("release", store.release(&claim)).await {
                    tracing::warn!(error = %e, "release failed; the lease will lapse instead");
                }
                return;
            }
        };
        keeper.abort();
        let event = match outcome {
            Some(Ok(ToolOutput::Complete(result))) => {
                if result.get("isError") == Some(&Value::Bool(true)) {
                    span.record("error.type", "tool_error");
                    span.record("otel.status_code", "error");
                }
                Event::Complete(self.complete_result(result))
            }
            Some(Ok(ToolOutput::InputRequired { .. }) | Err(ToolError::NeedInput(_))) => {
                tracing::error!("handler returned an MRTR continuation inside a task; use ctx.input()");
                Event::Fail(internal_error())
            }
            Some(Err(ToolError::Rpc(e))) => {
                span.record("error.type", e.code.to_string());
                span.record("otel.status_code", "error");
                Event::Fail(serde_json::to_value(e).unwrap_or_else(|_| internal_error()))
            }
            Some(Err(ToolError::Internal(cause))) => {
                tracing::error!(%cause, "tool handler failed");
                span.record("error.type", "internal");
                span.record("otel.status_code", "error");
                Event::Fail(internal_error())
            }
            // Cancelled by the task turning terminal, or by losing the claim:
            // whoever caused it owns the outcome. Clean up if terminal.
            None | Some(Err(ToolError::Cancelled)) => {
                match store_call("load", store.load(&task.id)).await {
                    Ok(Some(t)) if t.attempt == task.attempt && t.status.is_terminal() => {
                        span.record("presa.task.status", t.status.as_str());
                        self.finish(&claim).await
                    }
                    Ok(None) => self.finish(&claim).await,
                    _ => {}
                }
                return;
            }
        };
        self.conclude(&claim, event).await;
    }

    /// The stored result of a completed task: a full `CallToolResult`.
    fn complete_result(&self, result: Value) -> Value {
        let mut result = match result {
            Value::Object(m) => m,
            other => Map::from_iter([("content".to_string(), json!([{ "type": "text", "text": other.to_string() }]))]),
        };
        result.entry("resultType").or_insert_with(|| json!("complete"));
        let cfg = self.server.config();
        let info = json!({ "name": cfg.name, "version": cfg.version });
        match result.entry("_meta").or_insert_with(|| json!({})) {
            Value::Object(meta) => {
                meta.insert(SERVER_INFO_KEY.into(), info);
            }
            other => *other = json!({ SERVER_INFO_KEY: info }),
        }
        Value::Object(result)
    }

    /// Write the terminal event (fenced), then drop the work item.
    async fn conclude(&self, claim: &Claim, event: Event) {
        let store = self.server.store();
        match update_task(store.as_ref(), &claim.task.id, claim.writer(), &event).await {
            Ok(Updated::Applied(t)) => {
                tracing::Span::current().record("presa.task.status", t.status.as_str());
                tracing::info!(status = t.status.as_str(), "task finished");
                self.finish(claim).await;
            }
            Ok(Updated::Unchanged(_) | Updated::Gone) => self.finish(claim).await,
            Ok(Updated::Fenced) => tracing::warn!("claim was taken over; dropping this outcome"),
            Err(e) => {
                tracing::warn!(error = %e, "could not record the outcome; the work will be retried")
            }
        }
    }

    async fn finish(&self, claim: &Claim) {
        if let Err(e) = store_call("finish", self.server.store().finish(claim)).await {
            tracing::warn!(error = %e, "could not remove finished work");
        }
    }
}

/// Renew the lease every third of it; fire `cancel` when the claim is lost
/// or the task turns terminal (seen through the watch or a re-read).
async fn keep_lease(store: Arc<dyn TaskStore>, claim: Claim, lease: Duration, cancel: CancellationToken) {
    let id = claim.task.id.clone();
    let mut changes = match store.watch(std::slice::from_ref(&id)).await {
        Ok(s) => s,
        Err(_) => futures::stream::pending().boxed(),
    };
    let tick = lease / 3;
    let stop = |t: &presa_tasks::Task| t.status.is_terminal() || t.attempt != claim.task.attempt;
    loop {
        tokio::select! {
            change = changes.next() => match change {
                Some(t) if stop(&t) => break,
                Some(_) => continue,
                None => changes = futures::stream::pending().boxed(),
            },
            _ = tokio::time::sleep(tick) => {
                match store_call_traced(Trace::Debug, "renew", store.renew(&claim, lease)).await {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => tracing::warn!(error = %e, "lease renewal failed"),
                }
                match store_call_traced(Trace::Debug, "load", store.load(&id)).await {
                    Ok(Some(t)) if stop(&t) => break,
                    Ok(None) => break,
                    _ => {}
                }
            }
        }
    }
    cancel.cancel();
}

fn internal_error() -> Value {
    json!({ "code": -32603, "message": "Internal error" })
}
