//! The `--gateway-config` TOML file: its `[[upstream]]` tables (a
//! breaker's: `breaker`, [`super::BreakerRule`]; the catalog's shaping:
//! `expose`, `hide`, `[[upstream.tool]]`, [`super::UpstreamShape`]), its
//! `[[server]]` tables (virtual servers, checked in `servers.rs`) and its
//! `[[tool]]` rules ([`ToolRule`]: task policy, crash policy, retry policy
//! and what else counts as transient, rate, scopes).

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use presa_server::{RetryPolicy, ToolRate};
use serde::Deserialize;

use super::{
    ConfigError,
    upstream::{Protocol, UpstreamConfig, http, resolve_secret, stdio},
};

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
    /// How its tasks' transient failures are tried again (else the
    /// cluster's default, `WorkerConfig::retry`).
    #[serde(default)]
    pub retry: Option<RetryRule>,
    /// JSON-RPC error codes of the upstream's that are transient for this
    /// tool (its task tries the call again).
    #[serde(default)]
    pub retry_on_codes: Vec<i64>,
    /// Whether an `isError: true` result is transient for this tool.
    #[serde(default)]
    pub retry_on_tool_error: bool,
    /// How often the tool may be called across the cluster (`Tool::rate`).
    #[serde(default)]
    pub rate: Option<RateRule>,
    /// How many calls of it may run at once across the cluster (`Tool::concurrency`).
    #[serde(default)]
    pub concurrency: Option<super::concurrency::ConcurrencyRule>,
}

/// A `[[tool]]` rule's `rate = { per_second, burst, per_tenant }`: at most
/// `per_second` calls a second across the cluster, `burst` (1) at once, one
/// count for the tool or (`per_tenant`) one per tenant.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateRule {
    /// Calls a second (more than 0).
    pub per_second: f64,
    /// How many may come at once (at least 1).
    #[serde(default)]
    pub burst: Option<u32>,
    /// One count per tenant instead of one for the tool.
    #[serde(default)]
    pub per_tenant: bool,
}

/// A `[[tool]]` rule's `retry = { attempts, initial_ms, max_ms }`: each key
/// left out is the default policy's (3 tries, backing off from 1 s up to 60 s).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryRule {
    /// Tries in all, the first included (1: never tried again).
    #[serde(default)]
    pub attempts: Option<u32>,
    /// The backoff's first cap, in ms.
    #[serde(default)]
    pub initial_ms: Option<u64>,
    /// The backoff's largest cap, in ms.
    #[serde(default)]
    pub max_ms: Option<u64>,
}

impl RetryRule {
    /// The policy it gives, if it makes sense (at least 1 attempt, `0 < initial_ms <= max_ms`).
    pub fn policy(&self) -> Result<RetryPolicy, presa_server::RetryPolicyError> {
        let default = RetryPolicy::default();
        let ms = |v: Option<u64>, d: Duration| v.map_or(d, Duration::from_millis);
        RetryPolicy::attempts(self.attempts.unwrap_or(default.attempts))
            .backoff(ms(self.initial_ms, default.initial), ms(self.max_ms, default.max))
            .validated()
    }
}

impl ToolRule {
    /// Its retry policy, if it gives one; checked when the configuration is resolved.
    pub fn retry_policy(&self) -> Result<Option<RetryPolicy>, ConfigError> {
        self.retry
            .map(|r| r.policy())
            .transpose()
            .map_err(|e| ConfigError::Invalid(format!("[[tool]] match = {:?}: retry: {e}", self.pattern)))
    }

    /// Its rate, if it gives one; checked when the configuration is resolved.
    pub fn tool_rate(&self) -> Result<Option<ToolRate>, ConfigError> {
        let Some(r) = self.rate else { return Ok(None) };
        let refuse = |why: &str| ConfigError::Invalid(format!("[[tool]] match = {:?}: rate: {why}", self.pattern));
        if !(r.per_second.is_finite() && r.per_second > 0.0) {
            return Err(refuse("per_second must be a number over 0"));
        }
        if r.burst == Some(0) {
            return Err(refuse("burst must be at least 1"));
        }
        let rate = ToolRate::per_second(r.per_second).burst(r.burst.unwrap_or(1));
        Ok(Some(if r.per_tenant { rate.per_tenant() } else { rate }))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct File {
    /// Whether `/mcp` serves the whole catalog (`[[server]]`s aside).
    #[serde(default)]
    pub(super) root: Option<bool>,
    #[serde(default)]
    pub(super) upstream: Vec<FileUpstream>,
    #[serde(default)]
    pub(super) server: Vec<super::servers::FileServer>,
    #[serde(default)]
    pub(super) tool: Vec<ToolRule>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileUpstream {
    name: String,
    command: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    inherit_env: Vec<String>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    prefix: String,
    pool: Option<usize>,
    protocol: Option<Protocol>,
    breaker: Option<super::BreakerRule>,
    auth: Option<super::AuthRule>,
    tls: Option<super::TlsRule>,
    #[serde(default)]
    expose: Option<Vec<String>>,
    #[serde(default)]
    hide: Vec<String>,
    #[serde(default)]
    tool: Vec<super::ToolShape>,
}

impl FileUpstream {
    pub(super) fn resolve(
        self,
        default_pool: usize,
        default_protocol: Protocol,
    ) -> Result<UpstreamConfig, ConfigError> {
        let name = self.name;
        let auth = self.auth.map(|a| a.resolve(&name)).transpose()?;
        let tls = self.tls.map(|t| t.resolve(&name)).transpose()?;
        let endpoint = match (self.command, self.url) {
            (Some(_), None) if auth.is_some() || tls.is_some() => {
                return Err(ConfigError::Invalid(format!(
                    "upstream {name:?}: auth and tls are for url upstreams (Streamable HTTP), not a command"
                )));
            }
            (Some(cmd), None) => stdio(&cmd, self.env, self.inherit_env, self.cwd)?,
            (None, Some(url)) => {
                let headers = self.headers.into_iter().map(|(k, v)| Ok((k, resolve_secret(&v)?)));
                http(&url, headers, auth, tls)?
            }
            _ => {
                return Err(ConfigError::Invalid(format!("upstream {name:?}: give exactly one of command or url")));
            }
        };
        let pool = self.pool.unwrap_or(default_pool);
        if pool == 0 {
            return Err(ConfigError::Invalid(format!("upstream {name:?}: pool must be at least 1")));
        }
        let protocol = self.protocol.unwrap_or(default_protocol);
        let breaker = self.breaker.map(|b| b.breaker(&name)).transpose()?;
        let shape = super::UpstreamShape::resolve(&name, self.expose, self.hide, self.tool)?;
        Ok(UpstreamConfig { name, endpoint, prefix: self.prefix, pool, protocol, breaker, shape })
    }
}

pub(super) fn parse_file(text: &str) -> Result<File, String> {
    toml::from_str(text).map_err(|e| e.to_string())
}
