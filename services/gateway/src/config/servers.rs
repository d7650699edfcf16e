//! The `[[server]]` tables of the `--gateway-config` file: virtual servers,
//! each an MCP endpoint of its own at `/mcp/<name>` ([`VirtualServer`]),
//! serving the tools, prompts and resources of the upstreams it names
//! (narrowed by `tools` and `hide` globs over the gateway's tool names), with
//! its own required scopes and identity; and the top-level `root` key that
//! stops serving the whole catalog at `/mcp`. Checked here; served by
//! `services/gateway/src/catalog/mod.rs` (one catalog per server) and
//! `crates/server/src/endpoint.rs`.
//!
//! ```toml
//! root = false                     # /mcp serves nothing once servers exist (default: true)
//!
//! [[server]]
//! name = "ml"                      # /mcp/ml: [a-z0-9][a-z0-9_-]*, unique
//! upstreams = ["ml", "search"]     # whose shaped tools, prompts and resources it serves
//! tools = ["ml_*", "search"]       # only these of their tools (globs over the gateway's names)
//! hide = ["ml_delete_*"]           # and never these
//! scopes = ["ml"]                  # needed on every request to it (when authentication is on)
//! title = "ML tools"               # its serverInfo.title
//! instructions = "Train and search."   # its server/discover instructions
//! ```

use serde::Deserialize;

use super::ConfigError;

/// A `[[server]]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileServer {
    name: String,
    upstreams: Vec<String>,
    #[serde(default)]
    tools: Option<Vec<String>>,
    #[serde(default)]
    hide: Vec<String>,
    #[serde(default)]
    scopes: Vec<String>,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    instructions: Option<String>,
}

/// A virtual server: what `/mcp/<name>` serves. It selects from the
/// gateway's catalog and never renames, so its tools keep the gateway's names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VirtualServer {
    /// Its name, the path segment of `/mcp/<name>`.
    pub name: String,
    /// The upstreams whose (shaped) tools, prompts and resources it serves.
    pub upstreams: Vec<String>,
    /// Globs over the gateway's tool names: only these are served (`None`: all of its upstreams').
    pub tools: Option<Vec<String>>,
    /// Globs over the gateway's tool names never served.
    pub hide: Vec<String>,
    /// OAuth scopes every request to it needs.
    pub scopes: Vec<String>,
    /// Its `serverInfo.title`.
    pub title: Option<String>,
    /// Its `server/discover` instructions.
    pub instructions: Option<String>,
}

impl VirtualServer {
    /// Whether it serves the gateway's tool `name` (of one of its upstreams).
    pub fn serves_tool(&self, name: &str) -> bool {
        let matches = |globs: &[String]| globs.iter().any(|g| glob::Pattern::new(g).is_ok_and(|p| p.matches(name)));
        self.tools.as_deref().is_none_or(matches) && !matches(&self.hide)
    }

    /// Whether it serves what upstream `name` offers.
    pub fn serves_upstream(&self, name: &str) -> bool {
        self.upstreams.iter().any(|u| u == name)
    }
}

/// The `[[server]]` tables checked against the `upstreams` the file names:
/// each name a valid path segment and unique, each upstream it names
/// existing, each glob valid; `root = false` only with at least one server.
pub(super) fn resolve(
    servers: Vec<FileServer>,
    root: bool,
    upstreams: &[String],
) -> Result<Vec<VirtualServer>, ConfigError> {
    let invalid = |name: &str, why: String| ConfigError::Invalid(format!("[[server]] name = {name:?}: {why}"));
    let mut out: Vec<VirtualServer> = Vec::with_capacity(servers.len());
    for s in servers {
        if !presa_server::endpoint::valid_name(&s.name) {
            return Err(invalid(&s.name, "a name must be a URL path segment: [a-z0-9][a-z0-9_-]*".into()));
        }
        if out.iter().any(|o| o.name == s.name) {
            return Err(ConfigError::Invalid(format!("two [[server]] tables are named {:?}", s.name)));
        }
        if s.upstreams.is_empty() {
            return Err(invalid(&s.name, "upstreams must name at least one [[upstream]]".into()));
        }
        if let Some(unknown) = s.upstreams.iter().find(|u| !upstreams.contains(u)) {
            return Err(invalid(&s.name, format!("no [[upstream]] is named {unknown:?} (there are {upstreams:?})")));
        }
        for g in s.tools.iter().flatten().chain(&s.hide) {
            glob::Pattern::new(g).map_err(|e| invalid(&s.name, format!("glob {g:?}: {e}")))?;
        }
        out.push(VirtualServer {
            name: s.name,
            upstreams: s.upstreams,
            tools: s.tools,
            hide: s.hide,
            scopes: s.scopes,
            title: s.title,
            instructions: s.instructions,
        });
    }
    if !root && out.is_empty() {
        return Err(ConfigError::Invalid("root = false serves nothing: add a [[server]] or leave root out".into()));
    }
    Ok(out)
}
