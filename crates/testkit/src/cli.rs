//! Running the `presa` command-line client in tests, as a user's shell would
//! (no terminal, stdin closed, no `PRESA_*` variables from the outside).

use std::{
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

/// What a `presa` run printed and returned.
#[derive(Debug)]
pub struct Out {
    /// The exit code (-1 when killed by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl std::fmt::Display for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit {}\n--- stdout\n{}--- stderr\n{}", self.code, self.stdout, self.stderr)
    }
}

/// `bin --url URL ARGS…` with no `PRESA_*` variables from the outside.
pub fn command(bin: &Path, url: &str, args: &[&str]) -> Command {
    let mut c = Command::new(bin);
    for (k, _) in std::env::vars() {
        if k.starts_with("PRESA_") {
            c.env_remove(k);
        }
    }
    c.arg("--url").arg(url).args(args);
    c
}

/// Run `bin --url URL ARGS…` with stdin closed to its end, 60 s at most.
pub async fn run(bin: &Path, url: &str, args: &[&str]) -> Out {
    let mut c = tokio::process::Command::from(command(bin, url, args));
    c.stdin(Stdio::null()).kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), c.output())
        .await
        .unwrap_or_else(|_| panic!("presa {args:?} did not finish within 60 s"))
        .expect("presa runs");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
