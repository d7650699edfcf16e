//! [`ShareArgs`]: the fair-share flags of a worker's slots, common to
//! presa-worker and the embedded worker of presa-api.

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
