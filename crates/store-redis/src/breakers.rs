//! [`BreakerKeeper`]: the circuit breakers part of the store
//! ([`presa_store::Breakers`]): one small hash per breaker,
//! `{prefix}:{b.<hex of its name>}:breaker`, in a slot of its own, checked,
//! reported and read by `breaker.lua` (the state machine of
//! `presa_store::breakers`, by the server's clock).

use std::{sync::Arc, time::Duration};

use presa_store::{BreakerPolicy, BreakerView, Change, Check, Circuit, Report, StoreError};

use crate::{link::Link, scripts::script};

script!(BREAKER, "breaker.lua", "Check, report or read a circuit breaker.");

/// The cluster's circuit breakers, over the store's [`Link`].
#[derive(Debug, Clone)]
pub(crate) struct BreakerKeeper {
    link: Arc<Link>,
}

impl BreakerKeeper {
    pub(crate) fn new(link: Arc<Link>) -> BreakerKeeper {
        BreakerKeeper { link }
    }

    /// Run `op` of `breaker.lua` on `name`: its three numbers.
    async fn run(&self, op: &str, name: &str, policy: BreakerPolicy, token: &str) -> Result<[i64; 3], StoreError> {
        let policy = policy.clamped();
        let mut inv = BREAKER.prepare_invoke();
        inv.key(self.link.keys.breaker(name))
            .arg(op)
            .arg(token)
            .arg(policy.failures)
            .arg(policy.window_ms())
            .arg(policy.cool_down_ms())
            .arg(policy.probe_lease_ms());
        let answer: Vec<i64> = self.link.invoke(&inv).await?;
        match answer[..] {
            [a, b, c] => Ok([a, b, c]),
            _ => Err(StoreError::Corrupt(format!("breaker.lua answered {answer:?}"))),
        }
    }

    pub(crate) async fn check(
        &self,
        name: &str,
        policy: BreakerPolicy,
        token: &str,
    ) -> Result<(Check, Circuit), StoreError> {
        let [state, what, ms] = self.run("check", name, policy, token).await?;
        let check = match what {
            1 => Check::Probe,
            2 => Check::Open { retry_in: Duration::from_millis(ms.max(1).unsigned_abs()) },
            _ => Check::Pass,
        };
        Ok((check, Circuit::from_code(state)))
    }

    pub(crate) async fn report(
        &self,
        name: &str,
        policy: BreakerPolicy,
        token: &str,
        report: Report,
    ) -> Result<(Circuit, Change), StoreError> {
        let op = match report {
            Report::Success => "success",
            Report::Failure => "failure",
        };
        let [state, change, _] = self.run(op, name, policy, token).await?;
        let change = match change {
            1 => Change::Opened,
            2 => Change::Reopened,
            3 => Change::Closed,
            _ => Change::None,
        };
        Ok((Circuit::from_code(state), change))
    }

    pub(crate) async fn read(&self, name: &str, policy: BreakerPolicy) -> Result<BreakerView, StoreError> {
        let [state, failures, ms] = self.run("read", name, policy, "").await?;
        let circuit = Circuit::from_code(state);
        let retry_in = (circuit != Circuit::Closed).then(|| Duration::from_millis(ms.max(0).unsigned_abs()));
        Ok(BreakerView { circuit, failures: u32::try_from(failures).unwrap_or(0), retry_in })
    }
}
