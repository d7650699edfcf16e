//! The memory store's [`Breakers`]: each breaker's [`Breaker`] in the
//! shared state, checked and reported under the lock by the same rules
//! `breaker.lua` runs on Redis; a breaker closed with no failure left in
//! its window is dropped.

use crate::{
    breakers::{Breaker, BreakerPolicy, BreakerView, Breakers, Change, Check, Circuit, Report},
    error::StoreError,
    memory::{MemoryStore, State},
    util::now_ms,
};

impl State {
    /// Drop the breakers that hold nothing at `now` (closed, no failure in their window).
    pub(super) fn purge_breakers(&mut self, now: u64) {
        self.breakers.retain(|_, (breaker, policy)| !breaker.is_idle(policy, now));
    }
}

#[async_trait::async_trait]
impl Breakers for MemoryStore {
    async fn check_breaker(
        &self,
        name: &str,
        policy: BreakerPolicy,
        token: &str,
    ) -> Result<(Check, Circuit), StoreError> {
        let (now, mut s) = (now_ms(), self.state());
        let Some((breaker, _)) = s.breakers.get_mut(name) else {
            return Ok((Check::Pass, Circuit::Closed));
        };
        let check = breaker.check(&policy, now, token);
        Ok((check, breaker.circuit()))
    }

    async fn report_breaker(
        &self,
        name: &str,
        policy: BreakerPolicy,
        token: &str,
        report: Report,
    ) -> Result<(Circuit, Change), StoreError> {
        let (now, mut s) = (now_ms(), self.state());
        let (breaker, kept) = s.breakers.entry(name.to_string()).or_insert_with(|| (Breaker::default(), policy));
        *kept = policy;
        let change = breaker.report(&policy, now, token, report);
        let circuit = breaker.circuit();
        if breaker.is_idle(&policy, now) {
            s.breakers.remove(name);
        }
        Ok((circuit, change))
    }

    async fn read_breaker(&self, name: &str, policy: BreakerPolicy) -> Result<BreakerView, StoreError> {
        let s = self.state();
        Ok(s.breakers.get(name).map_or_else(|| Breaker::default().view(&policy, 0), |(b, _)| b.view(&policy, now_ms())))
    }
}
