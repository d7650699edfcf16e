//! The worker pool: claims task work from the store and runs tool handlers.
//!
//! The same code runs in-process (embedded mode) and in `presa-worker` pods
//! (Redis mode). For each claim it renews the lease while the handler runs
//! (also while parked on input), aborts the handler when the task turns
//! terminal (cancel) or the claim is lost, and writes the outcome with the
//! claim's fencing attempt, so a worker that lost its claim cannot overwrite
//! the outcome of the one that took over. Work delivered more than
//! `max_deliveries` times ends `failed` (poison task), and the write that
//! ends it records the task's dead letter ([`presa_store::dead`]), from which
//! an operator can run it again.
//!
//! A handler waiting for input gives its run slot back while it waits (see
//! `crate::slots`): `concurrency` bounds handlers doing work, `max_parked`
//! bounds those parked without a slot.
//!
//! With an artifact store, a big result is spilled into artifacts before it
//! is written (see [`crate::artifacts`]), a run's artifacts go if its result
//! is not kept, and the pool sweeps the artifacts of expired tasks.
//!
//! Shutdown: stop claiming, give running handlers `grace` to finish, then
//! release the rest to the store so another worker takes it at once.
//!
//! A worker needs only the [`Core`] (catalog, backend, settings): it never
//! sees a request, so it has no dispatcher and no `requestState` key.

use std::{sync::Arc, time::Duration};

use presa_protocol::{codes, jsonrpc::ErrorObject};
use presa_store::{Claim, util::now_ms};
use presa_tasks::{Caller, Event};
use presa_telemetry::{metrics, propagation};
use serde_json::Value;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, field::Empty};

mod config;
mod lease;

pub use config::WorkerConfig;

use lease::keep_lease;

use crate::{
    artifacts::{ArtifactsError, RunArtifacts, artifact_error_object},
    context::{Invocation, TaskRun, ToolContext},
    core::{Core, Outcome, internal_error},
    node::Node,
    retry::{Retry, RetryPolicy},
    slots::{Slot, Slots},
    store_io::{Concluding, TaskWriter, UpdateError, Updated, Verbosity, WriteLimits, store_call, store_call_at},
    tool::run_handler,
};

/// A worker pool bound to a catalog and a backend.
#[derive(Debug, Clone)]
pub struct Worker {
    core: Core,
    config: WorkerConfig,
    node: Option<Node>,
}

impl Worker {
    /// A pool running `core`'s tools on `core`'s backend.
    pub fn new(core: Core, config: WorkerConfig) -> Self {
        Worker { core, config, node: None }
    }

    /// Count runs and outcomes on `node`, and drain (claim nothing new,
    /// finish what it holds, then wait for shutdown) once it is asked to.
    pub fn with_node(mut self, node: Node) -> Self {
        self.node = Some(node);
        self
    }

    /// Claim and run work until `shutdown` fires, then drain (see module docs).
    pub async fn run(self, shutdown: CancellationToken) {
        let slots = Slots::new(
            self.config.concurrency,
            self.config.max_parked,
            self.config.run_share(),
            self.config.parked_share(),
        );
        // Fired when the grace period ends: running handlers release their work.
        let release_now = CancellationToken::new();
        let mut running = JoinSet::new();
        tracing::info!(worker = %self.config.id, concurrency = self.config.concurrency, "worker started");
        let sweeper = CancellationToken::new();
        let _stop_sweeping = sweeper.clone().drop_guard();
        if let Some(artifacts) = self.core.artifacts() {
            let (artifacts, store) = (artifacts.clone(), self.core.store().clone());
            tokio::spawn(crate::artifacts::sweep_until(artifacts, store, sweeper));
        }
        let drain = self.node.as_ref().map_or_else(CancellationToken::new, |n| n.draining().clone());
        while !shutdown.is_cancelled() && !drain.is_cancelled() {
            while running.try_join_next().is_some() {}
            let first = tokio::select! {
                p = slots.acquire() => p,
                _ = shutdown.cancelled() => break,
                _ = drain.cancelled() => break,
            };
            let free = slots.free() + 1;
            let queue = self.core.work().clone();
            let shares = slots.shares();
            let claim = queue.claim_fair(&self.config.id, free, self.config.lease, self.config.claim_wait, &shares);
            let claimed = tokio::select! {
                c = store_call_at(Verbosity::Debug, "claim", claim) => c,
                _ = shutdown.cancelled() => break,
                _ = drain.cancelled() => break,
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
                metrics::work_claimed(claim.deliveries > 1);
                let permit = match permit.take() {
                    Some(p) => p,
                    None => slots.acquire().await,
                };
                let slot = Arc::new(Slot::running(slots.clone(), permit, claim.task.scope.clone()));
                let worker = self.clone();
                let release_now = release_now.clone();
                // Boxed: a run's future is kilobytes, and a spawn moves it
                // by value through several calls (and its task cell again
                // when it ends); a box moves as a pointer.
                running.spawn(Box::pin(async move {
                    if let Some(node) = &worker.node {
                        node.run_started();
                    }
                    worker.execute(claim, slot.clone(), release_now).await;
                    slot.release();
                    if let Some(node) = &worker.node {
                        node.run_ended();
                    }
                }));
            }
        }
        if !shutdown.is_cancelled() {
            // Asked to drain: what runs finishes in its own time; nothing new comes.
            tracing::info!(worker = %self.config.id, running = running.len(), "worker drained by an operator");
            tokio::select! {
                _ = async { while running.join_next().await.is_some() {} } => {}
                _ = shutdown.cancelled() => {}
            }
            shutdown.cancelled().await;
        }
        tracing::info!(worker = %self.config.id, running = running.len(), "worker draining");
        let drained =
            tokio::time::timeout(self.config.grace, async { while running.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            release_now.cancel();
            while running.join_next().await.is_some() {}
        }
        tracing::info!(worker = %self.config.id, "worker stopped");
    }

    /// Run one claimed task to an outcome, inside its execution span: a
    /// consumer span named `execute_tool <tool>` whose parent is the trace
    /// context the work item carries (the creating request's span).
    async fn execute(&self, claim: Claim, slot: Arc<Slot>, release_now: CancellationToken) {
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
        self.run_to_outcome(claim, slot, release_now, span.clone()).instrument(span).await;
    }

    /// Run the handler of a claimed task under its lease and record how it ended.
    async fn run_to_outcome(&self, claim: Claim, slot: Arc<Slot>, release_now: CancellationToken, span: tracing::Span) {
        // The rare paths are boxed, so that every run's future is not as
        // large as theirs (see `running.spawn`).
        if claim.deliveries > self.config.max_deliveries {
            return Box::pin(self.bury(&claim, &span)).await;
        }
        let catalog = self.core.catalog();
        let Some(tool) = catalog.tool(&claim.task.work.tool) else {
            tracing::error!("task names a tool this worker does not have");
            self.conclude(&claim, failure(internal_error())).await;
            return;
        };
        let queue = self.core.work().clone();
        let cancel = CancellationToken::new();
        let task = &claim.task;
        let artifacts = self.core.artifacts().map(|a| Arc::new(RunArtifacts::new(a.clone(), &task.scope, &task.id)));
        let ctx = self.context_for(&claim, slot, cancel.clone(), artifacts.clone());
        let keeper = tokio::spawn(Box::pin(
            keep_lease(queue.clone(), claim.clone(), self.config.lease, cancel.clone()).instrument(span.clone()),
        ));
        let retry = tool.retry().unwrap_or(self.config.retry);
        let handler = run_handler(tool.handler(), ctx, claim.task.work.arguments.clone());
        tokio::pin!(handler);
        let outcome = tokio::select! {
            out = &mut handler => Outcome::from(out),
            _ = cancel.cancelled() => {
                // A handler watching `ctx.cancellation()` gets a moment to stop
                // what it started (an upstream call, a child process).
                let _ = tokio::time::timeout(self.config.cancel_grace, &mut handler).await;
                Outcome::Cancelled
            }
            _ = release_now.cancelled() => {
                keeper.abort();
                tracing::info!("handing unfinished work back");
                if let Err(e) = store_call("release", queue.release(&claim)).await {
                    tracing::warn!(error = %e, "release failed; the lease will lapse instead");
                }
                return;
            }
        };
        // A try worth trying again waits for its next one (or, with no try
        // left, fails): nothing it wrote is kept.
        if let Outcome::Retry(failed) = outcome {
            keeper.abort();
            Box::pin(self.retry_later(&claim, failed, retry, &span)).await;
            if let Some(run) = artifacts {
                run.discard().await;
            }
            return;
        }
        // The lease is kept while a big result is spilled into artifacts.
        let event = self.event_for(outcome, artifacts.as_deref(), &span).await;
        keeper.abort();
        let kept = match event {
            Some(event) => {
                let completes = matches!(event, Event::Complete(_));
                self.conclude(&claim, event).await && completes
            }
            None => {
                Box::pin(self.after_cancellation(&claim, &span)).await;
                false
            }
        };
        // A result that was not stored (failed, cancelled, fenced) shows no
        // artifact: whatever this run wrote goes.
        if let Some(run) = artifacts.filter(|_| !kept) {
            run.discard().await;
        }
    }

    /// A poison task (delivered more than `max_deliveries` times): it fails
    /// without running again, and its dead letter is recorded.
    async fn bury(&self, claim: &Claim, span: &tracing::Span) {
        tracing::warn!(deliveries = claim.deliveries, "poison task: giving up");
        metrics::poison_task();
        span.record("error.type", "poison");
        span.record("otel.status_code", "error");
        let error = ErrorObject::new(codes::INTERNAL_ERROR, "Task failed after repeated attempts");
        let times = if claim.deliveries == 1 { "once" } else { &format!("{} times", claim.deliveries) };
        let reason = format!("delivered {times}, more than max_deliveries ({})", self.config.max_deliveries);
        self.conclude_as(claim, failure(error), Some(&reason)).await;
    }

    /// A try that failed in a way worth trying again: put the work off for
    /// the policy's backoff (or as long as the failure said), the task
    /// staying `working` with a status message that says so; or, when it
    /// was the last try the policy allows (or the next would come after the
    /// task expires), fail the task and record its dead letter.
    async fn retry_later(&self, claim: &Claim, retry: Retry, policy: RetryPolicy, span: &tracing::Span) {
        let task = &claim.task;
        let (number, tool) = (task.try_number(), task.work.tool.as_str());
        span.record("error.type", "transient");
        span.record("otel.status_code", "error");
        let delay = retry.after.unwrap_or_else(|| policy.delay(number, rand::random::<f64>()));
        let due_at_ms = now_ms().saturating_add(delay.as_millis().min(u128::from(u64::MAX)) as u64);
        let past_expiry = task.expires_at_ms().is_some_and(|expires| due_at_ms >= expires);
        if !policy.allows_another(number) || past_expiry {
            metrics::task_retries_exhausted(tool);
            let why = if past_expiry { "the next would come after the task expires" } else { "no attempt is left" };
            tracing::warn!(attempt = number, attempts = policy.attempts, reason = %retry, "{why}: the task fails");
            let message = format!("The tool failed on attempt {number} of {} ({retry}); {why}", policy.attempts);
            let data = serde_json::json!({ "attempts": number, "reason": retry.reason });
            let error = ErrorObject::with_data(codes::INTERNAL_ERROR, message, data);
            let reason = format!("attempt {number} of {} failed: {retry}; {why}", policy.attempts);
            self.conclude_as(claim, failure(error), Some(&reason)).await;
            return;
        }
        metrics::task_retried(tool, retry.after.is_some());
        let message = format!("attempt {number} of {} failed ({retry}); next in {}", policy.attempts, Seconds(delay));
        tracing::info!(attempt = number, attempts = policy.attempts, reason = %retry, delay_ms = delay.as_millis() as u64, "putting the work off");
        let event = Event::Defer { reason: retry.reason, message, due_at_ms };
        self.conclude(claim, event).await;
    }

    /// What the handler of `claim` runs with: the call as the creating
    /// request made it, and the task it may change (fenced by the claim).
    fn context_for(
        &self,
        claim: &Claim,
        slot: Arc<Slot>,
        cancel: CancellationToken,
        artifacts: Option<Arc<RunArtifacts>>,
    ) -> ToolContext {
        let task = &claim.task;
        let invocation = Invocation {
            client_capabilities: task.work.client_capabilities.clone(),
            input_responses: task.work.input_responses.clone(),
            request_state: None,
            caller: task.work.caller.clone().unwrap_or(Caller { scope: task.scope.clone(), scopes: Some(Vec::new()) }),
            checkpoint: task.checkpoint.clone(),
        };
        let run = TaskRun {
            store: self.core.store().clone(),
            id: task.id.clone(),
            writer: claim.writer(),
            tries: (task.try_number(), claim.deliveries),
            slot,
            tick: self.core.config().input_tick,
            max_bytes: self.core.config().max_task_bytes,
            patience: self.config.lease,
            artifacts,
        };
        ToolContext::for_task(invocation, run, cancel, self.core.bus().clone())
    }

    /// The terminal event a handler's outcome writes, recorded on the task's
    /// span; `None` for a run that was cancelled, whose end is someone else's.
    /// A result over the artifact threshold is spilled into `artifacts` first.
    async fn event_for(
        &self,
        outcome: Outcome,
        artifacts: Option<&RunArtifacts>,
        span: &tracing::Span,
    ) -> Option<Event> {
        let failed = |kind: &str| {
            span.record("error.type", kind);
            span.record("otel.status_code", "error");
        };
        Some(match outcome {
            Outcome::Result(result) => {
                if result.get("isError") == Some(&Value::Bool(true)) {
                    failed("tool_error");
                }
                let result = match artifacts {
                    Some(run) => match spill_patiently(run, result).await {
                        Ok(spilled) => spilled,
                        Err(e) => {
                            tracing::warn!(error = %e, "storing the result's artifacts failed: the task fails");
                            failed("artifact_store");
                            return Some(failure(artifact_error_object(&e)));
                        }
                    },
                    None => result,
                };
                let result = self.core.envelope(result);
                let (bytes, limit) = (presa_tasks::json_len(&result), self.core.config().max_result_bytes);
                if bytes > limit {
                    tracing::warn!(bytes, limit, "tool result too large: the task fails");
                    failed("result_too_large");
                    let message =
                        format!("Tool result is {bytes} bytes, more than the {limit}-byte limit (max_result_bytes)");
                    failure(ErrorObject::new(codes::INTERNAL_ERROR, message))
                } else {
                    Event::Complete(result)
                }
            }
            Outcome::NeedsInput { .. } => {
                tracing::error!("handler returned an MRTR continuation inside a task; use ctx.input()");
                failure(internal_error())
            }
            Outcome::Error(e) => {
                failed(&e.code.to_string());
                failure(e)
            }
            Outcome::Failed(cause) => {
                tracing::error!(%cause, "tool handler failed");
                failed("internal");
                failure(internal_error())
            }
            // (`run_to_outcome` puts these off before it gets here.)
            Outcome::Retry(retry) => failure(retry.error_object()),
            Outcome::Cancelled => return None,
        })
    }

    /// After a run cancelled by the task turning terminal, or by losing the
    /// claim: whoever caused it owns the outcome. Clean up if terminal.
    async fn after_cancellation(&self, claim: &Claim, span: &tracing::Span) {
        match store_call("load", self.core.store().load(&claim.task.id)).await {
            Ok(Some(t)) if claim.writer().fence_holds(&t) && t.status.is_terminal() => {
                span.record("presa.task.status", t.status.as_str());
                self.remove_work(claim).await;
            }
            Ok(None) => self.remove_work(claim).await,
            _ => {}
        }
    }

    /// Write the terminal event (fenced), then remove the work item; whether
    /// `event` is what the task now holds.
    async fn conclude(&self, claim: &Claim, event: Event) -> bool {
        self.conclude_as(claim, event, None).await
    }

    /// [`conclude`](Self::conclude); for a poison task (`dead`: why it
    /// died), the write records its dead letter too.
    async fn conclude_as(&self, claim: &Claim, event: Event, dead: Option<&str>) -> bool {
        let store = self.core.store();
        let limit = self.core.config().max_task_bytes;
        // A Redis restart while the handler ran must not cost a re-run: wait it out (up to a lease).
        let (id, writer, patience) = (&claim.task.id, claim.writer(), self.config.lease);
        // Starting from the task as claimed (unless the handler or a client
        // changed it since, the write needs no read first), and concluding:
        // the write that ends the task removes its work too.
        let claimed = Some(Concluding { queue: self.core.work().as_ref(), claim, dead });
        let task_writer = TaskWriter::new(store.as_ref(), writer, WriteLimits::task(limit)).concluding(claimed);
        let mut written = task_writer.write_patiently(id, &event, patience).await;
        let mut as_given = true;
        if let Err(e @ UpdateError::TooLarge { .. }) = &written {
            as_given = false;
            tracing::warn!(error = %e, "task outcome too large: the task fails");
            let error = ErrorObject::new(codes::INTERNAL_ERROR, format!("Task outcome not stored: {e}"));
            let unbounded = TaskWriter::new(store.as_ref(), writer, WriteLimits::task(usize::MAX)).concluding(claimed);
            written = Box::pin(unbounded.write(id, &failure(error))).await;
        }
        match written {
            // Its work went with the write.
            Ok(Updated::Applied(t)) => {
                if let Some(node) = &self.node {
                    node.concluded(t.status);
                }
                tracing::Span::current().record("presa.task.status", t.status.as_str());
                tracing::info!(status = t.status.as_str(), "task finished");
                as_given
            }
            Ok(Updated::Unchanged(_) | Updated::Gone) => {
                self.remove_work(claim).await;
                false
            }
            Ok(Updated::Fenced) => {
                tracing::warn!("claim was taken over; dropping this outcome");
                false
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not record the outcome; the work will be retried");
                false
            }
        }
    }

    async fn remove_work(&self, claim: &Claim) {
        if let Err(e) = store_call("remove_work", self.core.work().remove_work(claim)).await {
            tracing::warn!(error = %e, "could not remove finished work");
        }
    }
}

/// How many times a spill is tried while the artifact store fails transiently.
const SPILL_ATTEMPTS: u32 = 3;

/// [`RunArtifacts::spill`], tried again (after 1 s, then 2 s) while the
/// artifact store fails in a way retrying may fix: the tool's work is done,
/// and a blip must not lose it.
async fn spill_patiently(run: &RunArtifacts, result: Value) -> Result<Value, ArtifactsError> {
    if presa_tasks::json_len(&result) <= run.artifacts.threshold() {
        return Ok(result);
    }
    let mut attempt = 1;
    loop {
        match run.spill(result.clone()).await {
            Err(ArtifactsError::Store(e)) if e.is_retryable() && attempt < SPILL_ATTEMPTS => {
                tracing::info!(error = %e, attempt, "storing the result's artifacts failed; trying again");
                tokio::time::sleep(Duration::from_secs(u64::from(attempt))).await;
                attempt += 1;
            }
            done => return done,
        }
    }
}

/// The terminal event of a task that failed with `error`.
fn failure(error: ErrorObject) -> Event {
    Event::Fail(serde_json::to_value(error).unwrap_or_default())
}

/// A delay as a person reads it in a status message: `850 ms`, `8 s`, `2 min 5 s`.
struct Seconds(Duration);

impl std::fmt::Display for Seconds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = self.0.as_millis();
        match ms {
            0..1_000 => write!(f, "{ms} ms"),
            1_000..60_000 => write!(f, "{} s", (ms + 500) / 1_000),
            _ => {
                let s = (ms + 500) / 1_000;
                write!(f, "{} min {} s", s / 60, s % 60)
            }
        }
    }
}
