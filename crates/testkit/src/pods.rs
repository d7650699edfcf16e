//! `presa-api` and `presa-worker` processes for cluster, crash and shutdown
//! tests: started from the built binaries, logs captured to a file, killed
//! (after a SIGCONT, in case a test stopped them) when dropped.

use std::{
    fs::File,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

pub use crate::redis::free_port;

/// A running presa process.
#[derive(Debug)]
pub struct Pod {
    /// `api1`, `worker2`…
    pub name: String,
    /// The MCP URL (API pods) or the health base URL (workers).
    pub url: String,
    child: Option<Child>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Pod {
    /// Start `binary` with `args` and `env`, listening on `listen`; wait until
    /// `GET http://<listen>/readyz` answers 200 (20 s at most).
    pub async fn start(name: &str, binary: &Path, listen: u16, args: &[&str], env: &[(&str, &str)]) -> Pod {
        Self::launch(name, binary, listen, args, env, "/readyz").await
    }

    /// Like [`start`](Self::start), but wait only until `/healthz` answers
    /// 200: for a pod expected to start unready (its Redis down).
    pub async fn start_unready(name: &str, binary: &Path, listen: u16, args: &[&str], env: &[(&str, &str)]) -> Pod {
        Self::launch(name, binary, listen, args, env, "/healthz").await
    }

    async fn launch(name: &str, binary: &Path, listen: u16, args: &[&str], env: &[(&str, &str)], probe: &str) -> Pod {
        assert!(binary.is_file(), "{} is not built: run `cargo build -p {}`", binary.display(), binary_name(binary));
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join(format!("{name}.log"));
        let out = File::create(&log).expect("log file");
        // `args` first, so a leading subcommand (`indexer worker …`) stays first.
        let child = Command::new(binary)
            .args(args)
            .args(["--listen", &format!("127.0.0.1:{listen}")])
            .envs(env.iter().copied())
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
        let base = format!("http://127.0.0.1:{listen}");
        let url = if binary_name(binary) == "presa-api" { format!("{base}/mcp") } else { base.clone() };
        let mut pod = Pod { name: name.into(), url, child: Some(child), log, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(r) = reqwest::get(format!("{base}{probe}")).await
                && r.status().is_success()
            {
                return pod;
            }
            if let Some(status) = pod.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("{name} exited at start ({status}):\n{}", pod.log());
            }
            assert!(Instant::now() < deadline, "{name} never became ready:\n{}", pod.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The base URL of its probes and metrics (`http://127.0.0.1:<port>`).
    pub fn base(&self) -> String {
        self.url.trim_end_matches("/mcp").to_string()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("pod is running").id()
    }

    /// Send a signal (`KILL`, `STOP`, `CONT`, `TERM`…).
    pub fn signal(&self, sig: &str) {
        crate::redis::signal(self.pid(), sig);
    }

    /// Wait for the process to exit (after a `TERM`), at most `timeout`.
    pub async fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                self.child = None;
                return status;
            }
            assert!(Instant::now() < deadline, "{} did not exit within {timeout:?}:\n{}", self.name, self.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// What the process logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The log once it holds `needle`, waiting at most `timeout`: a line a
    /// pod writes after the store change a test saw comes a moment later.
    pub async fn wait_log(&self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let log = self.log();
            if log.contains(needle) {
                return log;
            }
            assert!(Instant::now() < deadline, "{} did not log {needle:?} within {timeout:?}:\n{log}", self.name);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").arg("-CONT").arg(child.id().to_string()).status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn binary_name(binary: &Path) -> String {
    binary.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}
