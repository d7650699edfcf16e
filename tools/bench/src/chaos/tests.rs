//! Unit tests of the chaos program's planning and parsing (it does not run here: it needs nginx).

use clap::Parser;

use super::*;

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    chaos: ChaosArgs,
}

fn args(flags: &[&str]) -> ChaosArgs {
    Cli::parse_from(std::iter::once("chaos").chain(flags.iter().copied())).chaos
}

#[test]
fn kills_of_each_kind_are_spread_over_the_first_ninety_percent_in_order() {
    let plan = schedule(&args(&["--tasks", "10000", "--worker-kills", "10", "--api-kills", "3"]));
    assert_eq!(plan.len(), 14, "{plan:?}");
    assert!(plan.windows(2).all(|w| w[0].0 <= w[1].0), "in acknowledgement order: {plan:?}");
    assert!(plan.iter().all(|&(at, _)| at > 0 && at < 9000), "{plan:?}");
    let at = |kind| plan.iter().filter(|p| p.1 == kind).map(|p| p.0).collect::<Vec<_>>();
    assert_eq!(at(Kind::Worker), (0..10).map(|j| 450 + 900 * j).collect::<Vec<_>>());
    assert_eq!(at(Kind::Api), vec![1500, 4500, 7500]);
    assert_eq!(at(Kind::Redis), vec![4500], "one Redis restart by default, mid-run");
}

#[test]
fn failover_topologies_kill_the_primary_instead_of_restarting_redis() {
    let sentinel = args(&["--topology", "sentinel", "--tasks", "1000"]);
    assert_eq!((sentinel.redis_restarts(), sentinel.primary_kills()), (0, 1), "the defaults with replicas");
    assert!(sentinel.check().is_ok());
    let plan = schedule(&sentinel);
    assert_eq!(plan.iter().filter(|p| p.1 == Kind::Primary).map(|p| p.0).collect::<Vec<_>>(), vec![450]);
    assert!(plan.iter().all(|p| p.1 != Kind::Redis));
    assert!(sentinel.failover_may_lose(), "--durability primary acknowledges before replication");
    let replicated = args(&["--topology", "cluster", "--durability", "replicated", "--primary-kills", "3"]);
    assert!(replicated.check().is_ok() && !replicated.failover_may_lose());
    assert_eq!(schedule(&replicated).iter().filter(|p| p.1 == Kind::Primary).count(), 3);

    let standalone = args(&[]);
    assert_eq!((standalone.redis_restarts(), standalone.primary_kills()), (1, 0));
    assert!(standalone.check().is_ok() && !standalone.failover_may_lose());
    for bad in [
        &["--primary-kills", "1"][..],
        &["--durability", "replicated"],
        &["--topology", "sentinel", "--redis-restarts", "1"],
        &["--topology", "cluster", "--redis-restarts", "1"],
    ] {
        assert!(args(bad).check().is_err(), "{bad:?}");
    }
}

#[test]
fn a_stored_task_is_labelled_by_its_argument_or_its_result() {
    let hash = |rev: &str, status: &str, doc: &str| [rev, "1", status, doc].map(|v| Some(v.as_bytes().to_vec()));
    let working = hash("3", "working", r#"{"work":{"tool":"slow_compute","arguments":{"seconds":0.1,"label":"c7"}}}"#);
    assert_eq!(label_of(&working).as_deref(), Some("c7"));
    let done = r#"{"work":{"tool":"slow_compute"},"result":{"content":[{"type":"text","text":"Completed c8"}]}}"#;
    assert_eq!(label_of(&hash("5", "completed", done)).as_deref(), Some("c8"));
    assert_eq!(label_of(&[None, None, None, None]), None);
}

#[test]
fn no_kills_asked_none_planned() {
    let plan = schedule(&args(&["--worker-kills", "0", "--api-kills", "0", "--redis-restarts", "0"]));
    assert!(plan.is_empty());
}

#[test]
fn only_creates_acknowledged_in_the_second_before_a_redis_kill_may_be_lost() {
    let kill = Instant::now() + Duration::from_secs(10);
    let kills = [kill];
    assert!(in_aof_window(kill - Duration::from_millis(999), &kills));
    assert!(in_aof_window(kill, &kills));
    assert!(!in_aof_window(kill - Duration::from_secs(1), &kills));
    assert!(!in_aof_window(kill + Duration::from_millis(1), &kills), "acknowledged after the restart");
    assert!(!in_aof_window(kill - Duration::from_millis(10), &[]), "no Redis kill, no excuse");
}

#[test]
fn task_durations_stay_in_range_and_vary() {
    let ms: Vec<u64> = (0..1000).map(|i| spread(i, 451)).collect();
    assert!(ms.iter().all(|&m| m < 451));
    assert!(ms.iter().any(|&m| m < 50) && ms.iter().any(|&m| m > 400), "spread over the range");
}
