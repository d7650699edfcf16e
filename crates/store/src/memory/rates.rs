//! The memory store's [`Rates`]: each rate's TAT in the shared state,
//! taken by [`Rate::take`] under the lock; a rate whose bucket is empty is
//! dropped by the purge.

use crate::{
    error::StoreError,
    memory::{MemoryStore, State},
    rates::Rate,
    rates::Rates,
    rates::Take,
    rates::Taken,
};

impl State {
    /// Drop the rates whose bucket is empty at `now_us` (their TAT has passed).
    pub(super) fn purge_rates(&mut self, now_us: u64) {
        self.rates.retain(|_, tat| *tat > now_us);
    }
}

#[async_trait::async_trait]
impl Rates for MemoryStore {
    async fn take_rate(&self, key: &str, rate: Rate, how: Take) -> Result<Taken, StoreError> {
        let now = now_us();
        let mut s = self.state();
        let (next, taken) = rate.take(s.rates.get(key).copied().unwrap_or(0), now, how);
        if let Some(next) = next {
            s.rates.insert(key.to_string(), next);
        }
        Ok(taken)
    }
}

/// Now, Unix µs.
pub(super) fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}
