//! `subscriptions/listen`: one long-lived stream per request, carrying the
//! list-changed notifications the client asked for and `notifications/tasks`
//! for the tasks it watches (its own only: other ids are dropped from the
//! acknowledgement, exactly like unknown ones).
//!
//! Order on the stream: the acknowledgement; each watched task's current
//! state; then every change as it commits (snapshots at or below a revision
//! already sent are dropped); on shutdown, the graceful-closure result. A
//! stream whose client reads too slowly falls behind its bus queue
//! ([`presa_store::BUS_QUEUE`]): it ends with an error response saying it
//! lagged (the client listens again), never buffering without bound.
//! Subscriptions are opened before anything is read, so no change falls
//! between the read and the subscription.

use std::collections::HashMap;

use futures::{StreamExt, future::ready, stream};
use presa_protocol::{ResultType, jsonrpc, meta::SUBSCRIPTION_ID_KEY};
use presa_store::{Scope, TaskId, TaskStream};
use presa_tasks::{id::MAX_TASK_ID_LEN, wire};
use serde_json::{Map, Value, json};

use super::{Admitted, MessageStream, Server, invalid};
use crate::{context::ListChanged, error::ServerError, pools::Permit, store_io::store_call};

/// The most task ids one `subscriptions/listen` may watch.
pub(crate) const MAX_LISTEN_TASK_IDS: usize = 100;

impl Server {
    pub(super) async fn listen(&self, req: &Admitted) -> Result<MessageStream, ServerError> {
        // Taken first (and released if anything below fails): the per-pod
        // and per-scope counts are checked and bumped together.
        let guard = self.admit_listener(&req.caller.scope)?;
        let Some(Value::Object(filter)) = req.params.get("notifications") else {
            return Err(invalid("notifications must be an object"));
        };
        let flag = |k: &str| filter.get(k).and_then(Value::as_bool).unwrap_or(false);
        let mut honoured = Map::new();
        let mut methods = Vec::new();
        for list in ListChanged::ALL {
            if flag(list.filter_flag()) {
                honoured.insert(list.filter_flag().into(), json!(true));
                methods.push(list.method());
            }
        }
        let accepted = match filter.get("taskIds") {
            Some(ids) => self.owned_task_ids(req, ids).await?,
            None => Vec::new(),
        };
        if !accepted.is_empty() {
            honoured.insert("taskIds".into(), json!(accepted));
        }
        let sub_id = req.id.to_value();
        // Subscribe before acknowledging, so nothing published after the ack is missed.
        let events = self.bus().subscribe().await?;
        let tasks = self.task_snapshots(req, accepted).await?;
        let ack = jsonrpc::notification(
            "notifications/subscriptions/acknowledged",
            json!({ "_meta": { SUBSCRIPTION_ID_KEY: sub_id }, "notifications": honoured }),
        );
        let id = sub_id.clone();
        let list_changes = events.filter_map(move |event| {
            ready(match event {
                Ok(method) => methods.contains(&method.as_str()).then(|| {
                    Out::Message(jsonrpc::notification(&method, json!({ "_meta": { SUBSCRIPTION_ID_KEY: id } })))
                }),
                Err(_) => Some(Out::Lagged),
            })
        });
        let id = sub_id.clone();
        let task_changes = tasks.map(move |task| {
            Out::Message(jsonrpc::notification(
                "notifications/tasks",
                Value::Object(wire::notification_params(&task, &id)),
            ))
        });
        // The last message: the graceful-closure result (built when the
        // stream ends), or the error of a stream that lagged.
        let (core, req_id) = (self.core().clone(), req.id.clone());
        let body = stream::select(list_changes, task_changes)
            .take_until(self.inner.shutdown.clone().cancelled_owned())
            .map(Some)
            .chain(stream::once(ready(None)))
            .scan(false, move |ended, item| {
                if *ended {
                    return ready(None);
                }
                let message = match item {
                    Some(Out::Message(m)) => m,
                    Some(Out::Lagged) => {
                        *ended = true;
                        jsonrpc::failure(Some(&req_id), &ServerError::Lagged.to_error_object())
                    }
                    None => {
                        *ended = true;
                        let result =
                            json!({ "resultType": ResultType::Complete, "_meta": { SUBSCRIPTION_ID_KEY: sub_id } });
                        jsonrpc::success(&req_id, core.envelope(result))
                    }
                };
                ready(Some(message))
            });
        let with_guard = stream::once(ready(ack)).chain(body).map(move |m| {
            let _keep = &guard;
            m
        });
        Ok(with_guard.boxed())
    }

    /// The ids of `taskIds` that name a task the caller owns, each once;
    /// the others are dropped without a word (unknown and foreign alike).
    async fn owned_task_ids(&self, req: &Admitted, ids: &Value) -> Result<Vec<TaskId>, ServerError> {
        if !req.meta.declares_tasks() {
            return Err(ServerError::tasks_required());
        }
        let ids = ids.as_array().ok_or_else(|| invalid("taskIds must be an array of strings"))?;
        if ids.len() > MAX_LISTEN_TASK_IDS {
            return Err(invalid(&format!("taskIds holds more than {MAX_LISTEN_TASK_IDS} ids")));
        }
        let mut accepted: Vec<TaskId> = Vec::new();
        for id in ids {
            let id = id.as_str().filter(|s| !s.is_empty() && s.len() <= MAX_TASK_ID_LEN).ok_or_else(|| {
                invalid(&format!("taskIds must hold non-empty strings of at most {MAX_TASK_ID_LEN} bytes"))
            })?;
            let id = TaskId::from_wire(id);
            if accepted.contains(&id) {
                continue;
            }
            if let Some(task) = store_call("get", self.store().get(&req.caller.scope, &id)).await? {
                self.authorize_tool(&req.caller, &task.work.tool)?;
                accepted.push(id);
            }
        }
        Ok(accepted)
    }

    /// The watched tasks' current states, then every committed change. The
    /// watch opens first, then each task is read; snapshots at or below a
    /// revision already sent are dropped (duplicates, reordering).
    async fn task_snapshots(&self, req: &Admitted, ids: Vec<TaskId>) -> Result<TaskStream, ServerError> {
        if ids.is_empty() {
            return Ok(stream::empty().boxed());
        }
        let changes = store_call("watch", self.store().watch(&ids)).await?;
        let mut current = Vec::with_capacity(ids.len());
        for id in &ids {
            current.extend(store_call("get", self.store().get(&req.caller.scope, id)).await?);
        }
        let mut sent: HashMap<TaskId, u64> = HashMap::new();
        Ok(stream::iter(current)
            .chain(changes)
            .filter(move |t| {
                let newer = sent.get(&t.id).is_none_or(|&r| t.revision > r);
                if newer {
                    sent.insert(t.id.clone(), t.revision);
                }
                ready(newer)
            })
            .boxed())
    }
}

/// What a listen stream carries before it becomes a message.
enum Out {
    Message(Value),
    /// The bus ended the subscription: the client read too slowly.
    Lagged,
}

/// A long-lived stream's place in the listen-stream budget of this process
/// (`max_listen_streams`) and of its caller's scope
/// (`max_listen_streams_per_scope`), held while the stream is open. The
/// transport takes one for streams it serves itself (a 2025-11-25 session's
/// standalone `GET` stream), so every long-lived stream shares one budget.
pub struct StreamPermit {
    _permit: Permit,
}

impl std::fmt::Debug for StreamPermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamPermit").field("scope", self._permit.scope()).finish()
    }
}

impl Server {
    /// A place for one more long-lived stream of `scope`, or the retryable
    /// capacity error a `subscriptions/listen` past the same limits gets.
    pub fn admit_stream(&self, scope: &Scope) -> Result<StreamPermit, jsonrpc::ErrorObject> {
        self.admit_listener(scope).map(|permit| StreamPermit { _permit: permit }).map_err(|e| e.to_error_object())
    }

    /// Count one more stream for `scope`, unless the process
    /// (`max_listen_streams`) or the scope (`max_listen_streams_per_scope`) is full.
    fn admit_listener(&self, scope: &Scope) -> Result<Permit, ServerError> {
        self.inner.listeners.admit(scope).map_err(ServerError::capacity)
    }
}
