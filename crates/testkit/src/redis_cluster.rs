//! A local 3-master Redis Cluster for the cluster-mode tests (the store
//! contract on a cluster, crash tests with pods in cluster mode), shared by
//! every test of a binary (each under its own key prefix).
//!
//! `PRESA_TEST_REDIS_CLUSTER_URLS` set (comma-separated seed URLs): use that
//! cluster. Otherwise start three `redis-server --cluster-enabled yes` in
//! temporary directories and join them with `redis-cli --cluster create`.
//! The nodes are started under a small shell watchdog that stops each node
//! once the test process is gone, since a shared static is never dropped.

use std::{
    process::{Child, Command, Stdio},
    sync::{Mutex, OnceLock},
    time::{Duration, Instant},
};

use crate::redis::{free_cluster_port, redis_server_binary};

/// The seed URLs of the test cluster, comma-separated.
pub fn cluster_urls() -> String {
    static URLS: OnceLock<(String, &'static str)> = OnceLock::new();
    let (urls, source) = URLS.get_or_init(|| {
        if let Ok(urls) = std::env::var("PRESA_TEST_REDIS_CLUSTER_URLS")
            && !urls.is_empty()
        {
            return (urls, "env cluster URLs");
        }
        (start_cluster(), "spawned Redis Cluster, 3 masters")
    });
    eprintln!("[testkit] redis source: {source} ({urls})");
    urls.clone()
}

/// The node watchdogs, kept (never waited on: they end with the test process).
static NODES: Mutex<Vec<Child>> = Mutex::new(Vec::new());

fn start_cluster() -> String {
    let server = redis_server_binary();
    let base = tempfile::tempdir().expect("temp dir").keep();
    let ports: Vec<u16> = (0..3).map(|_| free_cluster_port()).collect();
    for port in &ports {
        let dir = base.join(port.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        // The node runs until it exits or the test process (WATCH_PID) is gone.
        let script = r#"
            "$SERVER" "$@" & child=$!
            while kill -0 "$WATCH_PID" 2>/dev/null && kill -0 "$child" 2>/dev/null; do sleep 0.5; done
            kill "$child" 2>/dev/null; wait "$child"
            # A node that died on its own keeps its folder (node.log) for the test's message.
            kill -0 "$WATCH_PID" 2>/dev/null || { rm -rf "$NODE_DIR"; rmdir "$BASE_DIR" 2>/dev/null; }
        "#;
        let node = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("sh")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--dir", &dir.to_string_lossy()])
            .env("SERVER", &server)
            .env("WATCH_PID", std::process::id().to_string())
            .env("NODE_DIR", &dir)
            .env("BASE_DIR", &base)
            .current_dir(&dir)
            .stdout(log_file(&dir))
            .stderr(log_file(&dir))
            .spawn()
            .expect("spawn a cluster node");
        NODES.lock().unwrap().push(node);
    }
    for port in &ports {
        wait_for(Duration::from_secs(10), || cli(*port, &["PING"]).is_some_and(|o| o.contains("PONG"))).unwrap_or_else(
            || {
                let log = std::fs::read_to_string(base.join(port.to_string()).join("node.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                panic!(
                    "cluster node {port} did not start; it said: {}",
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                )
            },
        );
    }
    let nodes: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let out = Command::new("redis-cli")
        .arg("--cluster")
        .arg("create")
        .args(&nodes)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .expect("redis-cli (Debian: apt-get install redis-tools)");
    assert!(out.status.success(), "redis-cli --cluster create failed: {}", String::from_utf8_lossy(&out.stdout));
    for port in &ports {
        wait_for(Duration::from_secs(20), || {
            cli(*port, &["CLUSTER", "INFO"]).is_some_and(|o| o.contains("cluster_state:ok"))
        })
        .unwrap_or_else(|| panic!("cluster node {port} never reached cluster_state:ok"));
    }
    ports.iter().map(|p| format!("redis://127.0.0.1:{p}")).collect::<Vec<_>>().join(",")
}

/// The node's output (its log, and a refused configuration) in its own folder, for the
/// message when it does not start.
fn log_file(dir: &std::path::Path) -> Stdio {
    let file = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("node.log"));
    file.map_or_else(|_| Stdio::null(), Stdio::from)
}

fn cli(port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new("redis-cli").args(["-p", &port.to_string()]).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn wait_for(limit: Duration, mut ok: impl FnMut() -> bool) -> Option<()> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if ok() {
            return Some(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}
