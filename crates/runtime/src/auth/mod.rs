//! Who may call `presa-api`: the `--auth` flags ([`AuthArgs`]) and what they
//! build (a [`presa_http::Access`]: the authenticator, the challenge, the RFC 9728 metadata),
//! plus the start-up refusals that keep a deployment from running open by
//! mistake ([`check_listen`], [`check_admin`], [`check_state_secret`], in
//! `checks`, each refusal a [`CheckError`]).

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use presa_auth::{
    AuthError,
    jwt::{Jwks, JwksSource, JwtAuthenticator, JwtConfig},
    tokens::StaticTokens,
};
use presa_http::{Access, Anonymous, Authenticator, Challenge, ResourceMetadata, auth::metadata::metadata_url};

mod checks;

pub use checks::{
    CheckError, MIN_STATE_SECRET_BYTES, STATE_SECRET_PLACEHOLDER, check_admin, check_listen, check_resource_url,
    check_state_secret,
};

/// How callers authenticate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthMode {
    /// No authentication: every caller shares one anonymous scope (loopback only, unless `--allow-anonymous`).
    None,
    /// Bearer JWTs verified against a JWKS (OAuth 2.1 resource server).
    Jwt,
    /// Static bearer tokens from `--tokens-file` (SHA-256 digests).
    Tokens,
}

/// The authentication flags of `presa-api`.
#[derive(Debug, Clone, clap::Args)]
pub struct AuthArgs {
    /// How callers authenticate: `none`, `jwt` (bearer JWTs) or `tokens` (static bearer tokens).
    #[arg(long = "auth", env = "PRESA_AUTH", value_enum, default_value_t = AuthMode::None)]
    pub auth: AuthMode,

    /// Allow `--auth none` on a non-loopback `--listen` address (every caller shares one scope).
    #[arg(long, env = "PRESA_ALLOW_ANONYMOUS")]
    pub allow_anonymous: bool,

    /// The canonical URL of this MCP endpoint (e.g. `https://mcp.example.com/mcp`):
    /// the RFC 9728 `resource`, and the default JWT audience. Its metadata is
    /// served at `/.well-known/oauth-protected-resource<its path>`.
    #[arg(long, env = "PRESA_RESOURCE_URL")]
    pub resource_url: Option<String>,

    /// Authorization server issuer URLs listed in the resource metadata
    /// (repeat or comma-separate; default: `--jwt-issuer`). With none, no
    /// metadata is published (`--auth tokens` or `none` without this flag).
    #[arg(long = "authorization-server", env = "PRESA_AUTHORIZATION_SERVERS", value_delimiter = ',')]
    pub authorization_servers: Vec<String>,

    /// A scope every MCP request needs (repeat or comma-separate).
    #[arg(long = "required-scope", env = "PRESA_REQUIRED_SCOPES", value_delimiter = ',')]
    pub required_scopes: Vec<String>,

    /// `jwt`: the exact `iss` tokens must carry.
    #[arg(long, env = "PRESA_JWT_ISSUER")]
    pub jwt_issuer: Option<String>,

    /// `jwt`: a value `aud` must contain (default: `--resource-url`).
    #[arg(long, env = "PRESA_JWT_AUDIENCE")]
    pub jwt_audience: Option<String>,

    /// `jwt`: the claim naming the caller's tenant.
    #[arg(long, env = "PRESA_JWT_TENANT_CLAIM", default_value = "iss")]
    pub jwt_tenant_claim: String,

    /// `jwt`: clock skew allowed on `exp` and `nbf`, in seconds.
    #[arg(long, env = "PRESA_JWT_LEEWAY_SECONDS", default_value_t = 30)]
    pub jwt_leeway_seconds: u64,

    /// `jwt`: the issuer's JWKS URL, `https://` (or `http://` inside a trusted network); fetched at start
    /// (retried until it loads, `/readyz` 503 until then), cached, refetched on an unknown `kid`.
    #[arg(long, env = "PRESA_JWKS_URL", conflicts_with = "jwks_file", hide_env_values = true)]
    pub jwks_url: Option<String>,

    /// `jwt`: PEM CA certificates trusted for an `https://` JWKS URL besides the built-in Mozilla roots
    /// (an issuer with a private CA).
    #[arg(long, env = "PRESA_JWKS_CA_FILE", requires = "jwks_url")]
    pub jwks_ca_file: Option<PathBuf>,

    /// `jwt`: a JWKS file instead of a URL (offline setups).
    #[arg(long, env = "PRESA_JWKS_FILE")]
    pub jwks_file: Option<PathBuf>,

    /// `jwt`: least time between the end of a JWKS fetch and the next one an unknown kid causes, in ms
    /// (one fetch at a time, shared by every request waiting for it).
    #[arg(long, env = "PRESA_JWKS_MIN_REFRESH_MS", default_value_t = 30_000)]
    pub jwks_min_refresh_ms: u64,

    /// `tokens`: the tokens file (`<sha256 hex> <tenant> <subject> [scope ...]` per line; reloaded on SIGHUP,
    /// which ends the streams of the tokens it dropped).
    #[arg(long, env = "PRESA_TOKENS_FILE")]
    pub tokens_file: Option<PathBuf>,
}

/// A configuration the process must not start with (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum AuthConfigError {
    /// A flag is missing or wrong; the message names it.
    #[error("{0}")]
    Invalid(String),
    /// `--resource-url` cannot be served.
    #[error(transparent)]
    Check(#[from] CheckError),
    /// A key or tokens file could not be loaded.
    #[error(transparent)]
    Load(#[from] AuthError),
}

impl AuthArgs {
    /// Build who may call: the authenticator, the challenge and the RFC 9728
    /// document. `tool_scopes`: every scope a tool of the catalog needs
    /// (listed in `scopes_supported`).
    pub async fn build(&self, tool_scopes: &[String]) -> Result<Access, AuthConfigError> {
        if let Some(url) = &self.resource_url {
            check_resource_url(url)?;
        }
        let resource_metadata = self.resource_metadata(tool_scopes);
        let metadata_at = resource_metadata.as_ref().map(|m| metadata_url(&m.resource));
        let challenge = Challenge::new(metadata_at, self.required_scopes.clone());
        let authenticator: Arc<dyn Authenticator> = match self.auth {
            AuthMode::None => Arc::new(Anonymous),
            AuthMode::Tokens => {
                let path = self
                    .tokens_file
                    .as_ref()
                    .ok_or_else(|| invalid("--auth tokens needs --tokens-file (PRESA_TOKENS_FILE)"))?;
                let tokens = Arc::new(StaticTokens::load(path, challenge.clone())?);
                tokens.reload_on_hangup();
                tokens
            }
            AuthMode::Jwt => Arc::new(self.jwt(challenge.clone()).await?),
        };
        Ok(Access::new(authenticator, challenge, resource_metadata))
    }

    /// The RFC 9728 document `--resource-url` asks for, naming the
    /// authorization servers and every scope (required or a tool's); none
    /// without an authorization server, which MCP requires in it.
    fn resource_metadata(&self, tool_scopes: &[String]) -> Option<ResourceMetadata> {
        let url = self.resource_url.as_ref()?;
        let mut scopes = self.required_scopes.clone();
        for s in tool_scopes {
            if !scopes.contains(s) {
                scopes.push(s.clone());
            }
        }
        let mut servers: Vec<String> = self.authorization_servers.iter().filter(|s| !s.is_empty()).cloned().collect();
        if servers.is_empty() {
            servers.extend(self.jwt_issuer.clone());
        }
        if servers.is_empty() {
            tracing::warn!(
                "--resource-url without an authorization server (--authorization-server, or --jwt-issuer): \
                 no Protected Resource Metadata is published"
            );
            return None;
        }
        Some(ResourceMetadata::new(url.clone(), servers, scopes))
    }

    /// `--auth jwt`: the issuer, the audience and the keys.
    async fn jwt(&self, challenge: Challenge) -> Result<JwtAuthenticator, AuthConfigError> {
        let issuer =
            self.jwt_issuer.clone().ok_or_else(|| invalid("--auth jwt needs --jwt-issuer (PRESA_JWT_ISSUER)"))?;
        let audience = self.jwt_audience.clone().or_else(|| self.resource_url.clone()).ok_or_else(|| {
            invalid("--auth jwt needs --resource-url (PRESA_RESOURCE_URL) or --jwt-audience (PRESA_JWT_AUDIENCE)")
        })?;
        let min_refresh = Duration::from_millis(self.jwks_min_refresh_ms);
        let jwks = self.jwks(min_refresh).await?;
        let config = JwtConfig {
            issuer,
            audience,
            tenant_claim: self.jwt_tenant_claim.clone(),
            leeway: Duration::from_secs(self.jwt_leeway_seconds),
            min_refresh,
        };
        Ok(JwtAuthenticator::new(config, jwks, challenge))
    }

    /// The signing keys: fetched from `--jwks-url` (an issuer down at start
    /// is retried in the background, unready until then) or read from `--jwks-file`.
    async fn jwks(&self, min_refresh: Duration) -> Result<Arc<Jwks>, AuthConfigError> {
        match (&self.jwks_url, &self.jwks_file) {
            (Some(url), None) => {
                let lower = url.to_ascii_lowercase();
                if !lower.starts_with("https://") && !lower.starts_with("http://") {
                    return Err(invalid("--jwks-url (PRESA_JWKS_URL) must be an https:// (or http://) URL"));
                }
                if lower.starts_with("http://") {
                    tracing::warn!(url = %presa_telemetry::redact_url(url), "--jwks-url is plain http: anyone on the path can swap the signing keys; use https:// outside a trusted network");
                }
                let jwks =
                    Arc::new(Jwks::new(JwksSource::Url(url.clone()), min_refresh, self.jwks_ca_file.as_deref())?);
                if let Err(e) = jwks.load().await {
                    tracing::warn!(
                        error = %e,
                        "JWKS not loaded at start-up: retrying until it loads; not ready (/readyz 503) until then"
                    );
                    jwks.retry_until_loaded();
                }
                Ok(jwks)
            }
            (None, Some(path)) => {
                let jwks = Jwks::new(JwksSource::File(path.clone()), min_refresh, None)?;
                jwks.load().await?;
                Ok(Arc::new(jwks))
            }
            _ => Err(invalid(
                "--auth jwt needs exactly one of --jwks-url (PRESA_JWKS_URL) or --jwks-file (PRESA_JWKS_FILE)",
            )),
        }
    }
}

/// A flag missing or wrong, `message` naming it.
fn invalid(message: &str) -> AuthConfigError {
    AuthConfigError::Invalid(message.to_string())
}

/// The loopback names a loopback listener accepts in `Host` when
/// `--allowed-hosts` is not set: a page on any other name (DNS rebinding)
/// is refused on `/mcp`, the admin API and the console.
pub const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// The `Host` values a listener on `listen` accepts: `configured`
/// (`--allowed-hosts`; `*` alone is every host), else the loopback names on
/// a loopback address, else every host (a pod behind an ingress, whose
/// names the process cannot know).
pub fn allowed_hosts(configured: &[String], listen: SocketAddr) -> Vec<String> {
    match configured {
        [only] if only == "*" => Vec::new(),
        [] if listen.ip().is_loopback() => LOOPBACK_HOSTS.map(String::from).to_vec(),
        _ => configured.to_vec(),
    }
}

/// The authentication flags alone, parsed from `args` (no program name):
/// what this module's tests and `checks`' start from.
#[cfg(test)]
fn auth_args(args: &[&str]) -> AuthArgs {
    #[derive(Debug, clap::Parser)]
    struct Flags {
        #[command(flatten)]
        auth: AuthArgs,
    }
    <Flags as clap::Parser>::parse_from([&["presa"], args].concat()).auth
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loopback_listener_accepts_only_loopback_hosts_unless_told() {
        let at = |a: &str| a.parse::<SocketAddr>().unwrap();
        assert_eq!(allowed_hosts(&[], at("127.0.0.1:8080")), LOOPBACK_HOSTS.map(String::from));
        assert_eq!(allowed_hosts(&[], at("[::1]:8080")), LOOPBACK_HOSTS.map(String::from));
        assert!(allowed_hosts(&[], at("0.0.0.0:8080")).is_empty(), "behind an ingress: every host");
        assert!(allowed_hosts(&["*".into()], at("127.0.0.1:8080")).is_empty(), "`*`: every host");
        let named = vec!["presa.internal".to_string()];
        assert_eq!(allowed_hosts(&named, at("127.0.0.1:8080")), named);
        assert_eq!(allowed_hosts(&named, at("0.0.0.0:8080")), named);
    }

    async fn built(args: &[&str]) -> Access {
        auth_args(args).build(&["deploy".to_string()]).await.unwrap()
    }

    /// Static tokens have no authorization server: without one named, no
    /// metadata (never `authorization_servers: []`) and no `resource_metadata`
    /// in challenges; with one, both, at the resource path's metadata URL.
    #[tokio::test]
    async fn the_resource_metadata_needs_an_authorization_server() {
        let file = std::env::temp_dir().join(format!("presa-tokens-{}", std::process::id()));
        std::fs::write(&file, "").unwrap();
        let tokens = ["--auth", "tokens", "--tokens-file", file.to_str().unwrap()];
        let url = ["--resource-url", "https://h.example/api/mcp"];
        let none = built(&[&tokens[..], &url].concat()).await;
        assert!(none.resource_metadata.is_none());
        assert_eq!(none.challenge.resource_metadata, None);
        let named = built(&[&tokens[..], &url, &["--authorization-server", "https://as.example"]].concat()).await;
        assert_eq!(named.resource_metadata.unwrap().authorization_servers, ["https://as.example"]);
        assert_eq!(
            named.challenge.resource_metadata.as_deref(),
            Some("https://h.example/.well-known/oauth-protected-resource/api/mcp")
        );
        std::fs::remove_file(&file).unwrap();
    }
}
