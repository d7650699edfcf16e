//! Pods through Redis Sentinel, real processes: a `presa-api` and a
//! `presa-worker` find the primary through three Sentinels (with passwords
//! on the data nodes and on the Sentinels); the primary is SIGKILLed; both
//! pods report the failover on `/readyz` while there is no primary and
//! serve again, unrestarted, once the replica is promoted. Also the start-up
//! refusals of contradicting Redis settings.

use std::{
    path::PathBuf,
    process::Command,
    time::{Duration, Instant},
};

use presa_testkit::{
    Client, Pod, free_port,
    redis::unique_prefix,
    redis_sentinel::{MASTER, TestSentinel},
    task_id, tasks_caps,
};
use serde_json::json;

const DATA_PASSWORD: &str = "data-secret";
const SENTINEL_PASSWORD: &str = "sentinel-secret";

fn worker_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_presa-worker"))
}

fn api_bin() -> PathBuf {
    worker_bin().with_file_name("presa-api")
}

fn redis_server_on_path() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|p| p.join("redis-server").is_file()))
}

async fn status(url: &str) -> Option<(u16, String)> {
    let r = reqwest::get(url).await.ok()?;
    let code = r.status().as_u16();
    Some((code, r.text().await.unwrap_or_default()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_follow_a_sentinel_failover_and_report_it_on_readyz() {
    if !redis_server_on_path() {
        eprintln!("SKIPPED: the Sentinel failover test needs redis-server on PATH (apt-get install redis-server)");
        return;
    }
    let mut set = TestSentinel::spawn_with_passwords(1, 3, Some(DATA_PASSWORD), Some(SENTINEL_PASSWORD));
    let sentinels = set.sentinel_addresses();
    let prefix = unique_prefix();
    let env = vec![
        ("PRESA_REDIS_SENTINELS", sentinels.as_str()),
        ("PRESA_REDIS_SENTINEL_MASTER", MASTER),
        ("PRESA_REDIS_PASSWORD", DATA_PASSWORD),
        ("PRESA_REDIS_SENTINEL_PASSWORD", SENTINEL_PASSWORD),
        ("PRESA_REDIS_PREFIX", prefix.as_str()),
        ("PRESA_REDIS_TIMEOUT_MS", "1000"),
        ("PRESA_STATE_SECRET", "sentinel-test-secret-at-least-32-bytes-long"),
    ];
    let api = Pod::start("api", &api_bin(), free_port(), &[], &env).await;
    let worker = Pod::start("w1", &worker_bin(), free_port(), &["--worker-id", "w1", "--lease-ms", "2000"], &env).await;
    let c = Client::new(&api.url, tasks_caps());
    let before = task_id(&c.call_tool("slow_compute", json!({ "seconds": 0, "label": "before" })).await);
    c.wait_status(&before, "completed").await;
    let old = set.data_port(0);
    let acked = set.ask_data(old, &["WAIT", "1", "5000"]).expect("WAIT");
    assert_eq!(acked, ["1"], "the replica has every write");

    set.kill_data_node(old);
    let killed = Instant::now();
    let (api_ready, worker_ready) = (format!("{}/readyz", api.base()), format!("{}/readyz", worker.base()));
    let mut unready = None;
    let deadline = killed + Duration::from_secs(30);
    loop {
        assert!(
            Instant::now() < deadline,
            "the pods were not ready again within 30 s:\n{}\n{}",
            api.log(),
            worker.log()
        );
        let (a, w) = (status(&api_ready).await, status(&worker_ready).await);
        if let Some((503, text)) = &a
            && unready.as_ref().is_none_or(|u: &String| !u.contains("Sentinel"))
        {
            // The first 503, or better one that says why.
            unready = Some(text.clone());
        }
        if unready.is_some() && matches!(a, Some((200, _))) && matches!(w, Some((200, _))) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ready_again = killed.elapsed();
    let unready = unready.expect("/readyz answered 503 while there was no primary");
    assert!(unready.contains("store unreachable"), "{unready}");
    assert!(unready.contains("no Redis primary for Sentinel master") && unready.contains("failover"), "{unready}");
    let new = set.wait_for_failover(old, Duration::from_secs(10)).expect("the Sentinels agree on the new primary");

    // The task from before the failover, and new work end to end (the API
    // pod waits for a plain call on the bus: its pub/sub followed too).
    let t = c.get_task(&before).await;
    assert_eq!(t["status"], "completed", "{t}");
    let after = task_id(&c.call_tool("slow_compute", json!({ "seconds": 0, "label": "after" })).await);
    let done = c.wait_status(&after, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "Completed after");
    let plain =
        Client::new(&api.url, json!({})).call_tool("slow_compute", json!({ "seconds": 0, "label": "plain" })).await;
    assert_eq!(plain["content"][0]["text"], "Completed plain", "{plain}");
    let served = killed.elapsed();
    eprintln!(
        "[sentinel pods] primary 127.0.0.1:{old} SIGKILLed, promoted 127.0.0.1:{new}: /readyz said {unready:?}; \
         both pods ready again after {ready_again:?}, new work done after {served:?}"
    );
    for pod in [&api, &worker] {
        let log = pod.log();
        assert!(log.contains("Redis primary moved"), "{} logs the move:\n{log}", pod.name);
        assert!(!log.contains(DATA_PASSWORD) && !log.contains(SENTINEL_PASSWORD), "{} logs no password", pod.name);
    }
}

/// Contradicting Redis settings stop a pod at start with a message naming them.
#[test]
fn contradicting_redis_settings_stop_the_pods_at_start() {
    let cases: [(&[&str], &str); 3] = [
        (&["--redis-url", "redis://127.0.0.1:1", "--redis-sentinels", "127.0.0.1:2"], "exclude each other"),
        (&["--redis-sentinels", "127.0.0.1:2", "--redis-sentinel-master", "m", "--redis-cluster"], "--redis-cluster"),
        (&["--redis-sentinels", "127.0.0.1:2"], "--redis-sentinel-master"),
    ];
    for bin in [worker_bin(), api_bin()] {
        for (args, says) in cases {
            let out = Command::new(&bin)
                .args(args)
                .args(["--listen", &format!("127.0.0.1:{}", free_port())])
                .env("PRESA_STATE_SECRET", "sentinel-test-secret-at-least-32-bytes-long")
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{} {args:?} started", bin.display());
            assert!(stderr.contains(says), "{} {args:?}: {stderr}", bin.display());
        }
    }
}

/// `--print-config` shows the Sentinel settings and hides both passwords.
#[test]
fn print_config_redacts_the_sentinel_passwords() {
    let out = Command::new(worker_bin())
        .args(["--redis-sentinels", "s1:26379,s2:26379", "--redis-sentinel-master", "m", "--print-config"])
        .env("PRESA_REDIS_PASSWORD", DATA_PASSWORD)
        .env("PRESA_REDIS_SENTINEL_PASSWORD", SENTINEL_PASSWORD)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("redis_sentinels = s1:26379,s2:26379"), "{text}");
    assert!(
        text.contains("redis_password = <redacted>") && text.contains("redis_sentinel_password = <redacted>"),
        "{text}"
    );
    assert!(!text.contains(DATA_PASSWORD) && !text.contains(SENTINEL_PASSWORD), "{text}");
}
