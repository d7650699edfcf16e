//! [`ArtifactSink`]: an artifact a tool writes itself, streaming, from
//! `ToolContext::artifact`; and [`RunArtifacts`], where a run's artifacts go.

use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use presa_artifacts::{ArtifactError, ArtifactWriter};
use presa_protocol::{codes, jsonrpc::ErrorObject};
use presa_tasks::TaskId;
use serde_json::{Value, json};

use super::{Artifacts, link, run_prefix};
use crate::tool::ToolError;

/// The artifacts of one run of a task's handler: one prefix, numbered keys.
#[derive(Debug)]
pub(crate) struct RunArtifacts {
    pub(crate) artifacts: Artifacts,
    pub(crate) prefix: String,
    next: AtomicUsize,
}

impl RunArtifacts {
    /// A new run of `task` writing to `artifacts`.
    pub(crate) fn new(artifacts: Artifacts, task: &TaskId) -> Self {
        RunArtifacts { prefix: run_prefix(task), artifacts, next: AtomicUsize::new(0) }
    }

    /// The key of the run's next artifact.
    pub(crate) fn next_key(&self) -> String {
        format!("{}/{}", self.prefix, self.next.fetch_add(1, Ordering::Relaxed))
    }

    /// A writer for the run's next artifact.
    pub(crate) async fn create(&self, name: &str, mime: &str) -> Result<ArtifactSink, ToolError> {
        let writer = self.artifacts.store().create(&self.next_key(), mime).await.map_err(artifact_error)?;
        Ok(ArtifactSink { writer, name: name.to_owned() })
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
}

impl ArtifactSink {
    /// Appends `chunk`. Past the store's limit on one artifact the write
    /// fails and nothing of the artifact is kept.
    pub async fn write(&mut self, chunk: impl Into<Bytes>) -> Result<(), ToolError> {
        self.writer.write(chunk.into()).await.map_err(artifact_error)
    }

    /// Completes the artifact; returns its `resource_link` (uri, name,
    /// mimeType, size, and `_meta` with its SHA-256 and download path).
    pub async fn finish(self) -> Result<Value, ToolError> {
        let meta = self.writer.finish().await.map_err(artifact_error)?;
        Ok(link(&meta, &self.name))
    }

    /// Discards what was written.
    pub async fn abort(self) -> Result<(), ToolError> {
        self.writer.abort().await.map_err(artifact_error)
    }
}

/// An artifact store's failure as the error a task ends with: it names the
/// store, and says in `data.retryable` whether running the task again may help.
pub(crate) fn artifact_error(e: ArtifactError) -> ToolError {
    ToolError::Rpc(artifact_error_object(&e))
}

/// See [`artifact_error`].
pub(crate) fn artifact_error_object(e: &ArtifactError) -> ErrorObject {
    let mut error = ErrorObject::new(codes::INTERNAL_ERROR, format!("Storing the result failed: {e}"));
    error.data = Some(json!({ "retryable": e.is_retryable() }));
    error
}
