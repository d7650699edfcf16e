//! `presa-bench`'s command line: the flags of the throughput rows, the subcommands and `--telemetry`.

use super::*;

#[derive(Debug, Parser)]
#[command(
    about = "Throughput and latency of presa on loopback (module docs say how to read them).",
    args_conflicts_with_subcommands = true
)]
pub(super) struct Args {
    /// `chaos`: tasks through nginx while pods and Redis are killed (see `chaos/mod.rs`); `soak`: steady load,
    /// memory sampled (see `soak/mod.rs`); none: the throughput rows.
    #[command(subcommand)]
    pub(super) command: Option<Command>,
    /// Seconds of measurement per row (each side of an alternated pair gets this much).
    #[arg(long, default_value_t = 3.0)]
    pub(super) seconds: f64,
    /// Concurrent connections of the multi-connection rows.
    #[arg(long, default_value_t = 16)]
    pub(super) connections: usize,
    /// Listen streams of the fan-out scenario.
    #[arg(long, default_value_t = 50)]
    pub(super) listeners: usize,
    /// Redis for the Redis rows; without it, a `redis-server` on PATH is spawned on a free loopback port.
    #[arg(long)]
    pub(super) redis_url: Option<String>,
    /// Listen streams held open at once for the RSS-per-stream row.
    #[arg(long, default_value_t = 2000)]
    pub(super) rss_streams: usize,
    /// The binaries' telemetry, installed before measuring so its cost is included: `none` (no
    /// subscriber), `logs` (`presa_telemetry::init` with no exporter: text logs filtered by
    /// `RUST_LOG`, default `info`, one line per task), `otel` (the same plus the OpenTelemetry
    /// layer building every span with no exporter, as `init` did before).
    #[arg(long, value_enum, default_value_t = Telemetry::None)]
    pub(super) telemetry: Telemetry,
    /// Small tasks created for the Redis-bytes-per-task row.
    #[arg(long, default_value_t = 2000)]
    pub(super) redis_tasks: usize,
    /// Only the peer comparison (sync echo and `tasks/get` through Redis against rmcp), for
    /// quick before/after runs of one lever.
    #[arg(long)]
    pub(super) peer_only: bool,
    /// Only the gateway rows (presa-gateway in front of the rmcp peer: added latency, tasks/s).
    #[arg(long)]
    pub(super) gateway_only: bool,
    /// Only the create → pickup rows (row 8's create → handler started, at 1 and C
    /// connections, on Redis with the default settings and two worker pools), for quick
    /// before/after runs of the claim path.
    #[arg(long)]
    pub(super) pickup_only: bool,
    /// Only the fairness rows (one principal flooding, another at a low rate).
    #[arg(long)]
    pub(super) fairness_only: bool,
    /// Only the admin task index's cost: bytes and CPU per small task with `--task-index` on and
    /// off, alternated this many rounds (0: the rows are part of a full run, 2 rounds).
    #[arg(long, default_value_t = 0)]
    pub(super) task_index_rounds: usize,
}

/// The subcommands.
#[derive(Debug, clap::Subcommand)]
pub(super) enum Command {
    /// Tasks created through nginx in front of API pods while workers, API pods and Redis
    /// are SIGKILLed and restarted; prints lost / stuck / re-run tasks and recovery times;
    /// exits non-zero on any loss.
    Chaos(chaos::ChaosArgs),
    /// Minutes of steady task load on API pods and workers on Redis (quick, cancelled, answered
    /// and expiring tasks, listen streams); prints the RSS of each process, Redis memory and
    /// keys every few seconds; exits non-zero when one of them keeps growing.
    Soak(soak::SoakArgs),
    /// The CPU a small task costs on each tier (an API pod, a worker pod, Redis) against a sync
    /// call, Redis's commands per task, and what one core of each sustains: the figures of
    /// docs/capacity.md's sizing model, on this machine.
    Tiers(tiers::TiersArgs),
    /// What a big artifact costs: a tool streams one (`--mebibytes`, 200 by default) through an
    /// API pod and a worker pod on Redis, then it is downloaded; throughput and each pod's RSS rise.
    Artifacts(artifacts::ArtifactsArgs),
    /// How punctual the delayed queue is: `--tasks` tasks (1000) put off at once after a failed
    /// try, on an API pod and two worker pods on Redis; how late each due try starts, p50/p99.
    Retries(retries::RetriesArgs),
    /// Recovery after a mass worker loss: `--tasks` tasks (10,000) stranded by a vanished
    /// consumer, their leases lapsed, then taken over and completed by fresh worker pods;
    /// time, Redis µs per recovered entry, worst Redis and pod stalls.
    Recovery(recovery::RecoveryArgs),
    /// `--calls` plain `tools/call`s (`echo`, as the echo rows send it) to `--url` on
    /// `--connections` connections, each answer checked; prints calls/s. For drivers that
    /// count a server's instructions per call (`tools/bench/callgrind-gateway.sh`).
    Calls(calls::CallsArgs),
    /// (Run by presa-bench itself.) Serve the bench catalog on a loopback port in this
    /// process, print the URL, stop when stdin closes.
    #[command(hide = true)]
    Serve(ServeArgs),
}

/// `serve`: the presa side of the process-separated rows.
#[derive(Debug, clap::Args)]
pub(super) struct ServeArgs {
    /// Redis to run on (a fresh key prefix, one worker pool); none: embedded.
    #[arg(long)]
    pub(super) redis_url: Option<String>,
    /// `max_listen_streams` (0: the default), with no per-scope bound.
    #[arg(long, default_value_t = 0)]
    pub(super) max_listen_streams: usize,
}

/// `--telemetry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum Telemetry {
    None,
    Logs,
    Otel,
}
