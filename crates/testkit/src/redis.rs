//! A real Redis for one test.
//!
//! [`TestRedis::start`] picks, in order: `PRESA_TEST_REDIS_URL` (a running
//! server, shared: give each test its own key prefix); a testcontainers
//! `redis:7.2` when a Docker engine answers; a `redis-server` spawned on a free
//! loopback port in a temporary directory. With none of them the test fails
//! and says how to get one: never a silent skip. [`TestRedis::spawn`] always
//! spawns a private server, for tests that stop, kill or restart it.
//!
//! Each test logs (stderr) which source it got: `env URL`, `container` or
//! `spawned`. `PRESA_TEST_REDIS=container` makes [`TestRedis::start`] use a
//! container or fail: no `PRESA_TEST_REDIS_URL`, no fallback to a spawned server
//! (CI sets it so the suites provably run on testcontainers).

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    path::Path,
    process::{Child, Command, Stdio},
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use testcontainers_modules::{
    redis::Redis,
    testcontainers::{ContainerAsync, ImageExt, core::ContainerPort, runners::AsyncRunner},
};

/// A Redis server for one test (or the shared one from `PRESA_TEST_REDIS_URL`).
#[derive(Debug)]
pub struct TestRedis {
    url: String,
    port: u16,
    child: Option<Child>,
    /// Kept alive for the test; dropping it stops the container.
    _container: Option<ContainerAsync<Redis>>,
    dir: Option<tempfile::TempDir>,
    /// Extra `redis-server` arguments of a spawned server, kept for restarts.
    extra: Vec<String>,
}

/// Whether `PRESA_TEST_REDIS=container` asks for testcontainers and nothing else.
fn container_required() -> bool {
    std::env::var("PRESA_TEST_REDIS").is_ok_and(|v| v == "container")
}

/// Whether a Docker engine is likely to answer (a socket or `DOCKER_HOST`).
/// A `docker` client on PATH alone does not mean an engine exists.
fn docker_engine_present() -> bool {
    std::env::var_os("DOCKER_HOST").is_some() || Path::new("/var/run/docker.sock").exists()
}

impl TestRedis {
    /// The server to test against (see the module docs for the order).
    pub async fn start() -> TestRedis {
        let container_only = container_required();
        if !container_only
            && let Ok(url) = std::env::var("PRESA_TEST_REDIS_URL")
            && !url.is_empty()
        {
            eprintln!("[testkit] redis source: env URL ({url})");
            return TestRedis { port: 0, url, child: None, _container: None, dir: None, extra: Vec::new() };
        }
        if docker_engine_present() {
            // An explicit host port: podman's Docker API reports published ports
            // with an empty HostIp, which testcontainers' get_host_port_ipv4 skips.
            let port = free_port();
            match Redis::default().with_tag("7.2").with_mapped_port(port, ContainerPort::Tcp(6379)).start().await {
                Ok(container) => {
                    let url = format!("redis://127.0.0.1:{port}");
                    eprintln!("[testkit] redis source: container redis:7.2 {} ({url})", container.id());
                    return TestRedis {
                        port,
                        url,
                        child: None,
                        _container: Some(container),
                        dir: None,
                        extra: Vec::new(),
                    };
                }
                Err(e) if container_only => {
                    panic!("PRESA_TEST_REDIS=container: testcontainers could not start redis:7.2 ({e})")
                }
                Err(e) => eprintln!("testcontainers could not start redis:7.2 ({e}); spawning redis-server instead"),
            }
        } else if container_only {
            panic!(
                "PRESA_TEST_REDIS=container but no Docker engine: set DOCKER_HOST (e.g. the podman socket .ci/podman-redis.sh starts) or start Docker"
            );
        }
        Self::spawn()
    }

    /// Always a private, spawned `redis-server` (for tests that stop or kill it).
    pub fn spawn() -> TestRedis {
        Self::spawn_with(&[])
    }

    /// A private `redis-server` with `extra` arguments (kept across
    /// [`restart`](Self::restart)s), e.g. AOF persistence:
    /// `["--appendonly", "yes", "--appendfsync", "everysec"]`.
    pub fn spawn_with(extra: &[&str]) -> TestRedis {
        let mut last_error = String::new();
        for _ in 0..5 {
            let port = free_port();
            let dir = tempfile::tempdir().expect("temp dir");
            match spawn_server(dir.path(), port, extra) {
                Ok(child) => {
                    eprintln!("[testkit] redis source: spawned redis-server (127.0.0.1:{port})");
                    return TestRedis {
                        url: format!("redis://127.0.0.1:{port}"),
                        port,
                        child: Some(child),
                        _container: None,
                        dir: Some(dir),
                        extra: extra.iter().map(ToString::to_string).collect(),
                    };
                }
                Err(e) => last_error = e,
            }
        }
        panic!("could not start redis-server: {last_error}");
    }

    /// The URL to connect to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The port (0 for an external server).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The spawned server's process id (None for an external server or a container).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Send a signal (`STOP`, `CONT`, …) to the spawned server.
    pub fn signal(&self, sig: &str) {
        let pid = self.pid().expect("only a spawned server can be signalled");
        signal(pid, sig);
    }

    /// Run `redis-cli` against the spawned server (as the default user);
    /// its output, trimmed. Panics when it cannot run or reports an error.
    pub fn cli(&self, args: &[&str]) -> String {
        assert!(self.child.is_some() || self.dir.is_some(), "only a spawned server has redis-cli access here");
        let cli = redis_server_binary().replace("redis-server", "redis-cli");
        let out = Command::new(&cli)
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("running {cli}: {e}"));
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(out.status.success() && !text.starts_with("ERR"), "redis-cli {args:?}: {text}");
        text
    }

    /// Stop the spawned server for good.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGKILL the spawned server and start it again on the same port and
    /// directory: empty, or with what its persistence (see
    /// [`spawn_with`](Self::spawn_with)) had written.
    pub fn restart(&mut self) {
        self.kill();
        let dir = self.dir.as_ref().expect("a spawned server").path().to_path_buf();
        let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match spawn_server(&dir, self.port, &extra) {
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
}

impl Drop for TestRedis {
    fn drop(&mut self) {
        if let Some(pid) = self.pid() {
            // A stopped server must be continued before it can be killed cleanly.
            let _ = Command::new("kill").arg("-CONT").arg(pid.to_string()).status();
        }
        self.kill();
    }
}

/// Send `kill -<sig> <pid>`; panics if it fails.
pub fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status().expect("kill").success();
    assert!(ok, "kill -{sig} {pid}");
}

/// Where `redis-server` is, or a failure saying how to get it.
pub fn redis_server_binary() -> String {
    let found = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|p| p.join("redis-server")).find(|p| p.is_file()));
    match found {
        Some(p) => p.to_string_lossy().into_owned(),
        None => panic!(
            "no Redis for the tests: no Docker engine for testcontainers and no redis-server on PATH. \
             Install it (Debian/Ubuntu: `apt-get install redis-server`, Redis 7.0 or newer), start a \
             Docker engine, or point the tests at a running server with \
             PRESA_TEST_REDIS_URL=redis://127.0.0.1:6379"
        ),
    }
}

/// Start `redis-server` on `port` in `dir` (plus `extra` arguments) and wait until it answers PING.
pub fn spawn_server(dir: &Path, port: u16, extra: &[&str]) -> Result<Child, String> {
    let mut command = Command::new(redis_server_binary());
    command
        .current_dir(dir)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .args(["--dir", &dir.to_string_lossy()])
        .args(extra);
    spawn_until(command, port, || ping(port))
}

/// Spawn `command` (a `redis-server`) with its output discarded and wait,
/// 10 s at most, until `ready` (it answers on `port`); killed when it does not.
pub(crate) fn spawn_until(mut command: Command, port: u16, ready: impl Fn() -> bool) -> Result<Child, String> {
    let mut child =
        command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().map_err(|e| format!("spawn redis-server: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("redis-server {:?} exited at start: {status}", command.get_args().collect::<Vec<_>>()));
        }
        if ready() {
            return Ok(child);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    Err(format!("redis-server on port {port} did not answer PING"))
}

/// Whether something on `127.0.0.1:port` answers `PING` with `+PONG`.
pub fn ping(port: u16) -> bool {
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

/// A free TCP port on loopback (bound then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// The highest port a Redis Cluster node can listen on: its cluster bus listens on
/// the port + 10,000, and above this Redis refuses to start ("Redis port number too high").
pub const MAX_CLUSTER_PORT: u16 = 65_535 - 10_000;

/// A free loopback port for a Redis Cluster node: at most [`MAX_CLUSTER_PORT`], with
/// its bus port (the port + 10,000) free too. Ephemeral ports (the OS's pick, as
/// [`free_port`] takes) are often above the limit, so pick from below it.
pub fn free_cluster_port() -> u16 {
    use std::sync::atomic::AtomicU32;
    // Spread callers (threads and processes) over the range; skip taken pairs.
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOW: u32 = 20_000;
    let span = u32::from(MAX_CLUSTER_PORT) - LOW;
    let seed = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..span {
        let offset = (seed + NEXT.fetch_add(1, Ordering::Relaxed) % span) % span;
        let port = u16::try_from(LOW + offset).expect("below MAX_CLUSTER_PORT");
        let pair = (TcpListener::bind(("127.0.0.1", port)), TcpListener::bind(("127.0.0.1", port + 10_000)));
        if let (Ok(_), Ok(_)) = pair {
            return port;
        }
    }
    panic!("no free port pair (p, p + 10000) below {MAX_CLUSTER_PORT} for a Redis Cluster node")
}

/// A key prefix no other test (or earlier run against a shared server) uses.
pub fn unique_prefix() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("t{}x{}x{}", std::process::id(), nanos % 1_000_000_000_000, N.fetch_add(1, Ordering::Relaxed))
}
