//! Data-loss detection: the epoch key.
//!
//! The first pod to find `{prefix}:epoch` missing writes a random value
//! (`SET … NX GET`, one round trip). Every pod remembers the value it saw
//! and checks it again periodically and whenever asked: the key vanishing
//! (a `FLUSHALL`, a restart without persistence, a failover to an empty
//! replica) or changing (another pod found it vanished first) means Redis
//! lost every task it held. That is reported (an error log,
//! [`DATA_LOSS_METRIC`](crate::metrics::DATA_LOSS_METRIC), [`Epoch::lost`] for
//! `/readyz`), never repaired: tasks are not recreated; their ids are
//! unknown from then on, and new tasks get new random ids.

use std::sync::{Arc, Mutex};

use presa_store::util::{new_task_id, now_ms};
use redis::Value;

use crate::{conn::Verbosity, error::RedisStoreError, link::Link};

/// The epoch watch of one store: the epoch key read over its [`Link`],
/// and what this process saw of it.
#[derive(Debug)]
pub(crate) struct Epochs {
    link: Arc<Link>,
    seen: Mutex<Seen>,
}

/// What this process knows of the store's epoch.
#[derive(Debug, Default)]
struct Seen {
    current: Option<String>,
    lost: Option<Epoch>,
}

/// A detected loss of Redis's data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Epoch {
    /// When it was detected, Unix ms.
    pub detected_at_ms: u64,
    /// The epoch this process had seen.
    pub was: String,
    /// What it found: the new epoch (`None`: the key was missing, and this
    /// process wrote a new one).
    pub found: Option<String>,
}

impl std::fmt::Display for Epoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = presa_tasks::wire::iso8601(self.detected_at_ms);
        match &self.found {
            Some(now) => write!(f, "Redis lost its data (detected {at}): epoch {} became {now}", self.was),
            None => write!(f, "Redis lost its data (detected {at}): epoch {} vanished", self.was),
        }
    }
}

impl Epochs {
    pub(crate) fn new(link: Arc<Link>) -> Epochs {
        Epochs { link, seen: Mutex::default() }
    }

    /// Read (or first write) the epoch key and compare it with the one this
    /// process saw before. Returns the loss it detected now, if any; a loss
    /// is also logged, counted and kept for [`lost`](Self::lost). Whether
    /// Redis answered sets [`UP_METRIC`](crate::metrics::UP_METRIC).
    pub(crate) async fn check(&self) -> Result<Option<Epoch>, RedisStoreError> {
        let mine = new_task_id(0).to_string();
        let cmd = redis::cmd("SET").arg(self.link.keys.epoch()).arg(&mine).arg("NX").arg("GET").to_owned();
        let reply = self.link.query::<Value>(Verbosity::Debug, &cmd).await;
        crate::metrics::up(reply.is_ok());
        let found: Option<String> = match reply? {
            Value::Nil => None,
            v => Some(redis::from_redis_value(v).map_err(|e| RedisStoreError::Corrupt(e.to_string()))?),
        };
        let now = found.clone().unwrap_or(mine);
        let mut seen = self.seen.lock().map_err(|_| RedisStoreError::Corrupt("epoch lock poisoned".into()))?;
        let loss = match seen.current.replace(now.clone()) {
            Some(was) if was != now => Some(Epoch { detected_at_ms: now_ms(), was, found }),
            _ => None,
        };
        if let Some(loss) = &loss {
            tracing::error!(was = %loss.was, now = %now, "{loss}: tasks created before are gone (not recreated)");
            metrics::counter!(crate::metrics::DATA_LOSS_METRIC).increment(1);
            seen.lost = Some(loss.clone());
        }
        Ok(loss)
    }

    /// The last data loss this process detected, if any.
    pub(crate) fn lost(&self) -> Option<Epoch> {
        self.seen.lock().ok().and_then(|s| s.lost.clone())
    }
}
