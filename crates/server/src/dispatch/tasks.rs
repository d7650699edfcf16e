//! `tasks/get`, `tasks/update` and `tasks/cancel` (Tasks extension).
//!
//! Every one needs the extension declared on the request (`-32021`), a
//! well-formed `taskId`, and a task the caller owns: another scope's task,
//! an expired one and an unknown one answer alike (`-32602`). Updates and
//! cancels go through the reducer ([`update_task_within`], bounded in bytes: the task's own limit and its scope's byte quota) as the client.

use presa_protocol::{Method, ResultType};
use presa_store::{Limit, StoreError, TaskId, Writer};
use presa_tasks::{Event, id::MAX_TASK_ID_LEN};
use presa_telemetry::metrics;
use serde_json::{Value, json};

use super::{Admitted, Answer, Server, input_responses, invalid};
use crate::{
    error::ServerError,
    store_io::{TaskWriter, UpdateError, Updated, WriteLimits, store_call},
};

impl Server {
    pub(super) async fn task_method(&self, req: &Admitted) -> Result<Answer, ServerError> {
        if !req.meta.declares_tasks() {
            return Err(ServerError::tasks_required());
        }
        let p = &req.params;
        let id = match p.get("taskId") {
            Some(Value::String(s)) if !s.is_empty() && s.len() <= MAX_TASK_ID_LEN => TaskId::from_wire(s.clone()),
            Some(Value::String(s)) if s.len() > MAX_TASK_ID_LEN => {
                return Err(invalid(&format!("taskId is longer than {MAX_TASK_ID_LEN} bytes")));
            }
            _ => return Err(invalid("A non-empty taskId is required")),
        };
        // Validated before the lookup, so a bad update costs no store call.
        let update = if req.method == Method::TasksUpdate {
            let v = p.get("inputResponses").ok_or_else(|| invalid("tasks/update requires an inputResponses object"))?;
            let responses = input_responses(v)?;
            let max = self.config().max_task_input_bytes;
            if presa_tasks::json_len(v) > max {
                metrics::refusal(Limit::MaxTaskInputBytes);
                return Err(invalid(&format!("inputResponses is larger than {max} bytes")));
            }
            Some(Event::ProvideInput(responses.into_iter().collect()))
        } else {
            None
        };
        let unknown = || invalid("Unknown or inaccessible taskId");
        let event = match (req.method, update) {
            (Method::TasksUpdate, Some(event)) => event,
            (Method::TasksCancel, _) => Event::Cancel,
            _ => {
                // tasks/get: only the view, never the whole task.
                let view =
                    store_call("get", self.store().get_view(&req.caller.scope, &id)).await?.ok_or_else(unknown)?;
                self.authorize_tool(&req.caller, &view.tool)?;
                // Answered as the store wrote it: no value built, none serialised.
                return Ok(Answer::Written(view.result));
            }
        };
        let task = store_call("get", self.store().get(&req.caller.scope, &id)).await?.ok_or_else(unknown)?;
        self.authorize_tool(&req.caller, &task.work.tool)?;
        // An answer may grow the task up to its own limit and its scope's byte quota.
        let limits = WriteLimits {
            max_task_bytes: self.config().max_task_bytes,
            max_bytes_per_scope: self.config().max_bytes_per_scope,
        };
        // The task just read is the update's first guess: when nothing changed it
        // since, the write needs no second read (any refusal is decided again on
        // the stored task, as before).
        let guess = Some(&task);
        let writer = TaskWriter::new(self.store().as_ref(), Writer::Client, limits).guessing(guess);
        match writer.write(&id, &event).await {
            Ok(Updated::Gone) => Err(unknown()),
            Ok(_) => Ok(json!({ "resultType": ResultType::Complete }).into()),
            Err(UpdateError::Store(e)) => {
                if let StoreError::Capacity { limit } = e {
                    metrics::refusal(limit);
                }
                Err(e.into())
            }
            Err(e @ UpdateError::TooLarge { .. }) => {
                metrics::refusal(Limit::MaxTaskBytes);
                Err(invalid(&format!("inputResponses not stored: {e}")))
            }
            Err(e) => Err(ServerError::Internal(e.to_string())),
        }
    }
}
