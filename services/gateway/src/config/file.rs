//! The `--gateway-config` TOML file: its `[[upstream]]` tables and its
//! `[[tool]]` rules ([`ToolRule`]: task policy, crash policy, scopes).

use std::{collections::BTreeMap, path::PathBuf};

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
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct File {
    #[serde(default)]
    pub(super) upstream: Vec<FileUpstream>,
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
}

impl FileUpstream {
    pub(super) fn resolve(
        self,
        default_pool: usize,
        default_protocol: Protocol,
    ) -> Result<UpstreamConfig, ConfigError> {
        let name = self.name;
        let endpoint = match (self.command, self.url) {
            (Some(cmd), None) => stdio(&cmd, self.env, self.inherit_env, self.cwd)?,
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

pub(super) fn parse_file(text: &str) -> Result<File, String> {
    toml::from_str(text).map_err(|e| e.to_string())
}
