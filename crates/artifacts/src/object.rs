//! [`ObjectArtifactStore`]: the [`ArtifactStore`] over any `object_store` backend.

use std::{fmt, sync::Arc, time::Duration};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt, stream::BoxStream};
use object_store::{
    GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutPayload, PutPayloadMut, RetryConfig, WriteMultipart,
    aws::{AmazonS3Builder, AmazonS3ConfigKey},
    local::LocalFileSystem,
    path::Path,
    prefix::PrefixStore,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{
    ArtifactConfig, ArtifactError, ArtifactMeta, ArtifactRead, ArtifactStore, ArtifactWriter, ByteRange,
    ListedArtifact, META_SUFFIX, Result,
    config::{config_error, display_url},
    http::HyperConnector,
    valid_mime, validate_key,
};

/// An [`ArtifactStore`] on an `object_store` backend: a local directory
/// (`file://`) or S3 (`s3://`). Made by [`ArtifactConfig::open`] or
/// [`ObjectArtifactStore::from_config`].
pub struct ObjectArtifactStore {
    shared: Arc<Shared>,
}

/// What the store and its writers share.
struct Shared {
    store: Arc<dyn ObjectStore>,
    name: String,
    max_bytes: u64,
    part_size: usize,
    max_concurrency: usize,
}

impl fmt::Debug for ObjectArtifactStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectArtifactStore")
            .field("name", &self.shared.name)
            .field("max_bytes", &self.shared.max_bytes)
            .field("part_size", &self.shared.part_size)
            .field("max_concurrency", &self.shared.max_concurrency)
            .finish_non_exhaustive()
    }
}

/// The smallest part S3 accepts (all parts but the last).
const MIN_S3_PART: usize = 5 << 20;

impl ObjectArtifactStore {
    /// Makes the store `config` describes (see [`ArtifactConfig::open`]).
    pub fn from_config(config: &ArtifactConfig) -> Result<Self> {
        let mut name = display_url(&config.url);
        let url = url::Url::parse(&config.url).map_err(|e| config_error(&name, format!("not a URL: {e}")))?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(config_error(
                &name,
                "credentials in the URL are not accepted: use the AWS_* environment variables or the S3 options",
            ));
        }
        if config.max_concurrency == 0 || config.part_size == 0 {
            return Err(config_error(&name, "part_size and max_concurrency must be at least 1"));
        }
        let store: Arc<dyn ObjectStore> = match url.scheme() {
            "file" => {
                if url.host_str().is_some_and(|h| !h.is_empty() && h != "localhost") {
                    return Err(config_error(&name, "a file:// URL names a local directory: file:///abs/dir"));
                }
                let dir = url.to_file_path().map_err(|()| config_error(&name, "not an absolute directory path"))?;
                std::fs::create_dir_all(&dir)
                    .map_err(|e| config_error(&name, format!("cannot create {}: {e}", dir.display())))?;
                let local = LocalFileSystem::new_with_prefix(&dir)
                    .map_err(|e| config_error(&name, format!("cannot use {}: {e}", dir.display())))?
                    .with_automatic_cleanup(true);
                Arc::new(local)
            }
            "s3" => {
                let bucket = url.host_str().filter(|b| !b.is_empty()).ok_or_else(|| {
                    config_error(&name, "an s3:// URL names a bucket: s3://bucket or s3://bucket/prefix")
                })?;
                if config.part_size < MIN_S3_PART {
                    return Err(config_error(&name, format!("part_size must be at least {MIN_S3_PART} bytes on S3")));
                }
                let s3 = &config.s3;
                let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
                if let Some(endpoint) = &s3.endpoint {
                    builder = builder.with_endpoint(endpoint);
                }
                if s3.allow_http {
                    builder = builder.with_allow_http(true);
                }
                let allow_http = s3.allow_http
                    || builder
                        .get_config_value(&AmazonS3ConfigKey::Client(object_store::ClientConfigKey::AllowHttp))
                        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
                if let Some(region) = &s3.region {
                    builder = builder.with_region(region);
                }
                if let Some(key) = &s3.access_key_id {
                    builder = builder.with_access_key_id(key);
                }
                if let Some(secret) = &s3.secret_access_key {
                    builder = builder.with_secret_access_key(secret);
                }
                if let Some(token) = &s3.session_token {
                    builder = builder.with_token(token);
                }
                if let Some(endpoint) = builder.get_config_value(&AmazonS3ConfigKey::Endpoint) {
                    name = format!("{name} at {}", display_url(&endpoint));
                    if endpoint.starts_with("http://") && !allow_http {
                        return Err(config_error(
                            &name,
                            "a plain http:// endpoint needs allow_http (AWS_ALLOW_HTTP=true)",
                        ));
                    }
                }
                let retry = RetryConfig {
                    max_retries: s3.max_retries.unwrap_or(3),
                    retry_timeout: s3.retry_timeout.unwrap_or(Duration::from_secs(30)),
                    ..RetryConfig::default()
                };
                let connector = HyperConnector {
                    allow_http,
                    connect_timeout: s3.connect_timeout.unwrap_or(Duration::from_secs(5)),
                    request_timeout: s3.request_timeout.unwrap_or(Duration::from_secs(30)),
                };
                let s3 = builder
                    .with_retry(retry)
                    .with_http_connector(connector)
                    .build()
                    .map_err(|e| config_error(&name, e.to_string()))?;
                let prefix = url.path().trim_matches('/');
                if prefix.is_empty() { Arc::new(s3) } else { Arc::new(PrefixStore::new(s3, prefix)) }
            }
            other => {
                return Err(config_error(
                    &name,
                    format!("unknown scheme {other:?}: use file:///abs/dir or s3://bucket/prefix"),
                ));
            }
        };
        Ok(ObjectArtifactStore {
            shared: Arc::new(Shared {
                store,
                name,
                max_bytes: config.max_bytes,
                part_size: config.part_size,
                max_concurrency: config.max_concurrency,
            }),
        })
    }
}

/// The sidecar `<key>.meta`: what an artifact is, written once its data is complete.
#[derive(Debug, Serialize, Deserialize)]
struct Sidecar {
    v: u32,
    size: u64,
    sha256: String,
    mime: String,
}

impl Shared {
    fn key(&self, key: &str, prefix: bool) -> Result<Path> {
        validate_key(key, prefix).map_err(|reason| ArtifactError::InvalidKey {
            store: self.name.clone(),
            key: key.to_owned(),
            reason,
        })?;
        Ok(Path::from(key))
    }

    fn os_error(&self, operation: &str, key: &str, e: object_store::Error) -> ArtifactError {
        ArtifactError::from_object_store(&self.name, operation, key, e)
    }

    fn too_large(&self, key: &str) -> ArtifactError {
        ArtifactError::TooLarge { store: self.name.clone(), key: key.to_owned(), max_bytes: self.max_bytes }
    }

    async fn read_meta(&self, key: &str) -> Result<ArtifactMeta> {
        let sidecar = Path::from(format!("{key}{META_SUFFIX}"));
        let bytes = self
            .store
            .get(&sidecar)
            .await
            .map_err(|e| self.os_error("get metadata", key, e))?
            .bytes()
            .await
            .map_err(|e| self.os_error("get metadata", key, e))?;
        let sidecar: Sidecar = serde_json::from_slice(&bytes).map_err(|e| ArtifactError::Corrupt {
            store: self.name.clone(),
            key: key.to_owned(),
            message: format!("unreadable metadata sidecar: {e}"),
        })?;
        Ok(ArtifactMeta { key: key.to_owned(), size: sidecar.size, sha256: sidecar.sha256, mime: sidecar.mime })
    }
}

#[async_trait::async_trait]
impl ArtifactStore for ObjectArtifactStore {
    fn name(&self) -> &str {
        &self.shared.name
    }

    fn max_bytes(&self) -> u64 {
        self.shared.max_bytes
    }

    async fn create(&self, key: &str, mime: &str) -> Result<Box<dyn ArtifactWriter>> {
        let path = self.shared.key(key, false)?;
        if !valid_mime(mime) {
            return Err(ArtifactError::InvalidMime {
                store: self.shared.name.clone(),
                key: key.to_owned(),
                mime: mime.to_owned(),
            });
        }
        Ok(Box::new(ObjectWriter {
            target: Target { shared: Arc::clone(&self.shared), key: key.to_owned(), path, mime: mime.to_owned() },
            size: 0,
            hasher: Sha256::new(),
            state: WriteState::Buffering(PutPayloadMut::new()),
        }))
    }

    async fn open(&self, key: &str, range: Option<ByteRange>) -> Result<ArtifactRead> {
        let path = self.shared.key(key, false)?;
        let meta = self.shared.read_meta(key).await?;
        let wanted = match range {
            None => 0..meta.size,
            Some(range) => range.resolve(meta.size).ok_or_else(|| ArtifactError::RangeNotSatisfiable {
                store: self.shared.name.clone(),
                key: key.to_owned(),
                range: range.to_string(),
                size: meta.size,
            })?,
        };
        let options = GetOptions {
            range: (wanted != (0..meta.size)).then(|| GetRange::Bounded(wanted.clone())),
            ..GetOptions::default()
        };
        let result =
            self.shared.store.get_opts(&path, options).await.map_err(|e| self.shared.os_error("get", key, e))?;
        if result.meta.size != meta.size {
            return Err(ArtifactError::Corrupt {
                store: self.shared.name.clone(),
                key: key.to_owned(),
                message: format!("{} bytes stored, {} in its metadata", result.meta.size, meta.size),
            });
        }
        let shared = Arc::clone(&self.shared);
        let owned_key = key.to_owned();
        let stream = result.into_stream().map_err(move |e| shared.os_error("read", &owned_key, e)).boxed();
        Ok(ArtifactRead { meta, range: wanted, stream })
    }

    async fn head(&self, key: &str) -> Result<ArtifactMeta> {
        self.shared.key(key, false)?;
        self.shared.read_meta(key).await
    }

    async fn delete(&self, key: &str) -> Result<()> {
        let path = self.shared.key(key, false)?;
        // The sidecar first: without it the artifact no longer exists for readers.
        for (path, what) in [(Path::from(format!("{key}{META_SUFFIX}")), "delete metadata"), (path, "delete")] {
            match self.shared.store.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.shared.os_error(what, key, e)),
            }
        }
        Ok(())
    }

    async fn delete_prefix(&self, prefix: &str) -> Result<u64> {
        let path = self.shared.key(prefix, true)?;
        // Sidecars and data alike: every object under the prefix.
        let locations = self.shared.store.list(Some(&path)).map_ok(|meta| meta.location).boxed();
        let mut deleted = self.shared.store.delete_stream(locations);
        let mut count = 0;
        while let Some(result) = deleted.next().await {
            match result {
                Ok(_) => count += 1,
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.shared.os_error("delete prefix", prefix, e)),
            }
        }
        Ok(count)
    }

    fn list(&self, prefix: &str) -> BoxStream<'static, Result<ListedArtifact>> {
        let path = match self.shared.key(prefix, true) {
            Ok(path) => path,
            Err(e) => return futures::stream::once(async move { Err(e) }).boxed(),
        };
        let shared = Arc::clone(&self.shared);
        let owned_prefix = prefix.to_owned();
        self.shared
            .store
            .list(Some(&path))
            .try_filter(|meta| futures::future::ready(!meta.location.as_ref().ends_with(META_SUFFIX)))
            .map(move |item| match item {
                Ok(meta) => Ok(ListedArtifact {
                    key: meta.location.to_string(),
                    size: meta.size,
                    last_modified: meta.last_modified.into(),
                }),
                Err(e) => Err(shared.os_error("list", &owned_prefix, e)),
            })
            .boxed()
    }
}

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
struct ObjectWriter {
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
