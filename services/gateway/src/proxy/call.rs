//! One run of a proxied call on a pooled connection: `tools/call` and a
//! 2026-07-28 upstream's input rounds, the upstream's events while it runs
//! (progress, logs, questions), cancellation, and giving up a connection
//! whose call may still be running.

use std::{sync::Arc, time::Duration};

use futures::future::BoxFuture;
use presa_http::inline::Inline;
use presa_server::{ToolContext, ToolError, ToolOutput};
use rmcp::{
    model::{
        CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientRequest, RequestId, ServerResult,
    },
    service::{PeerRequestOptions, ServiceError},
};
use serde_json::{Map, Value, json};
use tokio::time::Instant;
use tracing::Instrument;

use super::{
    CALLER_META, MAX_ROUNDS, ProxyTool,
    answer::rpc,
    question_key,
    status::{StatusPace, log_text, progress_text},
};
use crate::{
    convert::{Retry, bad_params, call_arguments, call_params, input_requests, tool_output},
    pool::Lease,
    upstream::{Answer, CallBody, Event, INVALID_ANSWER, Sent, Template, set_progress_token},
};

/// One run of a proxied call.
pub(super) struct Call<'a> {
    pub(super) tool: &'a ProxyTool,
    pub(super) ctx: &'a ToolContext,
    /// Questions asked so far (the position part of their keys).
    pub(super) asked: usize,
    /// Whether the caller's roots were given to the upstream, which may
    /// keep them for the session: then the connection serves no other call.
    pub(super) told_roots: bool,
    /// Whether the call is an upstream task being followed (a new try
    /// follows it again: its transport failures are safe to try again, its
    /// answers are final).
    pub(super) followed: bool,
}

impl Call<'_> {
    pub(super) async fn run(&mut self, lease: Lease, arguments: Value) -> Result<ToolOutput, ToolError> {
        match self.rounds(&lease, arguments).await {
            // A call given up while it may still run upstream: its connection goes.
            Err(Abandon(e)) => {
                self.abandon(lease, self.tool.timings.cancel_grace);
                Err(e)
            }
            Ok(Round::Task(task_id)) => Box::pin(self.follow_task(lease, task_id)).await,
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
        let mut retry: Option<Retry> = None;
        let name = self.tool.pool.name();
        for _round in 0..MAX_ROUNDS {
            // Trace-only (`log.omit`, see `presa_telemetry::LOG_OMIT`): the
            // request's or task's span already names the tool in log lines, and
            // the log layers building this one too, formatting its fields and
            // entering it on every poll cost ~6,000 instructions a proxied call;
            // without OpenTelemetry it is not built at all.
            let span = tracing::info_span!("upstream.call", upstream = %name, tool = %self.tool.upstream_name,
                log.omit = tracing::field::Empty);
            let answer = match self.once(lease, &arguments, retry.as_ref()).instrument(span).await? {
                Ok(answer) => answer,
                Err(e) => return Ok(Round::Done(Err(e))),
            };
            let other = match answer {
                Answer::Complete(v) => return Ok(Round::Done(Ok(ToolOutput::Complete(v)))),
                Answer::Other(other) => *other,
            };
            match other {
                ServerResult::CallToolResult(r) => return Ok(Round::Done(Ok(tool_output(&r)))),
                ServerResult::InputRequiredResult(r) => {
                    // The upstream call is over; what the caller answers goes into a retry.
                    let input_responses = match Box::pin(self.ask_all(input_requests(r.input_requests.as_ref()))).await
                    {
                        Ok(a) => a,
                        Err(e) => return Ok(Round::Done(Err(e))),
                    };
                    retry = Some(Retry { input_responses, request_state: r.request_state });
                }
                ServerResult::CreateTaskResult(t) => return Ok(Round::Task(t.task.task_id)),
                _ => {
                    let e = rpc(format!("upstream {name:?} answered tools/call with something else"), false);
                    return Ok(Round::Done(Err(e)));
                }
            }
        }
        Ok(Round::Done(Err(rpc(format!("upstream {name:?} asked for input more than {MAX_ROUNDS} times"), false))))
    }

    /// Send one `tools/call` and serve the upstream's events until it
    /// answers: its result, or the error it answered (the call is over
    /// upstream); `Abandon` when the call may still run there.
    ///
    /// On a Streamable HTTP connection that learnt how, the call goes as the
    /// gateway's own POST (`upstream/direct.rs`); an SSE answer is handed to
    /// rmcp, which then runs the call as on its own path without sending it again.
    async fn once(
        &mut self,
        lease: &Lease,
        arguments: &Value,
        retry: Option<&Retry>,
    ) -> Result<Result<Answer, ToolError>, Abandon> {
        let conn = lease.conn();
        // The trace goes on upstream (SEP-414 `traceparent` in `_meta`), and
        // the caller's identity when the operator asked for it.
        let mut meta: Map<String, Value> =
            presa_telemetry::propagation::inject_current().into_iter().map(|(k, v)| (k, Value::String(v))).collect();
        if self.tool.forward_identity {
            let caller = self.ctx.caller();
            meta.insert(CALLER_META.into(), json!({ "tenant": caller.tenant(), "subject": caller.subject() }));
        }
        let direct = conn
            .direct()
            .filter(|_| !self.tool.header_params)
            .and_then(|d| Some((d, d.template(&self.tool.upstream_name)?)));
        let name = self.tool.upstream_name.as_str();
        let given = call_arguments(arguments).map_err(|e| Abandon(bad_params("arguments", &e)))?;
        let (_scope, mut events) = conn.begin_call();
        let timeout = self.tool.timings.call_timeout;
        let deadline = Instant::now() + timeout;
        // The ids the upstream may know the call by (a call handed off to rmcp has two).
        let mut ids: Vec<RequestId> = Vec::with_capacity(2);
        // What a call the gateway's own POST did not finish hands to rmcp:
        // the same `_meta` (the context of the connection's template).
        let mut context: Option<Arc<Template>> = None;
        let mut pending = match direct {
            Some((d, template)) => {
                let id = d.next_id();
                set_progress_token(&mut meta, &id);
                // Written straight from the call's parts (no rmcp params built).
                let body = template.call_body(
                    &id,
                    &CallBody {
                        name,
                        arguments: given,
                        input_responses: retry.map(|r| &r.input_responses),
                        request_state: retry.and_then(|r| r.request_state.as_deref()),
                        meta: &meta,
                    },
                );
                lease.running(Some(id.clone()));
                ids.push(id.clone());
                context = Some(template.clone());
                // Inline: handing hyper's connection the request wakes this
                // task during its poll, which tokio would take for a yield.
                Pending::Direct(Inline::new(Box::pin(async move {
                    let sent = tokio::time::timeout(timeout, d.call(&template, &id, name, body)).await;
                    sent.unwrap_or(Err(ServiceError::Timeout { timeout }))
                })))
            }
            None => {
                let params = call_params(name, arguments.clone(), retry, std::mem::take(&mut meta))
                    .map_err(|e| Abandon(bad_params("arguments", &e)))?;
                let (id, response) = Box::pin(via_rmcp(lease, params, timeout))
                    .await
                    .map_err(|e| Abandon(self.tool.service_failure(self.ctx, e, false)))?;
                ids.push(id);
                Pending::Rmcp(response)
            }
        };
        let mut handed_off = false;
        let mut status = StatusPace { interval: self.tool.timings.status_interval, last: None, pending: None };
        let cancel = self.ctx.cancellation();
        // `direct_answer`: answered by the gateway's own POST as JSON
        // (nothing of this call is left in rmcp's hands).
        let (r, direct_answer) = loop {
            let flush_at = status.deadline();
            // In this order, not at random: a call answered at once (most
            // are) polls nothing else, and draws no random number (~500
            // instructions a call). What the upstream sent before its
            // answer is taken after it, below, before the answer is returned.
            let step = tokio::select! {
                biased;
                step = pending.next() => step,
                Some(event) = events.recv() => {
                    if let Err(e) = Box::pin(self.on_event(event, &mut status)).await {
                        Box::pin(self.cancel_request(lease, &ids, &e)).await;
                        return Err(Abandon(e));
                    }
                    continue;
                }
                _ = tokio::time::sleep_until(flush_at.unwrap_or_else(Instant::now)), if flush_at.is_some() => {
                    if let Some(last) = status.flush() {
                        Box::pin(self.ctx.set_status(last)).await?;
                    }
                    continue;
                }
                _ = cancel.cancelled() => {
                    Box::pin(self.cancel_request(lease, &ids, &ToolError::Cancelled)).await;
                    return Err(Abandon(ToolError::Cancelled));
                }
            };
            match step {
                Step::Answered(r, direct) => break (r, direct),
                // The upstream answers with a stream (rmcp takes it in place of
                // its POST), or did not take the call: rmcp runs it.
                Step::ToRmcp(sent) => {
                    handed_off = matches!(sent, Sent::HandedOff);
                    if !handed_off {
                        ids.clear();
                    }
                    meta.extend(context.iter().flat_map(|t| t.context()).map(|(k, v)| (k.clone(), v.clone())));
                    let params = call_params(name, arguments.clone(), retry, std::mem::take(&mut meta))
                        .map_err(|e| Abandon(bad_params("arguments", &e)))?;
                    let left = deadline.saturating_duration_since(Instant::now());
                    let (id, response) = match Box::pin(via_rmcp(lease, params, left)).await {
                        Ok(sent) => sent,
                        Err(e) => {
                            forget_handoff(lease);
                            return Err(Abandon(self.tool.service_failure(self.ctx, e, false)));
                        }
                    };
                    ids.push(id);
                    // The upstream knows a call handed off by the gateway's id.
                    if handed_off {
                        lease.running(ids.first().cloned());
                    }
                    pending = Pending::Rmcp(response);
                }
            }
        };
        if handed_off {
            forget_handoff(lease);
        }
        // Progress sent just before the answer may still be on its
        // way (rmcp hands each notification to a task of its own):
        // let those tasks run, then take what they queued. Not after a
        // JSON answer to the gateway's own POST: what relates to a request
        // comes on its POST's stream, and that answer had none (the yield
        // is a round through the scheduler and every future of the request).
        if !direct_answer {
            tokio::task::yield_now().await;
        }
        while let Ok(event) = events.try_recv() {
            if !matches!(event, Event::Question { .. }) {
                let _ = Box::pin(self.on_event(event, &mut status)).await;
            }
        }
        lease.running(None);
        if let Some(last) = status.flush() {
            let _ = Box::pin(self.ctx.set_status(last)).await;
        }
        match r {
            Ok(answer) => Ok(Ok(answer)),
            // The upstream answered with an error: its call is over and
            // the connection goes back to the pool (a task trying
            // again needs no new child). An answer the stdio screen
            // replaced may still be running there: that one goes.
            Err(ServiceError::McpError(e)) if !e.message.starts_with(INVALID_ANSWER) => {
                Ok(Err(self.tool.service_failure(self.ctx, ServiceError::McpError(e), false)))
            }
            Err(e) => Err(Abandon(self.tool.service_failure(self.ctx, e, false))),
        }
    }

    async fn on_event(&mut self, event: Event, status: &mut StatusPace) -> Result<(), ToolError> {
        match event {
            Event::Progress { progress, total, message } => {
                self.ctx.progress(progress, total, message.as_deref());
                if let Some(m) = status.offer(progress_text(progress, total, message.as_deref())) {
                    self.ctx.set_status(m).await?;
                }
            }
            Event::Log { level, data } => {
                self.ctx.log(level, self.tool.pool.name(), data.clone());
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

    /// Tell the upstream to stop a request this call no longer waits for
    /// (by each id it may know it by: a call handed off to rmcp has the
    /// gateway's, which the upstream knows, and rmcp's, which ends rmcp's wait).
    async fn cancel_request(&self, lease: &Lease, ids: &[RequestId], why: &ToolError) {
        let reason = match why {
            ToolError::Cancelled => "cancelled by the client".to_string(),
            ToolError::NeedInput(_) => "the caller must answer first".to_string(),
            other => other.to_string(),
        };
        for id in ids {
            let p = CancelledNotificationParam::new(Some(id.clone()), Some(reason.clone()));
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

/// The answer a call waits for: the gateway's own POST, or rmcp's request.
enum Pending<'a> {
    Direct(Inline<BoxFuture<'a, Result<Sent, ServiceError>>>),
    Rmcp(BoxFuture<'static, Result<ServerResult, ServiceError>>),
}

/// What the awaited answer brought.
enum Step {
    /// The call's answer (or the error it ended with); whether the
    /// gateway's own POST had it.
    Answered(Result<Answer, ServiceError>, bool),
    /// The gateway's own POST was handed off or not taken: rmcp sends the call.
    ToRmcp(Sent),
}

impl Pending<'_> {
    async fn next(&mut self) -> Step {
        match self {
            Pending::Rmcp(response) => Step::Answered(response.await.map(|r| Answer::Other(Box::new(r))), false),
            Pending::Direct(post) => match post.await {
                Ok(Sent::Answered(answer)) => Step::Answered(answer.map_err(ServiceError::McpError), true),
                Ok(sent) => Step::ToRmcp(sent),
                Err(e) => Step::Answered(Err(e), false),
            },
        }
    }
}

/// Send `tools/call` with `params` through rmcp: its id, and its answer to await.
async fn via_rmcp(
    lease: &Lease,
    params: CallToolRequestParams,
    timeout: Duration,
) -> Result<(RequestId, BoxFuture<'static, Result<ServerResult, ServiceError>>), ServiceError> {
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let options = PeerRequestOptions::with_timeout(timeout);
    let handle = lease.conn().peer().send_request_with_option(request, options).await?;
    lease.running(Some(handle.id.clone()));
    Ok((handle.id.clone(), Box::pin(handle.await_response())))
}

/// Drop a stream handed off that rmcp did not take (it never POSTed the call).
fn forget_handoff(lease: &Lease) {
    if let Some(d) = lease.conn().direct() {
        d.clear_handoff();
    }
}

/// An error after which the connection's call may still be running.
struct Abandon(ToolError);

/// How a call's rounds ended.
enum Round {
    /// With a result or an error; the connection is free.
    Done(Result<ToolOutput, ToolError>),
    /// The upstream made a task of the call (its `CreateTaskResult`'s `taskId`).
    Task(String),
}

impl From<ToolError> for Abandon {
    fn from(e: ToolError) -> Self {
        Abandon(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future `f` returns, without making one.
    fn future_size<A, B, C, R, F: FnOnce(A, B, C) -> R>(_: &F) -> usize {
        size_of::<R>()
    }

    #[test]
    fn a_calls_futures_keep_the_rare_branches_boxed() {
        // A proxied call's future is copied whole into its box on every
        // call: what only the rare branches need (an upstream's question,
        // a status write, rmcp's path, a new connection) is boxed when taken.
        let run = future_size::<&'static mut Call<'static>, Lease, Value, _, _>(&Call::run);
        let get = future_size(&|p: &'static Arc<crate::pool::Pool>, (): (), (): ()| p.get());
        assert!(run < 4096, "Call::run's future is {run} bytes");
        assert!(get < 2048, "Pool::get's future is {get} bytes");
    }
}
