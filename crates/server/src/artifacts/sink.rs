//! [`ArtifactSink`]: an artifact a tool writes itself, streaming, from
//! `ToolContext::artifact`; and [`RunArtifacts`], where a run's artifacts go
//! and the one place the principal's quota is checked.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use bytes::Bytes;
use presa_artifacts::{ArtifactMeta, ArtifactWriter};
use presa_protocol::{codes, jsonrpc::ErrorObject};
use presa_store::Scope;
use presa_tasks::TaskId;
use serde_json::{Value, json};

use super::{Artifacts, ArtifactsError, link, run_prefix};
use crate::output::ToolError;

/// The artifacts of one run of a task's handler: one prefix, numbered keys,
/// and the task's owner, whose quota they count against.
#[derive(Debug)]
pub(crate) struct RunArtifacts {
    pub(crate) artifacts: Artifacts,
    pub(crate) prefix: String,
    pub(crate) scope: Scope,
    next: AtomicUsize,
}

impl RunArtifacts {
    /// A new run of `scope`'s task `task` writing to `artifacts`.
    pub(crate) fn new(artifacts: Artifacts, scope: &Scope, task: &TaskId) -> Self {
        RunArtifacts { prefix: run_prefix(scope, task), artifacts, scope: scope.clone(), next: AtomicUsize::new(0) }
    }

    /// The key of the run's next artifact.
    pub(crate) fn next_key(&self) -> String {
        format!("{}/{}", self.prefix, self.next.fetch_add(1, Ordering::Relaxed))
    }

    /// Refuses `adding` more bytes when the owner's artifacts would pass
    /// their quota (what the store holds for them now, this run's included).
    pub(crate) async fn check_quota(&self, adding: u64) -> Result<(), ArtifactsError> {
        let Some(limit) = self.artifacts.max_bytes_per_scope() else { return Ok(()) };
        let used = self.artifacts.usage(&self.scope).await?;
        if used.saturating_add(adding) > limit {
            return Err(ArtifactsError::Quota { used, adding, limit });
        }
        Ok(())
    }

    /// A writer for the run's next artifact.
    pub(crate) async fn create(self: &Arc<Self>, name: &str, mime: &str) -> Result<ArtifactSink, ToolError> {
        self.check_quota(0).await.map_err(artifact_error)?;
        let writer = self.artifacts.store().create(&self.next_key(), mime).await.map_err(store_error)?;
        Ok(ArtifactSink { writer, name: name.to_owned(), run: Arc::clone(self) })
    }
}

/// An artifact being written by a tool: [`write`](Self::write) chunks as they
/// come (nothing holds the whole artifact), then [`finish`](Self::finish)
/// returns the `resource_link` content block to put in the tool's result.
/// Dropped unfinished, it leaves nothing behind.
///
/// ```no_run
/// # async fn demo(ctx: presa_server::ToolContext) -> Result<serde_json::Value, presa_server::ToolError> {
/// let mut report = ctx.artifact("report.csv", "text/csv").await?;
/// for row in 0..1_000_000 {
///     report.write(format!("{row},ok\n")).await?;
/// }
/// let link = report.finish().await?;
/// Ok(serde_json::json!({ "content": [link] }))
/// # }
/// ```
#[derive(Debug)]
pub struct ArtifactSink {
    writer: Box<dyn ArtifactWriter>,
    name: String,
    run: Arc<RunArtifacts>,
}

impl ArtifactSink {
    /// Appends `chunk`. Past the store's limit on one artifact the write
    /// fails and nothing of the artifact is kept.
    pub async fn write(&mut self, chunk: impl Into<Bytes>) -> Result<(), ToolError> {
        self.writer.write(chunk.into()).await.map_err(store_error)
    }

    /// Completes the artifact; returns its `resource_link` (uri, name,
    /// mimeType, size, and `_meta` with its SHA-256 and download path). An
    /// artifact that takes its owner past their quota is removed, and this fails.
    pub async fn finish(self) -> Result<Value, ToolError> {
        let meta: ArtifactMeta = self.writer.finish().await.map_err(store_error)?;
        if let Err(e) = self.run.check_quota(0).await {
            let _ = self.run.artifacts.store().delete(&meta.key).await;
            return Err(artifact_error(e));
        }
        Ok(link(&meta, &self.name, &self.run.scope))
    }

    /// Discards what was written.
    pub async fn abort(self) -> Result<(), ToolError> {
        self.writer.abort().await.map_err(store_error)
    }
}

fn store_error(e: presa_artifacts::ArtifactError) -> ToolError {
    artifact_error(ArtifactsError::Store(e))
}

/// Keeping an artifact failed: the error a task ends with. It names the store
/// (or the quota), and says in `data.retryable` whether running the task
/// again may help.
pub(crate) fn artifact_error(e: ArtifactsError) -> ToolError {
    ToolError::Rpc(artifact_error_object(&e))
}

/// See [`artifact_error`].
pub(crate) fn artifact_error_object(e: &ArtifactsError) -> ErrorObject {
    let mut error = ErrorObject::new(codes::INTERNAL_ERROR, format!("Storing the result failed: {e}"));
    error.data = Some(json!({ "retryable": e.is_retryable() }));
    error
}
