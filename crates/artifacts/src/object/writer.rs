//! [`ObjectWriter`]: one artifact being written to an `object_store`
//! backend, buffered below one part and a multipart upload above it, its
//! sha256 taken on the way, and nothing left behind unless it finishes.

use std::{fmt, sync::Arc};

use bytes::Bytes;
use object_store::{ObjectStoreExt, PutPayload, PutPayloadMut, WriteMultipart, path::Path};
use sha2::{Digest, Sha256};

use super::{Shared, Sidecar};
use crate::{ArtifactMeta, ArtifactWriter, META_SUFFIX, Result, error::ArtifactError};

/// Where a writer is.
enum WriteState {
    /// Less than one part so far, in memory: `finish` makes it one plain upload.
    Buffering(PutPayloadMut),
    /// A multipart upload, fed part by part.
    Uploading(PendingUpload),
    /// Finished, aborted or failed, or a call on it was cancelled midway.
    Closed,
}

/// A multipart upload that aborts itself when dropped unfinished: by the writer's
/// owner, or with the future of a cancelled `write` or `finish` that held it.
struct PendingUpload {
    upload: Option<WriteMultipart>,
    name: String,
    key: String,
}

impl PendingUpload {
    fn upload(&mut self) -> &mut WriteMultipart {
        self.upload.as_mut().expect("an upload until finished or aborted")
    }

    async fn finish(mut self) -> object_store::Result<()> {
        // WriteMultipart::finish aborts the upload itself when a part or the completion fails.
        self.upload.take().expect("an upload until finished or aborted").finish().await.map(drop)
    }

    async fn abort(mut self) -> object_store::Result<()> {
        drain_and_abort(self.upload.take().expect("an upload until finished or aborted")).await
    }
}

/// Aborts `upload` once its parts in flight have ended. A part that reaches the server
/// after the abort could be stored anyway (S3 documents that an abort may need
/// repeating while parts are in progress), so they finish or fail first.
async fn drain_and_abort(mut upload: WriteMultipart) -> object_store::Result<()> {
    // Each failed part is reported once and leaves the set: loop until none is left.
    while upload.wait_for_capacity(0).await.is_err() {}
    upload.abort().await
}

impl Drop for PendingUpload {
    fn drop(&mut self) {
        let Some(upload) = self.upload.take() else { return };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let (name, key) = (self.name.clone(), self.key.clone());
                runtime.spawn(async move {
                    if let Err(e) = drain_and_abort(upload).await {
                        tracing::warn!(store = %name, key = %key, error = %e, "could not abort a dropped artifact upload");
                    }
                });
            }
            Err(_) => tracing::warn!(
                store = %self.name,
                key = %self.key,
                "artifact upload dropped outside a Tokio runtime: it is not aborted"
            ),
        }
    }
}

/// The [`ArtifactWriter`] of [`ObjectArtifactStore`].
///
/// Cancellation-safe: every call takes the state out (leaving `Closed`) and puts
/// the next one back only when it completes, so a call whose future is dropped
/// midway closes the writer (and its upload aborts itself) instead of leaving
/// a writer whose bytes and hash disagree.
pub(super) struct ObjectWriter {
    target: Target,
    size: u64,
    hasher: Sha256,
    state: WriteState,
}

/// What a writer writes to (`Sync`, unlike the upload, so its futures stay `Send`).
struct Target {
    shared: Arc<Shared>,
    key: String,
    path: Path,
    mime: String,
}

impl ObjectWriter {
    /// A writer of `key` (at `path`) in `shared`'s store, nothing written yet.
    pub(super) fn new(shared: Arc<Shared>, key: String, path: Path, mime: String) -> Self {
        ObjectWriter {
            target: Target { shared, key, path, mime },
            size: 0,
            hasher: Sha256::new(),
            state: WriteState::Buffering(PutPayloadMut::new()),
        }
    }
}

impl fmt::Debug for ObjectWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            WriteState::Buffering(_) => "buffering",
            WriteState::Uploading(_) => "uploading",
            WriteState::Closed => "closed",
        };
        f.debug_struct("ObjectWriter")
            .field("store", &self.target.shared.name)
            .field("key", &self.target.key)
            .field("size", &self.size)
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

impl Target {
    fn unavailable(&self, operation: &str, e: &dyn std::error::Error) -> ArtifactError {
        ArtifactError::Unavailable {
            store: self.shared.name.clone(),
            operation: operation.to_owned(),
            message: e.to_string(),
        }
    }

    fn closed(&self) -> ArtifactError {
        ArtifactError::WriterClosed { store: self.shared.name.clone(), key: self.key.clone() }
    }

    /// Removes whatever `state` had uploaded.
    async fn discard(&self, state: WriteState) -> Result<()> {
        match state {
            WriteState::Uploading(upload) => {
                upload.abort().await.map_err(|e| self.shared.os_error("abort", &self.key, e))
            }
            WriteState::Buffering(_) | WriteState::Closed => Ok(()),
        }
    }

    /// `error`, after removing whatever `state` had uploaded.
    async fn fail(&self, state: WriteState, error: ArtifactError) -> ArtifactError {
        if let Err(e) = self.discard(state).await {
            tracing::warn!(store = %self.shared.name, key = %self.key, error = %e, "could not abort a failed artifact upload");
        }
        error
    }

    /// The state after `chunk` (already counted and hashed) is added to `state`.
    async fn advance(&self, state: WriteState, chunk: Bytes) -> Result<WriteState, (WriteState, ArtifactError)> {
        match state {
            WriteState::Closed => Err((WriteState::Closed, self.closed())),
            WriteState::Buffering(mut buffer) => {
                buffer.push(chunk);
                if buffer.content_length() < self.shared.part_size {
                    return Ok(WriteState::Buffering(buffer));
                }
                // Started in a task of its own: if this call is cancelled, the upload the store
                // creates still lands in a guard, which aborts it (no staged file, no open upload).
                let (store, path) = (Arc::clone(&self.shared.store), self.path.clone());
                let (name, key, part_size) = (self.shared.name.clone(), self.key.clone(), self.shared.part_size);
                let started = tokio::spawn(async move {
                    let upload = store.put_multipart(&path).await?;
                    Ok(PendingUpload {
                        upload: Some(WriteMultipart::new_with_chunk_size(upload, part_size)),
                        name,
                        key,
                    })
                });
                let mut upload = match started.await {
                    Ok(Ok(upload)) => upload,
                    Ok(Err(e)) => return Err((WriteState::Closed, self.shared.os_error("start upload", &self.key, e))),
                    Err(e) => return Err((WriteState::Closed, self.unavailable("start upload", &e))),
                };
                for part in buffer.freeze() {
                    upload.upload().put(part);
                }
                Ok(WriteState::Uploading(upload))
            }
            WriteState::Uploading(mut upload) => {
                // Back-pressure: fewer than max_concurrency parts in flight before buffering more.
                if let Err(e) = upload.upload().wait_for_capacity(self.shared.max_concurrency).await {
                    return Err((WriteState::Uploading(upload), self.shared.os_error("upload part", &self.key, e)));
                }
                upload.upload().put(chunk);
                Ok(WriteState::Uploading(upload))
            }
        }
    }

    /// Completes the data object (from `state`), then writes the sidecar.
    async fn complete(&self, state: WriteState, size: u64, sha256: String) -> Result<ArtifactMeta> {
        let shared = &self.shared;
        match state {
            WriteState::Closed => return Err(self.closed()),
            WriteState::Buffering(buffer) => {
                let payload: PutPayload = buffer.freeze();
                shared.store.put(&self.path, payload).await.map_err(|e| shared.os_error("put", &self.key, e))?;
            }
            WriteState::Uploading(upload) => {
                upload.finish().await.map_err(|e| shared.os_error("complete upload", &self.key, e))?;
            }
        }
        let meta = ArtifactMeta { key: self.key.clone(), size, sha256, mime: self.mime.clone() };
        let sidecar = Sidecar { v: 1, size, sha256: meta.sha256.clone(), mime: meta.mime.clone() };
        let body = serde_json::to_vec(&sidecar).expect("a sidecar serializes");
        let sidecar_path = Path::from(format!("{}{META_SUFFIX}", self.key));
        if let Err(e) = shared.store.put(&sidecar_path, body.into()).await {
            let error = shared.os_error("put metadata", &self.key, e);
            if let Err(e) = shared.store.delete(&self.path).await {
                tracing::warn!(store = %shared.name, key = %self.key, error = %e, "could not remove an artifact whose metadata was not written");
            }
            return Err(error);
        }
        Ok(meta)
    }
}

#[async_trait::async_trait]
impl ArtifactWriter for ObjectWriter {
    async fn write(&mut self, chunk: Bytes) -> Result<()> {
        let state = std::mem::replace(&mut self.state, WriteState::Closed);
        if matches!(state, WriteState::Closed) {
            return Err(self.target.closed());
        }
        if self.size.saturating_add(chunk.len() as u64) > self.target.shared.max_bytes {
            let error = self.target.shared.too_large(&self.target.key);
            return Err(self.target.fail(state, error).await);
        }
        self.size += chunk.len() as u64;
        self.hasher.update(&chunk);
        match self.target.advance(state, chunk).await {
            Ok(next) => {
                self.state = next;
                Ok(())
            }
            Err((state, error)) => Err(self.target.fail(state, error).await),
        }
    }

    async fn finish(self: Box<Self>) -> Result<ArtifactMeta> {
        let ObjectWriter { target, size, hasher, state } = *self;
        let sha256 = hex(&hasher.finalize());
        // In a task of its own: a cancelled finish still completes the artifact (data and
        // sidecar, under its key) rather than leaving data without metadata.
        let (store, key) = (target.shared.name.clone(), target.key.clone());
        match tokio::spawn(async move { target.complete(state, size, sha256).await }).await {
            Ok(result) => result,
            Err(e) => {
                Err(ArtifactError::Unavailable { store, operation: format!("finish {key}"), message: e.to_string() })
            }
        }
    }

    async fn abort(mut self: Box<Self>) -> Result<()> {
        let state = std::mem::replace(&mut self.state, WriteState::Closed);
        self.target.discard(state).await
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}
