//! What the gateway's integration tests share: the third-party upstreams
//! (installed once per machine by `tests/gateway/setup.sh` from npm and
//! PyPI), a gateway process in front of one, and a gateway cluster on Redis.

#![allow(dead_code, unreachable_pub)]

use std::{path::PathBuf, process::Command, sync::OnceLock};

use presa_testkit::{Pod, TestRedis, free_port, redis::unique_prefix};

/// The upstreams' command lines, from `tests/gateway/setup.sh`.
#[derive(Debug, Clone)]
pub struct Fixtures {
    /// `@modelcontextprotocol/server-everything` over stdio.
    pub everything_stdio: String,
    /// The same in its Streamable HTTP mode (`PORT` sets its port; path `/mcp`).
    pub everything_http: String,
    /// The venv's python with the official `mcp` SDK.
    pub python: String,
    /// `@modelcontextprotocol/server-filesystem` over stdio (append the directories it may read).
    pub filesystem_stdio: String,
}

/// A `--tokens-file` written in `dir` with two principals: `ops-token`, an
/// admin of every tenant (`presa:admin`), and `user-token`, tenant `acme`'s
/// `alice` with scope `deploy`.
pub fn admin_and_user_tokens(dir: &std::path::Path) -> PathBuf {
    let tokens = dir.join("tokens");
    let lines = [("ops-token", "ops root presa:admin"), ("user-token", "acme alice deploy")]
        .map(|(token, who)| format!("{} {who}\n", presa_auth::tokens::token_digest(token)))
        .concat();
    std::fs::write(&tokens, lines).expect("write the tokens file");
    tokens
}

/// `config` written to `dir`'s `gateway.toml`, whose path it returns.
pub fn gateway_toml(dir: &std::path::Path, config: &str) -> PathBuf {
    let path = dir.join("gateway.toml");
    std::fs::write(&path, config).expect("write gateway.toml");
    path
}

/// The `[[upstream]]` table of the Python SDK server as `py` with `pool` connections.
pub fn python_toml(pool: usize) -> String {
    let command = serde_json::to_string(&python_upstream()).expect("json");
    format!("[[upstream]]\nname = \"py\"\ncommand = {command}\npool = {pool}\n")
}

/// An embedded gateway reading `config` (a `gateway.toml`), signing callers
/// in with `tokens` (a `--tokens-file`), with `env` more.
pub async fn gateway_with_tokens(config: &std::path::Path, tokens: &std::path::Path, env: &[(&str, &str)]) -> Pod {
    let args = [
        "--gateway-config",
        config.to_str().expect("path"),
        "--upstream-settle-ms",
        "0",
        "--auth",
        "tokens",
        "--tokens-file",
        tokens.to_str().expect("path"),
    ];
    Pod::start("gw", &gateway_bin(), free_port(), &args, env).await
}

/// The repository's root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Install (once per machine; idempotent) and locate the upstreams. A failed
/// install fails the test, saying why: these tests never pass without them.
pub fn fixtures() -> Fixtures {
    static F: OnceLock<Fixtures> = OnceLock::new();
    F.get_or_init(|| {
        let out = Command::new("bash")
            .arg(repo().join("tests/gateway/setup.sh"))
            .output()
            .expect("running tests/gateway/setup.sh");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "tests/gateway/setup.sh failed (it installs server-everything from npm and the mcp SDK from PyPI):\n{}\n{}",
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
        let get = |key: &str| {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{key}=")))
                .unwrap_or_else(|| panic!("setup.sh printed no {key}=: {stdout}"))
                .to_string()
        };
        Fixtures {
            everything_stdio: get("EVERYTHING_STDIO"),
            everything_http: get("EVERYTHING_HTTP"),
            python: get("PYTHON"),
            filesystem_stdio: get("FILESYSTEM_STDIO"),
        }
    })
    .clone()
}

/// The Python upstream of these tests (`tests/gateway/upstream.py`) as a command line.
pub fn python_upstream() -> String {
    format!("{} {}", fixtures().python, repo().join("tests/gateway/upstream.py").display())
}

/// A child process killed when dropped.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The Python upstream (`tests/gateway/upstream.py`) serving Streamable
/// HTTP on 127.0.0.1:`port` (`/mcp`), its flaky tools logging to
/// `flaky_dir`; once it listens.
pub async fn python_over_http(port: u16, flaky_dir: &std::path::Path) -> Killed {
    let upstream = python_upstream();
    let mut argv = upstream.split(' ').map(str::to_string).collect::<Vec<_>>();
    argv.extend(["--http".to_string(), port.to_string()]);
    let child = Command::new(&argv[0])
        .args(&argv[1..])
        .env("PRESA_TEST_FLAKY_DIR", flaky_dir)
        .spawn()
        .expect("starting the Python upstream over HTTP");
    let killed = Killed(child);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < deadline, "the Python upstream never listened on {port}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    killed
}

/// The built `presa-gateway`.
pub fn gateway_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_presa-gateway"))
}

/// An embedded gateway (no Redis) in front of `upstream` (a stdio command line), with `args` more.
pub async fn embedded(name: &str, upstream: &str, args: &[&str], env: &[(&str, &str)]) -> (Pod, String) {
    let mut all = vec!["--upstream-command", upstream];
    all.extend_from_slice(args);
    let pod = Pod::start(name, &gateway_bin(), free_port(), &all, env).await;
    let url = format!("{}/mcp", pod.base());
    (pod, url)
}

/// A gateway cluster on its own Redis: API pods and worker pods (each with
/// its own upstream pool), started with the same environment.
pub struct Cluster {
    _redis: TestRedis,
    env: Vec<(String, String)>,
}

impl Cluster {
    /// A Redis, and the environment every pod gets (`extra_env` added).
    pub async fn new(extra_env: &[(&str, &str)]) -> Cluster {
        let redis = TestRedis::start().await;
        let mut env = vec![
            ("PRESA_REDIS_URL".to_string(), redis.url().to_string()),
            ("PRESA_REDIS_PREFIX".to_string(), unique_prefix()),
            ("PRESA_STATE_SECRET".to_string(), "gateway-crash-test-secret-at-least-32-bytes".to_string()),
        ];
        env.extend(extra_env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        Cluster { _redis: redis, env }
    }

    /// The pods' environment.
    pub fn env(&self) -> Vec<(&str, &str)> {
        self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }

    /// An API pod with the `upstream` flags.
    pub async fn api(&self, upstream: &[&str]) -> (Pod, String) {
        let pod = Pod::start("api", &gateway_bin(), free_port(), upstream, &self.env()).await;
        let url = format!("{}/mcp", pod.base());
        (pod, url)
    }

    /// A worker pod named `name` (a 2 s lease) with the `upstream` flags.
    pub async fn worker(&self, name: &str, upstream: &[&str]) -> Pod {
        let mut args = vec!["worker", "--worker-id", name, "--lease-ms", "2000"];
        args.extend_from_slice(upstream);
        Pod::start(name, &gateway_bin(), free_port(), &args, &self.env()).await
    }
}
