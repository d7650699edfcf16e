//! [`RuntimeError`]: why a process could not run, the one error type of
//! this crate's boot path.

use std::net::SocketAddr;

use presa_server::catalog::CatalogError;

use crate::storage::StorageError;

/// Why a process could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The catalog is invalid (a bad schema, a duplicate name…).
    #[error("building the catalog: {0}")]
    Catalog(#[from] CatalogError),
    /// The settings do not work together.
    #[error("{0}")]
    Config(String),
    /// The default retry policy's flags make no sense.
    #[error("--retry-attempts, --retry-initial-ms, --retry-max-ms: {0}")]
    Retry(#[from] presa_server::RetryPolicyError),
    /// A start-up check refused the settings ([`crate::auth::check_listen`] and the others).
    #[error(transparent)]
    Refused(#[from] crate::auth::CheckError),
    /// The key read from `--state-secret-file` is refused.
    #[error("{source} (read from --state-secret-file {})", path.display())]
    StateSecretFile {
        /// Why.
        source: crate::auth::CheckError,
        /// The file.
        path: std::path::PathBuf,
    },
    /// Telemetry could not be set up.
    #[error("setting up telemetry: {0}")]
    Telemetry(#[from] presa_telemetry::TelemetryError),
    /// A secret file (`--state-secret-file`) cannot be used.
    #[error(transparent)]
    SecretFile(#[from] crate::secret_file::SecretFileError),
    /// The authentication flags do not work (a bad key, an unreachable JWKS…).
    #[error(transparent)]
    Auth(#[from] crate::auth::AuthConfigError),
    /// The artifact store the flags name cannot be opened.
    #[error("opening the artifact store: {0}")]
    Artifacts(#[from] presa_artifacts::ArtifactError),
    /// The task store could not be set up.
    #[error("setting up the task store: {0}")]
    Storage(#[from] StorageError),
    /// The listen address could not be bound.
    #[error("binding {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    /// Serving HTTP failed.
    #[error("serving HTTP: {0}")]
    Serve(std::io::Error),
}
