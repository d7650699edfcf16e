//! The load generator: operations run by C loops for a time or a count, alternated in rounds, and the rows they print.

use super::*;

/// Length of one round when two operations are alternated.
pub(super) const ROUND: Duration = Duration::from_millis(250);
/// Interval between two `tasks/get` of the same task.
pub(super) const POLL: Duration = Duration::from_millis(5);
/// The wider connection count of the peer comparison.
pub(super) const PEER_WIDE: usize = 50;
/// Creators of the full-speed row (issue 12: p99 create latency at c=100).
pub(super) const CREATE_WIDE: usize = 100;
/// Rounds of the fan-out scenario.
pub(super) const FAN_OUT_ROUNDS: usize = 30;

/// What one operation reports.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Sample {
    pub(super) latency: Duration,
    /// `tasks/get` requests it sent.
    pub(super) polls: u64,
    /// The part after `tasks/update` (input round trips).
    pub(super) tail: Option<Duration>,
    /// Refused with a retryable answer (HTTP 503 or 429): not counted as done.
    pub(super) refused: bool,
}

/// The bench's clock: handlers get send times as microseconds since it.
pub(super) static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);
/// Create sent → handler started (`stamp_task`).
pub(super) static PICKUPS: Mutex<Vec<Duration>> = Mutex::new(Vec::new());
/// `tasks/update` sent → parked `park` handler resumed.
pub(super) static RESUMES: Mutex<Vec<Duration>> = Mutex::new(Vec::new());
/// Handlers of `noop_task` that ran.
pub(super) static COMPLETED: AtomicU64 = AtomicU64::new(0);

pub(super) fn now_us() -> u64 {
    EPOCH.elapsed().as_micros() as u64
}

/// Record the time since `sent` (from [`now_us`]) in `into`.
pub(super) fn stamp(into: &Mutex<Vec<Duration>>, sent: Option<u64>) {
    if let Some(sent) = sent {
        into.lock().expect("stamps").push(Duration::from_micros(now_us().saturating_sub(sent)));
    }
}

pub(super) fn take(from: &Mutex<Vec<Duration>>) -> Vec<Duration> {
    std::mem::take(&mut *from.lock().expect("stamps"))
}

/// One operation of a load loop: gets its connection's index, reports a [`Sample`].
pub(super) type Op = Arc<dyn Fn(usize) -> BoxFuture<'static, Sample> + Send + Sync>;

pub(super) fn op<F, Fut>(f: F) -> Op
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Sample> + Send + 'static,
{
    Arc::new(move |i| f(i).boxed())
}

/// Samples of completed operations and the wall time they took.
#[derive(Debug, Default)]
pub(super) struct Stats {
    pub(super) latencies: Vec<Duration>,
    pub(super) tails: Vec<Duration>,
    pub(super) polls: u64,
    pub(super) refused: u64,
    pub(super) elapsed: Duration,
}

impl Stats {
    pub(super) fn rate(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub(super) fn absorb(&mut self, other: Stats) {
        self.latencies.extend(other.latencies);
        self.tails.extend(other.tails);
        self.polls += other.polls;
        self.refused += other.refused;
        self.elapsed += other.elapsed;
    }

    pub(super) fn polls_per_op(&self) -> f64 {
        self.polls as f64 / self.latencies.len().max(1) as f64
    }
}

/// The `p`th percentile (nearest rank) of `d`, sorting it.
pub(super) fn pct(d: &mut [Duration], p: f64) -> Duration {
    d.sort_unstable();
    if d.is_empty() { Duration::ZERO } else { d[((p / 100.0) * (d.len() - 1) as f64).round() as usize] }
}

pub(super) fn ms(d: Duration) -> String {
    format!("{:.2}ms", d.as_secs_f64() * 1e3)
}

/// Print one table row (`rate` None: not a throughput measurement).
pub(super) fn row(name: &str, conns: usize, rate: Option<f64>, lat: &mut [Duration], notes: &str) {
    let rate = rate.map_or("-".into(), |r| format!("{r:.0}"));
    let (p50, p90, p99) = (pct(lat, 50.0), pct(lat, 90.0), pct(lat, 99.0));
    let line = format!("{name:<38} {conns:>5} {rate:>8} {:>9} {:>9} {:>9}  {notes}", ms(p50), ms(p90), ms(p99));
    println!("{}", line.trim_end());
}

/// Run `op` on `conns` loops for `dur`; each loop finishes the operation under way, then stops.
pub(super) async fn run(op: &Op, conns: usize, dur: Duration) -> Stats {
    let start = Instant::now();
    let deadline = start + dur;
    let loops: Vec<_> = (0..conns)
        .map(|i| {
            let op = op.clone();
            tokio::spawn(async move {
                let mut samples = Vec::new();
                while Instant::now() < deadline {
                    samples.push(op(i).await);
                }
                samples
            })
        })
        .collect();
    let mut stats = Stats::default();
    for l in loops {
        for s in l.await.expect("a load loop panicked") {
            if s.refused {
                stats.refused += 1;
                continue;
            }
            stats.latencies.push(s.latency);
            stats.tails.extend(s.tail);
            stats.polls += s.polls;
        }
    }
    stats.elapsed = start.elapsed();
    stats
}

/// `a` and `b` for `total` each, in alternating rounds (ABBA…), after a warm-up of both.
pub(super) async fn alternate(a: &Op, b: &Op, conns: usize, total: Duration) -> (Stats, Stats) {
    run(a, conns, ROUND / 2).await;
    run(b, conns, ROUND / 2).await;
    let rounds = ((total.as_secs_f64() / ROUND.as_secs_f64()).ceil() as usize).max(2);
    let (mut sa, mut sb) = (Stats::default(), Stats::default());
    for r in 0..rounds {
        if r % 2 == 0 {
            sa.absorb(run(a, conns, ROUND).await);
            sb.absorb(run(b, conns, ROUND).await);
        } else {
            sb.absorb(run(b, conns, ROUND).await);
            sa.absorb(run(a, conns, ROUND).await);
        }
    }
    (sa, sb)
}

/// Wait (at most `within`) until `noop_task` handlers ran `target` times in all; returns the wait.
pub(super) async fn drain(target: u64, within: Duration) -> Duration {
    let t = Instant::now();
    while COMPLETED.load(Ordering::Relaxed) < target && t.elapsed() < within {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    t.elapsed()
}

/// Run `op` `n` times over `c` loops, retrying refusals (the per-scope limit
/// while workers catch up).
pub(super) async fn run_n(op: &Op, c: usize, n: usize) {
    let started = Arc::new(AtomicU64::new(0));
    let loops: Vec<_> = (0..c)
        .map(|i| {
            let (op, started) = (op.clone(), started.clone());
            tokio::spawn(async move {
                while started.fetch_add(1, Ordering::Relaxed) < n as u64 {
                    while op(i).await.refused {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            })
        })
        .collect();
    for l in loops {
        l.await.expect("a load loop panicked");
    }
}
