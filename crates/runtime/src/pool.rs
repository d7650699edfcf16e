//! [`PoolArgs`]: the flags of a worker pool, common to presa-worker and the
//! embedded worker of presa-api (its slots, their fair shares, the default
//! retry policy), and the [`WorkerConfig`] they make.

use std::time::Duration;

use presa_server::WorkerConfig;

use crate::{error::RuntimeError, retry::RetryArgs};

/// A worker pool's flags.
#[derive(Debug, Clone, clap::Args)]
pub struct PoolArgs {
    /// Tool handlers run at once by this process's worker pool (presa-api:
    /// its in-process worker, embedded mode only; with Redis, `presa-worker`
    /// pods run them).
    #[arg(long, env = "PRESA_CONCURRENCY", default_value_t = 64)]
    pub concurrency: usize,

    /// Tool handlers that may wait for input without holding one of the
    /// `--concurrency` slots; past it a parked handler keeps its slot.
    #[arg(long, env = "PRESA_MAX_PARKED", default_value_t = 1024)]
    pub max_parked: usize,

    #[command(flatten)]
    pub(crate) shares: ShareArgs,

    #[command(flatten)]
    pub(crate) retry: RetryArgs,
}

impl PoolArgs {
    /// The settings of worker `id`'s pool, which drains for `grace` on SIGTERM.
    pub(crate) fn worker_config(&self, id: String, grace: Duration) -> Result<WorkerConfig, RuntimeError> {
        Ok(WorkerConfig {
            id,
            concurrency: self.concurrency,
            max_parked: self.max_parked,
            max_running_per_scope: self.shares.max_running_per_scope,
            max_parked_per_scope: self.shares.max_parked_per_scope,
            retry: self.retry.policy()?,
            grace,
            ..WorkerConfig::default()
        })
    }
}

/// Fair shares of a worker's slots, common to presa-worker and the embedded
/// worker of presa-api.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct ShareArgs {
    /// The most run slots (of `--concurrency`) one principal's tasks hold on
    /// a worker; its further tasks stay queued while others' run. Default: a
    /// quarter of `--concurrency` (at least 1), so three principals at their
    /// share leave a quarter of every worker to everyone else; 0: no cap.
    /// The anonymous principal (`--auth none`) has no cap.
    #[arg(long, env = "PRESA_MAX_RUNNING_PER_SCOPE")]
    pub max_running_per_scope: Option<usize>,

    /// The most parked slots (of `--max-parked`) one principal's tasks hold
    /// on a worker; past it its tasks waiting for input keep their run slot
    /// (and count against its run share). Default: a quarter of
    /// `--max-parked` (at least 1); 0: no cap.
    #[arg(long, env = "PRESA_MAX_PARKED_PER_SCOPE")]
    pub max_parked_per_scope: Option<usize>,
}
