//! How many runs of a tool may go on at once across the cluster: its
//! concurrency limit ([`ToolConcurrency`], `Tool::concurrency`), one count
//! for the tool, or one per tenant or per value of an argument, kept by the
//! store (`presa_store::Permits`) so every worker and API pod shares it.
//!
//! A run holds a **permit** while it runs: a lease in the store, taken after
//! the claim, renewed with the task's lease (`PermitHold::keep`) and given
//! back when the run ends, whatever ended it; a worker that dies frees it
//! within one lease. A task finding no permit free waits in line, in the
//! order tasks were created: its work is put off (no try counted, no worker
//! held, a status message saying how many are ahead) until a holder's
//! release wakes it (`WorkQueue::retry_now`) or, at the latest, one lease
//! later. A call run inside its request waits for a permit up to
//! `ServerConfig::permit_wait`, then gets `-32023` (HTTP 429) with
//! `data.limit: "tool_concurrency"` and `Retry-After`.

use std::{sync::Arc, time::Duration};

use presa_store::{Acquired, Caller, Holder, PermitName, PermitTerms, Permits, TaskId, WorkQueue, util::now_ms};
use presa_telemetry::metrics;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::store_io::{Verbosity, store_call, store_call_at};

/// How long a waiter keeps its place in line unseen, in leases: it asks
/// again at least once a lease, so three missed turns mean it is gone.
const WAITER_LEASES: u32 = 3;
/// The lease of a permit held by a call run inside its request.
const CALL_LEASE: Duration = Duration::from_secs(30);
/// How often a call run inside its request asks again while it waits.
const CALL_POLL: Duration = Duration::from_millis(100);
/// Argument values longer than this name their count by a digest.
const MOST_KEY_BYTES: usize = 64;

/// A tool's concurrency limit: at most `limit` runs at once across the
/// cluster; one count for the tool, or one per tenant and/or per value of
/// an argument.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolConcurrency {
    /// Runs at once (at least 1).
    pub limit: u32,
    /// One count per tenant.
    pub per_tenant: bool,
    /// One count per value of this argument (say `environment`: one
    /// `deploy` per environment at once).
    pub per_argument: Option<String>,
}

impl ToolConcurrency {
    /// At most `limit` runs at once (at least 1), one count for the tool.
    pub fn limit(limit: u32) -> Self {
        ToolConcurrency { limit: limit.max(1), per_tenant: false, per_argument: None }
    }

    /// One count per tenant: a tenant's runs do not use up another's.
    pub fn per_tenant(self) -> Self {
        ToolConcurrency { per_tenant: true, ..self }
    }

    /// One count per value of the argument `name` (a missing one counts as `null`).
    pub fn per_argument(self, name: impl Into<String>) -> Self {
        ToolConcurrency { per_argument: Some(name.into()), ..self }
    }

    /// The semaphore a run of `tool` by `caller` with `arguments` counts in.
    pub fn name(&self, tool: &str, caller: &Caller, arguments: &Value) -> PermitName {
        let mut key = String::new();
        if self.per_tenant {
            key.push_str("tenant=");
            key.push_str(caller.tenant());
        }
        if let Some(arg) = &self.per_argument {
            let value = arguments.get(arg).unwrap_or(&Value::Null);
            let value = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let value = if value.len() > MOST_KEY_BYTES { digest(&value) } else { value };
            // NUL separates the parts: neither a tenant nor a name holds one.
            key.push_str(&format!("{}{arg}={value}", if key.is_empty() { "" } else { "\0" }));
        }
        PermitName { limit: tool.to_string(), key }
    }

    /// The store's terms for a permit held under `lease`.
    pub(crate) fn terms(&self, lease: Duration) -> PermitTerms {
        PermitTerms { permits: self.limit, lease, waiter_ttl: lease.saturating_mul(WAITER_LEASES) }
    }

    /// A task's run (claimed under `lease`, fenced by `attempt`, created at
    /// `created_at_ms`) asks for its permit: the hold to keep and release,
    /// or `Err((in_use, ahead))` while it waits. A store that fails, or a
    /// stale claim, waits too (nothing runs past the limit blind).
    pub(crate) async fn admit_task(
        &self,
        permits: &Arc<dyn Permits>,
        name: PermitName,
        holder: Holder,
        lease: Duration,
    ) -> Result<PermitHold, (u32, u32)> {
        let terms = self.terms(lease);
        match store_call("acquire_permit", permits.acquire_permit(&name, &holder, terms)).await {
            Ok(Acquired::Granted) => Ok(PermitHold::new(permits.clone(), name, holder, terms)),
            Ok(Acquired::Waiting { in_use, ahead }) => {
                metrics::permit_waited(&name.limit);
                Err((in_use, ahead))
            }
            Ok(Acquired::Fenced) => Err((self.limit, 0)),
            Err(e) => {
                tracing::warn!(error = %e, tool = name.limit, "asking for a permit failed; waiting");
                Err((self.limit, 0))
            }
        }
    }

    /// A call run inside its request asks for its permit, asking again until
    /// `patience` runs out: the hold, or `None` (refused: it left the line).
    pub(crate) async fn admit_call(
        &self,
        permits: &Arc<dyn Permits>,
        name: PermitName,
        patience: Duration,
    ) -> Option<PermitHold> {
        let now = now_ms();
        let holder = Holder { id: format!("call-{:032x}", rand::random::<u128>()), fence: 0, order: now };
        let terms = self.terms(CALL_LEASE);
        let deadline = tokio::time::Instant::now() + patience;
        let mut waited = false;
        loop {
            match store_call("acquire_permit", permits.acquire_permit(&name, &holder, terms)).await {
                Ok(Acquired::Granted) => return Some(PermitHold::new(permits.clone(), name, holder, terms)),
                Ok(_) if !waited => {
                    waited = true;
                    metrics::permit_waited(&name.limit);
                }
                _ => {}
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                // It leaves the line (it holds nothing to give back).
                let released = permits.release_permit(&name, &holder, terms);
                if let Err(e) = store_call("release_permit", released).await {
                    tracing::warn!(error = %e, "leaving a permit's line failed; the place lapses");
                }
                return None;
            }
            tokio::time::sleep(CALL_POLL.min(deadline - now)).await;
        }
    }
}

/// A permit held by a running run ([`PermitHold::hold`]): renewed while it
/// lives, released when dropped.
#[derive(Debug)]
pub(crate) struct HeldPermit {
    hold: Option<(PermitHold, Arc<dyn WorkQueue>)>,
    _renewing: tokio_util::sync::DropGuard,
}

impl Drop for HeldPermit {
    fn drop(&mut self) {
        if let Some((hold, work)) = self.hold.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move { hold.release(Some(&work)).await });
        }
    }
}

/// A 128-bit digest of `value`, in hex: a long argument's count name.
fn digest(value: &str) -> String {
    use sha2::Digest;
    let sum = sha2::Sha256::digest(value.as_bytes());
    sum[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// A permit held by a run: renewed while it runs, released when it ends.
#[derive(Debug, Clone)]
pub(crate) struct PermitHold {
    permits: Arc<dyn Permits>,
    name: PermitName,
    holder: Holder,
    terms: PermitTerms,
}

impl PermitHold {
    fn new(permits: Arc<dyn Permits>, name: PermitName, holder: Holder, terms: PermitTerms) -> Self {
        metrics::permit_held(&name.limit, 1.0);
        PermitHold { permits, name, holder, terms }
    }

    /// Hold it while the run goes on: renewed every third of its lease, and
    /// released (waking the next in line through `work`) when the returned
    /// guard is dropped, however the run ended (a request's future dropped
    /// when its client went included).
    pub(crate) fn hold(self, work: Arc<dyn WorkQueue>) -> HeldPermit {
        let renewing = self.keep();
        HeldPermit { hold: Some((self, work)), _renewing: renewing }
    }

    /// Renew the permit every third of its lease until the returned guard is dropped.
    fn keep(&self) -> tokio_util::sync::DropGuard {
        let stop = CancellationToken::new();
        let (hold, done) = (self.clone(), stop.clone());
        tokio::spawn(async move {
            let tick = hold.terms.lease / 3;
            loop {
                tokio::select! {
                    _ = done.cancelled() => return,
                    _ = tokio::time::sleep(tick) => {}
                }
                let renew = hold.permits.renew_permit(&hold.name, &hold.holder, hold.terms);
                match store_call_at(Verbosity::Debug, "renew_permit", renew).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!(tool = hold.name.limit, "the run's permit lapsed while it ran");
                        return;
                    }
                    Err(e) => tracing::warn!(error = %e, "renewing a permit failed"),
                }
            }
        });
        stop.drop_guard()
    }

    /// Give the permit back and wake the waiters it now belongs to (their
    /// work made due at once, when `work` is given and they are tasks).
    async fn release(self, work: Option<&Arc<dyn WorkQueue>>) {
        metrics::permit_held(&self.name.limit, -1.0);
        let released = self.permits.release_permit(&self.name, &self.holder, self.terms);
        let wake = match store_call("release_permit", released).await {
            Ok(r) => r.wake,
            Err(e) => {
                tracing::warn!(error = %e, "releasing a permit failed; it lapses with its lease");
                return;
            }
        };
        let Some(work) = work else { return };
        for id in wake.into_iter().filter(|id| id.as_str() != self.holder.id) {
            let id = TaskId::from_wire(id);
            if id.partition().is_none() {
                continue; // a call waiting in its request: it asks again by itself
            }
            if let Err(e) = store_call("retry_now", work.retry_now(&id)).await {
                tracing::warn!(error = %e, task_id = %id, "waking a waiter failed; it asks again within a lease");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn counts_are_named_by_tool_tenant_and_argument() {
        let (acme, globex) = (Caller::new("acme", "a", vec![]), Caller::new("globex", "g", vec![]));
        let args = json!({ "environment": "production", "n": 3 });
        let shared = ToolConcurrency::limit(0);
        assert_eq!(shared.limit, 1);
        assert_eq!(shared.name("deploy", &acme, &args), shared.name("deploy", &globex, &args));
        assert_eq!(shared.name("deploy", &acme, &args).key, "");
        let tenant = ToolConcurrency::limit(2).per_tenant();
        assert_ne!(tenant.name("deploy", &acme, &args), tenant.name("deploy", &globex, &args));
        let env = ToolConcurrency::limit(1).per_argument("environment");
        assert_eq!(env.name("deploy", &acme, &args).key, "environment=production");
        assert_ne!(env.name("deploy", &acme, &args), env.name("deploy", &acme, &json!({ "environment": "staging" })));
        assert_eq!(env.name("deploy", &acme, &json!({})).key, "environment=null");
        let both = ToolConcurrency::limit(1).per_tenant().per_argument("n");
        assert_eq!(both.name("deploy", &acme, &args).key, "tenant=acme\0n=3");
        let long = json!({ "environment": "x".repeat(1000) });
        assert_eq!(env.name("deploy", &acme, &long).key.len(), "environment=".len() + 32, "a digest");
    }
}
