//! A watched task keeps being followed when its notification stream breaks:
//! Redis, two `presa-api` pods and a worker, the CLI talking through a small
//! failover proxy (what a load balancer does: new connections go to the
//! first pod that accepts them). Pod A, which holds the CLI's
//! `subscriptions/listen` stream, is SIGKILLed mid-task; the CLI must notice,
//! re-subscribe (through the proxy, now to pod B) or poll, and still print
//! the result.

mod common;

use std::{
    net::SocketAddr,
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use common::{api_bin, command, detached, worker_bin};
use presa_testkit::{Pod, TestRedis, free_port, redis::unique_prefix};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, BufReader},
    net::{TcpListener, TcpStream},
};

/// Connections the proxy sent to each backend.
#[derive(Debug, Default)]
struct Counts {
    a: AtomicUsize,
    b: AtomicUsize,
}

/// A TCP proxy on loopback: each connection goes to `a`, or to `b` when `a` refuses.
async fn failover_proxy(a: SocketAddr, b: SocketAddr, counts: Arc<Counts>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let counts = counts.clone();
            tokio::spawn(async move {
                let mut upstream = match TcpStream::connect(a).await {
                    Ok(s) => {
                        counts.a.fetch_add(1, Ordering::SeqCst);
                        s
                    }
                    Err(_) => match TcpStream::connect(b).await {
                        Ok(s) => {
                            counts.b.fetch_add(1, Ordering::SeqCst);
                            s
                        }
                        Err(_) => return,
                    },
                };
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    url
}

fn addr(pod: &Pod) -> SocketAddr {
    let rest = pod.url.strip_prefix("http://").unwrap();
    rest.split('/').next().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_survives_the_pod_holding_its_stream() {
    let redis = TestRedis::start().await;
    let prefix = unique_prefix();
    let env = [
        ("PRESA_REDIS_URL", redis.url()),
        ("PRESA_REDIS_PREFIX", prefix.as_str()),
        ("PRESA_STATE_SECRET", "cli-failover-secret-at-least-32-bytes-long"),
    ];
    let pod_a = Pod::start("api-a", &api_bin(), free_port(), &[], &env).await;
    let pod_b = Pod::start("api-b", &api_bin(), free_port(), &[], &env).await;
    let _worker =
        Pod::start("w1", &worker_bin(), free_port(), &["--worker-id", "w1", "--lease-ms", "5000"], &env).await;
    let counts = Arc::new(Counts::default());
    let url = failover_proxy(addr(&pod_a), addr(&pod_b), counts.clone()).await;

    let id = detached(&url, &["slow_compute", "seconds=4", "label=failover"]).await;
    let mut watch = command(&url, &["--verbose", "watch", &id])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("presa watch runs");
    let mut stdout = watch.stdout.take().unwrap();
    let stdout_text = tokio::spawn(async move {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s).await;
        s
    });
    let mut stderr = BufReader::new(watch.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    // Wait until the CLI holds a subscription (through the proxy, so on pod A).
    tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(line) = stderr.next_line().await.unwrap() {
            seen.push(line.clone());
            if line.contains("subscribed to task notifications") {
                return;
            }
        }
        panic!("presa exited before subscribing: {seen:?}");
    })
    .await
    .unwrap_or_else(|_| panic!("presa never subscribed: {seen:?}"));
    assert_eq!(counts.b.load(Ordering::SeqCst), 0, "everything went to pod A so far");

    pod_a.signal("KILL");

    let status = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = stderr.next_line().await.unwrap() {
            seen.push(line);
        }
        watch.wait().await.unwrap()
    })
    .await
    .unwrap_or_else(|_| panic!("presa watch never finished: {seen:?}"));
    let out = stdout_text.await.unwrap();
    let err = seen.join("\n");
    eprintln!("presa watch stderr:\n{err}\nstdout:\n{out}");
    assert_eq!(status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}\npod B:\n{}", pod_b.log());
    assert!(out.contains(&format!("{id} completed")), "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("Completed failover"), "stdout:\n{out}\nstderr:\n{err}");
    // It noticed the broken stream and came back through pod B.
    let after_kill = err.split("subscribed to task notifications").skip(1).collect::<Vec<_>>().join("|");
    assert!(
        after_kill.contains("re-subscribing") || after_kill.contains("polling"),
        "no sign of the broken stream in:\n{err}"
    );
    assert!(counts.b.load(Ordering::SeqCst) > 0, "nothing reached pod B:\n{err}");
}
