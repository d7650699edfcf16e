//! `presa-bench artifacts`: what a big artifact costs the pods. It starts a
//! private `redis-server`, one shipped `presa-api` pod and one `presa-worker`
//! pod sharing an artifact store (a fresh local directory, or with `--s3` a
//! spawned `s3s-fs`), then, `--rounds` times: a task of the demo's
//! `export_dataset` writes `--mebibytes` MiB through `ToolContext::artifact`
//! (streamed, never held), and the link it returns is downloaded from the API
//! pod (streamed to nowhere, its SHA-256 checked). It samples each pod's RSS
//! every 20 ms during each phase and prints, per round, throughput (MB/s) and
//! how far each pod's RSS rose above where it was before: the bound that
//! matters is that this does not grow with the artifact's size.

use std::{path::PathBuf, sync::Arc, time::Duration};

use futures::StreamExt;
use presa_testkit::{Client, Pod, TestRedis, free_port, redis::unique_prefix, s3::S3sFs, task_id, tasks_caps};
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::sync::Notify;

use crate::cost::rss_of;

/// `presa-bench artifacts` flags.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ArtifactsArgs {
    /// The artifact's size, MiB.
    #[arg(long, default_value_t = 200)]
    mebibytes: u64,
    /// Rounds (write, then download), each a fresh task.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Store artifacts on a spawned s3s-fs (S3 over HTTP) instead of a local directory.
    #[arg(long)]
    s3: bool,
    /// Where `presa-api` and `presa-worker` are (default: next to this program).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
}

/// Run it; the process's exit code.
pub(crate) async fn run(args: ArtifactsArgs) -> i32 {
    crate::procs::exit_code("presa-bench artifacts", measure(args).await.map(|()| true))
}

/// The highest RSS (MiB) of `pid` until `stop` fires.
async fn peak_rss(pid: u32, stop: Arc<Notify>) -> f64 {
    let path = format!("/proc/{pid}/status");
    let mut peak = rss_of(&path);
    loop {
        tokio::select! {
            () = stop.notified() => return peak.max(rss_of(&path)),
            () = tokio::time::sleep(Duration::from_millis(20)) => peak = peak.max(rss_of(&path)),
        }
    }
}

async fn measure(args: ArtifactsArgs) -> Result<(), String> {
    let (bin, profile) = crate::procs::pod_binaries(args.bin_dir.as_deref())?;
    let redis = TestRedis::start().await;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let s3 = args.s3.then(S3sFs::start);
    let (url, endpoint) = match &s3 {
        Some(s) => ("s3://presa-test/bench".to_string(), s.endpoint()),
        None => (format!("file://{}", dir.path().display()), String::new()),
    };
    let prefix = unique_prefix();
    let mut env = vec![
        ("PRESA_REDIS_URL", redis.url().to_string()),
        ("PRESA_REDIS_PREFIX", prefix),
        ("PRESA_STATE_SECRET", "presa-bench-artifacts-secret-at-least-32-bytes".into()),
        ("PRESA_ARTIFACT_URL", url.clone()),
    ];
    if s3.is_some() {
        env.extend([
            ("PRESA_ARTIFACT_S3_ENDPOINT", endpoint),
            ("PRESA_ARTIFACT_S3_ALLOW_HTTP", "true".into()),
            ("PRESA_ARTIFACT_S3_ACCESS_KEY_ID", presa_testkit::s3::ACCESS_KEY.into()),
            ("PRESA_ARTIFACT_S3_SECRET_ACCESS_KEY", presa_testkit::s3::SECRET_KEY.into()),
        ]);
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let api = Pod::start("api", &bin.join("presa-api"), free_port(), &[], &env).await;
    let worker = Pod::start("worker", &bin.join("presa-worker"), free_port(), &[], &env).await;
    let client = Client::new(&api.url, tasks_caps());
    // Warm both pods up with a small task before the first reading.
    let id = task_id(&client.call_tool("export_dataset", json!({ "mebibytes": 1 })).await);
    client.wait_status(&id, "completed").await;

    let mib = args.mebibytes;
    let mb = (mib * 1024 * 1024) as f64 / 1e6;
    println!("presa-bench artifacts: {mib} MiB per artifact, store {url}, {profile}, {} rounds", args.rounds);
    println!(
        "{:<6} {:>10} {:>14} {:>10} {:>14} {:>12}",
        "round", "write MB/s", "worker RSS +", "read MB/s", "API RSS +", "RSS before"
    );
    for round in 1..=args.rounds {
        let (worker_before, api_before) =
            (rss_of(&format!("/proc/{}/status", worker.pid())), rss_of(&format!("/proc/{}/status", api.pid())));
        let stop = Arc::new(Notify::new());
        let sampler = tokio::spawn(peak_rss(worker.pid(), stop.clone()));
        let started = std::time::Instant::now();
        let id = task_id(&client.call_tool("export_dataset", json!({ "mebibytes": mib })).await);
        let done =
            client.wait_task_for(&id, "completed", Duration::from_secs(600), |t| t["status"] == "completed").await;
        let write_secs = started.elapsed().as_secs_f64();
        stop.notify_one();
        let worker_peak = sampler.await.map_err(|e| e.to_string())?;
        let link = &done["result"]["content"][1];
        let path = link["_meta"]["io.presa/download"].as_str().ok_or_else(|| format!("no link in {done}"))?;
        let want = link["_meta"]["io.presa/sha256"].as_str().unwrap_or_default().to_owned();

        let stop = Arc::new(Notify::new());
        let sampler = tokio::spawn(peak_rss(api.pid(), stop.clone()));
        let started = std::time::Instant::now();
        let url = reqwest::Url::parse(&api.url).and_then(|u| u.join(path)).map_err(|e| e.to_string())?;
        let resp = reqwest::get(url).await.map_err(|e| e.to_string())?;
        let mut body = resp.bytes_stream();
        let mut hasher = Sha256::new();
        while let Some(chunk) = body.next().await {
            hasher.update(chunk.map_err(|e| e.to_string())?);
        }
        let read_secs = started.elapsed().as_secs_f64();
        stop.notify_one();
        let api_peak = sampler.await.map_err(|e| e.to_string())?;
        let got: String = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
        if got != want {
            return Err(format!("round {round}: the download's SHA-256 differs from the link's"));
        }
        println!(
            "{round:<6} {:>10.0} {:>11.1} MiB {:>10.0} {:>11.1} MiB {:>5.0}/{:<5.0} MiB",
            mb / write_secs,
            worker_peak - worker_before,
            mb / read_secs,
            api_peak - api_before,
            worker_before,
            api_before,
        );
    }
    println!("(RSS +: a pod's peak during the phase over its RSS just before; RSS before: worker/API)");
    Ok(())
}
