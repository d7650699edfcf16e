//! One upstream: how it is reached ([`Endpoint`]: a stdio child or a
//! Streamable HTTP URL), the revision spoken to it ([`Protocol`]), and the
//! checks that turn a command line, a URL, `KEY=VALUE` pairs and headers
//! (with their `${env:…}` / `${file:…}` secrets) into one.

use std::{collections::BTreeMap, path::PathBuf};

use serde::Deserialize;

use super::{ConfigError, auth::ClientCredentials, tls::ClientTls};

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

/// How to reach one upstream. Its `Debug` shows a header's name, never its
/// value (a static `Authorization` is a secret).
#[derive(Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A child process spoken to over stdio.
    Stdio {
        /// The program and its arguments.
        argv: Vec<String>,
        /// The environment variables it is given (besides a minimal `PATH`,
        /// `HOME`, locale and `TMPDIR`: nothing of the gateway's own).
        env: BTreeMap<String, String>,
        /// Names of the gateway's environment variables passed through to it
        /// (`inherit_env`, `--upstream-inherit-env`).
        inherit: Vec<String>,
        /// The working directory.
        cwd: Option<PathBuf>,
    },
    /// A Streamable HTTP endpoint.
    Http {
        /// The URL.
        url: String,
        /// Headers sent with every request (values resolved; not shown by `Debug`).
        headers: Vec<(String, String)>,
        /// How the gateway signs in to it (`auth`), if it must.
        auth: Option<ClientCredentials>,
        /// Its client certificate and CA (`tls`), if given.
        tls: Option<ClientTls>,
    },
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Stdio { argv, env, inherit, cwd } => f
                .debug_struct("Stdio")
                .field("argv", argv)
                .field("env", &env.keys().collect::<Vec<_>>())
                .field("inherit", inherit)
                .field("cwd", cwd)
                .finish(),
            Endpoint::Http { url, headers, auth, tls } => f
                .debug_struct("Http")
                .field("url", &presa_telemetry::redact_url(url))
                .field("headers", &headers.iter().map(|(k, _)| k).collect::<Vec<_>>())
                .field("auth", auth)
                .field("tls", tls)
                .finish(),
        }
    }
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
    /// The circuit breaker all its tools share (`[[upstream]] breaker`), named after it.
    pub breaker: Option<presa_server::ToolBreaker>,
    /// Which of its tools are served, and how each is shown and called.
    pub shape: super::UpstreamShape,
}

pub(super) fn stdio(
    cmd: &str,
    env: BTreeMap<String, String>,
    inherit: Vec<String>,
    cwd: Option<PathBuf>,
) -> Result<Endpoint, ConfigError> {
    let argv = shlex::split(cmd)
        .filter(|a| !a.is_empty())
        .ok_or_else(|| ConfigError::Invalid(format!("upstream command {cmd:?}: empty or unbalanced quotes")))?;
    for name in env.keys().chain(&inherit) {
        if !is_env_name(name) {
            return Err(ConfigError::Invalid(format!(
                "upstream environment variable name {name:?}: expected letters, digits and '_', not starting with a digit"
            )));
        }
    }
    Ok(Endpoint::Stdio { argv, env, inherit, cwd })
}

/// A portable environment variable name (POSIX: `[A-Za-z_][A-Za-z0-9_]*`).
fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

pub(super) fn http(
    url: &str,
    headers: impl Iterator<Item = Result<(String, String), ConfigError>>,
    auth: Option<ClientCredentials>,
    tls: Option<ClientTls>,
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
    if auth.is_some() && headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("authorization")) {
        return Err(ConfigError::Invalid(format!(
            "upstream url {url:?}: both an Authorization header and auth are given; keep one"
        )));
    }
    Ok(Endpoint::Http { url: url.to_string(), headers, auth, tls })
}

pub(super) fn parse_env(pairs: &[String]) -> Result<BTreeMap<String, String>, ConfigError> {
    pairs
        .iter()
        .map(|p| match p.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(ConfigError::Invalid(format!("--upstream-env {p:?}: expected KEY=VALUE"))),
        })
        .collect()
}

pub(super) fn parse_header(h: &str) -> Result<(String, String), ConfigError> {
    let (name, value) = h
        .split_once(':')
        .ok_or_else(|| ConfigError::Invalid(format!("--upstream-header {h:?}: expected 'Name: value'")))?;
    Ok((name.trim().to_string(), resolve_secret(value.trim())?))
}

/// Replace `${env:VAR}` and `${file:/path}` in a header value.
pub(super) fn resolve_secret(value: &str) -> Result<String, ConfigError> {
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
