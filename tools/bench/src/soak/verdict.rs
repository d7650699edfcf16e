//! The soak's samples and judgement: RSS, Redis memory, keys and work entries read every few seconds, printed, and whether each series stayed flat.

use super::*;

/// Growth allowed between the two windows: the larger of `share` of the earlier mean and `floor`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Tolerance {
    pub(super) share: f64,
    pub(super) floor: f64,
}

/// See the module docs for why.
pub(super) const RSS_TOLERANCE: Tolerance = Tolerance { share: 0.05, floor: 2.0 };
pub(super) const REDIS_MEMORY_TOLERANCE: Tolerance = Tolerance { share: 0.05, floor: 0.5 };
pub(super) const COUNT_TOLERANCE: Tolerance = Tolerance { share: 0.05, floor: 20.0 };

/// RSS of `pids`, Redis `used_memory`, key count and work-stream entries now.
pub(super) async fn sample(
    con: &mut redis::aio::MultiplexedConnection,
    keys: &Keys,
    pids: &[u32],
    t: f64,
) -> Result<Sample, String> {
    let rss = pids.iter().map(|pid| crate::rss_of(&format!("/proc/{pid}/status"))).collect();
    let info: String =
        redis::cmd("INFO").arg("memory").query_async(con).await.map_err(|e| format!("Redis INFO: {e}"))?;
    let used: f64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:")?.trim().parse().ok())
        .ok_or("Redis INFO memory without used_memory")?;
    let keys_now: u64 = redis::cmd("DBSIZE").query_async(con).await.map_err(|e| format!("Redis DBSIZE: {e}"))?;
    let mut pipe = redis::pipe();
    for stream in keys.all_work() {
        pipe.cmd("XLEN").arg(stream);
    }
    let lens: Vec<u64> = pipe.query_async(con).await.map_err(|e| format!("Redis XLEN: {e}"))?;
    Ok(Sample { t, rss, redis_mib: used / (1024.0 * 1024.0), keys: keys_now, work_entries: lens.iter().sum() })
}

pub(super) fn print_row(c: &Counts, s: &Sample) {
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let rss: String = s.rss.iter().map(|r| format!(" {r:>8.1}")).collect();
    println!(
        "{:>6.0} {:>7} {:>9} {:>9} {:>6} {:>7} {:>6} {:>7} |{rss} | {:>9.2} {:>6} {:>5}",
        s.t,
        n(&c.created),
        n(&c.completed),
        n(&c.cancelled),
        n(&c.parked),
        n(&c.expired),
        c.failures(),
        n(&c.listens),
        s.redis_mib,
        s.keys,
        s.work_entries,
    );
}

/// One judged series: its name, tolerance and value in each sample.
pub(super) struct Series {
    pub(super) name: String,
    pub(super) tolerance: Tolerance,
    pub(super) values: Vec<f64>,
}

/// The series judged: the RSS of each process (`names`, in sample order), Redis memory, keys and work entries.
pub(super) fn series_of(names: &[String], samples: &[Sample]) -> Vec<Series> {
    let column = |f: &dyn Fn(&Sample) -> f64| samples.iter().map(f).collect();
    let mut series: Vec<Series> = names
        .iter()
        .enumerate()
        .map(|(i, name)| Series {
            name: format!("RSS {name}, MiB"),
            tolerance: RSS_TOLERANCE,
            values: column(&|s| s.rss[i]),
        })
        .collect();
    series.push(Series {
        name: "Redis used_memory, MiB".into(),
        tolerance: REDIS_MEMORY_TOLERANCE,
        values: column(&|s| s.redis_mib),
    });
    series.push(Series { name: "Redis keys".into(), tolerance: COUNT_TOLERANCE, values: column(&|s| s.keys as f64) });
    series.push(Series {
        name: "work stream entries".into(),
        tolerance: COUNT_TOLERANCE,
        values: column(&|s| s.work_entries as f64),
    });
    series
}

/// Print whether each series stayed flat after `warmup_s`; whether all did.
pub(super) fn verdict(names: &[String], samples: &[Sample], warmup_s: f64, run_s: f64) -> Result<bool, String> {
    let split = warmup_s + (run_s - warmup_s) / 2.0;
    let early: Vec<usize> = (0..samples.len()).filter(|&i| samples[i].t >= warmup_s && samples[i].t < split).collect();
    let late: Vec<usize> = (0..samples.len()).filter(|&i| samples[i].t >= split).collect();
    if early.len() < 2 || late.len() < 2 {
        return Err(format!(
            "too short for a verdict: {} and {} samples in the windows after the {warmup_s:.0} s warm-up (need 2 each; \
             run longer, sample more often or shorten --warmup-s)",
            early.len(),
            late.len()
        ));
    }
    let mean = |values: &[f64], w: &[usize]| w.iter().map(|&i| values[i]).sum::<f64>() / w.len() as f64;
    let times: Vec<f64> = samples.iter().map(|s| s.t).collect();
    let minutes = (mean(&times, &late) - mean(&times, &early)) / 60.0;
    let span = |w: &[usize]| format!("{:.0}-{:.0} s", times[w[0]], times[w[w.len() - 1]]);
    println!(
        "\nverdict: mean of {} samples at {} against {} samples at {} (warm-up {warmup_s:.0} s)",
        late.len(),
        span(&late),
        early.len(),
        span(&early),
    );
    println!(
        "{:<24} {:>10} {:>10} {:>9} {:>10} {:>10}",
        "series", "earlier", "later", "growth", "per min", "tolerance"
    );
    let mut flat = true;
    for Series { name, tolerance, values } in series_of(names, samples) {
        let (before, after) = (mean(&values, &early), mean(&values, &late));
        let growth = after - before;
        let allowed = (before.abs() * tolerance.share).max(tolerance.floor);
        let ok = growth <= allowed;
        flat &= ok;
        println!(
            "{name:<24} {before:>10.2} {after:>10.2} {growth:>+9.2} {:>+10.2} {allowed:>10.2}  {}",
            growth / minutes,
            if ok { "flat" } else { "GROWING" }
        );
    }
    println!(
        "verdict: {}",
        if flat { "FLAT (every series within its tolerance)" } else { "GROWTH (see GROWING above)" }
    );
    Ok(flat)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Samples every 10 s up to 300 s: RSS `rss(t)`, 50 MiB of Redis, 1000 keys, 10 work entries.
    fn run(rss: impl Fn(f64) -> f64) -> Vec<Sample> {
        (1..=30)
            .map(|i| {
                let t = f64::from(i) * 10.0;
                Sample { t, rss: vec![rss(t)], redis_mib: 50.0, keys: 1000, work_entries: 10 }
            })
            .collect()
    }

    #[test]
    fn a_wobble_within_the_tolerance_is_flat() {
        let samples = run(|t| 40.0 + if ((t / 10.0) as u64).is_multiple_of(2) { 1.5 } else { -1.5 });
        assert_eq!(verdict(&["api0".into()], &samples, 100.0, 300.0), Ok(true));
    }

    #[test]
    fn steady_growth_past_the_tolerance_is_not() {
        // 2 MiB a minute: the windows' centres are 100 s apart, so +3.3 MiB > 2 MiB.
        let samples = run(|t| 40.0 + t / 30.0);
        assert_eq!(verdict(&["api0".into()], &samples, 100.0, 300.0), Ok(false));
    }

    #[test]
    fn growth_before_the_warm_up_ends_is_not_judged() {
        let samples = run(|t| if t < 100.0 { t } else { 100.0 });
        assert_eq!(verdict(&["api0".into()], &samples, 100.0, 300.0), Ok(true));
    }

    #[test]
    fn a_run_without_two_samples_per_window_has_no_verdict() {
        let samples = run(|_| 40.0);
        assert!(verdict(&["api0".into()], &samples[..12], 100.0, 120.0).is_err());
    }
}
