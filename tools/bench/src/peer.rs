//! The peer comparison's processes: presa (`serve`) and the rmcp echo peer side by side, their idle RSS, and the closing ratios.

use super::*;

/// The two sides of the peer rows, each in a process of its own: presa (`serve`, on
/// the bench's Redis when there is one, with this binary's allocator) and rmcp.
pub(super) async fn peers(redis: Option<&Running>) -> (procs::Proc, procs::Proc) {
    let exe = std::env::current_exe().expect("this binary's path");
    let mut args = vec!["serve".to_string()];
    if let Some((url, _)) = redis.and_then(|r| r.redis_url.as_ref()) {
        args.extend(["--redis-url".to_string(), url.clone()]);
    }
    let presa = procs::Proc::spawn(&exe, &args, true).await;
    let peer =
        procs::sibling("rmcp-peer").expect("rmcp-peer beside presa-bench: cargo build --profile dist -p presa-bench");
    (presa, procs::Proc::spawn(&peer, &[], true).await)
}

/// Idle RSS of the shipped `presa-api` (embedded) and `presa-worker` (on `redis_url`)
/// built beside this binary, and of the rmcp peer: each started, asked once for
/// `/healthz` (the peer: one `tools/call`), then read 1 s later.
pub(super) async fn idle_rss(redis_url: Option<&str>) -> String {
    let http = reqwest::Client::new();
    let mut figures = Vec::new();
    for name in ["presa-api", "presa-worker"] {
        let Some(path) = procs::sibling(name) else {
            figures.push(format!(
                "{name} not built (cargo build --profile dist -p {name}, or the profile this bench was built with)"
            ));
            continue;
        };
        let port = procs::free_port();
        let mut args = vec!["--listen".to_string(), format!("127.0.0.1:{port}")];
        if name == "presa-worker" {
            let Some(url) = redis_url else { continue };
            let prefix = format!("presa-bench-{}", unique_prefix());
            args.extend(["--redis-url".into(), url.into(), "--redis-prefix".into(), prefix]);
        }
        let p = procs::Proc::spawn(&path, &args, false).await;
        let health = format!("http://127.0.0.1:{port}/healthz");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !http.get(&health).send().await.is_ok_and(|r| r.status().is_success()) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if name == "presa-api" {
            // One sync call first, as the peer below answers one echo.
            echo_op(&Raw::pool(&format!("http://127.0.0.1:{port}/mcp"), 1), "greet", false)(0).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        figures.push(format!("{name} {:.1} MiB", p.rss_mib()));
    }
    if let Some(peer) = procs::sibling("rmcp-peer") {
        let p = procs::Proc::spawn(&peer, &[], true).await;
        echo_op(&Raw::pool(&p.url, 1), "echo", false)(0).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        figures.push(format!("rmcp-peer {:.1} MiB", p.rss_mib()));
    }
    figures.join(", ")
}

/// The closing lines: the ratios, then the machine's load.
pub(super) fn print_ratios(ratios: &[String]) {
    println!("\nratios (same run, alternated):");
    for r in ratios {
        println!("  {r}");
    }
    println!("\nend: load average {} (1/5/15 min), RSS {:.1} MiB", load_average(), rss_mib());
}
