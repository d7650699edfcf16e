//! [`ObjectArtifactStore`]: the [`ArtifactStore`] over any `object_store` backend.

use std::{fmt, sync::Arc, time::Duration};

use futures::{StreamExt, TryStreamExt, stream::BoxStream};
use object_store::{
    GetOptions, GetRange, ObjectStore, ObjectStoreExt, RetryConfig,
    aws::{AmazonS3Builder, AmazonS3ConfigKey},
    local::LocalFileSystem,
    path::Path,
    prefix::PrefixStore,
};
use serde::{Deserialize, Serialize};

mod writer;

use writer::ObjectWriter;

use crate::{
    ArtifactMeta, ArtifactRead, ArtifactStore, ArtifactWriter, ByteRange, ListedArtifact, META_SUFFIX, Result,
    config::ArtifactConfig,
    config::{config_error, display_url},
    error::ArtifactError,
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
            "file" => local_dir(&url, &name)?,
            "s3" => s3_bucket(&url, config, &mut name)?,
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

/// A `file:///abs/dir` store: the directory, made if missing.
fn local_dir(url: &url::Url, name: &str) -> Result<Arc<dyn ObjectStore>> {
    if url.host_str().is_some_and(|h| !h.is_empty() && h != "localhost") {
        return Err(config_error(name, "a file:// URL names a local directory: file:///abs/dir"));
    }
    let dir = url.to_file_path().map_err(|()| config_error(name, "not an absolute directory path"))?;
    std::fs::create_dir_all(&dir).map_err(|e| config_error(name, format!("cannot create {}: {e}", dir.display())))?;
    let local = LocalFileSystem::new_with_prefix(&dir)
        .map_err(|e| config_error(name, format!("cannot use {}: {e}", dir.display())))?
        .with_automatic_cleanup(true);
    Ok(Arc::new(local))
}

/// An `s3://bucket/prefix` store with `config`'s S3 options; `name` gains
/// the endpoint it talks to.
fn s3_bucket(url: &url::Url, config: &ArtifactConfig, name: &mut String) -> Result<Arc<dyn ObjectStore>> {
    let bucket = url
        .host_str()
        .filter(|b| !b.is_empty())
        .ok_or_else(|| config_error(name, "an s3:// URL names a bucket: s3://bucket or s3://bucket/prefix"))?;
    if config.part_size < MIN_S3_PART {
        return Err(config_error(name, format!("part_size must be at least {MIN_S3_PART} bytes on S3")));
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
        *name = format!("{name} at {}", display_url(&endpoint));
        if endpoint.starts_with("http://") && !allow_http {
            return Err(config_error(name, "a plain http:// endpoint needs allow_http (AWS_ALLOW_HTTP=true)"));
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
        .map_err(|e| config_error(name, e.to_string()))?;
    let prefix = url.path().trim_matches('/');
    Ok(if prefix.is_empty() { Arc::new(s3) } else { Arc::new(PrefixStore::new(s3, prefix)) })
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
        Ok(Box::new(ObjectWriter::new(Arc::clone(&self.shared), key.to_owned(), path, mime.to_owned())))
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
        let path = match prefix {
            "" => None,
            prefix => match self.shared.key(prefix, true) {
                Ok(path) => Some(path),
                Err(e) => return futures::stream::once(async move { Err(e) }).boxed(),
            },
        };
        let shared = Arc::clone(&self.shared);
        let owned_prefix = prefix.to_owned();
        self.shared
            .store
            .list(path.as_ref())
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

impl ArtifactConfig {
    /// Makes the store (a `file://` directory is created if missing). No request is
    /// sent: an unreachable S3 server shows at the first operation, as
    /// [`ArtifactError::Unavailable`].
    pub fn open(&self) -> Result<Arc<dyn ArtifactStore>> {
        Ok(Arc::new(ObjectArtifactStore::from_config(self)?))
    }
}
