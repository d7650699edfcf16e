//! How a handler asks the client for input: from the call's own answers,
//! by MRTR in a request, or by parking its task as `input_required` until
//! `tasks/update` answers.

use std::collections::BTreeMap;

use presa_tasks::{Event, Status, Task};
use serde_json::Value;

use super::{Mode, TaskRun, ToolContext};
use crate::{output::ToolError, snapshots::Snapshots, store_io::store_call};

impl ToolContext {
    /// Ask the client for one input; see [`ToolContext::inputs`].
    pub async fn input(&self, key: &str, request: impl Into<Value>) -> Result<Value, ToolError> {
        let mut answers = self.inputs(BTreeMap::from([(key.to_string(), request.into())])).await?;
        answers.remove(key).ok_or_else(|| ToolError::internal("input answer missing"))
    }

    /// Ask the client for several inputs at once and wait for all answers.
    ///
    /// In a task: parks the task as `input_required` with these requests until
    /// `tasks/update` has answered every key. Answers are recorded, so a task
    /// re-run after a crash gets them back at once instead of asking again.
    /// In a sync call: answers come from the call's `inputResponses`; missing
    /// ones end the call with an `InputRequiredResult` (MRTR). In both modes,
    /// answers the call (or the request that created the task) carries are used first.
    pub async fn inputs(&self, requests: BTreeMap<String, Value>) -> Result<BTreeMap<String, Value>, ToolError> {
        // Answers the call already carries (MRTR rounds before any task existed) come first.
        let given = self.inner.call.input_responses.as_ref();
        let found: BTreeMap<_, _> =
            requests.keys().filter_map(|k| given.and_then(|g| g.get(k)).map(|v| (k.clone(), v.clone()))).collect();
        if found.len() == requests.len() {
            return Ok(found);
        }
        match &self.inner.mode {
            Mode::Request { .. } => Err(ToolError::NeedInput(requests)),
            Mode::Task(run) => {
                let missing = requests.into_iter().filter(|(k, _)| !found.contains_key(k)).collect();
                // Waiting for the client: the worker slot goes back while parked.
                run.slot.park();
                let answers = self.park(run, missing).await;
                if !run.slot.resume(&self.inner.cancel).await {
                    return Err(ToolError::Cancelled);
                }
                let mut answers = answers?;
                answers.extend(found);
                Ok(answers)
            }
        }
    }

    async fn park(
        &self,
        run: &TaskRun,
        requests: BTreeMap<String, Value>,
    ) -> Result<BTreeMap<String, Value>, ToolError> {
        let (store, id, writer, tick) = (run.store.as_ref(), &run.id, run.writer, run.tick);
        let answered = |task: &Task| -> Option<BTreeMap<String, Value>> {
            requests.keys().map(|k| task.input_responses.get(k).map(|v| (k.clone(), v.clone()))).collect()
        };
        let load = || async { store_call("load", store.load(id)).await.map_err(ToolError::internal) };
        // Subscribe before asking, so an answer that lands at once is not missed.
        let changes = store_call("watch", store.watch_claimed(id)).await.map_err(ToolError::internal)?;
        let current: Task = load().await?.ok_or(ToolError::Cancelled)?;
        if let Some(all) = answered(&current) {
            return Ok(all);
        }
        let missing: BTreeMap<String, Value> = requests
            .iter()
            .filter(|(k, _)| !current.input_responses.contains_key(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        run.update(&Event::RequestInput(missing)).await?;
        let mut task = load().await?.ok_or(ToolError::Cancelled)?;
        let mut snapshots = Snapshots::new(changes, task.revision);
        loop {
            if !writer.may_continue(&task) {
                return Err(ToolError::Cancelled);
            }
            if let Some(all) = answered(&task) {
                return Ok(all);
            }
            debug_assert!(task.status == Status::InputRequired || task.status == Status::Working);
            tokio::select! {
                // A newer snapshot decides like a load (see `Snapshots`); a
                // watch that ended falls back to the lease tick.
                next = snapshots.next() => task = next,
                _ = tokio::time::sleep(tick) => {
                    task = load().await?.ok_or(ToolError::Cancelled)?;
                    snapshots.saw(task.revision);
                }
                _ = self.inner.cancel.cancelled() => return Err(ToolError::Cancelled),
            }
        }
    }
}
