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
            shared: Arc::clone(&self.shared),
            key: key.to_owned(),
            path,
            mime: mime.to_owned(),
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
    Uploading(WriteMultipart),
    /// Finished, aborted or failed.
    Closed,
}

/// The [`ArtifactWriter`] of [`ObjectArtifactStore`].
struct ObjectWriter {
    shared: Arc<Shared>,
    key: String,
    path: Path,
    mime: String,
    size: u64,
    hasher: Sha256,
    state: WriteState,
}

impl fmt::Debug for ObjectWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            WriteState::Buffering(_) => "buffering",
            WriteState::Uploading(_) => "uploading",
            WriteState::Closed => "closed",
        };
        f.debug_struct("ObjectWriter")
            .field("store", &self.shared.name)
            .field("key", &self.key)
            .field("size", &self.size)
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

impl ObjectWriter {
    fn closed(&self) -> ArtifactError {
        ArtifactError::WriterClosed { store: self.shared.name.clone(), key: self.key.clone() }
    }

    /// Closes the writer and removes whatever was uploaded.
    async fn discard(&mut self) -> Result<()> {
        match std::mem::replace(&mut self.state, WriteState::Closed) {
            WriteState::Uploading(upload) => {
                upload.abort().await.map_err(|e| self.shared.os_error("abort", &self.key, e))
            }
            WriteState::Buffering(_) | WriteState::Closed => Ok(()),
        }
    }

    /// Closes the writer after `error`, removing whatever was uploaded.
    async fn fail(&mut self, error: ArtifactError) -> ArtifactError {
        if let Err(e) = self.discard().await {
            tracing::warn!(store = %self.shared.name, key = %self.key, error = %e, "could not abort a failed artifact upload");
        }
        error
    }

    async fn write_inner(&mut self, chunk: Bytes) -> Result<()> {
        match &mut self.state {
            WriteState::Closed => Err(self.closed()),
            WriteState::Buffering(buffer) => {
                buffer.push(chunk);
                if buffer.content_length() < self.shared.part_size {
                    return Ok(());
                }
                let buffered = std::mem::take(buffer).freeze();
                let upload = self
                    .shared
                    .store
                    .put_multipart(&self.path)
                    .await
                    .map_err(|e| self.shared.os_error("start upload", &self.key, e))?;
                let mut upload = WriteMultipart::new_with_chunk_size(upload, self.shared.part_size);
                for part in buffered {
                    upload.put(part);
                }
                self.state = WriteState::Uploading(upload);
                Ok(())
            }
            WriteState::Uploading(upload) => {
                // Back-pressure: at most max_concurrency parts in flight before buffering more.
                let waited = upload.wait_for_capacity(self.shared.max_concurrency).await;
                waited.map_err(|e| self.shared.os_error("upload part", &self.key, e))?;
                upload.put(chunk);
                Ok(())
            }
        }
    }

    async fn finish_inner(&mut self) -> Result<ArtifactMeta> {
        match std::mem::replace(&mut self.state, WriteState::Closed) {
            WriteState::Closed => return Err(self.closed()),
            WriteState::Buffering(buffer) => {
                let payload: PutPayload = buffer.freeze();
                self.shared
                    .store
                    .put(&self.path, payload)
                    .await
                    .map_err(|e| self.shared.os_error("put", &self.key, e))?;
            }
            WriteState::Uploading(upload) => {
                // WriteMultipart::finish aborts the upload itself when a part or the completion fails.
                upload.finish().await.map_err(|e| self.shared.os_error("complete upload", &self.key, e))?;
            }
        }
        let meta = ArtifactMeta {
            key: self.key.clone(),
            size: self.size,
            sha256: hex(&std::mem::take(&mut self.hasher).finalize()),
            mime: self.mime.clone(),
        };
        let sidecar = Sidecar { v: 1, size: meta.size, sha256: meta.sha256.clone(), mime: meta.mime.clone() };
        let body = serde_json::to_vec(&sidecar).expect("a sidecar serializes");
        let sidecar_path = Path::from(format!("{}{META_SUFFIX}", self.key));
        if let Err(e) = self.shared.store.put(&sidecar_path, body.into()).await {
            let error = self.shared.os_error("put metadata", &self.key, e);
            if let Err(e) = self.shared.store.delete(&self.path).await {
                tracing::warn!(store = %self.shared.name, key = %self.key, error = %e, "could not remove an artifact whose metadata was not written");
            }
            return Err(error);
        }
        Ok(meta)
    }
}

#[async_trait::async_trait]
impl ArtifactWriter for ObjectWriter {
    async fn write(&mut self, chunk: Bytes) -> Result<()> {
        if matches!(self.state, WriteState::Closed) {
            return Err(self.closed());
        }
        if self.size.saturating_add(chunk.len() as u64) > self.shared.max_bytes {
            let error = self.shared.too_large(&self.key);
            return Err(self.fail(error).await);
        }
        self.size += chunk.len() as u64;
        self.hasher.update(&chunk);
        match self.write_inner(chunk).await {
            Ok(()) => Ok(()),
            Err(e) => Err(self.fail(e).await),
        }
    }

    async fn finish(mut self: Box<Self>) -> Result<ArtifactMeta> {
        self.finish_inner().await
    }

    async fn abort(mut self: Box<Self>) -> Result<()> {
        self.discard().await
    }
}

impl Drop for ObjectWriter {
    fn drop(&mut self) {
        if let WriteState::Uploading(upload) = std::mem::replace(&mut self.state, WriteState::Closed) {
            // Dropped unfinished: abort the multipart upload so no part is left behind.
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    let name = self.shared.name.clone();
                    let key = self.key.clone();
                    runtime.spawn(async move {
                        if let Err(e) = upload.abort().await {
                            tracing::warn!(store = %name, key = %key, error = %e, "could not abort a dropped artifact upload");
                        }
                    });
                }
                Err(_) => {
                    tracing::warn!(store = %self.shared.name, key = %self.key, "artifact writer dropped outside a Tokio runtime: its upload is not aborted");
                }
            }
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}
