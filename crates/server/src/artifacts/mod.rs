//! Big results as artifacts: what the dispatcher and the worker do with an
//! [`ArtifactStore`] (the store itself is the `presa-artifacts` crate).
//!
//! - `spill`: a task result bigger than [`Artifacts::threshold`] sheds its
//!   biggest content blocks (then its `structuredContent`) into artifacts and
//!   carries a `resource_link` to each in their place.
//! - `sink`: [`ArtifactSink`], what `ToolContext::artifact` hands a tool that
//!   writes an artifact itself, streaming.
//! - `sweep`: removes the artifacts of tasks that are gone (expired).
//! - `read`: `resources/read` of an artifact, for its owner.
//! - here: the artifact URI (`presa://artifacts/<taskId>/<run>/<n>`) and
//!   [`Artifacts::authorize`], the owner check every read goes through: an
//!   artifact belongs to its task, and only the task's scope may read it;
//!   anyone else gets what an unknown URI gets.
//!
//! A URI names `<taskId>/<run>/<n>`; the store keeps it under its owner's
//! segment, `<owner>/<taskId>/<run>/<n>` ([`owner`]: a digest of the task's
//! scope). `run` is random per run of a handler, so two runs of one task (a
//! crash, a lost claim) never write the same key, and one run's artifacts go
//! together with one `delete_prefix`; a principal's artifacts list together,
//! which is what its quota (`max_bytes_per_scope`) counts.

use std::{sync::Arc, time::Duration};

use presa_artifacts::{ArtifactError, ArtifactMeta, ArtifactStore};
use presa_store::{Scope, TaskStore};
use presa_tasks::TaskId;
use serde_json::{Value, json};

mod read;
mod sink;
mod spill;
mod sweep;

pub use sink::ArtifactSink;
pub(crate) use sink::{RunArtifacts, artifact_error_object};
pub use sweep::{SWEEP_GRACE, Swept, sweep, sweep_until};

/// The URI scheme and authority of artifacts.
pub const URI_PREFIX: &str = "presa://artifacts/";

/// The `_meta` key of an artifact link's SHA-256 (lowercase hex).
pub const META_SHA256: &str = "io.presa/sha256";

/// The `_meta` key of an artifact link's download path, relative to the MCP
/// endpoint's URL ([`download_path`]: `GET` it with the same credentials;
/// `Range` works).
pub const META_DOWNLOAD: &str = "io.presa/download";

/// The `_meta` key a spilled result names its `structuredContent`'s artifact under.
pub const META_STRUCTURED: &str = "io.presa/structuredContent";

/// The default [`Artifacts::threshold`]: 256 KiB.
pub const DEFAULT_THRESHOLD_BYTES: usize = 256 * 1024;

/// The default [`Artifacts::max_read_bytes`]: 16 MiB.
pub const DEFAULT_MAX_READ_BYTES: u64 = 16 * 1024 * 1024;

/// The default [`Artifacts::max_bytes_per_scope`]: 10 GiB.
pub const DEFAULT_MAX_BYTES_PER_SCOPE: u64 = 10 << 30;

/// The default [`Artifacts::sweep_every`]: 1 min.
pub const DEFAULT_SWEEP_EVERY: Duration = Duration::from_secs(60);

/// An artifact store and how presa uses it. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Artifacts {
    store: Arc<dyn ArtifactStore>,
    threshold: usize,
    max_read_bytes: u64,
    sweep_every: Duration,
    max_bytes_per_scope: Option<u64>,
}

impl Artifacts {
    /// Results and reads on `store`, with the default settings.
    pub fn new(store: Arc<dyn ArtifactStore>) -> Self {
        Artifacts {
            store,
            threshold: DEFAULT_THRESHOLD_BYTES,
            max_read_bytes: DEFAULT_MAX_READ_BYTES,
            sweep_every: DEFAULT_SWEEP_EVERY,
            max_bytes_per_scope: Some(DEFAULT_MAX_BYTES_PER_SCOPE),
        }
    }

    /// A task result over this many bytes (serialised) moves its biggest
    /// parts into artifacts until it fits.
    pub fn with_threshold(mut self, bytes: usize) -> Self {
        self.threshold = bytes;
        self
    }

    /// The biggest artifact `resources/read` returns (bigger: an error that
    /// points to the streamed download).
    pub fn with_max_read_bytes(mut self, bytes: u64) -> Self {
        self.max_read_bytes = bytes;
        self
    }

    /// How often a worker looks for artifacts whose task is gone.
    pub fn with_sweep_every(mut self, every: Duration) -> Self {
        self.sweep_every = every;
        self
    }

    /// The most bytes one principal's artifacts may hold at once (`None`: no
    /// quota); a spill or `ctx.artifact` past it fails its task with a
    /// retryable error.
    pub fn with_max_bytes_per_scope(mut self, bytes: Option<u64>) -> Self {
        self.max_bytes_per_scope = bytes;
        self
    }

    /// See [`with_max_bytes_per_scope`](Self::with_max_bytes_per_scope).
    pub fn max_bytes_per_scope(&self) -> Option<u64> {
        self.max_bytes_per_scope
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn ArtifactStore> {
        &self.store
    }

    /// See [`with_threshold`](Self::with_threshold).
    pub fn threshold(&self) -> usize {
        self.threshold
    }

    /// See [`with_max_read_bytes`](Self::with_max_read_bytes).
    pub fn max_read_bytes(&self) -> u64 {
        self.max_read_bytes
    }

    /// See [`with_sweep_every`](Self::with_sweep_every).
    pub fn sweep_every(&self) -> Duration {
        self.sweep_every
    }

    /// The artifact of URI key `key` (`<taskId>/<run>/<n>`) if `scope` owns
    /// its task (the task exists and is `scope`'s); `Ok(None)` otherwise,
    /// exactly as for a key that never existed. The returned metadata's `key`
    /// is the stored key (under `scope`'s own prefix). Store failures are errors.
    pub async fn authorize(
        &self,
        tasks: &dyn TaskStore,
        scope: &Scope,
        key: &str,
    ) -> Result<Option<ArtifactMeta>, ArtifactsError> {
        let Some(task) = task_of(key) else { return Ok(None) };
        if tasks.get(scope, &task).await.map_err(|e| ArtifactsError::Tasks(e.to_string()))?.is_none() {
            return Ok(None);
        }
        match self.store.head(&stored_key(scope, key)).await {
            Ok(meta) => Ok(Some(meta)),
            Err(ArtifactError::NotFound { .. } | ArtifactError::InvalidKey { .. }) => Ok(None),
            Err(e) => Err(ArtifactsError::Store(e)),
        }
    }

    /// How many bytes `scope`'s artifacts hold now (listed from the store).
    pub async fn usage(&self, scope: &Scope) -> Result<u64, ArtifactError> {
        use futures::TryStreamExt;
        self.store.list(&owner(scope)).try_fold(0u64, |sum, a| async move { Ok(sum + a.size) }).await
    }
}

/// Why keeping or reading an artifact failed (an artifact that is not there,
/// or not the caller's, is `None`, not an error).
#[derive(Debug, thiserror::Error)]
pub enum ArtifactsError {
    /// The task store could not say who owns it.
    #[error("task store: {0}")]
    Tasks(String),
    /// The artifact store failed.
    #[error(transparent)]
    Store(#[from] ArtifactError),
    /// Too big for one `resources/read` answer.
    #[error(
        "Artifact is {size} bytes, more than {limit} bytes `resources/read` returns: download it (GET artifacts/{key} with the same credentials)"
    )]
    TooBig {
        /// Its size.
        size: u64,
        /// `max_read_bytes`.
        limit: u64,
        /// Its key.
        key: String,
    },
    /// The principal's artifacts would pass their quota.
    #[error(
        "the caller's artifacts hold {used} bytes; {adding} more would pass max_artifact_bytes_per_scope ({limit}); \
         they are freed as the caller's tasks expire"
    )]
    Quota {
        /// What the principal's artifacts hold.
        used: u64,
        /// What this one adds.
        adding: u64,
        /// The quota.
        limit: u64,
    },
}

impl ArtifactsError {
    /// Whether the same operation may succeed later.
    pub fn is_retryable(&self) -> bool {
        match self {
            ArtifactsError::Tasks(_) | ArtifactsError::Quota { .. } => true,
            ArtifactsError::Store(e) => e.is_retryable(),
            ArtifactsError::TooBig { .. } => false,
        }
    }
}

/// The URI of the artifact whose URI key is `key`.
pub fn uri(key: &str) -> String {
    format!("{URI_PREFIX}{key}")
}

/// The URI key of an artifact URI (`<taskId>/<run>/<n>`); `None` for any other URI.
pub fn key_of(uri: &str) -> Option<&str> {
    uri.strip_prefix(URI_PREFIX).filter(|k| presa_artifacts::validate_key(k, false).is_ok())
}

/// The task a URI key belongs to (its first segment).
pub fn task_of(key: &str) -> Option<TaskId> {
    key.split_once('/').map(|(task, _)| TaskId::from_wire(task))
}

/// The first segment of every stored key of `scope`'s artifacts: 16 hex
/// digits of the SHA-256 of the scope. Keys are stored under it, so a
/// principal's artifacts list together (its quota) and a URI names a stored
/// key only together with its owner's scope.
pub fn owner(scope: &Scope) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(scope.key().as_bytes()).iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The stored key of `scope`'s artifact with URI key `key`.
pub fn stored_key(scope: &Scope, key: &str) -> String {
    format!("{}/{key}", owner(scope))
}

/// The URI key of a stored key (without its owner segment).
pub fn uri_key(stored: &str) -> &str {
    stored.split_once('/').map_or(stored, |(_, key)| key)
}

/// The download path of `scope`'s artifact `key`, relative to the URL of
/// the endpoint its task was made on: `artifacts/<key>` from `/mcp` (so
/// `/artifacts/<key>`), `<name>/artifacts/<key>` from a virtual server's
/// `/mcp/<name>` (so `/mcp/<name>/artifacts/<key>`, where the caller is
/// bound to that endpoint, as the task's owner is).
pub fn download_path(scope: &Scope, key: &str) -> String {
    match &scope.endpoint {
        Some(name) => format!("{name}/artifacts/{key}"),
        None => format!("artifacts/{key}"),
    }
}

/// The `resource_link` content block of `scope`'s stored artifact.
pub fn link(meta: &ArtifactMeta, name: &str, scope: &Scope) -> Value {
    let key = uri_key(&meta.key);
    json!({
        "type": "resource_link",
        "uri": uri(key),
        "name": name,
        "mimeType": meta.mime,
        "size": meta.size,
        "_meta": { META_SHA256: meta.sha256, META_DOWNLOAD: download_path(scope, key) },
    })
}

/// A fresh run prefix for `scope`'s task `task` (`<owner>/<taskId>/<random>`).
pub(crate) fn run_prefix(scope: &Scope, task: &TaskId) -> String {
    format!("{}/{task}/{:016x}", owner(scope), rand::random::<u64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_name_keys_and_keys_name_tasks() {
        assert_eq!(uri("p01.ab/00ff/0"), "presa://artifacts/p01.ab/00ff/0");
        assert_eq!(key_of("presa://artifacts/p01.ab/00ff/0"), Some("p01.ab/00ff/0"));
        for other in ["presa://artifacts/", "presa://artifacts/../x", "file:///etc/passwd", "presa://artifacts/a//b"] {
            assert_eq!(key_of(other), None, "{other}");
        }
        assert_eq!(task_of("p01.ab/00ff/0"), Some(TaskId::from_wire("p01.ab")));
        assert_eq!(task_of("lonely"), None);
        let (alice, bob) = (Scope::anonymous(), Scope { tenant: "t".into(), subject: "bob".into(), endpoint: None });
        assert_eq!(owner(&alice).len(), 16);
        assert_ne!(owner(&alice), owner(&bob));
        let prefix = run_prefix(&alice, &TaskId::from_wire("p01.ab"));
        let head = format!("{}/p01.ab/", owner(&alice));
        assert!(prefix.starts_with(&head) && prefix.len() == head.len() + 16, "{prefix}");
        assert_eq!(uri_key(&format!("{prefix}/0")), format!("p01.ab/{}/0", &prefix[head.len()..]));
    }

    /// A download path resolves, against the URL of the endpoint the task
    /// was made on, to that endpoint's download route.
    #[test]
    fn download_paths_stay_on_their_endpoint() {
        let root = Scope::anonymous();
        let on_files = Scope { endpoint: Some("files".into()), ..Scope::anonymous() };
        assert_eq!(download_path(&root, "p01.ab/00ff/0"), "artifacts/p01.ab/00ff/0");
        assert_eq!(download_path(&on_files, "p01.ab/00ff/0"), "files/artifacts/p01.ab/00ff/0");
    }
}
