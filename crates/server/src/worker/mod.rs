//! The worker pool: claims task work from the store and runs tool handlers.
//!
//! The same code runs in-process (embedded mode) and in `presa-worker` pods
//! (Redis mode). For each claim it renews the lease while the handler runs
//! (also while parked on input), aborts the handler when the task turns
//! terminal (cancel) or the claim is lost, and writes the outcome with the
//! claim's fencing attempt, so a worker that lost its claim cannot overwrite
//! the outcome of the one that took over. The write that fails a poison task
//! or ends its last try records the task's dead letter ([`presa_store::dead`]),
//! from which an operator can run it again. Work of one try delivered more than
//! `max_deliveries` times ends `failed` (poison task); a try that failed in a
//! way worth trying again waits for the next one (see [`crate::retry`]).
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
//! By part: this file claims and runs, `outcome.rs` writes how a run ended,
//! `permit.rs` takes a concurrency-limited tool's permit (or waits in line),
//! `lease.rs` keeps a claim's lease, `config.rs` holds the settings.
//!
//! A worker needs only the [`Core`] (catalog, backend, settings): it never
//! sees a request, so it has no dispatcher and no `requestState` key.

use std::{future::Future, pin::Pin, sync::Arc, task::Poll, time::Duration};

use presa_store::{Claim, Take, WorkQueue};
use presa_tasks::{Caller, Event};
use presa_telemetry::{metrics, propagation};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, field::Empty};

mod config;
mod lease;
mod outcome;
mod permit;

pub use config::WorkerConfig;

use lease::keep_lease;
use outcome::failure;

use crate::{
    artifacts::RunArtifacts,
    breaker,
    catalog::RegisteredTool,
    context::{Invocation, TaskRun, ToolContext},
    core::{Core, Outcome, internal_error},
    node::Node,
    output::{ToolError, ToolOutput},
    slots::{Slot, Slots},
    store_io::{Verbosity, store_call, store_call_at},
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
        // Shared by every run: a pointer each, not a copy of the pool's settings.
        let this = Arc::new(self);
        let slots = Slots::new(
            this.config.concurrency,
            this.config.max_parked,
            this.config.run_share(),
            this.config.parked_share(),
        );
        // Fired when the grace period ends: running handlers release their work.
        let release_now = CancellationToken::new();
        let mut running = JoinSet::new();
        tracing::info!(worker = %this.config.id, concurrency = this.config.concurrency, "worker started");
        let sweeper = CancellationToken::new();
        let _stop_sweeping = sweeper.clone().drop_guard();
        if let Some(artifacts) = this.core.artifacts() {
            let (artifacts, store) = (artifacts.clone(), this.core.store().clone());
            tokio::spawn(crate::artifacts::sweep_until(artifacts, store, sweeper));
        }
        let drain = this.node.as_ref().map_or_else(CancellationToken::new, |n| n.draining().clone());
        while !shutdown.is_cancelled() && !drain.is_cancelled() {
            while running.try_join_next().is_some() {}
            let first = tokio::select! {
                p = slots.acquire() => p,
                _ = shutdown.cancelled() => break,
                _ = drain.cancelled() => break,
            };
            let free = slots.free() + 1;
            let queue = this.core.work().clone();
            let shares = slots.shares();
            let claim = queue.claim_fair(&this.config.id, free, this.config.lease, this.config.claim_wait, &shares);
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
                let slot = Arc::new(Slot::running(slots.clone(), permit, &claim.task.scope));
                // Shared from here on (the run, its lease keeper): every
                // future down to the handler holds a pointer, not a copy of
                // the claim it would carry in its state for its whole life.
                let claim = Arc::new(claim);
                let worker = Arc::clone(&this);
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
        this.wind_down(running, &shutdown, &release_now).await;
    }

    /// After the claim loop: asked to drain by an operator, what runs finishes
    /// in its own time (nothing new comes) until shutdown; at shutdown it has
    /// the grace period, then the runs still going hand their work back.
    async fn wind_down(&self, mut running: JoinSet<()>, shutdown: &CancellationToken, release_now: &CancellationToken) {
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
    async fn execute(&self, claim: Arc<Claim>, slot: Arc<Slot>, release_now: CancellationToken) {
        let task = &claim.task;
        let span = tracing::info_span!(
            parent: None,
            "task",
            // Formatted only by a layer that reads it (see `store_call_at`).
            otel.name = %format_args!("execute_tool {}", task.work.tool),
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
    async fn run_to_outcome(
        &self,
        claim: Arc<Claim>,
        slot: Arc<Slot>,
        release_now: CancellationToken,
        span: tracing::Span,
    ) {
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
        // A rate-limited tool's run waits for a turn of its own (reserved,
        // so it does not take one again when it comes back), holding no worker.
        if let Some(rate) = tool.rate().filter(|_| !claim.task.retries.turn_reserved) {
            let caller = claim.task.work.caller.clone().unwrap_or_else(Caller::anonymous);
            if let Some(wait) = rate.take(self.core.rates().as_ref(), tool.name(), &caller, Take::Reserve).await {
                return Box::pin(self.hold_back(&claim, wait, &rate)).await;
            }
        }
        // A concurrency-limited tool's run holds a permit while it runs, or
        // waits in line for one, holding no worker.
        let permit = match tool.concurrency() {
            None => None,
            Some(_) => match Box::pin(self.permit_for(&claim, tool)).await {
                Ok(permit) => permit,
                Err(()) => return,
            },
        };
        let _held = permit.map(|p| p.hold(self.core.work().clone()));
        // Then its circuit breaker (last: an open one gives the permit back
        // as the run is put off, and a probe is never taken by a run that
        // would then wait for a permit): while open, the run waits (no try counted).
        let guard = match breaker::admit(self.core.breakers(), tool).await {
            breaker::Admission::Run(guard) => guard,
            breaker::Admission::Open(open) => return Box::pin(self.wait_for_circuit(&claim, open)).await,
        };
        self.run_admitted(claim, tool, guard, slot, release_now, span).await;
    }

    /// Run the handler of a claimed task allowed to start, under its lease
    /// (and in `span`, the run's), and record how it ended.
    async fn run_admitted(
        &self,
        claim: Arc<Claim>,
        tool: &RegisteredTool,
        guard: Option<breaker::Guard>,
        slot: Arc<Slot>,
        release_now: CancellationToken,
        span: tracing::Span,
    ) {
        let queue = self.core.work().clone();
        let cancel = CancellationToken::new();
        let task = &claim.task;
        let artifacts = self.core.artifacts().map(|a| Arc::new(RunArtifacts::new(a.clone(), &task.scope, &task.id)));
        let ctx = self.context_for(&claim, slot, cancel.clone(), artifacts.clone());
        let retry = tool.retry().unwrap_or(self.config.retry);
        let handler = breaker::run(guard, tool.handler(), ctx, claim.task.work.arguments.clone());
        tokio::pin!(handler);
        // The handler's first poll comes before its lease keeper: a handler
        // done in it (it answered without awaiting anything) needs no lease
        // kept and no watch of its task, and its outcome is written at once
        // (a cancel or a takeover meanwhile is settled by the fenced
        // compare-and-set of that write, as for any run). So the keeper (a
        // spawned task and its cancellation, about 3,500 instructions, and
        // once it runs a watch registration and a timer) is paid only by
        // runs that wait, which it is for.
        // With an artifact store the keeper runs anyway: spilling a big
        // result happens under the lease. A message for the task published
        // during that first poll is not lost: the claimed watch hands the
        // last moments' messages to a watcher that registers late
        // (`claimed.rs`), and the keeper re-reads the task on its timer.
        let first = std::future::poll_fn(|cx| Poll::Ready(handler.as_mut().poll(cx))).await;
        let (outcome, keeper) = match first {
            Poll::Ready(out) if artifacts.is_none() => (Outcome::from(out), None),
            first => {
                let keeper = tokio::spawn(Box::pin(
                    keep_lease(queue.clone(), claim.clone(), self.config.lease, cancel.clone())
                        .instrument(span.clone()),
                ));
                let outcome = match first {
                    Poll::Ready(out) => Outcome::from(out),
                    Poll::Pending => {
                        match self.await_handler(handler, &claim, &queue, &cancel, &release_now, &keeper).await {
                            Some(outcome) => outcome,
                            None => return,
                        }
                    }
                };
                (outcome, Some(keeper))
            }
        };
        // A try worth trying again waits for its next one (or, with no try
        // left, fails): nothing it wrote is kept.
        if let Outcome::Retry(failed) = outcome {
            if let Some(keeper) = keeper {
                keeper.abort();
            }
            Box::pin(self.retry_later(&claim, failed, retry, &span)).await;
            if let Some(run) = artifacts {
                run.discard().await;
            }
            return;
        }
        self.conclude_run(&claim, outcome, keeper, artifacts, &span).await;
    }

    /// The rest of a handler's run after a first poll that did not finish
    /// it, while `keeper` keeps its lease: its outcome, `Cancelled` when
    /// the keeper fired `cancel` (the task ended, or the claim was lost),
    /// or `None` when the worker's grace ran out and the work was handed
    /// back (`release_now`).
    async fn await_handler(
        &self,
        mut handler: Pin<&mut impl Future<Output = Result<ToolOutput, ToolError>>>,
        claim: &Claim,
        queue: &Arc<dyn WorkQueue>,
        cancel: &CancellationToken,
        release_now: &CancellationToken,
        keeper: &tokio::task::JoinHandle<()>,
    ) -> Option<Outcome> {
        Some(tokio::select! {
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
                if let Err(e) = store_call("release", queue.release(claim)).await {
                    tracing::warn!(error = %e, "release failed; the lease will lapse instead");
                }
                return None;
            }
        })
    }

    /// Record how the run of `claim` ended (its `keeper`, if it has one,
    /// renews the lease until then: a big result is spilled into artifacts
    /// under it).
    async fn conclude_run(
        &self,
        claim: &Claim,
        outcome: Outcome,
        keeper: Option<tokio::task::JoinHandle<()>>,
        artifacts: Option<Arc<RunArtifacts>>,
        span: &tracing::Span,
    ) {
        let event = self.event_for(outcome, artifacts.as_deref(), span).await;
        if let Some(keeper) = keeper {
            keeper.abort();
        }
        let kept = match event {
            Some(event) => {
                let completes = matches!(event, Event::Complete(_));
                self.conclude(claim, event).await && completes
            }
            None => {
                Box::pin(self.after_cancellation(claim, span)).await;
                false
            }
        };
        // A result that was not stored (failed, cancelled, fenced) shows no
        // artifact: whatever this run wrote goes.
        if let Some(run) = artifacts.filter(|_| !kept) {
            run.discard().await;
        }
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
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use presa_store::{Backend, Scope};
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::{Catalog, ServerConfig};

    /// A run's future is copied whole into its box when the run is spawned
    /// (`running.spawn`), once a task: it was 8,096 bytes while a concluding
    /// write held its tasks across its awaits (see `task_writer.rs`), and
    /// 3,048 after.
    #[tokio::test]
    async fn a_run_future_stays_small() {
        let (store, claim) = crate::task_writer::tests::claimed().await;
        let core = Core::new(ServerConfig::default(), Catalog::default(), Backend::new(Arc::new(store)));
        let claim = Arc::new(claim);
        let slots = Slots::new(1, 1, None, None);
        let slot = Arc::new(Slot::running(slots.clone(), slots.acquire().await, &Scope::anonymous()));
        let worker = Worker::new(core, WorkerConfig::default());
        let run = worker.execute(claim, slot, CancellationToken::new());
        let size = size_of_val(&run);
        assert!(size < 4_096, "{size} bytes");
        // The catalog has no `echo`: the run fails the task, and ends.
        run.await;
    }
}
