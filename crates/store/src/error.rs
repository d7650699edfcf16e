//! [`StoreError`]: why a store operation failed, the one error type of
//! every store and bus, and whether retrying can help.

use presa_protocol::Limit;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The backend could not be reached or timed out. Retryable.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A capacity limit was hit; nothing was stored. Retryable later.
    #[error("capacity limit reached: {limit}")]
    Capacity {
        /// Which limit ([`Limit::MaxActiveTasksPerScope`], [`Limit::MaxTasks`]…).
        limit: Limit,
    },
    /// The new task's partition already holds
    /// [`CreateLimits::max_queued_per_partition`](crate::CreateLimits::max_queued_per_partition) work items (queued or
    /// running); nothing was stored. Retryable once workers catch up.
    #[error("work queue full")]
    QueueFull,
    /// An idempotency key was used before, by the same principal, for a
    /// different request (another tool or other arguments); nothing was
    /// stored. Not retryable: the client must use a new key.
    #[error("the idempotency key was already used for a different request")]
    KeyReused,
    /// A write reached the Redis primary but fewer replicas than
    /// `--durability replicated` asks confirmed it in time: a failover now
    /// could lose it. Retryable: a create retried under the same idempotency
    /// key returns the task if the primary kept it (and confirms it again).
    #[error(
        "written on the Redis primary but confirmed by {acked} of {wanted} replicas in time; \
         retry (a create with the same idempotency key)"
    )]
    Unconfirmed {
        /// Replicas that confirmed.
        acked: u64,
        /// Replicas asked for.
        wanted: u32,
    },
    /// A stored record could not be decoded.
    #[error("corrupt task record: {0}")]
    Corrupt(String),
    /// A listing cursor that no listing returned; nothing was read. Not retryable.
    #[error("not a listing cursor: {0:?}")]
    BadCursor(String),
    /// This store was configured without what the operation needs (the
    /// admin task index, `--task-index off`). Not retryable.
    #[error("not available: {0}")]
    Unsupported(String),
    /// An event subscriber fell further behind than its queue's bound
    /// ([`QueueLimits`](crate::fanout::QueueLimits)): what was queued for it was dropped and its
    /// stream ends after this. Subscribe again to go on (from now).
    #[error("event subscriber lagged: it fell behind its queue's bound and was ended")]
    Lagged,
    /// Something to publish or store is larger than its limit; nothing was
    /// published or stored.
    #[error("{what} is {len} bytes, over the limit of {max}")]
    TooLarge {
        /// What was too large (`event`).
        what: &'static str,
        /// Its size.
        len: usize,
        /// The limit.
        max: usize,
    },
}

impl StoreError {
    /// Whether retrying later can succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable(_)
                | StoreError::Unconfirmed { .. }
                | StoreError::Capacity { .. }
                | StoreError::QueueFull
                | StoreError::Lagged
        )
    }
}
