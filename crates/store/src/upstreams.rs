//! What a gateway process says of its upstream MCP servers in its heartbeat
//! ([`crate::NodeInfo::upstreams`]), for the admin API's
//! `GET /admin/v1/upstreams` (`docs/admin.md`). Generic figures: the store
//! and the admin API know nothing of how a gateway connects.
//!
//! A heartbeat is one JSON value per node (Redis: one key; memory: a map),
//! so its size is bounded here: at most [`MAX_REPORTED_UPSTREAMS`]
//! upstreams, [`MAX_REPORTED_TOOLS`] tools each and an error of at most
//! [`MAX_ERROR_CHARS`] characters ([`UpstreamReport::bounded`]).

use serde::{Deserialize, Serialize};

/// The most upstreams one heartbeat reports (the rest are left out).
pub const MAX_REPORTED_UPSTREAMS: usize = 64;
/// The most tools one upstream's report counts calls of (the rest are left out).
pub const MAX_REPORTED_TOOLS: usize = 256;
/// The most characters of an upstream's last error a heartbeat carries.
pub const MAX_ERROR_CHARS: usize = 200;

/// One upstream as one process sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamReport {
    /// The upstream's name (its `[[upstream]]` name).
    pub name: String,
    /// `starting` (no connection opened yet), `ready` (the last start
    /// succeeded) or `failing` (the last start failed).
    pub state: String,
    /// Connections the pool may hold at once.
    pub pool: u64,
    /// Connections running a request now.
    pub in_use: u64,
    /// Connections that went away and were replaced, or were dropped by an
    /// operator's restart, since the process started.
    pub restarts: u64,
    /// Why the last start or call of the upstream failed, redacted (no
    /// secrets, at most [`MAX_ERROR_CHARS`] characters).
    #[serde(default)]
    pub last_error: Option<String>,
    /// Listings of the upstream that differed from the one before (1 after
    /// the first listing).
    pub catalog_version: u64,
    /// Tools its last listing offered.
    pub tool_count: u64,
    /// Calls and errors per tool this process ran, by tool name.
    #[serde(default)]
    pub tools: Vec<ToolCalls>,
}

/// The most characters of a refused config's reason a heartbeat carries.
pub const MAX_REFUSAL_CHARS: usize = 500;

/// A gateway process's config file as it serves it
/// ([`crate::NodeInfo::config`]), for `GET /admin/v1/gateway/config`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigReport {
    /// A fingerprint of the config being served (changes when a reload applies one).
    pub version: String,
    /// When that config was loaded (at start or by a reload), Unix ms.
    pub loaded_at_ms: u64,
    /// When a reload last refused a new config, Unix ms.
    #[serde(default)]
    pub refused_at_ms: Option<u64>,
    /// Why (at most [`MAX_REFUSAL_CHARS`] characters; the process's log has it whole).
    #[serde(default)]
    pub refusal: Option<String>,
}

impl ConfigReport {
    /// This report, its refusal cut to [`MAX_REFUSAL_CHARS`] characters.
    pub fn bounded(mut self) -> Self {
        if let Some(r) = &mut self.refusal
            && let Some((cut, _)) = r.char_indices().nth(MAX_REFUSAL_CHARS)
        {
            r.truncate(cut);
        }
        self
    }
}

/// Calls of one upstream tool this process ran.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCalls {
    /// The tool's name, as the upstream calls it.
    pub tool: String,
    /// Calls sent.
    pub calls: u64,
    /// Calls that failed or answered `isError`.
    pub errors: u64,
}

impl UpstreamReport {
    /// The report held to this module's bounds.
    pub fn bounded(mut self) -> UpstreamReport {
        self.tools.truncate(MAX_REPORTED_TOOLS);
        self.last_error = self.last_error.map(|e| e.chars().take(MAX_ERROR_CHARS).collect());
        self
    }
}

/// `reports` held to the bounds of a heartbeat.
pub fn bounded(reports: Vec<UpstreamReport>) -> Vec<UpstreamReport> {
    reports.into_iter().take(MAX_REPORTED_UPSTREAMS).map(UpstreamReport::bounded).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heartbeat_holds_bounded_reports() {
        let tools = (0..MAX_REPORTED_TOOLS + 5).map(|i| ToolCalls { tool: format!("t{i}"), ..Default::default() });
        let one = UpstreamReport {
            name: "u".into(),
            last_error: Some("x".repeat(MAX_ERROR_CHARS * 2)),
            tools: tools.collect(),
            ..Default::default()
        };
        let out = bounded(vec![one; MAX_REPORTED_UPSTREAMS + 1]);
        assert_eq!(out.len(), MAX_REPORTED_UPSTREAMS);
        assert_eq!(out[0].tools.len(), MAX_REPORTED_TOOLS);
        assert_eq!(out[0].last_error.as_ref().map(|e| e.chars().count()), Some(MAX_ERROR_CHARS));
    }
}
