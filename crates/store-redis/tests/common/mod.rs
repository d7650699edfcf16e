//! Test harness: a real Redis for the integration tests.
//!
//! `PRESA_TEST_REDIS_URL` set: every test uses that server (each under its own
//! random key prefix, so tests run in parallel without FLUSHDB). Otherwise each
//! test spawns its own `redis-server` on a free loopback port in a temporary
//! directory (no persistence), killed when the guard drops. Without
//! `redis-server` on PATH the test fails and says how to get one.

#![allow(dead_code, unreachable_pub)]

pub mod cluster;

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    path::Path,
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use presa_store::{Cas, Claim, CreateLimits, NewTask, Scope, StoreError, Task, TaskId, TaskStore, TaskStream, Writer};
use presa_store_redis::{RedisConfig, RedisStore};

/// A Redis server for one test (or the shared one from `PRESA_TEST_REDIS_URL`).
#[derive(Debug)]
pub struct TestRedis {
    url: String,
    port: u16,
    child: Option<Child>,
    _dir: Option<tempfile::TempDir>,
}

impl TestRedis {
    /// The server to test against.
    pub fn start() -> TestRedis {
        if let Ok(url) = std::env::var("PRESA_TEST_REDIS_URL")
            && !url.is_empty()
        {
            return TestRedis { port: 0, url, child: None, _dir: None };
        }
        Self::spawn()
    }

    /// Always a private, spawned server (for tests that stop or kill it).
    pub fn spawn() -> TestRedis {
        let mut last_error = String::new();
        for _ in 0..5 {
            let port = free_port();
            let dir = tempfile::tempdir().expect("temp dir");
            match spawn_server(dir.path(), port, &[]) {
                Ok(child) => {
                    return TestRedis {
                        url: format!("redis://127.0.0.1:{port}"),
                        port,
                        child: Some(child),
                        _dir: Some(dir),
                    };
                }
                Err(e) => last_error = e,
            }
        }
        panic!("could not start redis-server: {last_error}");
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The spawned server's process id (None for an external server).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Send a signal (`STOP`, `CONT`, …) to the spawned server.
    pub fn signal(&self, sig: &str) {
        let pid = self.pid().expect("only a spawned server can be signalled");
        let ok = Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status().expect("kill").success();
        assert!(ok, "kill -{sig} {pid}");
    }

    /// Stop the spawned server for good.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kill the spawned server and start an empty one on the same port.
    pub fn restart(&mut self) {
        self.kill();
        let dir = self._dir.as_ref().expect("a spawned server").path();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match spawn_server(dir, self.port, &[]) {
                Ok(child) => {
                    self.child = Some(child);
                    return;
                }
                // The port may linger for a moment after the kill.
                Err(e) if Instant::now() > deadline => panic!("restart: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for TestRedis {
    fn drop(&mut self) {
        if self.pid().is_some() {
            // A stopped server ignores SIGKILL until continued on some kernels.
            let _ = Command::new("kill").arg("-CONT").arg(self.pid().unwrap().to_string()).status();
        }
        self.kill();
    }
}

/// Where `redis-server` is, or a failure saying how to get it.
pub fn redis_server_binary() -> String {
    let found = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|p| p.join("redis-server")).find(|p| p.is_file()));
    match found {
        Some(p) => p.to_string_lossy().into_owned(),
        None => panic!(
            "redis-server is not on PATH. Install it (Debian/Ubuntu: `apt-get install redis-server`, \
             Redis 7.0 or newer) or point the tests at a running server with \
             PRESA_TEST_REDIS_URL=redis://127.0.0.1:6379"
        ),
    }
}

/// Start `redis-server` on `port` in `dir` and wait until it answers PING.
pub fn spawn_server(dir: &Path, port: u16, extra: &[&str]) -> Result<Child, String> {
    let mut child = Command::new(redis_server_binary())
        .current_dir(dir)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .args(["--dir", &dir.to_string_lossy()])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("spawn redis-server: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("redis-server exited at start: {status}"));
        }
        if ping(port) {
            return Ok(child);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    Err(format!("redis-server on port {port} did not answer PING"))
}

fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// A key prefix no other test (or earlier run) uses.
pub fn unique_prefix() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("t{}x{}x{}", std::process::id(), nanos % 1_000_000_000_000, N.fetch_add(1, Ordering::Relaxed))
}

/// A config for `redis` under a fresh prefix, 4 partitions, 1 s timeout.
pub fn config(redis: &TestRedis) -> RedisConfig {
    RedisConfig::new(redis.url())
        .with_prefix(unique_prefix())
        .with_partitions(4)
        .with_op_timeout(Duration::from_secs(1))
}

/// A store that owns its Redis server, so a `dyn TaskStore` keeps it alive.
#[derive(Debug)]
pub struct Guarded {
    pub store: RedisStore,
    pub redis: Arc<TestRedis>,
}

#[async_trait::async_trait]
impl TaskStore for Guarded {
    async fn create(&self, new: NewTask, limits: CreateLimits) -> Result<Task, StoreError> {
        self.store.create(new, limits).await
    }
    async fn get(&self, scope: &Scope, id: &TaskId) -> Result<Option<Task>, StoreError> {
        self.store.get(scope, id).await
    }
    async fn load(&self, id: &TaskId) -> Result<Option<Task>, StoreError> {
        self.store.load(id).await
    }
    async fn transition(&self, next: &Task, writer: Writer) -> Result<Cas, StoreError> {
        self.store.transition(next, writer).await
    }
    async fn claim(&self, worker: &str, max: usize, lease: Duration, wait: Duration) -> Result<Vec<Claim>, StoreError> {
        self.store.claim(worker, max, lease, wait).await
    }
    async fn renew(&self, claim: &Claim, lease: Duration) -> Result<bool, StoreError> {
        self.store.renew(claim, lease).await
    }
    async fn finish(&self, claim: &Claim) -> Result<(), StoreError> {
        self.store.finish(claim).await
    }
    async fn release(&self, claim: &Claim) -> Result<(), StoreError> {
        self.store.release(claim).await
    }
    async fn watch(&self, ids: &[TaskId]) -> Result<TaskStream, StoreError> {
        self.store.watch(ids).await
    }
}

/// A fresh, isolated store on a fresh (or the shared) Redis.
pub async fn make_store() -> Arc<dyn TaskStore> {
    let redis = Arc::new(TestRedis::start());
    let store = RedisStore::connect(config(&redis)).await.expect("connect to the test Redis");
    Arc::new(Guarded { store, redis })
}

/// A fresh, isolated store on the shared test cluster (cluster mode).
pub async fn make_cluster_store() -> Arc<dyn TaskStore> {
    let cfg = RedisConfig::new(cluster::cluster_urls())
        .with_cluster(true)
        .with_prefix(unique_prefix())
        .with_partitions(8)
        .with_op_timeout(Duration::from_secs(2));
    Arc::new(RedisStore::connect(cfg).await.expect("connect to the test cluster"))
}

/// A raw connection for inspecting keys.
pub async fn raw(redis: &TestRedis) -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis.url()).unwrap().get_multiplexed_async_connection().await.unwrap()
}
