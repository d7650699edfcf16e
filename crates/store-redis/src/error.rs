//! The crate's one error type and its mapping onto [`presa_store::StoreError`].

use std::time::Duration;

use presa_store::StoreError;

/// Why a Redis store operation failed. `Clone`: a batched write's failure
/// reaches every write of the batch (`batch.rs`).
#[derive(Debug, Clone, thiserror::Error)]
pub enum RedisStoreError {
    /// The configuration cannot work (bad URL, prefix with braces, no partitions…).
    #[error("invalid Redis store configuration: {0}")]
    Config(String),
    /// Redis answered with an error or the connection failed.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// Redis did not answer in time (unreachable, overloaded, partitioned).
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
    /// Connecting failed a moment ago (another command's attempt, shared by
    /// the commands that waited for it).
    #[error("redis unreachable: {0}")]
    Unreachable(String),
    /// No connection could be taken from the blocking-read pool.
    #[error("redis connection pool: {0}")]
    Pool(String),
    /// A write reached the primary, but fewer replicas than replicated
    /// durability asks confirmed it in time.
    #[error("written on the Redis primary but confirmed by {acked} of {wanted} replicas in time")]
    Unconfirmed {
        /// Replicas that confirmed.
        acked: u64,
        /// Replicas asked for.
        wanted: u32,
    },
    /// A batched write's flush ended without answering it (a bug: the
    /// flush panicked); the write may or may not have happened.
    #[error("batched write unanswered: {0}")]
    Unanswered(String),
    /// A stored record or a script reply could not be decoded.
    #[error("corrupt record: {0}")]
    Corrupt(String),
}

impl RedisStoreError {
    /// Whether retrying later can succeed (everything but bad configuration
    /// and corrupt records).
    pub fn is_retryable(&self) -> bool {
        !matches!(self, Self::Config(_) | Self::Corrupt(_))
    }
}

impl From<RedisStoreError> for StoreError {
    fn from(e: RedisStoreError) -> Self {
        match e {
            RedisStoreError::Corrupt(m) => StoreError::Corrupt(m),
            RedisStoreError::Unconfirmed { acked, wanted } => StoreError::Unconfirmed { acked, wanted },
            // Connection failures, timeouts, server errors (OOM, READONLY,
            // CLUSTERDOWN, MOVED storms…) and pool exhaustion are all
            // "try again later" for the caller.
            other => StoreError::Unavailable(other.to_string()),
        }
    }
}
