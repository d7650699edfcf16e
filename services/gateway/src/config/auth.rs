//! An `[[upstream]]` table's `auth = { client_credentials = { … } }`: how
//! the gateway signs in to a Streamable HTTP upstream with the OAuth 2.1
//! client credentials grant (RFC 6749 §4.4), checked when the configuration
//! is resolved. The token itself is fetched, cached and refreshed by
//! `upstream/oauth.rs`.
//!
//! The client secret comes from a file (read again at every token fetch, so
//! a rotated file is picked up) or an environment variable (read once, at
//! start). It is held in a [`Secret`], whose `Debug` never shows it.

use std::{path::PathBuf, time::Duration};

use serde::Deserialize;

use super::ConfigError;

/// The default share of a token's `expires_in` after which a new one is fetched.
const DEFAULT_REFRESH_PERCENT: u8 = 80;
/// The default least time a token is used before a new one is fetched.
const DEFAULT_MIN_REFRESH_MS: u64 = 1000;
/// The default longest a token request may take.
const DEFAULT_TIMEOUT_MS: u64 = 10_000;

/// `auth = { … }` on an `[[upstream]]` table: one sign-in scheme.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthRule {
    /// The OAuth client credentials grant.
    pub client_credentials: ClientCredentialsRule,
}

/// `client_credentials = { … }`, as written in the file.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientCredentialsRule {
    /// The authorization server's token endpoint (`http://` or `https://`).
    pub token_url: String,
    /// The client's id.
    pub client_id: String,
    /// A file holding the client secret (surrounding whitespace trimmed).
    #[serde(default)]
    pub client_secret_file: Option<PathBuf>,
    /// An environment variable of the gateway's holding the client secret.
    #[serde(default)]
    pub client_secret_env: Option<String>,
    /// The `scope` asked for (space-separated), if any.
    #[serde(default)]
    pub scope: Option<String>,
    /// The `audience` asked for (a parameter Auth0 and others read), if any.
    #[serde(default)]
    pub audience: Option<String>,
    /// How the client authenticates to the token endpoint (`basic` by default).
    #[serde(default)]
    pub client_auth: ClientAuth,
    /// The share of `expires_in`, in percent, after which a new token is fetched (80).
    #[serde(default)]
    pub refresh_percent: Option<u8>,
    /// The least time, in ms, a token is used before a new one is fetched (1000).
    #[serde(default)]
    pub min_refresh_ms: Option<u64>,
    /// The longest one token request may take, in ms (10000).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

impl std::fmt::Debug for ClientCredentialsRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Nothing here is secret (the secret is only named), but keep it short.
        f.debug_struct("ClientCredentialsRule")
            .field("token_url", &presa_telemetry::redact_url(&self.token_url))
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

/// How the client authenticates to the token endpoint (RFC 6749 §2.3.1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum ClientAuth {
    /// `client_secret_basic`: HTTP Basic with the form-encoded id and secret.
    #[default]
    #[serde(rename = "basic")]
    Basic,
    /// `client_secret_post`: `client_id` and `client_secret` in the form.
    #[serde(rename = "post")]
    Post,
}

/// A secret value: its `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a secret.
    pub fn new(value: String) -> Self {
        Secret(value)
    }

    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Where the client secret is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// A file, read at every token fetch.
    File(PathBuf),
    /// An environment variable, read at start.
    Env {
        /// Its name.
        name: String,
        /// Its value.
        value: Secret,
    },
}

impl SecretSource {
    /// The secret now (a file is read again), or why not (naming the file, never its content).
    pub fn read(&self) -> Result<Secret, String> {
        match self {
            SecretSource::Env { value, .. } => Ok(value.clone()),
            SecretSource::File(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("reading the client secret file {}: {e}", path.display()))?;
                let secret = text.trim();
                if secret.is_empty() {
                    return Err(format!("the client secret file {} is empty", path.display()));
                }
                Ok(Secret(secret.to_string()))
            }
        }
    }
}

/// A resolved `client_credentials` sign-in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCredentials {
    /// The token endpoint.
    pub token_url: String,
    /// The client's id.
    pub client_id: String,
    /// Where its secret comes from.
    pub secret: SecretSource,
    /// The `scope` asked for.
    pub scope: Option<String>,
    /// The `audience` asked for.
    pub audience: Option<String>,
    /// How the client authenticates to the token endpoint.
    pub client_auth: ClientAuth,
    /// The share of `expires_in`, in percent, after which a new token is fetched.
    pub refresh_percent: u8,
    /// The least time a token is used before a new one is fetched.
    pub min_refresh: Duration,
    /// The longest one token request may take.
    pub timeout: Duration,
}

impl AuthRule {
    /// The sign-in of the upstream `name`, if it makes sense.
    pub fn resolve(self, name: &str) -> Result<ClientCredentials, ConfigError> {
        let c = self.client_credentials;
        let refuse = |why: String| ConfigError::Invalid(format!("upstream {name:?}: auth.client_credentials: {why}"));
        let uri: http::Uri = c.token_url.parse().map_err(|e| refuse(format!("token_url: {e}")))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(refuse("token_url: expected http://host[:port]/path or https://…".into()));
        }
        if c.client_id.is_empty() {
            return Err(refuse("client_id must not be empty".into()));
        }
        let secret = match (c.client_secret_file, c.client_secret_env) {
            (Some(path), None) => {
                let source = SecretSource::File(path);
                source.read().map_err(refuse)?;
                source
            }
            (None, Some(var)) => {
                let value = std::env::var(&var).ok().filter(|v| !v.trim().is_empty());
                let value = value.ok_or_else(|| refuse(format!("client_secret_env names {var}, which is not set")))?;
                SecretSource::Env { name: var, value: Secret(value.trim().to_string()) }
            }
            _ => return Err(refuse("give exactly one of client_secret_file or client_secret_env".into())),
        };
        let refresh_percent = c.refresh_percent.unwrap_or(DEFAULT_REFRESH_PERCENT);
        if !(10..=95).contains(&refresh_percent) {
            return Err(refuse(format!("refresh_percent must be 10 to 95, not {refresh_percent}")));
        }
        let timeout = c.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
        if timeout == 0 {
            return Err(refuse("timeout_ms must be at least 1".into()));
        }
        Ok(ClientCredentials {
            token_url: c.token_url,
            client_id: c.client_id,
            secret,
            scope: c.scope.filter(|s| !s.is_empty()),
            audience: c.audience.filter(|s| !s.is_empty()),
            client_auth: c.client_auth,
            refresh_percent,
            min_refresh: Duration::from_millis(c.min_refresh_ms.unwrap_or(DEFAULT_MIN_REFRESH_MS)),
            timeout: Duration::from_millis(timeout),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Endpoint, GatewayArgs, GatewayConfig, file::parse_file};

    fn resolve(toml: &str) -> Result<GatewayConfig, String> {
        let file = parse_file(toml)?;
        GatewayArgs { upstream_pool: 1, ..GatewayArgs::default() }.resolve_with(Some(file)).map_err(|e| e.to_string())
    }

    fn upstream(auth: &str) -> String {
        format!("[[upstream]]\nname = \"search\"\nurl = \"http://127.0.0.1:9/mcp\"\nauth = {auth}\n")
    }

    #[test]
    fn the_secret_never_shows_in_debug() {
        let dir = tempfile::tempdir().unwrap();
        let secret_file = dir.path().join("secret");
        std::fs::write(&secret_file, "s3cret-from-file\n").unwrap();
        let auth = format!(
            "{{ client_credentials = {{ token_url = \"http://127.0.0.1:9/token\", client_id = \"gw\", \
             client_secret_file = {:?}, scope = \"mcp\" }} }}",
            secret_file.display().to_string()
        );
        let config = resolve(&upstream(&auth)).unwrap();
        let Endpoint::Http { auth: Some(c), .. } = &config.upstreams[0].endpoint else { panic!("no auth") };
        assert_eq!((c.client_id.as_str(), c.scope.as_deref(), c.refresh_percent), ("gw", Some("mcp"), 80));
        assert_eq!(c.secret.read().unwrap().expose(), "s3cret-from-file");
        let debug = format!("{config:?}");
        assert!(!debug.contains("s3cret"), "{debug}");

        // From the environment (a variable every test process has): read at start, redacted too.
        let value = std::env::var("PATH").unwrap();
        let auth = "{ client_credentials = { token_url = \"http://127.0.0.1:9/token\", client_id = \"gw\", \
                    client_secret_env = \"PATH\", client_auth = \"post\" } }";
        let config = resolve(&upstream(auth)).unwrap();
        let Endpoint::Http { auth: Some(c), .. } = &config.upstreams[0].endpoint else { panic!("no auth") };
        assert_eq!(c.secret.read().unwrap().expose(), value.trim());
        let debug = format!("{config:?}");
        assert!(!debug.contains(value.trim()) && debug.contains("<redacted>"), "{debug}");
    }

    /// The example of docs/gateway.md's "Upstreams that need sign-in", with its secret file made here.
    #[test]
    fn the_documented_example_resolves() {
        let doc = include_str!("../../../../docs/gateway.md");
        let section = doc.split("## Upstreams that need sign-in").nth(1).expect("the section");
        let example = section.split("```toml\n").nth(1).and_then(|s| s.split("```").next()).expect("its example");
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "x").unwrap();
        let example = example.replace("/run/secrets/crm-client-secret", &secret.display().to_string());
        let config = resolve(&example).unwrap();
        let Endpoint::Http { auth: Some(c), .. } = &config.upstreams[0].endpoint else { panic!("no auth") };
        assert_eq!(c.token_url, "https://login.internal/oauth2/token");
        assert_eq!((c.scope.as_deref(), c.audience.as_deref()), (Some("mcp:tools"), Some("https://crm.internal")));
    }

    #[test]
    fn mistakes_are_refused_at_start_naming_the_upstream() {
        let cc = |rest: &str| {
            format!("{{ client_credentials = {{ token_url = \"http://a/t\", client_id = \"gw\"{rest} }} }}")
        };
        let cases = [
            (cc(""), "upstream \"search\": auth.client_credentials: give exactly one of client_secret_file or client_secret_env"),
            (
                "{ client_credentials = { token_url = \"ftp://a/t\", client_id = \"gw\", client_secret_env = \"PATH\" } }".into(),
                "token_url: expected http://host[:port]/path",
            ),
            (cc(", client_secret_env = \"PRESA_TEST_UNSET_VAR_OAUTH\""), "client_secret_env names PRESA_TEST_UNSET_VAR_OAUTH, which is not set"),
            (cc(", client_secret_file = \"/nonexistent/secret\""), "reading the client secret file /nonexistent/secret"),
            (cc(", client_secret_env = \"PATH\", refresh_percent = 99"), "refresh_percent must be 10 to 95, not 99"),
            (cc(", client_secret_env = \"PATH\", client_secret = \"x\""), "unknown field `client_secret`"),
            ("{ password = { user = \"x\" } }".into(), "unknown field `password`"),
        ];
        for (auth, expected) in cases {
            let err = resolve(&upstream(&auth)).unwrap_err();
            assert!(err.contains(expected), "{auth}: {err}");
        }
        let auth = cc(", client_secret_env = \"PATH\"");
        let stdio = format!("[[upstream]]\nname = \"s\"\ncommand = \"true\"\nauth = {auth}\n");
        assert!(resolve(&stdio).unwrap_err().contains("auth and tls are for url upstreams"));
        let both = format!("{}headers = {{ Authorization = \"Bearer x\" }}\n", upstream(&auth));
        assert!(resolve(&both).unwrap_err().contains("both an Authorization header and auth"));
    }
}
