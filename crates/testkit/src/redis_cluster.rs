//! Local Redis Clusters: the 3-master one the cluster-mode tests share (the
//! store contract on a cluster, crash tests with pods in cluster mode), each
//! test under its own key prefix ([`cluster_urls`]), and private ones with
//! replicas for failover tests and the chaos run ([`TestCluster::spawn`]:
//! kill a shard's primary, watch its replica be promoted, restart the killed
//! node, which rejoins as a replica).
//!
//! `PRESA_TEST_REDIS_CLUSTER_URLS` set (comma-separated seed URLs): the
//! shared cluster is that one. Otherwise, and always for [`TestCluster`],
//! `redis-server --cluster-enabled yes` nodes are started in temporary
//! directories and joined with `redis-cli --cluster create`. Each node runs
//! under a small shell watchdog that stops it once the test process is gone,
//! since a shared static is never dropped (and a killed chaos run drops
//! nothing). With replicas, a node is counted failed after 1 s of silence
//! (`cluster-node-timeout`, like the Sentinel fixture's down-after) and any
//! replica may be promoted (`cluster-replica-validity-factor 0`), so a
//! killed primary is replaced within a few seconds.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::OnceLock,
    time::{Duration, Instant},
};

use crate::redis::{free_cluster_port, redis_server_binary, signal};

/// The seed URLs of the shared test cluster, comma-separated.
pub fn cluster_urls() -> String {
    static URLS: OnceLock<(String, &'static str)> = OnceLock::new();
    // Never dropped: its nodes end with the test process (their watchdogs).
    static SHARED: OnceLock<TestCluster> = OnceLock::new();
    let (urls, source) = URLS.get_or_init(|| {
        if let Ok(urls) = std::env::var("PRESA_TEST_REDIS_CLUSTER_URLS")
            && !urls.is_empty()
        {
            return (urls, "env cluster URLs");
        }
        (SHARED.get_or_init(|| TestCluster::spawn(3, 0)).urls(), "spawned Redis Cluster, 3 masters")
    });
    eprintln!("[testkit] redis source: {source} ({urls})");
    urls.clone()
}

/// One node: its port, its `redis-server` process id (`None` once killed)
/// and the watchdog shell it runs under.
#[derive(Debug)]
struct Node {
    port: u16,
    pid: Option<u32>,
    watchdog: Child,
}

/// A Redis Cluster of spawned nodes on loopback; a private one stops its
/// nodes and removes their directories when dropped.
#[derive(Debug)]
pub struct TestCluster {
    nodes: Vec<Node>,
    base: PathBuf,
    /// `cluster-node-timeout`, ms (`None`: Redis's default, 15 s).
    node_timeout_ms: Option<u64>,
}

impl TestCluster {
    /// `masters` primaries sharing the slots, each with `replicas` replicas
    /// (`redis-cli --cluster create --cluster-replicas`); returns once every
    /// node says `cluster_state:ok` and every replica is in sync.
    pub fn spawn(masters: usize, replicas: usize) -> TestCluster {
        let base = tempfile::tempdir().expect("temp dir").keep();
        let node_timeout_ms = (replicas > 0).then_some(1000);
        let mut cluster = TestCluster { nodes: Vec::new(), base, node_timeout_ms };
        for _ in 0..masters * (1 + replicas) {
            let port = free_cluster_port();
            let (watchdog, pid) = cluster.start_node(port);
            cluster.nodes.push(Node { port, pid: Some(pid), watchdog });
        }
        let nodes: Vec<String> = cluster.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&nodes)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli (Debian: apt-get install redis-tools)");
        assert!(out.status.success(), "redis-cli --cluster create failed: {}", String::from_utf8_lossy(&out.stdout));
        for node in &cluster.nodes {
            let port = node.port;
            wait_for(Duration::from_secs(20), || {
                cli(port, &["CLUSTER", "INFO"]).is_some_and(|o| o.contains("cluster_state:ok")).then_some(())
            })
            .unwrap_or_else(|| panic!("cluster node {port} never reached cluster_state:ok"));
        }
        wait_for(Duration::from_secs(30), || {
            let in_sync =
                |port| cli(port, &["INFO", "replication"]).is_some_and(|o| o.contains("master_link_status:up"));
            let replica_ports: Vec<u16> =
                cluster.nodes.iter().map(|n| n.port).filter(|&p| cluster.is_replica(p)).collect();
            (replica_ports.len() == masters * replicas && replica_ports.into_iter().all(in_sync)).then_some(())
        })
        .unwrap_or_else(|| panic!("the cluster's {} replicas did not all sync within 30 s", masters * replicas));
        if replicas > 0 {
            eprintln!(
                "[testkit] redis source: spawned Redis Cluster, {masters} masters with {replicas} replica(s) each ({})",
                cluster.urls()
            );
        }
        cluster
    }

    /// Every node's URL, comma-separated (the seeds for `--redis-url`).
    pub fn urls(&self) -> String {
        self.nodes.iter().map(|n| format!("redis://127.0.0.1:{}", n.port)).collect::<Vec<_>>().join(",")
    }

    /// The slot of `key` (`CLUSTER KEYSLOT`, asked of a running node).
    pub fn slot_of(&self, key: &str) -> u16 {
        self.live_ports()
            .find_map(|p| cli(p, &["CLUSTER", "KEYSLOT", key]).and_then(|o| o.trim().parse().ok()))
            .expect("a running cluster node answers CLUSTER KEYSLOT")
    }

    /// The primary serving `slot` as the first running node that answers
    /// sees it (a node marked failed serves nothing).
    pub fn primary_of_slot(&self, slot: u16) -> Option<u16> {
        self.live_ports().find_map(view).and_then(|nodes| owner(&nodes, slot))
    }

    /// The primary serving `key`'s slot (see [`primary_of_slot`](Self::primary_of_slot)).
    pub fn primary_of_key(&self, key: &str) -> Option<u16> {
        self.primary_of_slot(self.slot_of(key))
    }

    /// The primaries serving slots, as the first running node that answers sees them.
    pub fn primaries(&self) -> Vec<u16> {
        let nodes = self.live_ports().find_map(view).unwrap_or_default();
        nodes.iter().filter(|n| n.master && !n.failed && !n.slots.is_empty()).map(|n| n.port).collect()
    }

    /// SIGKILL the node on `port` (a primary, to force its replica's promotion).
    pub fn kill_node(&mut self, port: u16) {
        let node = self.nodes.iter_mut().find(|n| n.port == port).expect("a node on that port");
        if let Some(pid) = node.pid.take() {
            signal(pid, "KILL");
            // Its watchdog ends with it, and the port is free again.
            let _ = node.watchdog.wait();
        }
    }

    /// Start the killed node on `port` again, from its directory (its
    /// `nodes.conf`, no data): the cluster tells it its slots moved, and it
    /// becomes a replica of the node promoted in its place. Returns once it
    /// is one, in sync.
    pub fn restart_node(&mut self, port: u16) -> Result<(), String> {
        let (watchdog, pid) = self.start_node(port);
        let node = self.nodes.iter_mut().find(|n| n.port == port).expect("a node on that port");
        assert!(node.pid.is_none(), "node {port} is running");
        (node.watchdog, node.pid) = (watchdog, Some(pid));
        wait_for(Duration::from_secs(30), || {
            (self.is_replica(port)
                && cli(port, &["INFO", "replication"]).is_some_and(|o| o.contains("master_link_status:up")))
            .then_some(())
        })
        .ok_or_else(|| format!("restarted node {port} did not become an in-sync replica within 30 s"))
    }

    /// Wait until every running node names the same primary other than
    /// `old` for `slot`, and that node answers `ROLE` as master with
    /// `cluster_state:ok`; returns its port.
    pub fn wait_for_failover(&self, slot: u16, old: u16, timeout: Duration) -> Result<u16, String> {
        let deadline = Instant::now() + timeout;
        let mut last = Vec::new();
        while Instant::now() < deadline {
            let named: Vec<Option<u16>> = self.live_ports().map(|p| view(p).and_then(|v| owner(&v, slot))).collect();
            if let Some(Some(new)) = named.first()
                && *new != old
                && named.iter().all(|n| *n == Some(*new))
                && cli(*new, &["ROLE"]).is_some_and(|r| r.starts_with("master"))
                && cli(*new, &["CLUSTER", "INFO"]).is_some_and(|o| o.contains("cluster_state:ok"))
            {
                return Ok(*new);
            }
            last = named;
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("no failover of slot {slot} from port {old} within {timeout:?}; the nodes name {last:?}"))
    }

    fn live_ports(&self) -> impl Iterator<Item = u16> + '_ {
        self.nodes.iter().filter(|n| n.pid.is_some()).map(|n| n.port)
    }

    /// Whether the node on `port` says it is a replica.
    fn is_replica(&self, port: u16) -> bool {
        view(port).is_some_and(|nodes| nodes.iter().any(|n| n.myself && !n.master))
    }

    /// Start a node on `port` in its directory under its watchdog and wait
    /// until it answers; the watchdog and the node's process id.
    fn start_node(&self, port: u16) -> (Child, u32) {
        let dir = self.base.join(port.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        // The node runs until it exits or the test process (WATCH_PID) is gone.
        let script = r#"
            "$SERVER" "$@" & child=$!
            while kill -0 "$WATCH_PID" 2>/dev/null && kill -0 "$child" 2>/dev/null; do sleep 0.5; done
            kill "$child" 2>/dev/null; wait "$child"
            # A node that died on its own keeps its folder (node.log) for the test's message.
            kill -0 "$WATCH_PID" 2>/dev/null || { rm -rf "$NODE_DIR"; rmdir "$BASE_DIR" 2>/dev/null; }
        "#;
        let mut node = Command::new("sh");
        node.arg("-c")
            .arg(script)
            .arg("sh")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--dir", &dir.to_string_lossy()]);
        if let Some(ms) = self.node_timeout_ms {
            node.args(["--cluster-node-timeout", &ms.to_string(), "--cluster-replica-validity-factor", "0"]);
        }
        let watchdog = node
            .env("SERVER", redis_server_binary())
            .env("WATCH_PID", std::process::id().to_string())
            .env("NODE_DIR", &dir)
            .env("BASE_DIR", &self.base)
            .current_dir(&dir)
            .stdout(log_file(&dir))
            .stderr(log_file(&dir))
            .spawn()
            .expect("spawn a cluster node");
        let pid = wait_for(Duration::from_secs(10), || {
            let info = cli(port, &["INFO", "server"])?;
            info.lines().find_map(|l| l.strip_prefix("process_id:")).and_then(|p| p.trim().parse().ok())
        });
        let Some(pid) = pid else {
            let log = std::fs::read_to_string(dir.join("node.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            panic!(
                "cluster node {port} did not start; it said: {}",
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            )
        };
        (watchdog, pid)
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(pid) = node.pid.take() {
                // Not `signal`: a node that already died must not panic a drop.
                let _ = Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
                let _ = node.watchdog.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// One line of `CLUSTER NODES`.
#[derive(Debug)]
struct Seen {
    port: u16,
    myself: bool,
    master: bool,
    failed: bool,
    slots: Vec<(u16, u16)>,
}

/// The cluster as the node on `port` sees it (`CLUSTER NODES`).
fn view(port: u16) -> Option<Vec<Seen>> {
    let text = cli(port, &["CLUSTER", "NODES"])?;
    let nodes = text.lines().filter_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // <id> <ip:port@bus> <flags> <master> <ping> <pong> <epoch> <link> <slot>...
        let addr = f.get(1)?.split('@').next()?;
        let port = addr.rsplit(':').next()?.parse().ok()?;
        let flags: Vec<&str> = f.get(2)?.split(',').collect();
        let slots = f.iter().skip(8).filter(|s| !s.starts_with('[')).filter_map(|s| {
            let (a, b) = s.split_once('-').unwrap_or((s, s));
            Some((a.parse().ok()?, b.parse().ok()?))
        });
        Some(Seen {
            port,
            myself: flags.contains(&"myself"),
            master: flags.contains(&"master"),
            failed: flags.iter().any(|f| *f == "fail" || *f == "noaddr"),
            slots: slots.collect(),
        })
    });
    Some(nodes.collect())
}

/// The port of the primary serving `slot` in `nodes`, unless it is marked failed.
fn owner(nodes: &[Seen], slot: u16) -> Option<u16> {
    let n = nodes.iter().find(|n| n.master && n.slots.iter().any(|&(a, b)| (a..=b).contains(&slot)))?;
    (!n.failed).then_some(n.port)
}

/// The node's output (its log, and a refused configuration) in its own folder, for the
/// message when it does not start.
fn log_file(dir: &Path) -> Stdio {
    let file = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("node.log"));
    file.map_or_else(|_| Stdio::null(), Stdio::from)
}

fn cli(port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new("redis-cli").args(["-p", &port.to_string()]).args(args).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.success() && !text.starts_with("ERR") && !text.starts_with("Could not connect")).then_some(text)
}

/// Poll `ok` until it gives a value, `limit` at most.
fn wait_for<T>(limit: Duration, mut ok: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(v) = ok() {
            return Some(v);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}
