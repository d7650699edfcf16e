//! What the gateway is put in front of, and how each tool is served: the
//! flags ([`GatewayArgs`], one upstream) and the TOML file (`--gateway-config`,
//! several upstreams and per-tool rules), both resolved into one
//! [`GatewayConfig`]. Pure: nothing here starts a process or opens a socket.
//!
//! ```toml
//! [[upstream]]
//! name = "ml"                      # names metrics and logs; unique
//! command = "python3 server.py"    # stdio: split like a shell would, never run by one
//! env = { MODEL_DIR = "/models" }
//! cwd = "/srv/ml"
//! prefix = "ml_"                   # its tools are listed as ml_<name>
//! pool = 4                         # child processes at most (calls at once)
//!
//! [[upstream]]
//! name = "search"
//! url = "http://127.0.0.1:3001/mcp"   # Streamable HTTP
//! headers = { Authorization = "Bearer ${env:SEARCH_TOKEN}" }
//!
//! [[tool]]
//! match = "ml_train_*"             # a glob over the listed name
//! policy = "required"              # sync | optional | required
//! rerun = "never"                  # after a lost worker: auto | always | never
//! scopes = ["ml:train"]
//! ```

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use serde::Deserialize;

/// Why the configuration cannot be used. Each message names what to fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The config file is not valid TOML of the expected shape.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, with its line.
        message: String,
    },
    /// Anything else: no upstream, two kinds at once, a bad header, a bad glob…
    #[error("{0}")]
    Invalid(String),
}

/// The gateway's own flags, beside every flag of `presa-api` / `presa-worker`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct GatewayArgs {
    /// The upstream MCP server as a command line, spoken to over stdio
    /// (split into arguments like a shell would, but never run by one).
    #[arg(long, env = "PRESA_UPSTREAM_COMMAND", conflicts_with = "upstream_url")]
    pub upstream_command: Option<String>,

    /// An environment variable for the upstream command, `KEY=VALUE`;
    /// repeatable (in the environment variable: one per line).
    #[arg(long = "upstream-env", env = "PRESA_UPSTREAM_ENV", value_name = "KEY=VALUE", value_delimiter = '\n')]
    pub upstream_env: Vec<String>,

    /// The working directory of the upstream command.
    #[arg(long, env = "PRESA_UPSTREAM_CWD")]
    pub upstream_cwd: Option<PathBuf>,

    /// The upstream MCP server's Streamable HTTP endpoint (`http://host:port/mcp`).
    #[arg(long, env = "PRESA_UPSTREAM_URL")]
    pub upstream_url: Option<String>,

    /// A header sent to the HTTP upstream, `Name: value`; repeatable. Keep
    /// secrets out of the command line: `${env:VAR}` in the value is replaced by
    /// that variable, `${file:/path}` by the file's contents (trimmed). In the
    /// environment variable: one header per line.
    #[arg(long = "upstream-header", env = "PRESA_UPSTREAM_HEADER", value_name = "NAME: VALUE", value_delimiter = '\n')]
    pub upstream_header: Vec<String>,

    /// The revision spoken to the upstream: `auto` tries 2025-11-25's
    /// `initialize` first over stdio (a child serves one worker, so its
    /// sessions and server-to-client requests are what it can offer) and
    /// 2026-07-28's `server/discover` first over HTTP (its tasks outlive a
    /// worker), each falling back to the other.
    #[arg(long, env = "PRESA_UPSTREAM_PROTOCOL", value_enum, default_value_t = Protocol::Auto)]
    pub upstream_protocol: Protocol,

    /// A TOML file with several upstreams and per-tool rules (see the README);
    /// the `--upstream-*` flags then add nothing.
    #[arg(long, env = "PRESA_GATEWAY_CONFIG")]
    pub gateway_config: Option<PathBuf>,

    /// Run the upstream's tools with presa's adaptive policy: as a task from
    /// the start for clients that declared Tasks, answered plainly if the call
    /// ends within this many ms, else with the task handle. Applies to tools
    /// neither a rule nor the upstream's `execution.taskSupport` pins down.
    /// Unset: such tools are `optional` (a task whenever the client can take one).
    #[arg(long, env = "PRESA_TASK_AFTER_MS")]
    pub task_after_ms: Option<u64>,

    /// Tell the upstream who called: every `tools/call` carries
    /// `_meta["dev.presa/caller"] = {"tenant", "subject"}` of the presa caller.
    /// The upstream never gets the caller's token (MCP forbids passing it
    /// through): it authenticates presa with its own `--upstream-header`, and
    /// with this set it may trust presa's word for who the caller is.
    #[arg(long, env = "PRESA_UPSTREAM_FORWARD_IDENTITY", default_value_t = false)]
    pub upstream_forward_identity: bool,

    /// Connections to each upstream at most in this process: stdio child
    /// processes or HTTP sessions, each running one call at a time. Calls
    /// past it wait for one to free up.
    #[arg(long, env = "PRESA_UPSTREAM_POOL", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub upstream_pool: u32,

    /// Longest one upstream call may run, in ms, before it is cancelled and fails.
    #[arg(long, env = "PRESA_UPSTREAM_CALL_TIMEOUT_MS", default_value_t = 3_600_000)]
    pub upstream_call_timeout_ms: u64,

    /// Longest starting and initialising an upstream connection may take, in ms.
    #[arg(long, env = "PRESA_UPSTREAM_CONNECT_TIMEOUT_MS", default_value_t = 30_000)]
    pub upstream_connect_timeout_ms: u64,

    /// After its handshake, how long a new upstream connection is left alone
    /// before its first call, in ms: requests an upstream makes on its own
    /// right after starting (server-everything asks for roots ~350 ms after
    /// `initialize`) then get the gateway's fixed answer (no roots) instead of
    /// being taken for a question of the first call.
    #[arg(long, env = "PRESA_UPSTREAM_SETTLE_MS", default_value_t = 1_000)]
    pub upstream_settle_ms: u64,

    /// After `notifications/cancelled`, how long an upstream gets to stop
    /// before its connection is closed (a stdio child is then killed), in ms.
    #[arg(long, env = "PRESA_UPSTREAM_CANCEL_GRACE_MS", default_value_t = 5_000)]
    pub upstream_cancel_grace_ms: u64,

    /// Fewest ms between two status messages a task takes from upstream
    /// progress or log lines (the last one is never dropped for long).
    #[arg(long, env = "PRESA_UPSTREAM_STATUS_INTERVAL_MS", default_value_t = 250)]
    pub upstream_status_interval_ms: u64,

    /// How often the upstream's catalog is listed again, in ms (besides its
    /// `notifications/tools/list_changed`); 0: never.
    #[arg(long, env = "PRESA_UPSTREAM_REFRESH_MS", default_value_t = 60_000)]
    pub upstream_refresh_ms: u64,
}

/// The MCP revision spoken to an upstream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
pub enum Protocol {
    /// By transport, with a fallback (see `--upstream-protocol`).
    #[default]
    #[serde(rename = "auto")]
    #[value(name = "auto")]
    Auto,
    /// The `initialize` handshake and a session.
    #[serde(rename = "2025-11-25")]
    #[value(name = "2025-11-25")]
    Legacy,
    /// Stateless, `server/discover`.
    #[serde(rename = "2026-07-28")]
    #[value(name = "2026-07-28")]
    Stateless,
}

/// How to reach one upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A child process spoken to over stdio.
    Stdio {
        /// The program and its arguments.
        argv: Vec<String>,
        /// Extra environment variables.
        env: BTreeMap<String, String>,
        /// The working directory.
        cwd: Option<PathBuf>,
    },
    /// A Streamable HTTP endpoint.
    Http {
        /// The URL.
        url: String,
        /// Headers sent with every request (values resolved).
        headers: Vec<(String, String)>,
    },
}

/// One upstream server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamConfig {
    /// Its name (metrics, logs).
    pub name: String,
    /// How to reach it.
    pub endpoint: Endpoint,
    /// Prepended to its tool and prompt names in presa's catalog.
    pub prefix: String,
    /// Connections at most.
    pub pool: usize,
    /// The revision to speak.
    pub protocol: Protocol,
}

/// Whether a call becomes a task (see `presa_server::TaskPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyRule {
    /// Always in the request.
    Sync,
    /// A task when the client declared the Tasks extension.
    Optional,
    /// Always a task.
    Required,
    /// A task answered plainly when it ends within `after_ms` (see `--task-after-ms`).
    After,
}

/// What a worker that takes a task over after another was lost does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Rerun {
    /// Call again when the tool says `readOnlyHint` or `idempotentHint`,
    /// else fail the task with a clear error.
    #[default]
    Auto,
    /// Always call again.
    Always,
    /// Never call again.
    Never,
}

/// A per-tool rule: the first rule whose glob matches a listed tool name applies.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolRule {
    /// A glob over the tool's name as presa lists it (prefix included).
    #[serde(rename = "match")]
    pub pattern: String,
    /// Its task policy (else `required` when the upstream's
    /// `execution.taskSupport` says so, else `--task-after-ms`'s adaptive policy, else optional).
    #[serde(default)]
    pub policy: Option<PolicyRule>,
    /// With `policy = "after"`: the ms (else `--task-after-ms`, else 1000).
    #[serde(default)]
    pub after_ms: Option<u64>,
    /// Its crash policy.
    #[serde(default)]
    pub rerun: Option<Rerun>,
    /// OAuth scopes a caller needs (when authentication is on).
    #[serde(default)]
    pub scopes: Vec<String>,
}

/// Limits and timings every upstream shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timings {
    /// Longest one call.
    pub call_timeout: Duration,
    /// Longest a connection's start and handshake.
    pub connect_timeout: Duration,
    /// Quiet time after a handshake before the first call.
    pub settle: Duration,
    /// Grace after a cancellation.
    pub cancel_grace: Duration,
    /// Fewest time between two status messages.
    pub status_interval: Duration,
    /// Catalog refresh period (`None`: only on `list_changed`).
    pub refresh: Option<Duration>,
}

/// Everything the gateway was told.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// The upstreams, in listing order.
    pub upstreams: Vec<UpstreamConfig>,
    /// The per-tool rules, first match wins.
    pub rules: Vec<ToolRule>,
    /// The adaptive policy's wait for tools no rule or hint pins down.
    pub task_after: Option<Duration>,
    /// Whether calls carry the caller's identity in `_meta`.
    pub forward_identity: bool,
    /// Timings.
    pub timings: Timings,
}

impl GatewayConfig {
    /// The rule for a listed tool name, if any.
    pub fn rule(&self, tool: &str) -> Option<&ToolRule> {
        self.rules.iter().find(|r| glob::Pattern::new(&r.pattern).is_ok_and(|p| p.matches(tool)))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    upstream: Vec<FileUpstream>,
    #[serde(default)]
    tool: Vec<ToolRule>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileUpstream {
    name: String,
    command: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    prefix: String,
    pool: Option<usize>,
    protocol: Option<Protocol>,
}

impl GatewayArgs {
    /// Resolve the flags (and the config file they name) into a [`GatewayConfig`].
    pub fn resolve(&self) -> Result<GatewayConfig, ConfigError> {
        let file = match &self.gateway_config {
            Some(path) => {
                let text =
                    std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.clone(), source })?;
                Some(parse_file(&text).map_err(|message| ConfigError::Parse { path: path.clone(), message })?)
            }
            None => None,
        };
        self.resolve_with(file)
    }

    fn resolve_with(&self, file: Option<File>) -> Result<GatewayConfig, ConfigError> {
        let pool = self.upstream_pool as usize;
        let from_flags = self.upstream_command.is_some() || self.upstream_url.is_some();
        let (upstreams, rules) = match file {
            Some(_) if from_flags => {
                return Err(ConfigError::Invalid(
                    "give the upstream either with --upstream-command/--upstream-url or in --gateway-config, not both"
                        .into(),
                ));
            }
            Some(file) => {
                let ups = file.upstream.into_iter().map(|u| u.resolve(pool, self.upstream_protocol)).collect::<Result<
                    Vec<_>,
                    _,
                >>(
                )?;
                (ups, file.tool)
            }
            None => {
                let endpoint = match (&self.upstream_command, &self.upstream_url) {
                    (Some(cmd), None) => stdio(cmd, parse_env(&self.upstream_env)?, self.upstream_cwd.clone())?,
                    (None, Some(url)) => http(url, self.upstream_header.iter().map(|h| parse_header(h)))?,
                    _ => {
                        return Err(ConfigError::Invalid(
                            "no upstream: give --upstream-command '<command line>' (stdio), --upstream-url <url> \
                             (Streamable HTTP) or --gateway-config <file.toml>"
                                .into(),
                        ));
                    }
                };
                let protocol = self.upstream_protocol;
                let up = UpstreamConfig { name: "upstream".into(), endpoint, prefix: String::new(), pool, protocol };
                (vec![up], Vec::new())
            }
        };
        if upstreams.is_empty() {
            return Err(ConfigError::Invalid("the config file lists no [[upstream]]".into()));
        }
        let mut names = std::collections::BTreeSet::new();
        for u in &upstreams {
            if !names.insert(&u.name) {
                return Err(ConfigError::Invalid(format!("two upstreams are named {:?}", u.name)));
            }
        }
        for r in &rules {
            glob::Pattern::new(&r.pattern)
                .map_err(|e| ConfigError::Invalid(format!("[[tool]] match = {:?}: {e}", r.pattern)))?;
        }
        let ms = Duration::from_millis;
        let timings = Timings {
            call_timeout: ms(self.upstream_call_timeout_ms),
            connect_timeout: ms(self.upstream_connect_timeout_ms),
            settle: ms(self.upstream_settle_ms),
            cancel_grace: ms(self.upstream_cancel_grace_ms),
            status_interval: ms(self.upstream_status_interval_ms),
            refresh: (self.upstream_refresh_ms > 0).then(|| ms(self.upstream_refresh_ms)),
        };
        let task_after = self.task_after_ms.map(ms);
        Ok(GatewayConfig { upstreams, rules, timings, task_after, forward_identity: self.upstream_forward_identity })
    }
}

impl FileUpstream {
    fn resolve(self, default_pool: usize, default_protocol: Protocol) -> Result<UpstreamConfig, ConfigError> {
        let name = self.name;
        let endpoint = match (self.command, self.url) {
            (Some(cmd), None) => stdio(&cmd, self.env, self.cwd)?,
            (None, Some(url)) => http(&url, self.headers.into_iter().map(|(k, v)| Ok((k, resolve_secret(&v)?))))?,
            _ => {
                return Err(ConfigError::Invalid(format!("upstream {name:?}: give exactly one of command or url")));
            }
        };
        let pool = self.pool.unwrap_or(default_pool);
        if pool == 0 {
            return Err(ConfigError::Invalid(format!("upstream {name:?}: pool must be at least 1")));
        }
        let protocol = self.protocol.unwrap_or(default_protocol);
        Ok(UpstreamConfig { name, endpoint, prefix: self.prefix, pool, protocol })
    }
}

fn parse_file(text: &str) -> Result<File, String> {
    toml::from_str(text).map_err(|e| e.to_string())
}

fn stdio(cmd: &str, env: BTreeMap<String, String>, cwd: Option<PathBuf>) -> Result<Endpoint, ConfigError> {
    let argv = shlex::split(cmd)
        .filter(|a| !a.is_empty())
        .ok_or_else(|| ConfigError::Invalid(format!("upstream command {cmd:?}: empty or unbalanced quotes")))?;
    Ok(Endpoint::Stdio { argv, env, cwd })
}

fn http(
    url: &str,
    headers: impl Iterator<Item = Result<(String, String), ConfigError>>,
) -> Result<Endpoint, ConfigError> {
    let uri: http::Uri = url.parse().map_err(|e| ConfigError::Invalid(format!("upstream url {url:?}: {e}")))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(ConfigError::Invalid(format!(
            "upstream url {url:?}: expected http://host[:port]/path or https://…"
        )));
    }
    let headers = headers.collect::<Result<Vec<_>, _>>()?;
    for (name, value) in &headers {
        http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| ConfigError::Invalid(format!("upstream header name {name:?} is not a valid header name")))?;
        http::HeaderValue::from_str(value).map_err(|_| {
            ConfigError::Invalid(format!("upstream header {name:?}: the value is not a valid header value"))
        })?;
    }
    Ok(Endpoint::Http { url: url.to_string(), headers })
}

fn parse_env(pairs: &[String]) -> Result<BTreeMap<String, String>, ConfigError> {
    pairs
        .iter()
        .map(|p| match p.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(ConfigError::Invalid(format!("--upstream-env {p:?}: expected KEY=VALUE"))),
        })
        .collect()
}

fn parse_header(h: &str) -> Result<(String, String), ConfigError> {
    let (name, value) = h
        .split_once(':')
        .ok_or_else(|| ConfigError::Invalid(format!("--upstream-header {h:?}: expected 'Name: value'")))?;
    Ok((name.trim().to_string(), resolve_secret(value.trim())?))
}

/// Replace `${env:VAR}` and `${file:/path}` in a header value.
fn resolve_secret(value: &str) -> Result<String, ConfigError> {
    let mut out = String::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end =
            after.find('}').ok_or_else(|| ConfigError::Invalid("a header value has an unclosed ${…}".to_string()))?;
        let reference = &after[..end];
        let resolved = match reference.split_once(':') {
            Some(("env", var)) => std::env::var(var)
                .map_err(|_| ConfigError::Invalid(format!("a header value names ${{env:{var}}}, which is not set")))?,
            Some(("file", path)) => std::fs::read_to_string(path)
                .map_err(|e| ConfigError::Invalid(format!("a header value names ${{file:{path}}}: {e}")))?
                .trim()
                .to_string(),
            _ => {
                return Err(ConfigError::Invalid(format!(
                    "a header value has ${{{reference}}}; only ${{env:VAR}} and ${{file:/path}} are known"
                )));
            }
        };
        out.push_str(&resolved);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> GatewayArgs {
        GatewayArgs { upstream_pool: 4, upstream_refresh_ms: 1000, ..GatewayArgs::default() }
    }

    #[test]
    fn a_command_line_is_split_without_a_shell() {
        let a = GatewayArgs {
            upstream_command: Some("python3 -m 'my server' --flag=\"a b\"".into()),
            upstream_env: vec!["K=V=W".into()],
            ..args()
        };
        let c = a.resolve().unwrap();
        let Endpoint::Stdio { argv, env, .. } = &c.upstreams[0].endpoint else { panic!("not stdio") };
        assert_eq!(argv, &["python3", "-m", "my server", "--flag=a b"]);
        assert_eq!(env.get("K").map(String::as_str), Some("V=W"));
        assert_eq!(c.upstreams[0].pool, 4);
    }

    #[test]
    fn bad_input_is_refused_with_what_to_fix() {
        let err = |a: GatewayArgs| a.resolve().unwrap_err().to_string();
        assert!(err(args()).contains("no upstream"));
        assert!(err(GatewayArgs { upstream_command: Some("'unbalanced".into()), ..args() }).contains("unbalanced"));
        assert!(
            err(GatewayArgs { upstream_command: Some("x".into()), upstream_env: vec!["=v".into()], ..args() })
                .contains("KEY=VALUE")
        );
        assert!(err(GatewayArgs { upstream_url: Some("ftp://h/x".into()), ..args() }).contains("expected http"));
        assert!(
            err(GatewayArgs {
                upstream_url: Some("http://h/mcp".into()),
                upstream_header: vec!["NoColon".into()],
                ..args()
            })
            .contains("Name: value")
        );
        assert!(
            err(GatewayArgs {
                upstream_url: Some("http://h/mcp".into()),
                upstream_header: vec!["X-Key: ${env:PRESA_TEST_SURELY_UNSET_VAR}".into()],
                ..args()
            })
            .contains("not set")
        );
    }

    #[test]
    fn header_values_read_secrets_from_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "s3cret\n").unwrap();
        let a = GatewayArgs {
            upstream_url: Some("http://127.0.0.1:9/mcp".into()),
            upstream_header: vec![format!("Authorization: Bearer ${{file:{}}}", path.display())],
            ..args()
        };
        let c = a.resolve().unwrap();
        let Endpoint::Http { headers, .. } = &c.upstreams[0].endpoint else { panic!("not http") };
        assert_eq!(headers, &[("Authorization".to_string(), "Bearer s3cret".to_string())]);
    }

    #[test]
    fn the_file_gives_upstreams_and_first_matching_rules() {
        let file = parse_file(
            r#"
            [[upstream]]
            name = "ml"
            command = "python3 server.py"
            prefix = "ml_"
            pool = 2
            protocol = "2025-11-25"
            [[upstream]]
            name = "web"
            url = "http://127.0.0.1:3001/mcp"
            [[tool]]
            match = "ml_train_*"
            policy = "required"
            rerun = "never"
            [[tool]]
            match = "ml_*"
            policy = "sync"
            [[tool]]
            match = "web_*"
            policy = "after"
            after_ms = 2500
            "#,
        )
        .unwrap();
        let c = args().resolve_with(Some(file)).unwrap();
        assert_eq!(c.upstreams.len(), 2);
        assert_eq!((c.upstreams[0].prefix.as_str(), c.upstreams[0].pool), ("ml_", 2));
        assert_eq!(c.upstreams[1].pool, 4);
        assert_eq!((c.upstreams[0].protocol, c.upstreams[1].protocol), (Protocol::Legacy, Protocol::Auto));
        let train = c.rule("ml_train_model").unwrap();
        assert_eq!((train.policy, train.rerun), (Some(PolicyRule::Required), Some(Rerun::Never)));
        assert_eq!(c.rule("ml_add").unwrap().policy, Some(PolicyRule::Sync));
        assert!(c.rule("other").is_none());
        let web = c.rule("web_search").unwrap();
        assert_eq!((web.policy, web.after_ms), (Some(PolicyRule::After), Some(2500)));
        assert!(parse_file("[[upstream]]\nname = 1").unwrap_err().contains("line"));
        assert!(parse_file("[[tool]]\nmatch = \"x\"\npolicy = \"sometimes\"").is_err());
        let twice = parse_file("[[upstream]]\nname='a'\ncommand='x'\n[[upstream]]\nname='a'\ncommand='y'").unwrap();
        assert!(args().resolve_with(Some(twice)).unwrap_err().to_string().contains("two upstreams"));
    }
}
