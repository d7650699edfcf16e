//! The one error type of the crate.

/// Why an artifact operation failed.
///
/// Every variant names the store it happened on (its URL, never with
/// credentials) and says, through [`is_retryable`](Self::is_retryable),
/// whether the same call may succeed later.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArtifactError {
    /// The configuration cannot make a store (a bad URL, an unknown scheme, a bad option).
    #[error("artifact store {store}: invalid configuration: {message}")]
    Config {
        /// The store's URL, without credentials.
        store: String,
        /// What is wrong.
        message: String,
    },
    /// A key or prefix that is not of the form `segment/segment…` (see [`crate::validate_key`]).
    #[error("artifact store {store}: invalid key {key:?}: {reason}")]
    InvalidKey {
        /// The store's URL, without credentials.
        store: String,
        /// The key as given.
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A MIME type that is empty, too long, or not `type/subtype` in printable ASCII.
    #[error("artifact store {store}: invalid MIME type {mime:?} for {key}")]
    InvalidMime {
        /// The store's URL, without credentials.
        store: String,
        /// The artifact's key.
        key: String,
        /// The MIME type as given.
        mime: String,
    },
    /// No artifact under this key (never written, deleted, or its write never finished).
    #[error("artifact store {store}: artifact {key} not found")]
    NotFound {
        /// The store's URL, without credentials.
        store: String,
        /// The key looked for.
        key: String,
    },
    /// The requested range has no byte inside the artifact (HTTP's 416).
    #[error("artifact store {store}: range {range} of artifact {key} is not satisfiable (size {size} bytes)")]
    RangeNotSatisfiable {
        /// The store's URL, without credentials.
        store: String,
        /// The artifact's key.
        key: String,
        /// The range asked for, in HTTP `Range` syntax.
        range: String,
        /// The artifact's size.
        size: u64,
    },
    /// The writer got more than `max_bytes`; nothing of the artifact was kept.
    #[error("artifact store {store}: artifact {key} is larger than the limit of {max_bytes} bytes; nothing was stored")]
    TooLarge {
        /// The store's URL, without credentials.
        store: String,
        /// The artifact's key.
        key: String,
        /// The store's limit.
        max_bytes: u64,
    },
    /// A writer used after it finished, was aborted, or failed.
    #[error("artifact store {store}: the writer of {key} is closed (finished, aborted or failed)")]
    WriterClosed {
        /// The store's URL, without credentials.
        store: String,
        /// The artifact's key.
        key: String,
    },
    /// The stored object disagrees with its metadata (a bad sidecar, a size that differs).
    #[error("artifact store {store}: artifact {key} is corrupt: {message}")]
    Corrupt {
        /// The store's URL, without credentials.
        store: String,
        /// The artifact's key.
        key: String,
        /// What disagrees.
        message: String,
    },
    /// The store answered, and refused (permission denied, bad credentials, a 4xx answer).
    /// Retrying the same call gets the same answer.
    #[error("artifact store {store}: {operation} refused: {message}")]
    Refused {
        /// The store's URL, without credentials.
        store: String,
        /// What was being done (`put data/7`, `list 7`, …).
        operation: String,
        /// The store's answer.
        message: String,
    },
    /// The store could not be reached or failed transiently (connection refused, timeouts,
    /// 5xx answers after the client's own retries, local IO errors). Retrying later may succeed.
    #[error("artifact store {store}: {operation} failed, store unavailable: {message}")]
    Unavailable {
        /// The store's URL, without credentials.
        store: String,
        /// What was being done.
        operation: String,
        /// The underlying error.
        message: String,
    },
}

impl ArtifactError {
    /// Whether the same call may succeed later: only for [`Unavailable`](Self::Unavailable).
    /// Everything else (a missing artifact, a bad key or range, a refusal, a size over
    /// the limit) gives the same answer however often it is retried.
    pub fn is_retryable(&self) -> bool {
        matches!(self, ArtifactError::Unavailable { .. })
    }

    /// Whether this is [`NotFound`](Self::NotFound).
    pub fn is_not_found(&self) -> bool {
        matches!(self, ArtifactError::NotFound { .. })
    }

    /// Maps an `object_store` error on `operation` (for `key`, when there is one).
    pub(crate) fn from_object_store(store: &str, operation: &str, key: &str, e: object_store::Error) -> Self {
        use object_store::Error as E;
        let store = store.to_owned();
        match e {
            E::NotFound { .. } => ArtifactError::NotFound { store, key: key.to_owned() },
            E::PermissionDenied { .. }
            | E::Unauthenticated { .. }
            | E::InvalidPath { .. }
            | E::NotSupported { .. }
            | E::NotImplemented { .. }
            | E::UnknownConfigurationKey { .. }
            | E::Precondition { .. }
            | E::AlreadyExists { .. }
            | E::NotModified { .. } => {
                ArtifactError::Refused { store, operation: operation.to_owned(), message: error_chain(&e) }
            }
            other => {
                let message = error_chain(&other);
                if is_client_error(&other, &message) {
                    ArtifactError::Refused { store, operation: operation.to_owned(), message }
                } else {
                    ArtifactError::Unavailable { store, operation: operation.to_owned(), message }
                }
            }
        }
    }
}

/// Whether a generic `object_store` error is a 4xx answer other than 408 and 429.
///
/// object_store does not export the error that carries the status (its `RetryError`), so
/// this reads its message (`Server returned non-2xx status code: 400 Bad Request: …`).
/// A transport failure (connect, timeout, reset) carries an
/// [`HttpError`](object_store::client::HttpError) instead and is never a client error.
fn is_client_error(e: &object_store::Error, message: &str) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if s.is::<object_store::client::HttpError>() {
            return false;
        }
        source = s.source();
    }
    const MARKER: &str = "status code: 4";
    message.find(MARKER).is_some_and(|at| {
        let rest = &message[at + MARKER.len()..];
        !(rest.starts_with("08") || rest.starts_with("29"))
    })
}

/// An error and its sources, `: `-separated (object_store's own messages stop at the top).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}
