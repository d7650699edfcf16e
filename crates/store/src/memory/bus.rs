//! The memory store's [`EventBus`]: each subscriber has its own bounded
//! queue ([`crate::fanout`]), registered by topic ([`BROADCAST`] for the
//! bus) and forgotten when its stream is dropped or ended.

use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard, PoisonError},
};

use futures::StreamExt;

use crate::{
    bus::EventBus,
    bus::EventStream,
    error::StoreError,
    fanout::{self, Offered, Overflow, QueueLimits, QueueSender},
    limits::BUS_QUEUE,
    limits::TOPIC_QUEUE,
    memory::MemoryStore,
};

/// The name under which [`Subscribers`] keeps the broadcast's subscribers
/// (topics are prefixed, so no topic is named so).
const BROADCAST: &str = "";

/// One subscriber's queue of shared messages, with its id.
type Subscriber = (u64, QueueSender<std::sync::Arc<str>>);

/// Every subscriber's queue, by topic ([`BROADCAST`] for the bus).
#[derive(Default)]
pub(super) struct Subscribers {
    next_id: u64,
    pub(super) topics: HashMap<String, Vec<Subscriber>>,
}

impl Subscribers {
    /// Offer `message` to each subscriber of `topic`, forgetting the ones gone or ended.
    fn offer(&mut self, topic: &str, message: &str) {
        let Some(subs) = self.topics.get_mut(topic) else {
            return;
        };
        // One copy, shared by every queue (each counts all of it against its bound).
        let shared: std::sync::Arc<str> = std::sync::Arc::from(message);
        subs.retain(|(_, tx)| match tx.offer(shared.clone(), shared.len()) {
            Offered::Queued | Offered::Skipped => true,
            Offered::Ended => {
                tracing::warn!(topic, "an event subscriber lagged and was ended");
                false
            }
            Offered::Closed => false,
        });
        if subs.is_empty() {
            self.topics.remove(topic);
        }
    }

    fn remove(&mut self, topic: &str, id: u64) {
        if let Some(subs) = self.topics.get_mut(topic) {
            subs.retain(|(i, _)| *i != id);
            if subs.is_empty() {
                self.topics.remove(topic);
            }
        }
    }
}

/// A subscription to the memory bus; unregisters when dropped.
struct Subscription {
    rx: fanout::QueueReceiver<std::sync::Arc<str>>,
    registry: std::sync::Weak<Mutex<Subscribers>>,
    topic: String,
    id: u64,
}

impl futures::Stream for Subscription {
    type Item = Result<String, StoreError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.rx.poll_next_unpin(cx).map(|next| next.map(|r| r.map(|m| m.to_string())))
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(registry) = self.registry.upgrade() {
            registry.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.topic, self.id);
        }
    }
}

impl MemoryStore {
    pub(super) fn subscribers(&self) -> MutexGuard<'_, Subscribers> {
        self.events.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new subscriber of `topic` ([`BROADCAST`]: the bus), with its own queue.
    fn subscribe_queue(&self, topic: String, limits: QueueLimits) -> EventStream {
        let (tx, rx) = fanout::queue(limits, Overflow::End);
        let mut subs = self.subscribers();
        subs.next_id += 1;
        let id = subs.next_id;
        subs.topics.entry(topic.clone()).or_default().push((id, tx));
        drop(subs);
        Box::pin(Subscription { rx, registry: std::sync::Arc::downgrade(&self.events), topic, id })
    }

    /// Bytes queued for the bus's subscribers now, all queues summed (what
    /// stalled subscribers hold).
    pub fn queued_event_bytes(&self) -> usize {
        self.subscribers().topics.values().flatten().map(|(_, tx)| tx.queued_bytes()).sum()
    }
}

/// The registry name of `topic` (never [`BROADCAST`]).
fn topic_key(topic: &str) -> String {
    format!("t:{topic}")
}

#[async_trait::async_trait]
impl EventBus for MemoryStore {
    async fn publish(&self, event: &str) -> Result<(), StoreError> {
        crate::check_event(event)?;
        // No subscribers is not an error: nobody needed telling.
        self.subscribers().offer(BROADCAST, event);
        Ok(())
    }

    async fn subscribe(&self) -> Result<EventStream, StoreError> {
        Ok(self.subscribe_queue(BROADCAST.to_string(), BUS_QUEUE))
    }

    async fn publish_to(&self, topic: &str, message: &str) -> Result<(), StoreError> {
        self.subscribers().offer(&topic_key(topic), message);
        Ok(())
    }

    async fn subscribe_to(&self, topic: &str) -> Result<EventStream, StoreError> {
        Ok(self.subscribe_queue(topic_key(topic), TOPIC_QUEUE))
    }
}
