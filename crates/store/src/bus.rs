//! [`EventBus`]: short events broadcast to every API process, and topics
//! for payloads that concern one subscriber.

use std::pin::Pin;

use futures::Stream;

use crate::error::StoreError;
#[cfg(doc)]
use crate::limits::{BUS_QUEUE, MAX_EVENT_BYTES, TOPIC_QUEUE};

/// A stream of events: each one, or [`StoreError::Lagged`] once (the
/// subscriber fell behind its queue's bound) and then the end.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<String, StoreError>> + Send>>;

/// Events between API processes: a broadcast of short events to every
/// subscriber, and topics for payloads that concern one subscriber.
///
/// Every subscriber has its own bounded queue ([`BUS_QUEUE`],
/// [`TOPIC_QUEUE`]); one that falls behind it gets [`StoreError::Lagged`]
/// and its stream ends, so a subscriber that stops reading never holds more
/// than its bound.
#[async_trait::async_trait]
pub trait EventBus: Send + Sync + std::fmt::Debug + 'static {
    /// Publish an event (e.g. `notifications/tools/list_changed`) to every
    /// process. Over [`MAX_EVENT_BYTES`]: `StoreError::TooLarge`, nothing sent.
    async fn publish(&self, event: &str) -> Result<(), StoreError>;
    /// Events published from now on, by any process.
    async fn subscribe(&self) -> Result<EventStream, StoreError>;
    /// Publish `message` to the subscribers of `topic` only, in any process
    /// (none: it is dropped). For payloads (a client's answer to one
    /// session's request), which the broadcast never carries.
    async fn publish_to(&self, topic: &str, message: &str) -> Result<(), StoreError>;
    /// Messages published to `topic` from now on, by any process.
    async fn subscribe_to(&self, topic: &str) -> Result<EventStream, StoreError>;
}
