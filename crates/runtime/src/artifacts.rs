//! The artifact store's flags (`--artifact-url` and its kin), shared by API,
//! worker and gateway processes, and the one place they become a
//! [`presa_server::artifacts::Artifacts`].

use std::{path::PathBuf, time::Duration};

use clap::Args;
use presa_artifacts::{ArtifactConfig, S3Options};
use presa_server::artifacts::{
    Artifacts, DEFAULT_MAX_BYTES_PER_SCOPE, DEFAULT_MAX_READ_BYTES, DEFAULT_THRESHOLD_BYTES,
};

use crate::{error::RuntimeError, secret_file::SecretFlag};

const SECRET_KEY_FILE: SecretFlag =
    SecretFlag { flag: "--artifact-s3-secret-access-key-file", env: "PRESA_ARTIFACT_S3_SECRET_ACCESS_KEY_FILE" };

/// Where big results go: an artifact store (see docs/tasks.md, "Large results").
#[derive(Debug, Clone, Args)]
pub struct ArtifactArgs {
    /// The artifact store: `file:///abs/dir`, `s3://bucket[/prefix]`, or
    /// `off`. Unset: when embedded, a directory of this process's own under
    /// the system's temporary directory, removed when it stops; `off` with Redis (a result over --max-result-bytes then
    /// fails its task). Every API, worker and gateway process of a cluster
    /// needs the same store.
    #[arg(long, env = "PRESA_ARTIFACT_URL")]
    pub artifact_url: Option<String>,

    /// A task result over this many bytes (serialised) moves its biggest
    /// content blocks (then its structuredContent) into artifacts, each
    /// replaced by a `resource_link`.
    #[arg(long, env = "PRESA_ARTIFACT_THRESHOLD_BYTES", default_value_t = DEFAULT_THRESHOLD_BYTES)]
    pub artifact_threshold_bytes: usize,

    /// Largest artifact, in bytes: a bigger one fails its task, and nothing of it is kept.
    #[arg(long, env = "PRESA_MAX_ARTIFACT_BYTES", default_value_t = 1 << 30)]
    pub max_artifact_bytes: u64,

    /// Largest artifact `resources/read` returns, in bytes; a bigger one is
    /// downloaded (`GET /artifacts/…` with the same credentials, `Range` supported).
    #[arg(long, env = "PRESA_MAX_ARTIFACT_READ_BYTES", default_value_t = DEFAULT_MAX_READ_BYTES)]
    pub max_artifact_read_bytes: u64,

    /// Most bytes one principal's artifacts may hold at once (0: no quota): a
    /// result that would pass it fails its task with a retryable error; it
    /// frees as the principal's tasks expire.
    #[arg(long, env = "PRESA_MAX_ARTIFACT_BYTES_PER_SCOPE", default_value_t = DEFAULT_MAX_BYTES_PER_SCOPE)]
    pub max_artifact_bytes_per_scope: u64,

    /// How often a worker removes the artifacts of expired tasks, in ms.
    #[arg(long, env = "PRESA_ARTIFACT_SWEEP_MS", default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(10..))]
    pub artifact_sweep_ms: u64,

    /// An S3-compatible server's endpoint (`http://127.0.0.1:9000`); unset:
    /// AWS (or `AWS_ENDPOINT_URL`).
    #[arg(long, env = "PRESA_ARTIFACT_S3_ENDPOINT")]
    pub artifact_s3_endpoint: Option<String>,

    /// Allow a plain `http://` S3 endpoint.
    #[arg(long, env = "PRESA_ARTIFACT_S3_ALLOW_HTTP", default_value_t = false)]
    pub artifact_s3_allow_http: bool,

    /// The S3 region; unset: `AWS_REGION`, `AWS_DEFAULT_REGION`, else `us-east-1`.
    #[arg(long, env = "PRESA_ARTIFACT_S3_REGION")]
    pub artifact_s3_region: Option<String>,

    /// The S3 access key id; unset: `AWS_ACCESS_KEY_ID`, then web identity,
    /// container and instance credentials.
    #[arg(long, env = "PRESA_ARTIFACT_S3_ACCESS_KEY_ID")]
    pub artifact_s3_access_key_id: Option<String>,

    /// The S3 secret access key (prefer the `-file` form).
    #[arg(long, env = "PRESA_ARTIFACT_S3_SECRET_ACCESS_KEY", hide_env_values = true)]
    pub artifact_s3_secret_access_key: Option<String>,

    /// A file holding the S3 secret access key (a mounted Kubernetes secret).
    #[arg(
        long,
        env = "PRESA_ARTIFACT_S3_SECRET_ACCESS_KEY_FILE",
        value_name = "PATH",
        conflicts_with = "artifact_s3_secret_access_key"
    )]
    pub artifact_s3_secret_access_key_file: Option<PathBuf>,
}

impl ArtifactArgs {
    /// The artifact store these flags name (`embedded`: the process keeps its
    /// tasks in memory, so an unset URL means a local directory), or `None`
    /// when off. Says at start which it is.
    pub fn open(&self, embedded: bool) -> Result<Option<Artifacts>, RuntimeError> {
        let url = match self.artifact_url.as_deref().map(str::trim) {
            Some("off") => None,
            Some(url) if !url.is_empty() => Some(url.to_owned()),
            _ if embedded => Some(format!("file://{}", embedded_dir().display())),
            _ => None,
        };
        let Some(url) = url else {
            tracing::warn!("no artifact store (--artifact-url): a task result over --max-result-bytes fails its task");
            return Ok(None);
        };
        let config = ArtifactConfig::new(url).with_max_bytes(self.max_artifact_bytes).with_s3(self.s3()?);
        let store = config.open()?;
        tracing::info!(
            store = store.name(),
            threshold_bytes = self.artifact_threshold_bytes,
            "artifact store: big results are stored there and linked"
        );
        Ok(Some(
            Artifacts::new(store)
                .with_threshold(self.artifact_threshold_bytes)
                .with_max_read_bytes(self.max_artifact_read_bytes)
                .with_max_bytes_per_scope(
                    (self.max_artifact_bytes_per_scope > 0).then_some(self.max_artifact_bytes_per_scope),
                )
                .with_sweep_every(Duration::from_millis(self.artifact_sweep_ms)),
        ))
    }

    /// Removes the directory an embedded process keeps its artifacts in when
    /// no `--artifact-url` was given (its tasks are gone with it).
    pub(crate) fn remove_embedded_dir(&self) {
        if self.artifact_url.is_none() {
            let _ = std::fs::remove_dir_all(embedded_dir());
        }
    }

    fn s3(&self) -> Result<S3Options, RuntimeError> {
        let mut s3 = S3Options::default().with_allow_http(self.artifact_s3_allow_http);
        if let Some(endpoint) = &self.artifact_s3_endpoint {
            s3 = s3.with_endpoint(endpoint);
        }
        if let Some(region) = &self.artifact_s3_region {
            s3 = s3.with_region(region);
        }
        let secret = SECRET_KEY_FILE
            .resolve(self.artifact_s3_secret_access_key.as_ref(), self.artifact_s3_secret_access_key_file.as_ref())?;
        match (&self.artifact_s3_access_key_id, secret) {
            (Some(id), Some(secret)) => s3 = s3.with_credentials(id, secret),
            (None, None) => {}
            _ => {
                return Err(RuntimeError::Config(
                    "--artifact-s3-access-key-id and a secret access key go together".into(),
                ));
            }
        }
        Ok(s3)
    }
}

/// Where an embedded process keeps its artifacts when not told: its own
/// directory (two embedded processes on one machine must not sweep each
/// other's artifacts).
fn embedded_dir() -> PathBuf {
    std::env::temp_dir().join(format!("presa-artifacts-{}", std::process::id()))
}
