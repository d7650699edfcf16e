//! Bearer JWTs validated as an OAuth 2.1 resource server (§5.2) and RFC 8707
//! require (`--auth jwt`).
//!
//! - The signature is checked against a JWKS ([`Jwks`]: a URL fetched
//!   asynchronously and cached, or a file). The key is chosen by the
//!   token's `kid` *and* its `alg`, which must fit the key's type (`RSA` →
//!   RS*/PS*, `EC` P-256 → ES256, P-384 → ES384, `OKP` Ed25519 → EdDSA) and
//!   the key's own `alg` when it has one. Symmetric (`oct`) keys are never
//!   used, so `alg: none` and HMAC signed with a public key are refused.
//! - `iss` must equal the configured issuer exactly; the configured
//!   audience must be in `aud`; `exp` and `nbf` are checked with a small leeway.
//! - An unknown `kid` refetches the JWKS: one fetch at a time, that every
//!   request needing it waits for, and the next at least
//!   [`JwtConfig::min_refresh`] after it ended (a burst of made-up kids costs
//!   one fetch, a slow issuer no queue). Tokens whose key is cached never wait.
//! - A JWKS URL that does not answer at start is fetched again in the
//!   background ([`Jwks::retry_until_loaded`]); until it has loaded every
//!   token is refused and the authenticator is not [ready](Authenticator::ready).
//!
//! - A stream a token opens (`subscriptions/listen`, a legacy `GET`) ends
//!   when the token expires (`exp` plus the leeway, see [`Authenticated`]).
//!   A token revoked before its `exp` is not noticed: presa does no
//!   introspection.
//!
//! The caller: subject = `sub`; tenant = the claim named by
//! [`JwtConfig::tenant_claim`] (default `iss`); scopes from `scope` (a
//! space-separated string) or `scp` (an array).

use std::{
    sync::Arc,
    time::{Duration, UNIX_EPOCH},
};

use http::request::Parts;
use jsonwebtoken::{Validation, decode, decode_header};
use serde_json::{Map, Value};

use presa_http::{Authenticated, Authenticator, Caller, Challenge, Refusal};

mod jwks;

use jwks::select;
pub use jwks::{Jwks, JwksSource, LOAD_RETRY_FIRST, LOAD_RETRY_MAX};

/// What the `jwt` authenticator checks.
#[derive(Debug, Clone)]
pub struct JwtConfig {
    /// The exact `iss`.
    pub issuer: String,
    /// What `aud` must contain (the resource URL by default).
    pub audience: String,
    /// The claim naming the tenant (`iss` by default).
    pub tenant_claim: String,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: Duration,
    /// Least time between two JWKS fetches caused by unknown kids.
    pub min_refresh: Duration,
}

/// Why a bearer JWT is refused; its text goes to the client in `error_description`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// Not a JWT, or signed with an algorithm presa does not accept.
    #[error("malformed token or unsupported algorithm")]
    Malformed,
    /// No key of the JWKS fits the token's `kid` and `alg` (even after a refetch).
    #[error("no key for this token's kid and alg")]
    NoKey,
    /// `exp` has passed (beyond the leeway).
    #[error("token expired")]
    Expired,
    /// `nbf` is still to come (beyond the leeway).
    #[error("token not yet valid")]
    NotYetValid,
    /// `iss` is not the configured issuer.
    #[error("wrong issuer")]
    WrongIssuer,
    /// The configured audience is not in `aud`.
    #[error("token not issued for this resource (aud)")]
    WrongAudience,
    /// The signature does not verify.
    #[error("bad signature")]
    BadSignature,
    /// A claim presa needs is missing or empty (`sub`, the tenant claim…).
    #[error("no {0} claim")]
    MissingClaim(String),
    /// Invalid for another reason.
    #[error("invalid token")]
    Invalid,
}

/// The `jwt` authenticator.
#[derive(Debug)]
pub struct JwtAuthenticator {
    config: JwtConfig,
    jwks: Arc<Jwks>,
    challenge: Challenge,
}

impl JwtAuthenticator {
    /// Validate tokens per `config` against `jwks`; refusals carry `challenge`.
    pub fn new(config: JwtConfig, jwks: Arc<Jwks>, challenge: Challenge) -> Self {
        JwtAuthenticator { config, jwks, challenge }
    }

    /// The key cache.
    pub fn jwks(&self) -> &Arc<Jwks> {
        &self.jwks
    }

    /// The caller a token names, or why it is refused (sent in `error_description`).
    pub async fn verify(&self, token: &str) -> Result<Caller, TokenError> {
        self.verify_until(token).await.map(|a| a.caller)
    }

    /// [`JwtAuthenticator::verify`], and until when the token is accepted:
    /// its `exp` plus the leeway.
    pub async fn verify_until(&self, token: &str) -> Result<Authenticated, TokenError> {
        let header = decode_header(token).map_err(|_| TokenError::Malformed)?;
        let kid = header.kid.as_deref();
        let key = match select(&self.jwks.current(), kid, header.alg) {
            Some(key) => key,
            None => {
                // Maybe the issuer rotated its keys: refetch (rate limited), then look again.
                self.jwks.refresh().await;
                select(&self.jwks.current(), kid, header.alg).ok_or(TokenError::NoKey)?
            }
        };
        let mut validation = Validation::new(header.alg);
        validation.algorithms = vec![header.alg];
        validation.leeway = self.config.leeway.as_secs();
        validation.validate_nbf = true;
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&[&self.config.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let data = decode::<Map<String, Value>>(token, &key, &validation).map_err(|e| describe(&e))?;
        let caller = self.caller(&data.claims)?;
        // Validated above: present and a number of seconds.
        let exp = data.claims.get("exp").and_then(Value::as_f64).unwrap_or_default().max(0.0);
        let expires_at = UNIX_EPOCH.checked_add(Duration::from_secs_f64(exp.min(1e12)) + self.config.leeway);
        Ok(Authenticated { expires_at, ..Authenticated::new(caller) })
    }

    fn caller(&self, claims: &Map<String, Value>) -> Result<Caller, TokenError> {
        let subject = claims
            .get("sub")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| TokenError::MissingClaim("sub".into()))?;
        let tenant_claim = &self.config.tenant_claim;
        let tenant = claims
            .get(tenant_claim)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| TokenError::MissingClaim(tenant_claim.clone()))?;
        let scopes = match (claims.get("scope"), claims.get("scp")) {
            (Some(Value::String(s)), _) => s.split_whitespace().map(str::to_string).collect(),
            (_, Some(Value::Array(a))) => a.iter().filter_map(Value::as_str).map(str::to_string).collect(),
            (_, Some(Value::String(s))) => s.split_whitespace().map(str::to_string).collect(),
            _ => Vec::new(),
        };
        Ok(Caller::new(tenant, subject, scopes))
    }
}

fn describe(e: &jsonwebtoken::errors::Error) -> TokenError {
    use jsonwebtoken::errors::ErrorKind;
    match e.kind() {
        ErrorKind::ExpiredSignature => TokenError::Expired,
        ErrorKind::ImmatureSignature => TokenError::NotYetValid,
        ErrorKind::InvalidIssuer => TokenError::WrongIssuer,
        ErrorKind::InvalidAudience => TokenError::WrongAudience,
        ErrorKind::InvalidSignature => TokenError::BadSignature,
        ErrorKind::MissingRequiredClaim(c) => TokenError::MissingClaim(c.clone()),
        _ => TokenError::Invalid,
    }
}

#[async_trait::async_trait]
impl Authenticator for JwtAuthenticator {
    /// Not before the JWKS has loaded once.
    fn ready(&self) -> bool {
        self.jwks.loaded()
    }

    async fn authenticate(&self, parts: &Parts) -> Result<Caller, Refusal> {
        self.authenticate_until(parts).await.map(|a| a.caller)
    }

    async fn authenticate_until(&self, parts: &Parts) -> Result<Authenticated, Refusal> {
        let token = self.challenge.bearer(parts)?;
        self.verify_until(token).await.map_err(|why| {
            tracing::debug!(%why, "bearer token refused");
            self.challenge.invalid_token(&why.to_string())
        })
    }
}
