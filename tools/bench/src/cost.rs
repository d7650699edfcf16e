//! What things cost: CPU and Redis bytes per task, the admin task index's cost, RSS per listen stream, and this process's RSS and the load average.

use super::*;

/// `used_memory` of the Redis at `url` (INFO memory), bytes.
pub(super) async fn redis_used_memory(con: &mut redis::aio::MultiplexedConnection) -> i64 {
    let info: String = redis::cmd("INFO").arg("memory").query_async(con).await.expect("INFO memory");
    info.lines().find_map(|l| l.strip_prefix("used_memory:")?.trim().parse().ok()).expect("used_memory in INFO")
}

/// CPU seconds Redis has used (`INFO cpu`: user + system, main thread and children).
pub(super) async fn redis_cpu_secs(con: &mut redis::aio::MultiplexedConnection) -> f64 {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(con).await.expect("INFO cpu");
    let field = |name: &str| -> f64 {
        info.lines().find_map(|l| l.strip_prefix(name)?.trim().parse().ok()).unwrap_or(f64::NAN)
    };
    field("used_cpu_user:") + field("used_cpu_sys:")
}

/// CPU seconds this process's threads have run: the sum of the first field of
/// each `/proc/self/task/<tid>/schedstat` (nanoseconds; `/proc/self/stat`
/// counts 10 ms ticks, too coarse for a few thousand sync calls). A thread
/// that exits takes its time along; the runtime's threads outlive every row.
pub(super) fn own_cpu_secs() -> f64 {
    cpu_secs_of("/proc/self/task")
}

/// CPU seconds the threads listed under `tasks` (`/proc/<pid>/task`) have
/// run, as [`own_cpu_secs`] counts them.
pub(super) fn cpu_secs_of(tasks: &str) -> f64 {
    let Ok(threads) = std::fs::read_dir(tasks) else { return f64::NAN };
    let ns = threads
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<f64>().ok());
    ns.sum::<f64>() / 1e9
}

/// Redis bytes per small completed task: `INFO memory` delta over `n` `noop_task`s, and
/// `MEMORY USAGE` of one task's record. Also the CPU a task costs from create to
/// completed (this process: server, worker pools and generator; and Redis) against
/// a sync `echo` call's, which bounds the creations/sync ratio where the cores are the limit.
pub(super) async fn redis_bytes_per_task(server: &Running, n: usize, c: usize) -> Option<String> {
    task_cost(server, n, c).await.map(|cost| cost.to_string())
}

/// The CPU a task that awaits 1 ms costs (`wait_task`: its run is watched
/// while it waits, as any real task's is), from create to completed, against
/// a sync call's; the bytes are as [`redis_bytes_per_task`]'s.
pub(super) async fn waiting_task_cost(server: &Running, n: usize, c: usize) -> Option<String> {
    let cost = task_cost_of(server, "wait_task", n, c).await?;
    let TaskCost { task_own, task_redis, echo_own, echo_redis, .. } = cost;
    Some(format!(
        "CPU per task {task_own:.0} µs here + {task_redis:.0} µs Redis, per sync echo {echo_own:.0} + {echo_redis:.0} µs"
    ))
}

/// What a small task costs, from create to completed, against a sync call
/// ([`task_cost`]).
pub(super) struct TaskCost {
    pub(super) before: i64,
    pub(super) after: i64,
    pub(super) n: usize,
    /// `MEMORY USAGE` of one completed task's record.
    pub(super) usage: Option<i64>,
    /// `MEMORY USAGE` of the admin task indexes per entry, when indexed.
    pub(super) index: Option<f64>,
    /// CPU per task, µs: this process's and Redis's.
    pub(super) task_own: f64,
    pub(super) task_redis: f64,
    /// CPU per sync `echo` call, µs: this process's and Redis's.
    pub(super) echo_own: f64,
    pub(super) echo_redis: f64,
}

impl TaskCost {
    pub(super) fn bytes_per_task(&self) -> f64 {
        (self.after - self.before) as f64 / self.n as f64
    }

    pub(super) fn cpu_per_task(&self) -> f64 {
        self.task_own + self.task_redis
    }
}

impl std::fmt::Display for TaskCost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let TaskCost { before, after, n, usage, index, task_own, task_redis, echo_own, echo_redis } = self;
        let (per, usage) = (self.bytes_per_task(), usage.map_or("-".into(), |u| u.to_string()));
        let index = index.map_or("none".into(), |b| format!("{b:.0} B/entry"));
        let bound = (echo_own + echo_redis) / (task_own + task_redis);
        write!(
            f,
            "INFO used_memory {before} -> {after} over {n} tasks = {per:.0} B/task; MEMORY USAGE of one task record {usage} B, \
             of the task index {index}; \
             CPU per task {task_own:.0} µs here + {task_redis:.0} µs Redis, per sync echo {echo_own:.0} + {echo_redis:.0} µs \
             (cores the limit: creations/sync ≤ {bound:.2})"
        )
    }
}

/// [`redis_bytes_per_task`]'s figures.
pub(super) async fn task_cost(server: &Running, n: usize, c: usize) -> Option<TaskCost> {
    task_cost_of(server, "noop_task", n, c).await
}

/// [`task_cost`] of `n` tasks of `tool` (one that counts [`COMPLETED`]).
async fn task_cost_of(server: &Running, tool: &'static str, n: usize, c: usize) -> Option<TaskCost> {
    let (url, prefix) = server.redis_url.clone()?;
    let client = redis::Client::open(url.as_str()).expect("a Redis URL");
    let mut con = client.get_multiplexed_async_connection().await.expect("a Redis connection");
    let pool = Raw::pool(&server.url, c);
    let one = create_op(&pool, tool, false);
    let done0 = COMPLETED.load(Ordering::Relaxed);
    let before = redis_used_memory(&mut con).await;
    let cpu0 = (own_cpu_secs(), redis_cpu_secs(&mut con).await);
    run_n(&one, c, n).await;
    drain(done0 + n as u64, Duration::from_secs(30)).await;
    let cpu1 = (own_cpu_secs(), redis_cpu_secs(&mut con).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = redis_used_memory(&mut con).await;
    let cpu2 = (own_cpu_secs(), redis_cpu_secs(&mut con).await);
    // Five times as many sync calls: each costs a fraction of a task.
    run_n(&echo_op(&pool, "echo", false), c, 5 * n).await;
    let cpu3 = (own_cpu_secs(), redis_cpu_secs(&mut con).await);
    let us = |a: f64, b: f64, n: usize| (b - a) * 1e6 / n as f64;
    let (task_own, task_redis) = (us(cpu0.0, cpu1.0, n), us(cpu0.1, cpu1.1, n));
    let (echo_own, echo_redis) = (us(cpu2.0, cpu3.0, 5 * n), us(cpu2.1, cpu3.1, 5 * n));
    let id = create(&Client::new(server.url.clone(), tasks_caps()), "noop_task").await;
    drain(done0 + n as u64 + 1, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let key = format!("{prefix}:{{{}}}:task:{id}", &id[..3]);
    let usage: Option<i64> =
        redis::cmd("MEMORY").arg("USAGE").arg(&key).arg("SAMPLES").arg(0).query_async(&mut con).await.ok();
    let index = index_bytes_per_entry(&mut con, &prefix).await;
    Some(TaskCost { before, after, n, usage, index, task_own, task_redis, echo_own, echo_redis })
}

/// `MEMORY USAGE` of every admin task index under `prefix` over the entries
/// they hold (`None` when there is none: `--task-index off`).
pub(super) async fn index_bytes_per_entry(con: &mut redis::aio::MultiplexedConnection, prefix: &str) -> Option<f64> {
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{prefix}:{{p*}}:ix:*")).query_async(con).await.ok()?;
    let (mut bytes, mut entries) = (0i64, 0i64);
    for key in &keys {
        let usage: Option<i64> =
            redis::cmd("MEMORY").arg("USAGE").arg(key).arg("SAMPLES").arg(0).query_async(con).await.ok();
        let len: Option<i64> = redis::cmd("XLEN").arg(key).query_async(con).await.ok();
        bytes += usage.unwrap_or(0);
        entries += len.unwrap_or(0);
    }
    (entries > 0).then(|| bytes as f64 / entries as f64)
}

/// The admin task index's cost (`--task-index`): [`task_cost`] of one server
/// indexing its tasks and one not, alternated `rounds` times on one Redis,
/// with the ratios of bytes and CPU per task.
pub(super) async fn task_index_rows(url: Option<&str>, n: usize, c: usize, rounds: usize) {
    let start = |index: bool| start_redis_indexed(url, ServerConfig::default(), 2, HttpConfig::default(), index);
    let (Some(on), Some(off)) = (start(true).await, start(false).await) else {
        println!("task index cost: no Redis, skipped");
        return;
    };
    let (mut ons, mut offs) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        for (name, server, seen) in [("on", &on, &mut ons), ("off", &off, &mut offs)] {
            let Some(cost) = task_cost(server, n, c).await else { return };
            println!("{:<38} {c:>5} {:>8}  {cost}", format!("small task, --task-index {name}"), "-");
            seen.push(cost);
        }
    }
    let mean = |v: &[TaskCost], f: fn(&TaskCost) -> f64| v.iter().map(f).sum::<f64>() / v.len().max(1) as f64;
    let (b_on, b_off) = (mean(&ons, TaskCost::bytes_per_task), mean(&offs, TaskCost::bytes_per_task));
    let (c_on, c_off) = (mean(&ons, TaskCost::cpu_per_task), mean(&offs, TaskCost::cpu_per_task));
    println!(
        "task index cost over {rounds} alternated rounds: {b_on:.0} vs {b_off:.0} B/task ({:+.1} %), \
         CPU {c_on:.0} vs {c_off:.0} µs/task ({:+.1} %)",
        (b_on / b_off - 1.0) * 100.0,
        (c_on / c_off - 1.0) * 100.0
    );
}

/// RSS of an embedded presa server in a process of its own (`serve`) with `n`
/// listen streams open (this process holds the client ends), then closed.
pub(super) async fn rss_per_listen_stream(n: usize) -> String {
    let exe = std::env::current_exe().expect("this binary's path");
    let args = ["serve".to_string(), "--max-listen-streams".into(), (n + 10).to_string()];
    let server = procs::Proc::spawn(&exe, &args, true).await;
    let http = reqwest::Client::builder().tcp_nodelay(true).build().expect("an HTTP client");
    let client = Client { url: server.url.clone(), http, caps: json!({}), scope: None, bearer: None };
    // One stream opened and closed first, so the per-stream figure leaves out one-time set-up.
    drop(client.listen(json!({ "toolsListChanged": true })).await);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = server.rss_mib();
    let mut streams = Vec::with_capacity(n);
    for _ in 0..n {
        let (status, mut stream) = client.listen(json!({ "toolsListChanged": true })).await;
        let ack = next_within(&mut stream, 5).await;
        assert!(status == 200 && ack["method"] == "notifications/subscriptions/acknowledged", "listen: {ack}");
        streams.push(stream);
    }
    let open = server.rss_mib();
    drop(streams);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let closed = server.rss_mib();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let later = server.rss_mib();
    let per = (open - before) * 1024.0 / n as f64;
    format!(
        "server process RSS {before:.1} -> {open:.1} MiB with {n} open = {per:.1} KiB/stream; after closing: {closed:.1} MiB at 1 s, {later:.1} MiB at 11 s"
    )
}

/// VmRSS of this process, MiB.
pub(super) fn rss_mib() -> f64 {
    rss_of("/proc/self/status")
}

/// VmRSS from a `/proc/<pid>/status` file, MiB.
pub(super) fn rss_of(status: &str) -> f64 {
    let status = std::fs::read_to_string(status).unwrap_or_default();
    let kib = status.lines().find_map(|l| l.strip_prefix("VmRSS:")?.trim().strip_suffix("kB")?.trim().parse().ok());
    kib.map_or(f64::NAN, |k: f64| k / 1024.0)
}

pub(super) fn load_average() -> String {
    let l = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}
