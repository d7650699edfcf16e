//! A worker pool's settings ([`WorkerConfig`]) and the per-principal
//! shares of its slots they imply.

use std::time::Duration;

use crate::retry::RetryPolicy;

/// Worker pool settings.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// This worker's name (consumer name in Redis).
    pub id: String,
    /// Handlers run at once.
    pub concurrency: usize,
    /// Handlers that may wait for input without holding one of the
    /// `concurrency` slots; past it a parked handler keeps its slot.
    pub max_parked: usize,
    /// The most run slots one scope (principal) holds; its further work stays
    /// queued while others' runs. `None`: a quarter of `concurrency` (at
    /// least 1); `Some(0)`: no cap. See [`WorkerConfig::run_share`].
    pub max_running_per_scope: Option<usize>,
    /// The most parked slots one scope holds; past it its parking handlers
    /// keep their run slot (and so count against its run share). `None`: a
    /// quarter of `max_parked` (at least 1); `Some(0)`: no cap.
    pub max_parked_per_scope: Option<usize>,
    /// Lease on claimed work; renewed every third of it.
    pub lease: Duration,
    /// Deliveries of one try after which a task ends `failed` (a poison
    /// task: its workers keep being lost).
    pub max_deliveries: u64,
    /// How a task's transiently failed tries are tried again, for tools
    /// that set no policy of their own (`Tool::retry`).
    pub retry: RetryPolicy,
    /// How long one claim call may wait for work.
    pub claim_wait: Duration,
    /// How long running handlers may finish after shutdown starts.
    pub grace: Duration,
    /// How long a handler may go on after its task was cancelled (or its
    /// claim lost), to stop what it started; then it is dropped.
    pub cancel_grace: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            id: format!("worker-{}", std::process::id()),
            concurrency: 64,
            max_parked: 1024,
            max_running_per_scope: None,
            max_parked_per_scope: None,
            lease: Duration::from_secs(30),
            max_deliveries: 5,
            retry: RetryPolicy::default(),
            claim_wait: Duration::from_secs(1),
            grace: Duration::from_secs(20),
            cancel_grace: Duration::from_secs(2),
        }
    }
}

impl WorkerConfig {
    /// The run slots one scope may hold: by default a quarter of
    /// `concurrency`, so three principals at their share still leave a
    /// quarter of every worker to everyone else.
    pub fn run_share(&self) -> Option<usize> {
        share(self.max_running_per_scope, self.concurrency)
    }

    /// The parked slots one scope may hold: by default a quarter of `max_parked`.
    pub fn parked_share(&self) -> Option<usize> {
        share(self.max_parked_per_scope, self.max_parked)
    }
}

/// A per-scope cap: `Some(0)` none, `Some(n)` n, `None` a quarter of `pool` (at least 1).
fn share(set: Option<usize>, pool: usize) -> Option<usize> {
    match set {
        Some(0) => None,
        Some(n) => Some(n),
        None => Some(pool.div_ceil(4).max(1)),
    }
}
