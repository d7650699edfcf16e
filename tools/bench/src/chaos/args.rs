//! `presa-bench chaos`'s flags: what they mean, which go together, the pods they start and when the kills happen.

use super::*;

/// `presa-bench chaos` flags.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ChaosArgs {
    /// API pods behind nginx.
    #[arg(long, default_value_t = 2)]
    pub(super) apis: usize,
    /// Worker pods.
    #[arg(long, default_value_t = 2)]
    pub(super) workers: usize,
    /// Tasks to create (acknowledged creates).
    #[arg(long, default_value_t = 1000)]
    pub(super) tasks: usize,
    /// Worker SIGKILLs (each replaced by a fresh worker).
    #[arg(long, default_value_t = 5)]
    pub(super) worker_kills: usize,
    /// API pod SIGKILLs (each restarted on its port).
    #[arg(long, default_value_t = 1)]
    pub(super) api_kills: usize,
    /// Redis SIGKILLs, each restarted from its AOF (standalone only; default 1 there).
    #[arg(long)]
    pub(super) redis_restarts: Option<usize>,
    /// Where Redis runs: one server with AOF (`standalone`), a primary with 2
    /// replicas and 3 Sentinels (`sentinel`), or 3 primaries with a replica
    /// each (`cluster`).
    #[arg(long, value_enum, default_value_t = Topology::Standalone)]
    pub(super) topology: Topology,
    /// SIGKILLs of a Redis primary (sentinel and cluster; default 1 there),
    /// its replica promoted, the killed node restarted as a replica
    /// `--restart-ms` after the promotion.
    #[arg(long)]
    pub(super) primary_kills: Option<usize>,
    /// Before each primary kill, cut the primary off from its replicas for
    /// this long, ms (0: no gap): what it acknowledges meanwhile is on no
    /// replica, so a failover loses it under `--durability primary`, and
    /// `--durability replicated` acknowledges none of it.
    #[arg(long, default_value_t = 0)]
    pub(super) replication_gap_ms: u64,
    /// The pods' `--durability`: `primary` (a write is acknowledged once the
    /// primary has it) or `replicated` (once a replica confirmed it, `WAIT`).
    #[arg(long, value_enum, default_value_t = Durability::Primary)]
    pub(super) durability: Durability,
    /// Client loops creating and polling tasks at once.
    #[arg(long, default_value_t = 32)]
    pub(super) concurrency: usize,
    /// Shortest work of a task, ms.
    #[arg(long, default_value_t = 50)]
    pub(super) min_ms: u64,
    /// Longest work of a task, ms.
    #[arg(long, default_value_t = 500)]
    pub(super) max_ms: u64,
    /// Interval between two `tasks/get` of a task, ms.
    #[arg(long, default_value_t = 100)]
    pub(super) poll_ms: u64,
    /// The workers' `--lease-ms`: a killed worker's tasks are recovered after it.
    #[arg(long, default_value_t = 2000)]
    pub(super) lease_ms: u64,
    /// Handlers each worker runs at once (its `--concurrency`).
    #[arg(long, default_value_t = 64)]
    pub(super) worker_concurrency: usize,
    /// A killed pod is replaced this long after its kill, ms.
    #[arg(long, default_value_t = 500)]
    pub(super) restart_ms: u64,
    /// Redis stays down this long after its kill, ms.
    #[arg(long, default_value_t = 1000)]
    pub(super) redis_down_ms: u64,
    /// A task not terminal this long after its create was acknowledged is stuck, s.
    #[arg(long, default_value_t = 120)]
    pub(super) task_deadline_s: u64,
    /// Where `presa-api` and `presa-worker` are (default: next to this program).
    #[arg(long)]
    pub(super) bin_dir: Option<PathBuf>,
    /// The nginx binary (default: `nginx` on PATH, else /usr/sbin/nginx).
    #[arg(long)]
    pub(super) nginx: Option<PathBuf>,
}

/// Where Redis runs (`--topology`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum Topology {
    /// One `redis-server` with AOF.
    Standalone,
    /// A primary, 2 replicas and 3 Sentinels.
    Sentinel,
    /// A Redis Cluster: 3 primaries with a replica each.
    Cluster,
}

/// When a write is acknowledged (the pods' `--durability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum Durability {
    /// Once the primary has it.
    Primary,
    /// Once a replica confirmed it (`WAIT 1`).
    Replicated,
}

impl ChaosArgs {
    /// Redis restarts from AOF (1 by default on a standalone Redis).
    pub(super) fn redis_restarts(&self) -> usize {
        self.redis_restarts.unwrap_or(usize::from(self.topology == Topology::Standalone))
    }

    /// Primary kills (1 by default with replicas).
    pub(super) fn primary_kills(&self) -> usize {
        self.primary_kills.unwrap_or(usize::from(self.topology != Topology::Standalone))
    }

    /// Whether losing acknowledged tasks to a failover is allowed: only when
    /// writes are acknowledged before any replica has them.
    pub(super) fn failover_may_lose(&self) -> bool {
        self.topology != Topology::Standalone && self.durability == Durability::Primary
    }

    /// Flags that do not go together, or why not.
    pub(super) fn check(&self) -> Result<(), String> {
        if self.apis == 0 || self.workers == 0 || self.concurrency == 0 || self.min_ms > self.max_ms {
            return Err("need --apis, --workers and --concurrency of at least 1 and --min-ms <= --max-ms".into());
        }
        match self.topology {
            Topology::Standalone if self.primary_kills() > 0 => {
                Err("--primary-kills needs replicas to promote: --topology sentinel or cluster".into())
            }
            Topology::Standalone if self.durability == Durability::Replicated => {
                Err("--durability replicated needs replicas: --topology sentinel or cluster".into())
            }
            _ if self.replication_gap_ms > 0 && self.primary_kills() == 0 => {
                Err("--replication-gap-ms cuts a primary off before its kill: it needs --primary-kills".into())
            }
            Topology::Sentinel | Topology::Cluster if self.redis_restarts() > 0 => {
                Err("--redis-restarts restarts a standalone Redis from its AOF; with replicas use --primary-kills"
                    .into())
            }
            _ => Ok(()),
        }
    }
}

impl ChaosArgs {
    /// The pods to start.
    pub(super) fn shape(&self) -> Shape {
        let mut env = Vec::new();
        if self.durability == Durability::Replicated {
            env.extend([
                ("PRESA_DURABILITY".to_string(), "replicated".to_string()),
                ("PRESA_DURABILITY_REPLICAS".to_string(), "1".to_string()),
            ]);
        }
        let (lease, conc) = (self.lease_ms.to_string(), self.worker_concurrency.to_string());
        Shape {
            apis: self.apis,
            workers: self.workers,
            env,
            api_flags: Vec::new(),
            worker_flags: ["--lease-ms", &lease, "--concurrency", &conc].map(String::from).into(),
        }
    }
}

/// The kills, in the order they happen: each kind spread evenly over the run.
pub(super) fn schedule(args: &ChaosArgs) -> Vec<(usize, Kind)> {
    let mut plan = Vec::new();
    for (kind, count) in [
        (Kind::Worker, args.worker_kills),
        (Kind::Api, args.api_kills),
        (Kind::Redis, args.redis_restarts()),
        (Kind::Primary, args.primary_kills()),
    ] {
        for j in 0..count {
            // At (j + 1/2) / count of the tasks, kept inside the first 90 %.
            let at = (args.tasks as f64 * 0.9 * (j as f64 + 0.5) / count as f64) as usize;
            plan.push((at, kind));
        }
    }
    plan.sort();
    plan
}
