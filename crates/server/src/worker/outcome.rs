//! How a run ends: the event its outcome writes (a result, spilled into
//! artifacts when big; a failure), a try put off for the next one
//! ([`crate::retry`]), a poison task buried with its dead letter, and the
//! concluding write that removes (or moves) the work with it.

use std::time::Duration;

use presa_protocol::{codes, jsonrpc::ErrorObject};
use presa_store::{Claim, util::now_ms};
use presa_tasks::Event;
use presa_telemetry::metrics;
use serde_json::Value;

use super::Worker;
use crate::{
    artifacts::{ArtifactsError, RunArtifacts, artifact_error_object},
    core::{Outcome, internal_error},
    flow::ToolRate,
    retry::{Retry, RetryPolicy},
    store_io::{Concluding, TaskWriter, UpdateError, Updated, WriteLimits, store_call},
};

impl Worker {
    /// A poison task (delivered more than `max_deliveries` times): it fails
    /// without running again, and its dead letter is recorded.
    pub(super) async fn bury(&self, claim: &Claim, span: &tracing::Span) {
        tracing::warn!(deliveries = claim.deliveries, "poison task: giving up");
        metrics::poison_task();
        mark_failed(span, "poison");
        let error = ErrorObject::new(codes::INTERNAL_ERROR, "Task failed after repeated attempts");
        let times = if claim.deliveries == 1 { "once" } else { &format!("{} times", claim.deliveries) };
        let reason = format!("delivered {times}, more than max_deliveries ({})", self.config.max_deliveries);
        self.conclude_as(claim, failure(error), Some(&reason)).await;
    }

    /// A run of a rate-limited tool that may not start yet: its work is put
    /// off for `wait` (no try counted), the task saying why.
    pub(super) async fn hold_back(&self, claim: &Claim, wait: Duration, rate: &ToolRate) {
        let burst = if rate.burst > 1 { format!(", bursts of {}", rate.burst) } else { String::new() };
        let message =
            format!("waiting for the tool's rate ({}/s{burst}); starting in {}", rate.per_second, Seconds(wait));
        tracing::info!(wait_ms = wait.as_millis() as u64, "rate limited: putting the run off");
        let due_at_ms = now_ms().saturating_add(wait.as_millis().min(u128::from(u64::MAX)) as u64);
        let event = Event::Defer { failed: false, reason: "tool rate".into(), message, due_at_ms };
        self.conclude(claim, event).await;
    }

    /// A run whose tool's circuit is open: its work is put off until the
    /// breaker may let it through (no try counted, no turn of a rate held),
    /// the task saying why.
    pub(super) async fn wait_for_circuit(&self, claim: &Claim, open: crate::breaker::Open) {
        let wait = open.task_wait(rand::random::<f64>());
        let message = format!("{} is failing (circuit open); trying again in {}", open.what, Seconds(wait));
        tracing::info!(breaker = %open.name, wait_ms = wait.as_millis() as u64, "circuit open: putting the run off");
        let due_at_ms = now_ms().saturating_add(wait.as_millis().min(u128::from(u64::MAX)) as u64);
        self.conclude(claim, Event::Wait { message, due_at_ms }).await;
    }

    /// A try that failed in a way worth trying again: put the work off for
    /// the policy's backoff (or as long as the failure said), the task
    /// staying `working` with a status message that says so; or, when it
    /// was the last try the policy allows (or the next would come after the
    /// task expires), fail the task and record its dead letter.
    pub(super) async fn retry_later(&self, claim: &Claim, retry: Retry, policy: RetryPolicy, span: &tracing::Span) {
        let task = &claim.task;
        let (number, tool) = (task.try_number(), task.work.tool.as_str());
        mark_failed(span, "transient");
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
        let event = Event::Defer { failed: true, reason: retry.reason, message, due_at_ms };
        self.conclude(claim, event).await;
    }

    /// The terminal event a handler's outcome writes, recorded on the task's
    /// span; `None` for a run that was cancelled, whose end is someone else's.
    /// A result over the artifact threshold is spilled into `artifacts` first.
    pub(super) async fn event_for(
        &self,
        outcome: Outcome,
        artifacts: Option<&RunArtifacts>,
        span: &tracing::Span,
    ) -> Option<Event> {
        let failed = |kind: &str| mark_failed(span, kind);
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
    pub(super) async fn after_cancellation(&self, claim: &Claim, span: &tracing::Span) {
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
    pub(super) async fn conclude(&self, claim: &Claim, event: Event) -> bool {
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
        // No write's outcome (a task each) is held across an await below:
        // it would make every run's future larger (see `running.spawn`).
        let settled = match task_writer.write_patiently(id, &event, patience).await {
            Err(e @ UpdateError::TooLarge { .. }) => Err(e),
            written => Ok(self.settle(written, true)),
        };
        let settled = match settled {
            Ok(settled) => settled,
            Err(e) => {
                tracing::warn!(error = %e, "task outcome too large: the task fails");
                let error = ErrorObject::new(codes::INTERNAL_ERROR, format!("Task outcome not stored: {e}"));
                drop(e);
                let unbounded =
                    TaskWriter::new(store.as_ref(), writer, WriteLimits::task(usize::MAX)).concluding(claimed);
                let written = Box::pin(unbounded.write(id, &failure(error))).await;
                self.settle(written, false)
            }
        };
        match settled {
            Some(kept) => kept,
            None => {
                self.remove_work(claim).await;
                false
            }
        }
    }

    /// How a concluding write went (`as_given`: it wrote the event it was
    /// given, not a failure in its place): whether the task holds the event,
    /// or `None` when the work is still to be removed (the task changed no
    /// more: it had ended, or is gone).
    fn settle(&self, written: Result<Updated, UpdateError>, as_given: bool) -> Option<bool> {
        match written {
            // Its work went with the write.
            Ok(Updated::Applied(t)) => {
                if let Some(node) = &self.node {
                    node.concluded(t.status);
                }
                tracing::Span::current().record("presa.task.status", t.status.as_str());
                tracing::info!(status = t.status.as_str(), "task finished");
                Some(as_given)
            }
            Ok(Updated::Unchanged(_) | Updated::Gone) => None,
            Ok(Updated::Fenced) => {
                tracing::warn!("claim was taken over; dropping this outcome");
                Some(false)
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not record the outcome; the work will be retried");
                Some(false)
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

/// Mark the run's `span` failed: its `error.type` is `kind` and its
/// `otel.status_code` `error`. Both in one record: each record is a call
/// into every layer (the text log's formats the span's fields again), about
/// 1,200 instructions.
fn mark_failed(span: &tracing::Span, kind: &str) {
    let Some(meta) = span.metadata() else { return };
    let fields = meta.fields();
    if let (Some(error_type), Some(status)) = (fields.field("error.type"), fields.field("otel.status_code")) {
        let (kind, error): (&dyn tracing::Value, &dyn tracing::Value) = (&kind, &"error");
        span.record_all(&fields.value_set(&[(&error_type, Some(kind)), (&status, Some(error))]));
    }
}

/// The terminal event of a task that failed with `error`.
pub(super) fn failure(error: ErrorObject) -> Event {
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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing::{
        field::{Empty, Field, Visit},
        span,
    };
    use tracing_subscriber::{Layer, Registry, layer::Context, layer::SubscriberExt};

    use super::*;

    /// The fields one record call set: (name, value).
    type Recorded = Vec<(String, String)>;

    /// What each record call on a span set, a list a call.
    #[derive(Clone, Default)]
    struct Records(Arc<Mutex<Vec<Recorded>>>);

    struct Fields(Recorded);

    impl Visit for Fields {
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0.push((field.name().into(), value.into()));
        }

        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0.push((field.name().into(), format!("{value:?}")));
        }
    }

    impl<S: tracing::Subscriber> Layer<S> for Records {
        fn on_record(&self, _: &span::Id, values: &span::Record<'_>, _: Context<'_, S>) {
            let mut fields = Fields(Vec::new());
            values.record(&mut fields);
            self.0.lock().unwrap().push(fields.0);
        }
    }

    #[test]
    fn a_failed_run_is_marked_in_one_record() {
        let records = Records::default();
        tracing::subscriber::with_default(Registry::default().with(records.clone()), || {
            let span = tracing::info_span!("task", task_id = "t-1", error.type = Empty, otel.status_code = Empty);
            mark_failed(&span, "tool_error");
        });
        let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
        let records = records.0.lock().unwrap();
        assert_eq!(*records, [vec![pair("error.type", "tool_error"), pair("otel.status_code", "error")]]);
    }

    #[test]
    fn a_span_without_the_fields_is_left_alone() {
        let records = Records::default();
        tracing::subscriber::with_default(Registry::default().with(records.clone()), || {
            mark_failed(&tracing::info_span!("other", task_id = "t-1"), "internal");
            mark_failed(&tracing::Span::none(), "internal");
        });
        assert!(records.0.lock().unwrap().is_empty());
    }
}
