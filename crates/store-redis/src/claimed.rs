//! How a worker process watches the tasks it runs: one long-lived
//! subscription to every partition's `{prefix}:{pNN}:claimed` channel
//! (`Keys::claimed`), demultiplexed here by task id, instead of a
//! SUBSCRIBE and an UNSUBSCRIBE of each task's own channel per run.
//!
//! The scripts publish there only what a holder must hear and did not write
//! itself: a client's write to a claimed task (`transition.lua`: an answer,
//! a cancel) and a claim that fences an earlier holder out (`claim.lua`,
//! `claim_batch.lua`), each as `"<task id>\n<doc>"`. The holder's own
//! writes (its claim, status messages, the outcome) are not sent back to
//! it, so a run that nobody touches costs its worker no pub/sub traffic.
//! Every worker process hears every such write of every partition, and
//! decodes only those of tasks it runs: client writes to running tasks are
//! few next to the tasks themselves (docs/capacity.md weighs the fan-out).
//!
//! A message can arrive between a claim and the moment its run starts
//! watching: the last [`RECENT_ITEMS`] messages for tasks nobody here
//! watched (at most [`RECENT_BYTES`], none older than [`RECENT_FOR`]) are
//! kept and handed to a watcher of their task when it registers. As with
//! any watch, a message can still be missed (Redis restarted, a full
//! queue): the lease keeper and a parked handler re-read on a timer.

use std::{
    collections::{HashMap, VecDeque},
    pin::Pin,
    sync::{Arc, Mutex, Weak},
    task::{Context, Poll},
    time::{Duration, Instant},
};

use futures::{Stream, StreamExt};
use presa_store::{
    TaskStream,
    fanout::{Overflow, QueueLimits},
};
use presa_tasks::{Task, TaskId};
use tokio::sync::{OnceCell, mpsc};

use crate::{
    error::RedisStoreError,
    hub::{Hub, Subscription, WATCH_QUEUE_BYTES},
    keys::Keys,
    record::decode,
};

/// Messages kept for tasks nobody here watches yet.
pub(crate) const RECENT_ITEMS: usize = 256;
/// Most bytes of payload kept for tasks nobody here watches yet.
pub(crate) const RECENT_BYTES: usize = 1024 * 1024;
/// How long such a message is kept.
pub(crate) const RECENT_FOR: Duration = Duration::from_secs(2);
/// Snapshots queued for one watcher before newer ones are dropped (it
/// re-reads on its timer).
const WATCHER_QUEUE: usize = 16;

/// The claimed-task watch of one store (so of one process).
#[derive(Debug, Default)]
pub(crate) struct Claimed {
    state: Arc<Mutex<State>>,
    /// Set once the subscription is confirmed and its demultiplexer runs.
    started: OnceCell<()>,
}

#[derive(Debug, Default)]
struct State {
    /// Task id → its watchers (registration number, queue).
    watchers: HashMap<String, Vec<(u64, mpsc::Sender<Task>)>>,
    /// Recent messages of tasks nobody watched: (when, task id, doc).
    recent: VecDeque<(Instant, String, Arc<[u8]>)>,
    recent_bytes: usize,
    next: u64,
}

impl Claimed {
    /// Subscribe every partition's claimed channel, once per process; an
    /// error leaves it for the next call to try again.
    pub(crate) async fn start(&self, hub: &Hub, keys: &Keys) -> Result<(), RedisStoreError> {
        self.started
            .get_or_try_init(|| async {
                let channels = (0..keys.partitions()).map(|p| keys.claimed(p)).collect();
                // Skipping rather than ending: a missed message is re-read on a timer.
                let limits = QueueLimits { max_items: 4096, max_bytes: 4 * WATCH_QUEUE_BYTES };
                let sub = hub.subscribe_with(channels, limits, Overflow::Skip).await?;
                tokio::spawn(demultiplex(sub, Arc::downgrade(&self.state)));
                Ok(())
            })
            .await
            .map(|_| ())
    }

    /// Snapshots of task `id` published on its claimed channel from now on
    /// (and in the last moments, see the module docs).
    pub(crate) fn watch(&self, id: &TaskId) -> TaskStream {
        let (tx, rx) = mpsc::channel(WATCHER_QUEUE);
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = state.next;
        state.next += 1;
        let id = id.as_str().to_owned();
        for (_, _, doc) in state.take_recent(&id) {
            if let Ok(task) = decode(&doc) {
                let _ = tx.try_send(task);
            }
        }
        state.watchers.entry(id.clone()).or_default().push((key, tx));
        Box::pin(Watch { rx, id, key, state: Arc::downgrade(&self.state) })
    }
}

impl State {
    /// Remove and return the recent messages of task `id`, oldest first.
    fn take_recent(&mut self, id: &str) -> Vec<(Instant, String, Arc<[u8]>)> {
        let (mine, rest): (VecDeque<_>, VecDeque<_>) = self.recent.drain(..).partition(|(_, t, _)| t == id);
        self.recent = rest;
        self.recent_bytes = self.recent.iter().map(|(_, _, d)| d.len()).sum();
        mine.into()
    }

    /// Keep a message nobody watched, within the bounds.
    fn keep(&mut self, id: String, doc: Arc<[u8]>) {
        let now = Instant::now();
        self.recent_bytes += doc.len();
        self.recent.push_back((now, id, doc));
        while let Some((at, _, d)) = self.recent.front() {
            let stale = now.duration_since(*at) > RECENT_FOR;
            if !stale && self.recent.len() <= RECENT_ITEMS && self.recent_bytes <= RECENT_BYTES {
                break;
            }
            self.recent_bytes -= d.len();
            self.recent.pop_front();
        }
    }
}

/// Route each message of `sub` to the watchers of its task (decoding it
/// only when there are some), until the hub or the store is gone.
async fn demultiplex(mut sub: Subscription, state: Weak<Mutex<State>>) {
    while let Some(delivery) = sub.next().await {
        let Ok(delivery) = delivery else { continue };
        let Some(state) = state.upgrade() else { return };
        let Some((id, doc)) = split(&delivery.payload) else {
            tracing::warn!(channel = %delivery.channel, "claimed-channel message without a task id; ignored");
            continue;
        };
        let senders: Vec<mpsc::Sender<Task>> = {
            let mut state = state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            match state.watchers.get(id) {
                Some(w) => w.iter().map(|(_, tx)| tx.clone()).collect(),
                None => {
                    state.keep(id.to_owned(), Arc::from(doc));
                    continue;
                }
            }
        };
        match decode(doc) {
            Ok(task) => {
                for tx in senders {
                    // A full queue drops this snapshot: its watcher re-reads on a timer.
                    let _ = tx.try_send(task.clone());
                }
            }
            Err(e) => tracing::warn!(task_id = id, error = %e, "undecodable claimed-task snapshot"),
        }
    }
}

/// `"<task id>\n<doc>"` as its two parts.
fn split(payload: &[u8]) -> Option<(&str, &[u8])> {
    let at = payload.iter().position(|&b| b == b'\n')?;
    Some((std::str::from_utf8(&payload[..at]).ok()?, &payload[at + 1..]))
}

/// One watcher's snapshots; unregisters when dropped.
struct Watch {
    rx: mpsc::Receiver<Task>,
    id: String,
    key: u64,
    state: Weak<Mutex<State>>,
}

impl Stream for Watch {
    type Item = Task;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Task>> {
        self.rx.poll_recv(cx)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let Some(state) = self.state.upgrade() else { return };
        let mut state = state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(list) = state.watchers.get_mut(&self.id) {
            list.retain(|(k, _)| *k != self.key);
            if list.is_empty() {
                state.watchers.remove(&self.id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_takes_the_id_before_the_first_newline() {
        assert_eq!(split(b"p01.abc\n{\"a\":\"x\\ny\"}"), Some(("p01.abc", &b"{\"a\":\"x\\ny\"}"[..])));
        assert_eq!(split(b"no newline"), None);
    }

    #[test]
    fn recent_messages_stay_within_their_bounds() {
        let mut state = State::default();
        for i in 0..RECENT_ITEMS + 10 {
            state.keep(format!("t{i}"), Arc::from(&b"{}"[..]));
        }
        assert_eq!(state.recent.len(), RECENT_ITEMS, "the oldest went first");
        assert_eq!(state.take_recent("t0").len(), 0);
        assert_eq!(state.take_recent(&format!("t{}", RECENT_ITEMS + 9)).len(), 1);
        assert_eq!(state.recent.len(), RECENT_ITEMS - 1);
        assert_eq!(state.recent_bytes, 2 * (RECENT_ITEMS - 1));
        let big: Arc<[u8]> = Arc::from(vec![b' '; RECENT_BYTES / 2 + 1]);
        state.keep("a".into(), big.clone());
        state.keep("b".into(), big);
        assert!(state.recent_bytes <= RECENT_BYTES, "bytes bounded: {}", state.recent_bytes);
        assert_eq!(state.take_recent("b").len(), 1, "the newest is kept");
    }
}
