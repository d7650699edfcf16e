//! The limits a store holds writes to, shared by every implementation:
//! what a create may take ([`CreateLimits`], checked atomically with it),
//! how a write's growth counts against its scope's byte quota
//! ([`growth_quota`]), how large a bus event may be and how far a
//! subscriber may fall behind, and how long a blocking operation may wait.

use std::time::Duration;

use presa_tasks::Task;

use crate::{claim::Writer, error::StoreError, fanout};

/// Limits enforced atomically with creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreateLimits {
    /// At most this many non-terminal tasks per scope.
    pub max_active_per_scope: Option<u64>,
    /// At most this many bytes of task records per scope (serialised; each
    /// task counts from its creation until it expires).
    pub max_bytes_per_scope: Option<u64>,
    /// At most this many work items (queued or claimed, not yet removed) in
    /// the new task's partition; beyond it creates get
    /// [`StoreError::QueueFull`], so the queue stays bounded when creators
    /// outpace workers.
    pub max_queued_per_partition: Option<u64>,
}

impl CreateLimits {
    /// No limit at all.
    pub const NONE: CreateLimits =
        CreateLimits { max_active_per_scope: None, max_bytes_per_scope: None, max_queued_per_partition: None };
}

/// The byte quota a write's growth is held to: `max_bytes_per_scope` for
/// a client write that leaves the task live, `None` (counted, never refused)
/// for a worker's write or one that ends the task.
pub fn growth_quota(next: &Task, writer: Writer, max_bytes_per_scope: Option<u64>) -> Option<u64> {
    max_bytes_per_scope.filter(|_| writer == Writer::Client && !next.status.is_terminal())
}

/// Largest event [`EventBus::publish`](crate::EventBus::publish) sends to every process, in bytes: an
/// event is a notice (a list changed, a resource URI, a session ended),
/// never a caller's payload, which goes to one topic ([`EventBus::publish_to`](crate::EventBus::publish_to)).
pub const MAX_EVENT_BYTES: usize = 8 * 1024;

/// The queue of each [`EventBus::subscribe`](crate::EventBus::subscribe) subscriber: 1,024 events or
/// 1 MiB, whichever comes first; past it the subscriber is ended
/// ([`StoreError::Lagged`]).
pub const BUS_QUEUE: fanout::QueueLimits = fanout::QueueLimits { max_items: 1024, max_bytes: 1024 * 1024 };

/// The queue of each [`EventBus::subscribe_to`](crate::EventBus::subscribe_to) subscriber: 64 messages or
/// 16 MiB (four answers as large as the default request body limit).
pub const TOPIC_QUEUE: fanout::QueueLimits = fanout::QueueLimits { max_items: 64, max_bytes: 16 * 1024 * 1024 };

/// Refuse an event over [`MAX_EVENT_BYTES`] (shared by every bus).
pub fn check_event(event: &str) -> Result<(), StoreError> {
    if event.len() > MAX_EVENT_BYTES {
        return Err(StoreError::TooLarge { what: "event", len: event.len(), max: MAX_EVENT_BYTES });
    }
    Ok(())
}

/// How long a blocking operation may wait, shared by implementations.
pub const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(2);
