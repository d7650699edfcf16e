//! Servers in processes of their own, so that each side of a comparison runs
//! with its own allocator and runtime, and its memory is its own: presa (this
//! binary's hidden `serve` subcommand: the bench catalog, with the allocator
//! presa's binaries ship with), the rmcp peer (`rmcp-peer`, the system
//! allocator as an rmcp user gets it), and the shipped `presa-api` and
//! `presa-worker` binaries for their idle RSS.
//!
//! A child prints its URL on its first stdout line (or nothing, for the
//! shipped binaries) and stops when its stdin closes; it is killed when its
//! [`Proc`] is dropped, whatever happens.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};

/// A child process serving on loopback.
#[derive(Debug)]
pub(crate) struct Proc {
    child: Child,
    /// Its MCP endpoint (`http://127.0.0.1:<port>/mcp`).
    pub(crate) url: String,
}

/// Where this binary's sibling `name` is (`target/<profile>/name`).
pub(crate) fn sibling(name: &str) -> Option<PathBuf> {
    let path = std::env::current_exe().ok()?.parent()?.join(name);
    path.is_file().then_some(path)
}

/// The directory of the `presa-api` and `presa-worker` binaries to run
/// (`bin_dir`, else this binary's own) and how to name them in a report
/// (`debug build`, `release build` or the directory); an error saying how to
/// build them when one is missing.
pub(crate) fn pod_binaries(bin_dir: Option<&Path>) -> Result<(PathBuf, String), String> {
    let bin = match bin_dir {
        Some(d) => d.to_path_buf(),
        None => std::env::current_exe().map_err(|e| e.to_string())?.parent().map(Path::to_path_buf).unwrap_or_default(),
    };
    for b in ["presa-api", "presa-worker"] {
        if !bin.join(b).is_file() {
            return Err(format!(
                "{} is not built: cargo build [--release] -p presa-api -p presa-worker (or --bin-dir)",
                bin.join(b).display()
            ));
        }
    }
    let profile = match bin.file_name().and_then(|n| n.to_str()) {
        Some(p @ ("release" | "debug")) => format!("{p} build"),
        _ => bin.display().to_string(),
    };
    Ok((bin, profile))
}

impl Proc {
    /// Start `program args…`; with `announces`, wait (at most 30 s) for the URL it prints first.
    pub(crate) async fn spawn(program: &Path, args: &[String], announces: bool) -> Proc {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
        let mut url = String::new();
        if announces {
            let stdout = child.stdout.take().expect("a piped stdout");
            let mut lines = BufReader::new(stdout).lines();
            let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await;
            url = match first {
                Ok(Ok(Some(line))) => line.trim().to_string(),
                other => panic!("{} printed no URL: {other:?}", program.display()),
            };
        }
        Proc { child, url }
    }

    /// This process's resident memory, MiB.
    pub(crate) fn rss_mib(&self) -> f64 {
        self.child.id().map_or(f64::NAN, |pid| crate::rss_of(&format!("/proc/{pid}/status")))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Closing stdin asks for a clean stop; the kill makes sure of it.
        drop(self.child.stdin.take());
        let _ = self.child.start_kill();
    }
}

/// A free loopback port (bound, then released for a child to bind).
pub(crate) fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    l.local_addr().expect("a bound listener").port()
}

/// A program's exit code from its outcome: 0 when it ran and judged the run
/// clean, 1 when it judged it not clean or could not run (saying why, after
/// `name: `).
pub(crate) fn exit_code(name: &str, outcome: Result<bool, String>) -> i32 {
    match outcome {
        Ok(clean) => i32::from(!clean),
        Err(e) => {
            eprintln!("{name}: {e}");
            1
        }
    }
}
