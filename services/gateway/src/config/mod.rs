//! What the gateway is put in front of, and how each tool is served: the
//! flags ([`GatewayArgs`], one upstream) and the TOML file (`--gateway-config`,
//! several upstreams and per-tool rules), both resolved into one
//! [`GatewayConfig`]. Pure: nothing here starts a process or opens a socket.
//!
//! ```toml
//! [[upstream]]
//! name = "ml"                      # names metrics and logs; unique
//! command = "python3 server.py"    # stdio: split like a shell would, never run by one
//! env = { MODEL_DIR = "/models" }  # its whole environment, with PATH, HOME, locale, TMPDIR
//! inherit_env = ["HF_TOKEN"]       # and these of the gateway's, by name
//! cwd = "/srv/ml"
//! prefix = "ml_"                   # its tools are listed as ml_<name>
//! pool = 4                         # child processes at most (calls at once)
//! breaker = { failures = 5, window_s = 30, cool_down_s = 10 }   # one circuit breaker for its tools
//! hide = ["delete_*"]              # globs over its own tool names: not served (also `expose = [..]`)
//!
//! [[upstream.tool]]                # how the ml upstream's tools are shown and called
//! match = "train"                  # a glob over the upstream's own name
//! rename = "train_model"           # listed (and called) as ml_train_model
//! annotations = { idempotentHint = true }
//! pin = { device = "gpu0" }        # set on every call, out of the listed schema
//! defaults = { epochs = 3 }        # set when the call leaves it out
//! max_output_bytes = 1048576       # a bigger result is a tool error
//!
//! [[upstream]]
//! name = "search"
//! url = "http://127.0.0.1:3001/mcp"   # Streamable HTTP
//! headers = { Authorization = "Bearer ${env:SEARCH_TOKEN}" }
//!
//! [[upstream]]
//! name = "crm"
//! url = "https://crm.internal/mcp"
//! auth = { client_credentials = { token_url = "https://login.internal/oauth/token", client_id = "presa",
//!          client_secret_file = "/run/secrets/crm", scope = "mcp" } }   # OAuth client credentials
//! tls = { client_cert_file = "/run/tls/crt", client_key_file = "/run/tls/key", ca_file = "/run/tls/ca" }   # mTLS
//!
//! [[tool]]
//! match = "ml_train_*"             # a glob over the listed name
//! policy = "required"              # sync | optional | required
//! rerun = "never"                  # after a lost worker: auto | always | never
//! scopes = ["ml:train"]
//! retry = { attempts = 4, initial_ms = 200, max_ms = 2000 }   # tasks' transient failures
//! retry_on_codes = [-32001]        # these upstream JSON-RPC errors are transient too
//! retry_on_tool_error = true       # and so are its isError results
//! concurrency = { limit = 2, per_argument = "model" }   # calls at once, cluster-wide
//!
//! [[server]]                       # a virtual server at /mcp/ml (see `servers`)
//! name = "ml"
//! upstreams = ["ml"]
//! scopes = ["ml"]
//! ```
//!
//! The code is split by what it reads: `args` holds the flags
//! ([`GatewayArgs`]) and resolves everything, `file` the TOML file's shape and
//! its per-tool rules ([`ToolRule`]), `breaker` an upstream's circuit breaker
//! ([`BreakerRule`]), `concurrency` a rule's concurrency limit
//! ([`ConcurrencyRule`]), `shape` which of an upstream's tools are served and
//! how each is shown and called ([`UpstreamShape`], [`ToolShape`]),
//! `servers` the virtual servers ([`VirtualServer`]),
//! `upstream` how one upstream is reached ([`UpstreamConfig`], [`Endpoint`])
//! and the checks and secret references of its command line, URL and headers.

use std::{path::PathBuf, time::Duration};

mod args;
mod auth;
mod breaker;
mod concurrency;
mod file;
mod servers;
mod shape;
#[cfg(test)]
mod tests;
mod tls;
mod upstream;

pub use args::GatewayArgs;
pub use auth::{AuthRule, ClientAuth, ClientCredentials, ClientCredentialsRule, Secret, SecretSource};
pub use breaker::BreakerRule;
pub use concurrency::ConcurrencyRule;
pub use file::{PolicyRule, Rerun, RetryRule, ToolRule};
pub use servers::VirtualServer;
pub use shape::{AnnotationsRule, ToolShape, UpstreamShape};
pub use tls::{ClientTls, TlsRule};
pub use upstream::{Endpoint, Protocol, UpstreamConfig};

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

/// Limits and timings every upstream shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timings {
    /// Longest one call.
    pub call_timeout: Duration,
    /// Longest a prompt, read, completion or listing waits for a connection.
    pub wait: Duration,
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
    /// The virtual servers (`[[server]]`), each at `/mcp/<name>`.
    pub servers: Vec<VirtualServer>,
    /// Whether `/mcp` serves the whole catalog (the file's `root`, default true).
    pub root: bool,
}

impl GatewayConfig {
    /// The rule for a listed tool name, if any.
    pub fn rule(&self, tool: &str) -> Option<&ToolRule> {
        self.rules.iter().find(|r| glob::Pattern::new(&r.pattern).is_ok_and(|p| p.matches(tool)))
    }
}
