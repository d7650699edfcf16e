//! [`ProxyTool`]: the presa tool handler that runs one upstream tool. The same
//! code runs a plain call (inside the request) and a task (on a worker):
//!
//! - a connection comes from the upstream's [`Pool`] (the call waits for one);
//! - upstream progress and log lines become the task's status message
//!   (at most one per `status_interval`, the last one always kept) and, in a
//!   plain call, progress notifications on the request's stream;
//! - upstream questions (`elicitation/create`, `sampling/createMessage`,
//!   `roots/list`, or a 2026-07-28 upstream's `InputRequiredResult`) become
//!   presa input requests under keys from their position in the call and a
//!   digest of their content ([`question_key`]), so a re-run asks the same
//!   questions under the same keys and gets the recorded answers;
//! - a 2026-07-28 upstream that answers with its own task is followed with
//!   `tasks/get`, its questions answered with `tasks/update`;
//! - `tasks/cancel` sends `notifications/cancelled` (or `tasks/cancel`) and
//!   closes the connection after a grace period if the upstream keeps going;
//! - a task claimed again after its worker was lost calls the upstream again
//!   only for a tool that is safe to repeat ([`Rerun`]).

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use presa_protocol::{codes, jsonrpc::ErrorObject, meta::LogLevel};
use presa_server::{ToolContext, ToolError, ToolHandler, ToolOutput};
use rmcp::{
    model::{CallToolRequest, ClientRequest, ServerResult},
    service::{PeerRequestOptions, ServiceError},
};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use tokio::time::Instant;
use tracing::Instrument;

use crate::{
    config::{Rerun, Timings},
    pool::{Lease, Pool},
    upstream::Event,
};

/// The `_meta` key of the caller's identity (`--upstream-forward-identity`).
pub const CALLER_META: &str = "dev.presa/caller";

/// The checkpoint key of the upstream task a call became.
const UPSTREAM_TASK: &str = "upstreamTask";

/// Most MRTR rounds one call may take with a 2026-07-28 upstream.
const MAX_ROUNDS: usize = 32;

/// One upstream tool served by presa.
#[derive(Debug)]
pub struct ProxyTool {
    /// Where the tool lives.
    pub pool: Arc<Pool>,
    /// Its name upstream (without presa's prefix).
    pub upstream_name: String,
    /// Whether a re-run after a lost worker calls the upstream again.
    pub rerun_allowed: bool,
    /// Timings.
    pub timings: Timings,
    /// Whether calls carry the caller's tenant and subject in `_meta`.
    pub forward_identity: bool,
}

impl ProxyTool {
    /// Whether a tool with these annotations may be called again under `rerun`.
    pub fn may_rerun(rerun: Rerun, annotations: &Value) -> bool {
        let hint = |k: &str| annotations.get(k).and_then(Value::as_bool) == Some(true);
        match rerun {
            Rerun::Always => true,
            Rerun::Never => false,
            Rerun::Auto => hint("readOnlyHint") || hint("idempotentHint"),
        }
    }
}

/// The input key of the `n`th question (from 1) of a call: its position and
/// a digest of what it asks, so a re-run that asks the same thing at the same
/// point finds the recorded answer, and a different question never does.
pub fn question_key(n: usize, method: &str, params: &Value) -> String {
    let kind = match method {
        "elicitation/create" => "elicit",
        "sampling/createMessage" => "sample",
        "roots/list" => "roots",
        _ => "ask",
    };
    let mut h = Sha256::new();
    h.update(method.as_bytes());
    h.update([0]);
    h.update(serde_json::to_vec(params).unwrap_or_default());
    let digest = h.finalize();
    let hex: String = digest[..5].iter().map(|b| format!("{b:02x}")).collect();
    format!("q{n}-{kind}-{hex}")
}

fn rpc(message: impl Into<String>, retryable: bool) -> ToolError {
    let data = json!({ "retryable": retryable });
    ToolError::Rpc(ErrorObject::with_data(codes::INTERNAL_ERROR, message, data))
}

fn lost_worker_error(tool: &str) -> ToolError {
    rpc(
        format!(
            "The worker running {tool:?} was lost mid-call and the tool is not marked idempotent or \
             read-only, so it was not called again: it may or may not have taken effect. Call it again \
             if that is safe."
        ),
        true,
    )
}

/// An upstream failure as the error the caller sees (no internals beyond the upstream's name).
fn service_error(pool: &Pool, e: ServiceError) -> ToolError {
    match e {
        ServiceError::McpError(e) => {
            let mut err = ErrorObject::new(i64::from(e.code.0), e.message.to_string());
            err.data = e.data;
            ToolError::Rpc(err)
        }
        ServiceError::Timeout { timeout } => {
            rpc(format!("upstream {:?} did not answer within {timeout:?}", pool.name()), true)
        }
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
            rpc(format!("upstream {:?} went away during the call", pool.name()), true)
        }
        other => {
            tracing::warn!(upstream = %pool.name(), error = %other, "upstream call failed");
            rpc(format!("upstream {:?} answered unexpectedly", pool.name()), false)
        }
    }
}

/// Status messages from upstream progress, at most one per interval.
#[derive(Debug)]
struct Status {
    interval: Duration,
    last: Option<Instant>,
    pending: Option<String>,
}

impl Status {
    fn offer(&mut self, message: String) -> Option<String> {
        let now = Instant::now();
        if self.last.is_none_or(|l| now.duration_since(l) >= self.interval) {
            self.last = Some(now);
            self.pending = None;
            Some(message)
        } else {
            self.pending = Some(message);
            None
        }
    }

    fn deadline(&self) -> Option<Instant> {
        self.pending.as_ref().and(self.last).map(|l| l + self.interval)
    }

    fn flush(&mut self) -> Option<String> {
        self.last = Some(Instant::now());
        self.pending.take()
    }
}

fn progress_text(progress: f64, total: Option<f64>, message: Option<&str>) -> String {
    match (message, total) {
        (Some(m), _) if !m.is_empty() => m.to_string(),
        (_, Some(t)) => format!("{progress}/{t}"),
        _ => format!("{progress}"),
    }
}

fn log_text(data: &Value) -> String {
    match data {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A `CallToolResult` as presa returns it (presa adds `resultType` itself).
fn into_output(result: &impl serde::Serialize) -> ToolOutput {
    let mut v = serde_json::to_value(result).unwrap_or_else(|_| json!({ "content": [] }));
    if let Some(o) = v.as_object_mut() {
        o.remove("resultType");
    }
    ToolOutput::Complete(v)
}

#[async_trait::async_trait]
impl ToolHandler for ProxyTool {
    async fn call(&self, ctx: ToolContext, arguments: Value) -> Result<ToolOutput, ToolError> {
        // A run that already handed the call to an upstream task resumes
        // following that task, whatever the tool: nothing is called again.
        let resume = ctx.checkpoint().and_then(|c| c[UPSTREAM_TASK].as_str()).map(str::to_string);
        if resume.is_none() && ctx.attempt().is_some_and(|a| a > 1) && !self.rerun_allowed {
            metrics::counter!("presa_gateway_reruns_refused_total", "upstream" => self.pool.name().to_string())
                .increment(1);
            return Err(lost_worker_error(&self.upstream_name));
        }
        let cancel = ctx.cancellation();
        let lease = tokio::select! {
            lease = self.pool.get() => lease.map_err(|e| {
                tracing::warn!(upstream = %self.pool.name(), error = %e, "no upstream connection");
                rpc(format!("upstream {:?} is unavailable: {e}", self.pool.name()), true)
            })?,
            _ = cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        let started = Instant::now();
        let upstream = self.pool.name().to_string();
        let mut call = Call { tool: self, ctx: &ctx, asked: 0, told_roots: false };
        let out = match resume {
            Some(task_id) => {
                tracing::info!(upstream = %upstream, upstream_task = %task_id, "resuming the upstream's task");
                call.follow_task(lease, json!({ "taskId": task_id })).await
            }
            None => call.run(lease, arguments).await,
        };
        let outcome = match &out {
            Ok(ToolOutput::Complete(v)) if v["isError"] == true => "tool_error",
            Ok(_) => "ok",
            Err(ToolError::Cancelled) => "cancelled",
            Err(ToolError::NeedInput(_)) => "input_required",
            Err(_) => "error",
        };
        metrics::counter!("presa_gateway_upstream_calls_total", "upstream" => upstream.clone(), "outcome" => outcome)
            .increment(1);
        metrics::histogram!("presa_gateway_upstream_call_seconds", "upstream" => upstream)
            .record(started.elapsed().as_secs_f64());
        out
    }
}

/// One run of a proxied call.
struct Call<'a> {
    tool: &'a ProxyTool,
    ctx: &'a ToolContext,
    /// Questions asked so far (the position part of their keys).
    asked: usize,
    /// Whether the caller's roots were given to the upstream, which may
    /// keep them for the session: then the connection serves no other call.
    told_roots: bool,
}

impl Call<'_> {
    async fn run(&mut self, lease: Lease, arguments: Value) -> Result<ToolOutput, ToolError> {
        match self.rounds(&lease, arguments).await {
            // A call given up while it may still run upstream: its connection goes.
            Err(Abandon(e)) => {
                self.abandon(lease, self.tool.timings.cancel_grace);
                Err(e)
            }
            Ok(Round::Task(task)) => self.follow_task(lease, task).await,
            Ok(Round::Done(out)) => {
                if self.told_roots {
                    self.abandon(lease, Duration::ZERO);
                }
                out
            }
        }
    }

    /// Call, answering a 2026-07-28 upstream's MRTR rounds, until a result or an upstream task.
    async fn rounds(&mut self, lease: &Lease, arguments: Value) -> Result<Round, Abandon> {
        let mut params = json!({ "name": self.tool.upstream_name, "arguments": arguments });
        let name = self.tool.pool.name().to_string();
        for _round in 0..MAX_ROUNDS {
            let span = tracing::info_span!("upstream.call", upstream = %name, tool = %self.tool.upstream_name);
            match self.once(lease, &params).instrument(span).await? {
                ServerResult::CallToolResult(r) => return Ok(Round::Done(Ok(into_output(&r)))),
                ServerResult::InputRequiredResult(r) => {
                    // The upstream call is over; what the caller answers goes into a retry.
                    let requests = serde_json::to_value(&r.input_requests).unwrap_or_default();
                    let answers = match self.ask_all(requests).await {
                        Ok(a) => a,
                        Err(e) => return Ok(Round::Done(Err(e))),
                    };
                    params["inputResponses"] = Value::Object(answers);
                    match r.request_state {
                        Some(s) => params["requestState"] = json!(s),
                        None => {
                            params.as_object_mut().map(|p| p.remove("requestState"));
                        }
                    }
                }
                ServerResult::CreateTaskResult(t) => {
                    return Ok(Round::Task(serde_json::to_value(&t).unwrap_or_default()));
                }
                _ => {
                    let e = rpc(format!("upstream {name:?} answered tools/call with something else"), false);
                    return Ok(Round::Done(Err(e)));
                }
            }
        }
        Ok(Round::Done(Err(rpc(format!("upstream {name:?} asked for input more than {MAX_ROUNDS} times"), false))))
    }

    /// Send one `tools/call` and serve the upstream's events until it answers.
    async fn once(&mut self, lease: &Lease, params: &Value) -> Result<ServerResult, Abandon> {
        let conn = lease.conn();
        let mut params = params.clone();
        // The trace goes on upstream (SEP-414 `traceparent` in `_meta`), and
        // the caller's identity when the operator asked for it.
        let mut meta: Map<String, Value> =
            presa_telemetry::propagation::inject_current().into_iter().map(|(k, v)| (k, Value::String(v))).collect();
        if self.tool.forward_identity {
            let caller = self.ctx.caller();
            meta.insert(CALLER_META.into(), json!({ "tenant": caller.tenant(), "subject": caller.subject() }));
        }
        if !meta.is_empty() {
            params["_meta"] = Value::Object(meta);
        }
        let params = serde_json::from_value(params)
            .map_err(|e| Abandon(ToolError::invalid_params(format!("arguments: {e}"))))?;
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let (_scope, mut events) = conn.begin_call();
        let options = PeerRequestOptions::with_timeout(self.tool.timings.call_timeout);
        let handle = conn
            .peer()
            .send_request_with_option(request, options)
            .await
            .map_err(|e| Abandon(service_error(&self.tool.pool, e)))?;
        let id = handle.id.clone();
        lease.running(Some(id.clone()));
        let response = handle.await_response();
        tokio::pin!(response);
        let mut status = Status { interval: self.tool.timings.status_interval, last: None, pending: None };
        let cancel = self.ctx.cancellation();
        loop {
            let flush_at = status.deadline();
            tokio::select! {
                r = &mut response => {
                    // Progress sent just before the answer may still be on its
                    // way (rmcp hands each notification to a task of its own):
                    // let those tasks run, then take what they queued.
                    tokio::task::yield_now().await;
                    while let Ok(event) = events.try_recv() {
                        if !matches!(event, Event::Question { .. }) {
                            let _ = self.on_event(event, &mut status).await;
                        }
                    }
                    lease.running(None);
                    if let Some(last) = status.flush() {
                        let _ = self.ctx.set_status(last).await;
                    }
                    return r.map_err(|e| Abandon(service_error(&self.tool.pool, e)));
                }
                Some(event) = events.recv() => {
                    if let Err(e) = self.on_event(event, &mut status).await {
                        self.cancel_request(lease, id.clone(), &e).await;
                        return Err(Abandon(e));
                    }
                }
                _ = tokio::time::sleep_until(flush_at.unwrap_or_else(Instant::now)), if flush_at.is_some() => {
                    if let Some(last) = status.flush() {
                        self.ctx.set_status(last).await?;
                    }
                }
                _ = cancel.cancelled() => {
                    self.cancel_request(lease, id.clone(), &ToolError::Cancelled).await;
                    return Err(Abandon(ToolError::Cancelled));
                }
            }
        }
    }

    async fn on_event(&mut self, event: Event, status: &mut Status) -> Result<(), ToolError> {
        match event {
            Event::Progress { progress, total, message } => {
                self.ctx.progress(progress, total, message.as_deref());
                if let Some(m) = status.offer(progress_text(progress, total, message.as_deref())) {
                    self.ctx.set_status(m).await?;
                }
            }
            Event::Log { level, data } => {
                let lvl = LogLevel::parse(&level).unwrap_or(LogLevel::Info);
                self.ctx.log(lvl, self.tool.pool.name(), data.clone());
                if let Some(m) = status.offer(log_text(&data)) {
                    self.ctx.set_status(m).await?;
                }
            }
            Event::Question { method, params, reply } => {
                self.asked += 1;
                let key = question_key(self.asked, method, &params);
                let answer = self.ctx.input(&key, json!({ "method": method, "params": params })).await?;
                self.told_roots |= method == "roots/list";
                let _ = reply.send(Ok(answer));
            }
        }
        Ok(())
    }

    /// Ask a 2026-07-28 upstream's input requests (by its keys) and return
    /// the answers by the same keys.
    async fn ask_all(&mut self, requests: Value) -> Result<Map<String, Value>, ToolError> {
        let Value::Object(requests) = requests else { return Ok(Map::new()) };
        let mut ours = BTreeMap::new();
        let mut theirs = Vec::new();
        for (their_key, request) in requests {
            self.asked += 1;
            let method = request["method"].as_str().unwrap_or_default().to_string();
            let key = question_key(self.asked, &method, &request["params"]);
            self.told_roots |= method == "roots/list";
            theirs.push((their_key, key.clone()));
            ours.insert(key, request);
        }
        let mut answers = self.ctx.inputs(ours).await?;
        Ok(theirs.into_iter().filter_map(|(theirs, ours)| Some((theirs, answers.remove(&ours)?))).collect())
    }

    /// Follow an upstream task to its end.
    async fn follow_task(&mut self, lease: Lease, created: Value) -> Result<ToolOutput, ToolError> {
        let Some(task_id) = created["taskId"].as_str().map(str::to_string) else {
            return Err(rpc(format!("upstream {:?} made a task without an id", self.tool.pool.name()), false));
        };
        tracing::info!(upstream = %self.tool.pool.name(), upstream_task = %task_id, "following the upstream's task");
        // Recorded first, so a worker that takes over follows this task
        // instead of calling the tool again.
        if self.ctx.checkpoint().and_then(|c| c[UPSTREAM_TASK].as_str()) != Some(task_id.as_str()) {
            self.ctx.save_checkpoint(json!({ UPSTREAM_TASK: task_id })).await?;
        }
        let peer = lease.conn().peer().clone();
        let pool = self.tool.pool.clone();
        let cancel = self.ctx.cancellation();
        let mut last_message: Option<String> = None;
        loop {
            let got = tokio::select! {
                got = peer.get_task(serde_json::from_value(json!({ "taskId": task_id })).map_err(|e| rpc(e.to_string(), false))?) => got,
                _ = cancel.cancelled() => {
                    // Cancelled by the client: the upstream task goes too. A lost
                    // claim leaves it running for the worker that takes over.
                    if self.ctx.cancelled_by_client().await {
                        let id = serde_json::from_value(json!({ "taskId": task_id })).map_err(|e| rpc(e.to_string(), false))?;
                        let _ = peer.cancel_task(id).await;
                    }
                    return Err(ToolError::Cancelled);
                }
            };
            let task = serde_json::to_value(got.map_err(|e| service_error(&pool, e))?).unwrap_or_default();
            let message = task["statusMessage"].as_str().map(str::to_string);
            if message.is_some() && message != last_message {
                self.ctx.set_status(message.clone().unwrap_or_default()).await?;
                last_message = message;
            }
            match task["status"].as_str() {
                Some("completed") => return Ok(into_output(&task["result"])),
                Some("failed") => {
                    let e = &task["error"];
                    let mut err = ErrorObject::new(
                        e["code"].as_i64().unwrap_or(codes::INTERNAL_ERROR),
                        e["message"].as_str().unwrap_or("the upstream task failed"),
                    );
                    err.data = e.get("data").cloned();
                    return Err(ToolError::Rpc(err));
                }
                Some("cancelled") => return Err(rpc(format!("upstream {:?} cancelled the task", pool.name()), false)),
                Some("input_required") => {
                    let answers = self.ask_all(task["inputRequests"].clone()).await?;
                    let update = json!({ "taskId": task_id, "inputResponses": answers });
                    peer.update_task(serde_json::from_value(update).map_err(|e| rpc(e.to_string(), false))?)
                        .await
                        .map_err(|e| service_error(&pool, e))?;
                    continue;
                }
                _ => {}
            }
            let poll = Duration::from_millis(task["pollIntervalMs"].as_u64().unwrap_or(500).clamp(50, 5_000));
            self.ctx.sleep(poll).await.inspect_err(|_| {
                let peer = peer.clone();
                let id = task_id.clone();
                tokio::spawn(async move {
                    if let Ok(p) = serde_json::from_value(json!({ "taskId": id })) {
                        let _ = peer.cancel_task(p).await;
                    }
                });
            })?;
        }
    }

    /// Tell the upstream to stop a request this call no longer waits for.
    async fn cancel_request(&self, lease: &Lease, id: rmcp::model::RequestId, why: &ToolError) {
        let reason = match why {
            ToolError::Cancelled => "cancelled by the client".to_string(),
            ToolError::NeedInput(_) => "the caller must answer first".to_string(),
            other => other.to_string(),
        };
        let params = json!({ "requestId": id, "reason": reason });
        if let Ok(p) = serde_json::from_value(params) {
            let _ = lease.conn().peer().notify_cancelled(p).await;
        }
    }

    /// Stop using a connection: a call abandoned on it may still be running
    /// there (give the upstream `grace`, then close it), or it holds a caller's roots.
    fn abandon(&self, lease: Lease, grace: Duration) {
        let conn = lease.discard();
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            conn.close().await;
        });
    }
}

/// An error after which the connection's call may still be running.
struct Abandon(ToolError);

/// How a call's rounds ended.
enum Round {
    /// With a result or an error; the connection is free.
    Done(Result<ToolOutput, ToolError>),
    /// The upstream made a task of the call (its `CreateTaskResult`).
    Task(Value),
}

impl From<ToolError> for Abandon {
    fn from(e: ToolError) -> Self {
        Abandon(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn question_keys_follow_position_and_content() {
        let p = json!({ "message": "Name?", "requestedSchema": { "type": "object" } });
        let a = question_key(1, "elicitation/create", &p);
        assert!(a.starts_with("q1-elicit-"), "{a}");
        assert_eq!(a, question_key(1, "elicitation/create", &p.clone()));
        assert_ne!(a, question_key(2, "elicitation/create", &p));
        assert_ne!(a, question_key(1, "elicitation/create", &json!({ "message": "Age?" })));
        assert!(question_key(3, "roots/list", &json!({})).starts_with("q3-roots-"));
        assert!(question_key(1, "sampling/createMessage", &json!({})).starts_with("q1-sample-"));
    }

    #[test]
    fn only_tools_safe_to_repeat_run_again() {
        let idem = json!({ "idempotentHint": true });
        let ro = json!({ "readOnlyHint": true });
        let unsafe_ = json!({ "idempotentHint": false, "destructiveHint": true });
        assert!(ProxyTool::may_rerun(Rerun::Auto, &idem));
        assert!(ProxyTool::may_rerun(Rerun::Auto, &ro));
        assert!(!ProxyTool::may_rerun(Rerun::Auto, &unsafe_));
        assert!(!ProxyTool::may_rerun(Rerun::Auto, &Value::Null));
        assert!(ProxyTool::may_rerun(Rerun::Always, &unsafe_));
        assert!(!ProxyTool::may_rerun(Rerun::Never, &idem));
    }

    #[tokio::test]
    async fn status_messages_are_rate_limited_and_the_last_is_kept() {
        let mut s = Status { interval: Duration::from_millis(20), last: None, pending: None };
        assert_eq!(s.offer("1".into()).as_deref(), Some("1"));
        assert_eq!(s.offer("2".into()), None);
        assert_eq!(s.offer("3".into()), None);
        let due = s.deadline().expect("a pending message has a deadline");
        tokio::time::sleep_until(due).await;
        assert_eq!(s.flush().as_deref(), Some("3"));
        assert_eq!(s.deadline(), None);
        assert_eq!(progress_text(2.0, Some(5.0), None), "2/5");
        assert_eq!(progress_text(2.0, Some(5.0), Some("step 2")), "step 2");
    }
}
