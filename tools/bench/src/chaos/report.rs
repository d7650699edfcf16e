//! The figures printed at the end of a chaos run, and whether it was clean.

use super::*;

/// How long the AOF `everysec` promise may lose acknowledged writes for.
const AOF_WINDOW: Duration = Duration::from_secs(1);

/// Whether a create acknowledged at `acked` falls in the last [`AOF_WINDOW`]
/// before one of the Redis kills: `appendfsync everysec` may lose it.
pub(super) fn in_aof_window(acked: Instant, redis_kills: &[Instant]) -> bool {
    redis_kills.iter().any(|&k| acked <= k && k - acked < AOF_WINDOW)
}

/// p50 / p99 / max of `d`, in seconds.
pub(super) fn spread_of(d: &mut [Duration]) -> String {
    if d.is_empty() {
        return format!("{:>7} {:>7} {:>7}", "-", "-", "-");
    }
    let max = d.iter().max().copied().unwrap_or_default();
    let (p50, p99) = (crate::pct(d, 50.0), crate::pct(d, 99.0));
    format!("{:>7.2} {:>7.2} {:>7.2}", p50.as_secs_f64(), p99.as_secs_f64(), max.as_secs_f64())
}

/// Print the figures; whether the run was clean (nothing lost, stuck or failed).
/// `stored`: the labels of the tasks Redis holds at the end; those beyond the
/// acknowledged ones still there were made by creates no client got an
/// answer for (ambiguous creates: idempotency keys make them 0), and two
/// tasks of one label are one logical create made twice (duplicated).
pub(super) fn report(
    s: &Shared,
    seen: &[Seen],
    kills: &[Kill],
    attempts: &[u64],
    load_time: Duration,
    stored: &[String],
) -> bool {
    let c = &s.counters;
    let failover = s.args.topology != Topology::Standalone;
    let count = |st: &str| seen.iter().filter(|t| t.status == st).count();
    let (completed, failed, cancelled) = (count("completed"), count("failed"), count("cancelled"));
    let redis_kills: Vec<Instant> = kills.iter().filter(|k| k.kind == Kind::Redis).map(|k| k.at).collect();
    let in_window = |t: &Seen| in_aof_window(t.acked_at, &redis_kills);
    let lost: Vec<&Seen> = seen.iter().filter(|t| t.status == "unknown").collect();
    let lost_allowed = lost.iter().filter(|t| in_window(t)).count();
    let lost_other = lost.len() - lost_allowed;
    let terminal = |t: &Seen| ["completed", "failed", "cancelled"].contains(&t.status.as_str());
    let wrong = count(WRONG);
    let stuck: Vec<&Seen> = seen
        .iter()
        .filter(|t| ![WRONG, "unknown"].contains(&t.status.as_str()) && (!terminal(t) || t.done_at.is_none()))
        .collect();

    println!("\n== presa-bench chaos: results");
    let by_kind = |k: Kind| kills.iter().filter(|x| x.kind == k).count();
    println!(
        "tasks acknowledged: {} in {:.1} s ({:.0}/s), creates sent {}",
        seen.len(),
        load_time.as_secs_f64(),
        seen.len() as f64 / load_time.as_secs_f64().max(1e-9),
        c.creates_sent.load(Ordering::Relaxed)
    );
    println!("redis: {}, pods' durability {}", name_of(s.args.topology), name_of(s.args.durability));
    let redis_kills = if failover {
        format!("{} primary (SIGKILL, replica promoted, restarted as a replica)", by_kind(Kind::Primary))
    } else {
        format!("{} Redis (SIGKILL, restarted from AOF)", by_kind(Kind::Redis))
    };
    println!(
        "kills: {} worker (SIGKILL, replaced), {} API pod (SIGKILL, restarted), {redis_kills}",
        by_kind(Kind::Worker),
        by_kind(Kind::Api),
    );
    println!(
        "tasks: {completed} completed, {failed} failed, {cancelled} cancelled, {} lost, {} stuck, {wrong} with a wrong result",
        lost_other,
        stuck.len()
    );
    if failover {
        // Acknowledged before a primary kill, on the partitions it held: what
        // asynchronous replication may lose in a failover.
        let before_kill = |t: &Seen| {
            let p = TaskId::from_wire(t.id.clone()).partition();
            kills
                .iter()
                .any(|k| k.kind == Kind::Primary && t.acked_at <= k.at && p.is_some_and(|p| k.partitions.contains(&p)))
        };
        let lost_to_failover = lost.iter().filter(|t| before_kill(t)).count();
        println!(
            "       lost to failover (acknowledged before a primary kill, on its shard): {lost_to_failover} of {} such \
             tasks; {} by --durability {}",
            seen.iter().filter(|t| before_kill(t)).count(),
            if s.args.failover_may_lose() { "allowed" } else { "NOT allowed" },
            name_of(s.args.durability)
        );
    } else {
        println!(
            "       {lost_allowed} lost of those acknowledged < 1 s before a Redis kill (allowed by AOF everysec; {} such tasks)",
            seen.iter().filter(|t| in_window(t)).count()
        );
    }

    // Handler executions: the claim attempt counter.
    let mut runs: BTreeMap<u64, usize> = BTreeMap::new();
    for &a in attempts {
        *runs.entry(a).or_default() += 1;
    }
    let total: u64 = attempts.iter().sum();
    let twice: usize = runs.range(2..).map(|(_, n)| n).sum();
    let dist: Vec<String> = runs.iter().map(|(a, n)| format!("{a}x: {n}")).collect();
    println!(
        "handler executions (claim attempts): {total} for {} tasks = {:.4} per task; ran more than once: {twice} ({:.2} %); \
         distribution {}",
        seen.len(),
        total as f64 / seen.len().max(1) as f64,
        100.0 * twice as f64 / seen.len().max(1) as f64,
        dist.join(", ")
    );
    let failures = |m: &Mutex<BTreeMap<String, u64>>| {
        let m = m.lock().expect("counters");
        let n: u64 = m.values().sum();
        let list: Vec<String> = m.iter().map(|(k, v)| format!("{v} × {k}")).collect();
        if list.is_empty() { "0".to_string() } else { format!("{n} ({})", list.join("; ")) }
    };
    println!("creates failed (retried with the same idempotency key): {}", failures(&c.creates_failed));
    let ambiguous = stored.len().saturating_sub(seen.len() - lost.len());
    let mut per_label: HashMap<&str, usize> = HashMap::new();
    for label in stored.iter().filter(|l| *l != "?") {
        *per_label.entry(label.as_str()).or_default() += 1;
    }
    let duplicated: usize = per_label.values().map(|n| n - 1).sum();
    println!(
        "ambiguous creates (tasks stored that no client acknowledged): {ambiguous} ({} tasks stored); duplicated \
         (a second task for one logical create): {duplicated}",
        stored.len()
    );
    println!("tasks/get sent {}, failed (retried): {}", c.gets_sent.load(Ordering::Relaxed), failures(&c.gets_failed));

    // Recovery after each kill: the first answer to a request sent after it.
    let first_after = |at: Instant, f: &dyn Fn(&Seen) -> Option<(Instant, Instant)>| {
        seen.iter().filter_map(f).filter(|&(sent, _)| sent >= at).map(|(_, t)| t).min().map(|t| t - at)
    };
    let index: HashMap<&str, &Seen> = seen.iter().map(|t| (t.id.as_str(), t)).collect();
    println!("\nrecovery after each kill, s            kills     p50     p99     max");
    for kind in [Kind::Worker, Kind::Api, Kind::Redis, Kind::Primary] {
        let of: Vec<&Kill> = kills.iter().filter(|k| k.kind == kind).collect();
        if of.is_empty() {
            continue;
        }
        let mut acks: Vec<Duration> =
            of.iter().filter_map(|k| first_after(k.at, &|t| Some((t.create_sent, t.acked_at)))).collect();
        let mut dones: Vec<Duration> =
            of.iter().filter_map(|k| first_after(k.at, &|t| t.done_sent.zip(t.done_at))).collect();
        let mut back: Vec<Duration> = of.iter().map(|k| k.back_at - k.at).collect();
        let name = kind.name();
        println!("{:<38} {:>5} {}", format!("{name}: kill -> next create acked"), acks.len(), spread_of(&mut acks));
        println!("{:<38} {:>5} {}", format!("{name}: kill -> next task completed"), dones.len(), spread_of(&mut dones));
        if kind == Kind::Worker {
            let held: usize = of.iter().map(|k| k.in_flight.len()).sum();
            let mut done: Vec<Duration> = of
                .iter()
                .filter(|k| !k.in_flight.is_empty())
                .filter_map(|k| {
                    // Held tasks never acknowledged (their create's answer was lost) are not followed.
                    let known = k.in_flight.iter().filter_map(|id| index.get(id.as_str()));
                    let done = known.map(|t| t.done_at).collect::<Option<Vec<_>>>()?;
                    done.into_iter().max().map(|t| t.saturating_duration_since(k.at))
                })
                .collect();
            let label = format!("worker: kill -> its {held} held tasks done");
            println!("{label:<38} {:>5} {}", done.len(), spread_of(&mut done));
        }
        let what = match kind {
            Kind::Redis => "redis: kill -> restarted (AOF loaded)",
            Kind::Primary => "primary: kill -> replica promoted",
            _ => &format!("{name}: kill -> replacement ready"),
        };
        println!("{what:<38} {:>5} {}", back.len(), spread_of(&mut back));
    }
    // Each primary kill, measured on the tasks of the partitions it held (a
    // cluster's other shards never stopped).
    for (n, k) in kills.iter().filter(|k| k.kind == Kind::Primary).enumerate() {
        let on_shard =
            |t: &Seen| TaskId::from_wire(t.id.clone()).partition().is_some_and(|p| k.partitions.contains(&p));
        let secs = |d: Option<Duration>| d.map_or("-".to_string(), |d| format!("{:.2} s", d.as_secs_f64()));
        let ack = first_after(k.at, &|t| on_shard(t).then_some((t.create_sent, t.acked_at)));
        let done = first_after(k.at, &|t| t.done_sent.zip(t.done_at).filter(|_| on_shard(t)));
        println!(
            "primary kill {} ({}, t+{:.1} s, {} partitions): kill -> next create acked on its shard {}, -> next task \
             completed on its shard {}, -> promoted {}, -> back as a replica {}",
            n + 1,
            k.target,
            (k.at - s.start).as_secs_f64(),
            k.partitions.len(),
            secs(ack),
            secs(done),
            secs(Some(k.back_at - k.at)),
            secs(k.rejoined_at.map(|t| t - k.at)),
        );
    }
    println!(
        "(lease {} ms; completions are seen by polling every {} ms; a worker's held tasks are its pending work entries at the kill)",
        s.args.lease_ms, s.args.poll_ms
    );
    for t in lost.iter().filter(|t| !in_window(t)).take(10) {
        println!("LOST: {} ({}), acknowledged t+{:.2} s", t.id, t.label, (t.acked_at - s.start).as_secs_f64());
    }
    for t in seen.iter().filter(|t| t.status == WRONG).take(10) {
        println!("WRONG RESULT: {} ({}): completed with another task's result", t.id, t.label);
    }
    for t in stuck.iter().take(10) {
        println!("STUCK: {} ({}), last seen {}", t.id, t.label, t.status);
    }
    // Losses to a failover are a measured figure when writes are acknowledged before replication.
    let lost_counts = if s.args.failover_may_lose() { 0 } else { lost_other };
    let clean = lost_counts == 0
        && stuck.is_empty()
        && failed == 0
        && cancelled == 0
        && wrong == 0
        && ambiguous == 0
        && duplicated == 0;
    println!(
        "\nverdict: {}",
        match (clean, s.args.failover_may_lose()) {
            (true, false) =>
                "PASS (0 lost, 0 stuck, 0 failed, 0 wrong results, 0 ambiguous or duplicated creates)".into(),
            (true, true) => format!(
                "PASS ({lost_other} lost: allowed by --durability primary; 0 stuck, 0 failed, 0 wrong results, 0 \
                 ambiguous or duplicated creates)"
            ),
            (false, _) => "FAIL (lost, stuck, failed, wrong, ambiguous or duplicated tasks above)".into(),
        }
    );
    clean
}
