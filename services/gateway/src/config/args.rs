//! The gateway's flags ([`GatewayArgs`]) and their resolution, with the
//! `--gateway-config` file they may name, into one [`GatewayConfig`].

use std::{path::PathBuf, time::Duration};

use super::{
    ConfigError, GatewayConfig, Timings, UpstreamConfig,
    file::{File, parse_file},
    upstream::{Protocol, http, parse_env, parse_header, stdio},
};

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

    /// A variable of the gateway's own environment passed through to the
    /// upstream command, by name; repeatable or comma-separated. The command
    /// gets nothing else of the gateway's environment (its `PRESA_*` secrets,
    /// `PRESA_REDIS_URL`…) but `PATH`, `HOME`, `LANG`, `LC_*`, `TZ` and
    /// `TMPDIR`, and what `--upstream-env` sets.
    #[arg(
        long = "upstream-inherit-env",
        env = "PRESA_UPSTREAM_INHERIT_ENV",
        value_name = "NAME",
        value_delimiter = ','
    )]
    pub upstream_inherit_env: Vec<String>,

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

    /// Read `--gateway-config` every this many ms and reload it when its
    /// content changed (as `SIGHUP` would, this process only); 0: never
    /// (reload on `SIGHUP` or `POST /admin/v1/gateway/reload` only).
    #[arg(long, env = "PRESA_GATEWAY_CONFIG_WATCH_MS", default_value_t = 0)]
    pub gateway_config_watch_ms: u64,

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

    /// Longest a prompt, resource read, completion or listing waits for a
    /// free upstream connection, in ms (each has one to itself, like a tool
    /// call); past it the request fails with a retryable error.
    #[arg(long, env = "PRESA_UPSTREAM_WAIT_MS", default_value_t = 10_000)]
    pub upstream_wait_ms: u64,

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

    pub(super) fn resolve_with(&self, file: Option<File>) -> Result<GatewayConfig, ConfigError> {
        let pool = self.upstream_pool as usize;
        let from_flags = self.upstream_command.is_some() || self.upstream_url.is_some();
        let (upstreams, rules, servers, root) = match file {
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
                let names: Vec<String> = ups.iter().map(|u: &UpstreamConfig| u.name.clone()).collect();
                let root = file.root.unwrap_or(true);
                let servers = super::servers::resolve(file.server, root, &names)?;
                (ups, file.tool, servers, root)
            }
            None => {
                let endpoint = match (&self.upstream_command, &self.upstream_url) {
                    (Some(cmd), None) => stdio(
                        cmd,
                        parse_env(&self.upstream_env)?,
                        self.upstream_inherit_env.clone(),
                        self.upstream_cwd.clone(),
                    )?,
                    (None, Some(url)) => http(url, self.upstream_header.iter().map(|h| parse_header(h)), None, None)?,
                    _ => {
                        return Err(ConfigError::Invalid(
                            "no upstream: give --upstream-command '<command line>' (stdio), --upstream-url <url> \
                             (Streamable HTTP) or --gateway-config <file.toml>"
                                .into(),
                        ));
                    }
                };
                let protocol = self.upstream_protocol;
                let up = UpstreamConfig {
                    name: "upstream".into(),
                    endpoint,
                    prefix: String::new(),
                    pool,
                    protocol,
                    breaker: None,
                    shape: super::UpstreamShape::default(),
                };
                (vec![up], Vec::new(), Vec::new(), true)
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
            r.retry_policy()?;
            r.tool_rate()?;
            r.tool_concurrency()?;
        }
        let ms = Duration::from_millis;
        let timings = Timings {
            call_timeout: ms(self.upstream_call_timeout_ms),
            wait: ms(self.upstream_wait_ms),
            connect_timeout: ms(self.upstream_connect_timeout_ms),
            settle: ms(self.upstream_settle_ms),
            cancel_grace: ms(self.upstream_cancel_grace_ms),
            status_interval: ms(self.upstream_status_interval_ms),
            refresh: (self.upstream_refresh_ms > 0).then(|| ms(self.upstream_refresh_ms)),
        };
        let task_after = self.task_after_ms.map(ms);
        let forward_identity = self.upstream_forward_identity;
        Ok(GatewayConfig { upstreams, rules, timings, task_after, forward_identity, servers, root })
    }
}
