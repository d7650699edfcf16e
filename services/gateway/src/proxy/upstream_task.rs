//! Following the task a 2026-07-28 upstream made of a call: `tasks/get`
//! until it ends, its questions answered with `tasks/update`, its id kept as
//! the presa task's checkpoint so a worker that takes over follows it too.

use std::time::Duration;

use presa_protocol::codes;
use presa_server::{ToolError, ToolOutput};
use serde_json::{Value, json};

use super::{
    UPSTREAM_TASK,
    answer::{into_output, rpc, service_error, upstream_rpc},
    call::Call,
};
use crate::pool::Lease;

impl Call<'_> {
    /// Follow an upstream task to its end.
    pub(super) async fn follow_task(&mut self, lease: Lease, created: Value) -> Result<ToolOutput, ToolError> {
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
                    return Err(ToolError::Rpc(upstream_rpc(
                        e["code"].as_i64().unwrap_or(codes::INTERNAL_ERROR),
                        e["message"].as_str().unwrap_or("the upstream task failed"),
                        e.get("data").cloned(),
                    )));
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
}
