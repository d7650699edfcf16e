//! `rediss://` against a real TLS `redis-server`: a test CA and server
//! certificate made with the `openssl` CLI, the server started with
//! `--tls-port`, and the store trusting the CA through `tls_ca_file`. Every
//! connection kind goes over TLS: the command connection (create, get), the
//! blocking-read pool (a waiting claim) and the pub/sub hub (a watch).
//!
//! If the local `redis-server` was built without TLS the round trip is
//! skipped with a loud message (and only then); a missing `openssl` fails.

mod common;

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use common::{free_port, redis_server_binary, unique_prefix};
use futures::StreamExt;
use presa_store::{Cas, CreateLimits, NewTask, Scope, TaskStore, WorkQueue, util::now_ms};
use presa_store_redis::{RedisConfig, RedisStore, RedisStoreError};
use presa_tasks::{Event, Work, apply};

const NO_LIMITS: CreateLimits =
    CreateLimits { max_active_per_scope: None, max_bytes_per_scope: None, max_queued_per_partition: None };

/// A spawned `redis-server` listening on a plain port (for readiness) and a TLS port.
struct TlsRedis {
    child: Child,
    tls_port: u16,
    ca: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl CLI makes the test certificates (Debian/Ubuntu: apt-get install openssl)");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A CA, and a server certificate for 127.0.0.1 / localhost signed by it.
fn make_certs(dir: &Path) {
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    let ca = ["req", "-x509", "-days", "2", "-subj", "/CN=presa test CA", "-keyout", "ca.key", "-out", "ca.crt"];
    openssl(dir, &[&ca[..], &ec[..]].concat());
    let csr = ["req", "-subj", "/CN=localhost", "-keyout", "server.key", "-out", "server.csr"];
    openssl(dir, &[&csr[..], &ec[..]].concat());
    std::fs::write(dir.join("san.cnf"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n").unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.cnf",
            "-out",
            "server.crt",
        ],
    );
}

/// Start the TLS server; `None` (after a loud message) only when this
/// `redis-server` has no TLS support.
fn start_tls_redis() -> Option<TlsRedis> {
    let dir = tempfile::tempdir().expect("temp dir");
    make_certs(dir.path());
    let (port, tls_port) = (free_port(), free_port());
    let log = dir.path().join("redis.log");
    let mut child = Command::new(redis_server_binary())
        .current_dir(dir.path())
        .args(["--port", &port.to_string(), "--tls-port", &tls_port.to_string(), "--bind", "127.0.0.1"])
        .args(["--tls-cert-file", "server.crt", "--tls-key-file", "server.key", "--tls-ca-cert-file", "ca.crt"])
        .args(["--tls-auth-clients", "no", "--save", "", "--appendonly", "no", "--logfile", "redis.log"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn redis-server");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let out = std::fs::read_to_string(&log).unwrap_or_default();
            if out.contains("tls-port") || out.contains("TLS") {
                eprintln!(
                    "\n!!! SKIPPED rediss_round_trip_against_a_tls_redis_server: {} has no TLS support \
                     ({status}):\n{out}\n!!! Build Redis with BUILD_TLS=yes, or use a distribution package \
                     (Debian's redis-server has TLS), to run this test.\n",
                    redis_server_binary()
                );
                return None;
            }
            panic!("redis-server with TLS exited at start ({status}):\n{out}");
        }
        if presa_testkit::redis::ping(port) {
            break;
        }
        assert!(Instant::now() < deadline, "redis-server with TLS did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(TlsRedis { child, tls_port, ca: dir.path().join("ca.crt"), _dir: dir })
}

fn new_task() -> NewTask {
    NewTask {
        scope: Scope::anonymous(),
        work: Work::default(),
        ttl_ms: Some(60_000),
        poll_interval_ms: None,
        status_message: None,
    }
}

fn tls_config(server: &TlsRedis) -> RedisConfig {
    RedisConfig::new(format!("rediss://127.0.0.1:{}", server.tls_port))
        .with_prefix(unique_prefix())
        .with_partitions(2)
        .with_op_timeout(Duration::from_secs(2))
}

/// Every kind of connection of a store over TLS carries its traffic: the
/// command connection (create, get, a claim, a write), the pub/sub hub (the
/// claim's snapshot) and the blocking pool (a waiting claim returns empty).
async fn every_connection_kind_works(store: &RedisStore) {
    let task = store.create(new_task(), NO_LIMITS).await.unwrap();
    assert_eq!(store.get(&Scope::anonymous(), &task.id).await.unwrap(), Some(task.clone()));
    let mut watch = store.watch(std::slice::from_ref(&task.id)).await.unwrap();
    let claims = store.claim("w", 1, Duration::from_secs(30), Duration::from_secs(2)).await.unwrap();
    assert_eq!(claims.len(), 1);
    let seen = tokio::time::timeout(Duration::from_secs(5), watch.next()).await.unwrap().unwrap();
    assert_eq!(seen, claims[0].task, "the claim's snapshot, over the TLS subscriber connection");
    let done = apply(&claims[0].task, &Event::Cancel, now_ms()).unwrap().unwrap();
    assert!(matches!(store.transition(&done, claims[0].writer()).await.unwrap(), Cas::Applied(_)));
    store.remove_work(&claims[0]).await.unwrap();
    let started = Instant::now();
    let none = store.claim("w", 1, Duration::from_secs(30), Duration::from_millis(300)).await.unwrap();
    assert!(none.is_empty() && started.elapsed() >= Duration::from_millis(150), "a waiting claim on the TLS pool");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_round_trip_against_a_tls_redis_server() {
    let Some(server) = start_tls_redis() else { return };
    let store = RedisStore::connect(tls_config(&server).with_tls_ca_file(Some(server.ca.clone())))
        .await
        .expect("connect over TLS, trusting the test CA");
    store.ping().await.unwrap();
    every_connection_kind_works(&store).await;
    let second = store.create(new_task(), NO_LIMITS).await.unwrap();
    let stats = store.work_stats().await.unwrap();
    assert_eq!(stats.iter().map(|p| p.queued).sum::<u64>(), 1, "{stats:?}");
    assert_eq!(store.load(&second.id).await.unwrap(), Some(second));

    // The certificate really is checked: the system roots do not know the test CA.
    let err = RedisStore::connect(tls_config(&server)).await.expect_err("an unknown issuer is refused");
    assert!(err.to_string().to_lowercase().contains("certificate"), "{err}");
}

#[tokio::test]
async fn rediss_is_built_in_and_fails_like_any_unreachable_server() {
    // Before TLS was compiled in, this failed at once with "feature not enabled".
    let op = Duration::from_millis(500);
    let cfg = RedisConfig::new(format!("rediss://127.0.0.1:{}", free_port())).with_op_timeout(op);
    let started = Instant::now();
    let err = RedisStore::connect(cfg).await.expect_err("nobody listens");
    assert!(started.elapsed() < op * 4, "fails fast: {:?}", started.elapsed());
    let text = err.to_string();
    assert!(!text.contains("feature") && !text.to_lowercase().contains("not enabled"), "{text}");
    assert!(
        matches!(&err, RedisStoreError::Redis(e) if e.is_connection_refusal() || e.is_io_error())
            || matches!(err, RedisStoreError::Timeout(_)),
        "a connect error: {err:?}"
    );
    assert!(err.is_retryable());
}

#[tokio::test]
async fn a_ca_file_needs_rediss_and_must_be_readable() {
    let plain = RedisConfig::new("redis://127.0.0.1:1").with_tls_ca_file(Some("/dev/null".into()));
    let err = RedisStore::connect(plain).await.unwrap_err();
    assert!(matches!(&err, RedisStoreError::Config(m) if m.contains("rediss://")), "{err}");
    let missing = RedisConfig::new("rediss://127.0.0.1:1").with_tls_ca_file(Some("/nonexistent/ca.pem".into()));
    let err = RedisStore::connect(missing).await.unwrap_err();
    assert!(matches!(&err, RedisStoreError::Config(m) if m.contains("/nonexistent/ca.pem")), "{err}");
    assert!(!err.is_retryable());
}

/// A Sentinel with a TLS port, monitoring the TLS server over TLS
/// (`tls-replication yes`); `None` when this `redis-server` has no TLS.
struct TlsSentinel {
    child: Child,
    tls_port: u16,
}

impl Drop for TlsSentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_tls_sentinel(server: &TlsRedis) -> TlsSentinel {
    let dir = server.ca.parent().expect("the certificates' folder").to_path_buf();
    let (port, tls_port) = (free_port(), free_port());
    let conf = dir.join("sentinel.conf");
    let text = format!(
        "port {port}\ntls-port {tls_port}\nbind 127.0.0.1\ndir {}\n\
         tls-cert-file server.crt\ntls-key-file server.key\ntls-ca-cert-file ca.crt\n\
         tls-auth-clients no\ntls-replication yes\nlogfile sentinel.log\n\
         sentinel monitor tls-master 127.0.0.1 {} 1\n",
        dir.display(),
        server.tls_port
    );
    std::fs::write(&conf, text).unwrap();
    let mut child = Command::new(redis_server_binary())
        .arg(&conf)
        .arg("--sentinel")
        .current_dir(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn redis-server --sentinel");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !presa_testkit::redis::ping(port) {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "the TLS Sentinel exited ({status}):\n{}",
                std::fs::read_to_string(dir.join("sentinel.log")).unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "the TLS Sentinel did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    TlsSentinel { child, tls_port }
}

/// `--redis-sentinel-tls`: the Sentinel and the primary it names are both
/// reached over TLS, trusting the CA file; every connection kind works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_over_tls_names_a_tls_primary() {
    let Some(server) = start_tls_redis() else { return };
    let sentinel = start_tls_sentinel(&server);
    let cfg = |tls: bool, ca: bool| {
        let s = presa_store_redis::SentinelConfig {
            tls,
            ..presa_store_redis::SentinelConfig::new(&format!("127.0.0.1:{}", sentinel.tls_port), "tls-master")
        };
        RedisConfig::sentinel(s)
            .with_prefix(unique_prefix())
            .with_partitions(2)
            .with_op_timeout(Duration::from_secs(2))
            .with_tls_ca_file(ca.then(|| server.ca.clone()))
    };
    let store = RedisStore::connect(cfg(true, true)).await.expect("Sentinel and primary over TLS");
    every_connection_kind_works(&store).await;

    // The certificate is checked (the system roots do not know the test CA),
    // and a plain-text client gets no answer from a TLS port.
    let err = RedisStore::connect(cfg(true, false)).await.expect_err("an unknown issuer is refused");
    assert!(err.to_string().to_lowercase().contains("certificate"), "{err}");
    assert!(RedisStore::connect(cfg(false, false)).await.is_err(), "plain text to a TLS Sentinel");
}
