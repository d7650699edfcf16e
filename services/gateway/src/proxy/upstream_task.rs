//! Following the task a 2026-07-28 upstream made of a call: `tasks/get`
//! until it ends, its questions answered with `tasks/update`, its id kept as
//! the presa task's checkpoint so a worker that takes over follows it too.
//! Its status is presa's [`Status`], converted once (`crate::convert`).

use std::time::Duration;

use presa_protocol::{Status, codes};
use presa_server::{ToolError, ToolOutput};
use rmcp::model::{CancelTaskParams, GetTaskParams, UpdateTaskParams};
use serde_json::json;

use super::{
    UPSTREAM_TASK,
    answer::{rpc, upstream_rpc},
    call::Call,
};
use crate::{
    convert::{TaskReport, tool_output},
    pool::Lease,
};

impl Call<'_> {
    /// Follow the upstream task `task_id` to its end.
    pub(super) async fn follow_task(&mut self, lease: Lease, task_id: String) -> Result<ToolOutput, ToolError> {
        tracing::info!(upstream = %self.tool.pool.name(), upstream_task = %task_id, "following the upstream's task");
        self.followed = true;
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
                got = peer.get_task(GetTaskParams::new(task_id.clone())) => got,
                _ = cancel.cancelled() => {
                    // Cancelled by the client: the upstream task goes too. A lost
                    // claim leaves it running for the worker that takes over.
                    if self.ctx.cancelled_by_client().await {
                        let _ = peer.cancel_task(CancelTaskParams::new(task_id.clone())).await;
                    }
                    return Err(ToolError::Cancelled);
                }
            };
            let task = TaskReport::from(got.map_err(|e| self.tool.service_failure(self.ctx, e, true))?);
            if task.status_message.is_some() && task.status_message != last_message {
                self.ctx.set_status(task.status_message.clone().unwrap_or_default()).await?;
                last_message = task.status_message;
            }
            match task.status {
                Status::Completed => return Ok(tool_output(&task.payload)),
                Status::Failed => {
                    let e = &task.payload;
                    return Err(ToolError::Rpc(upstream_rpc(
                        e["code"].as_i64().unwrap_or(codes::INTERNAL_ERROR),
                        e["message"].as_str().unwrap_or("the upstream task failed"),
                        e.get("data").cloned(),
                    )));
                }
                Status::Cancelled => return Err(rpc(format!("upstream {:?} cancelled the task", pool.name()), false)),
                Status::InputRequired => {
                    let requests = task.payload.as_object().cloned().unwrap_or_default();
                    let answers = self.ask_all(requests).await?;
                    let update = UpdateTaskParams::new(task_id.clone(), answers.into_iter().collect());
                    peer.update_task(update).await.map_err(|e| self.tool.service_failure(self.ctx, e, true))?;
                    continue;
                }
                Status::Working => {}
            }
            let poll = Duration::from_millis(task.poll_interval_ms.unwrap_or(500).clamp(50, 5_000));
            self.ctx.sleep(poll).await.inspect_err(|_| {
                let peer = peer.clone();
                let id = task_id.clone();
                tokio::spawn(async move {
                    let _ = peer.cancel_task(CancelTaskParams::new(id)).await;
                });
            })?;
        }
    }
}
