//! Who is calling: an [`Authenticator`] maps a request's head (method, URI,
//! headers; never the body, which is not read yet) to the [`Caller`] that
//! owns its tasks (with, when known, the credential's end: [`Authenticated`]),
//! or to a [`Refusal`] with its status and `WWW-Authenticate` challenge.
//!
//! This module is the transport's side of authentication: the trait, the
//! [`Refusal`] and the [`Challenge`] that renders its `WWW-Authenticate`,
//! and [`Anonymous`] (one shared, unrestricted scope, for local use). The
//! credential schemes live in the `presa-auth` crate, which implements
//! [`Authenticator`]: bearer JWTs verified against a JWKS (`presa_auth::jwt`)
//! and hashed static bearer tokens (`presa_auth::tokens`); so this crate
//! links no JWT or JWKS code. A library user can plug in another scheme
//! (RFC 7662 introspection, mTLS…). [`metadata`] serves the RFC 9728
//! Protected Resource Metadata the challenges point to.

pub mod metadata;

use axum::http::{StatusCode, header, request::Parts};
use futures::future::BoxFuture;
pub use presa_store::Caller;
use tokio_util::sync::CancellationToken;

/// Maps a request head to its caller, or refuses it.
#[async_trait::async_trait]
pub trait Authenticator: Send + Sync + 'static {
    /// The caller, or why not (sent as is: status, challenge, message).
    async fn authenticate(&self, parts: &Parts) -> Result<Caller, Refusal>;

    /// [`Authenticator::authenticate`], and until when the credential holds
    /// (a JWT's `exp`): the streams a request opens end then. The default
    /// knows no end.
    async fn authenticate_until(&self, parts: &Parts) -> Result<Authenticated, Refusal> {
        Ok(Authenticated::new(self.authenticate(parts).await?))
    }

    /// Whether valid credentials can be recognised yet (`false`, e.g., while
    /// a JWKS has never loaded): `/readyz` answers 503 until then.
    fn ready(&self) -> bool {
        true
    }
}

/// An authenticated request head: its caller, and until when its credential holds.
#[derive(Debug, Clone)]
pub struct Authenticated {
    /// Who is calling.
    pub caller: Caller,
    /// When the credential stops being accepted (`None`: not known to end).
    /// A stream the request opens (`subscriptions/listen`, a legacy `GET`)
    /// ends then.
    pub expires_at: Option<std::time::SystemTime>,
    /// Cancelled when the credential is revoked (a static token removed
    /// from its file); its streams end then too. A JWT revoked at its issuer
    /// before `exp` is not seen: presa does no introspection.
    pub revoked: Option<CancellationToken>,
}

impl Authenticated {
    /// `caller`, with a credential not known to end.
    pub fn new(caller: Caller) -> Self {
        Authenticated { caller, expires_at: None, revoked: None }
    }

    /// Resolves when the credential stops being valid (expiry or
    /// revocation); `None` when neither can happen.
    pub(crate) fn ended(&self) -> Option<BoxFuture<'static, ()>> {
        if self.expires_at.is_none() && self.revoked.is_none() {
            return None;
        }
        let left = self.expires_at.map(|at| at.duration_since(std::time::SystemTime::now()).unwrap_or_default());
        let revoked = self.revoked.clone();
        Some(Box::pin(async move {
            let expiry = async {
                match left {
                    Some(left) => tokio::time::sleep(left).await,
                    None => std::future::pending().await,
                }
            };
            let revocation = async {
                match revoked {
                    Some(token) => token.cancelled_owned().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = expiry => {}
                () = revocation => {}
            }
        }))
    }
}

/// Every caller shares one anonymous scope, with no scope checks.
#[derive(Debug, Clone, Copy, Default)]
pub struct Anonymous;

#[async_trait::async_trait]
impl Authenticator for Anonymous {
    async fn authenticate(&self, _parts: &Parts) -> Result<Caller, Refusal> {
        Ok(Caller::anonymous())
    }
}

/// A refused request: the HTTP status, the `WWW-Authenticate` value, and a
/// message for the JSON-RPC error body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// 401 (no or bad credentials) or 403 (not allowed).
    pub status: StatusCode,
    /// The `WWW-Authenticate` header value, if any.
    pub challenge: Option<String>,
    /// Why, for the error body (never secret material).
    pub message: String,
}

/// Builds RFC 6750 `Bearer` challenges naming the RFC 9728 metadata URL and
/// the scopes every MCP request needs.
#[derive(Debug, Clone, Default)]
pub struct Challenge {
    /// The Protected Resource Metadata URL (`resource_metadata`).
    pub resource_metadata: Option<String>,
    /// Scopes every MCP request needs (`--required-scope`).
    pub required_scopes: Vec<String>,
}

impl Challenge {
    /// A challenge for `resource_metadata` (see [`metadata::metadata_url`]).
    pub fn new(resource_metadata: Option<String>, required_scopes: Vec<String>) -> Self {
        Challenge { resource_metadata, required_scopes }
    }

    fn render(&self, error: Option<(&str, &str)>, scopes: &[String]) -> String {
        let mut params = Vec::new();
        if let Some((code, description)) = error {
            params.push(format!("error=\"{code}\""));
            params.push(format!("error_description=\"{}\"", quoted(description)));
        }
        if !scopes.is_empty() {
            params.push(format!("scope=\"{}\"", quoted(&scopes.join(" "))));
        }
        if let Some(url) = &self.resource_metadata {
            params.push(format!("resource_metadata=\"{}\"", quoted(url)));
        }
        if params.is_empty() { "Bearer".to_string() } else { format!("Bearer {}", params.join(", ")) }
    }

    /// The request's bearer token, or the 401 for its absence (no error
    /// code) or for a malformed `Authorization` (`invalid_token`).
    pub fn bearer<'a>(&self, parts: &'a Parts) -> Result<&'a str, Refusal> {
        match bearer_token(parts) {
            Ok(Some(token)) => Ok(token),
            Ok(None) => Err(self.missing_token()),
            // Another scheme (Basic, DPoP…) is no bearer token at all: RFC 6750
            // §3.1 asks for the plain challenge, without an error code.
            Err(_) if let Some(scheme) = other_scheme(parts) => Err(Refusal {
                message: format!("Unauthorized: the {scheme} scheme is not accepted; a bearer token is required"),
                ..self.missing_token()
            }),
            Err(why) => Err(self.invalid_token(why)),
        }
    }

    /// 401 for a request without a token.
    pub fn missing_token(&self) -> Refusal {
        Refusal {
            status: StatusCode::UNAUTHORIZED,
            challenge: Some(self.render(None, &self.required_scopes)),
            message: "Unauthorized: a bearer token is required".into(),
        }
    }

    /// 401 `invalid_token` for a token that was presented and refused.
    pub fn invalid_token(&self, why: &str) -> Refusal {
        Refusal {
            status: StatusCode::UNAUTHORIZED,
            challenge: Some(self.render(Some(("invalid_token", why)), &self.required_scopes)),
            message: format!("Unauthorized: {why}"),
        }
    }

    /// 403 `insufficient_scope` listing every scope the call needs (the
    /// required ones included).
    pub fn insufficient_scope(&self, needed: &[String]) -> Refusal {
        let mut scopes = self.required_scopes.clone();
        scopes.extend(needed.iter().filter(|s| !self.required_scopes.contains(s)).cloned());
        Refusal {
            status: StatusCode::FORBIDDEN,
            challenge: Some(self.render(Some(("insufficient_scope", "the token lacks a required scope")), &scopes)),
            message: format!("Forbidden: insufficient scope (needs {})", scopes.join(" ")),
        }
    }
}

/// An RFC 7230 quoted-string body: `"` and `\` escaped, control characters dropped.
fn quoted(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control())
        .flat_map(|c| match c {
            '"' | '\\' => vec!['\\', c],
            _ => vec![c],
        })
        .collect()
}

/// Run `authenticator` on a request head, unless its `Authorization` value
/// is longer than `max_token_bytes`: then 401 `invalid_token` at once, the
/// value never parsed (what every request handler calls).
pub(crate) async fn authenticate(
    authenticator: &dyn Authenticator,
    challenge: &Challenge,
    max_token_bytes: usize,
    parts: &Parts,
) -> Result<Authenticated, Refusal> {
    let longest = parts.headers.get_all(header::AUTHORIZATION).iter().map(http::HeaderValue::len).max().unwrap_or(0);
    if longest > max_token_bytes {
        return Err(challenge.invalid_token(&format!("token longer than {max_token_bytes} bytes")));
    }
    authenticator.authenticate_until(parts).await
}

/// The bearer token of `parts`: `Ok(None)` without an `Authorization`
/// header; `Err` for a repeated header, another scheme or an empty token.
pub fn bearer_token(parts: &Parts) -> Result<Option<&str>, &'static str> {
    let mut values = parts.headers.get_all(header::AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err("repeated Authorization header");
    }
    let value = value.to_str().map_err(|_| "Authorization header has invalid characters")?;
    let (scheme, token) = value.split_once(' ').ok_or("Authorization must be \"Bearer <token>\"")?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() || token.contains(' ') {
        return Err("Authorization must be \"Bearer <token>\"");
    }
    Ok(Some(token))
}

/// The scheme of a lone `Authorization` header that is not `Bearer`
/// (an RFC 7235 token: letters, digits and `!#$%&'*+-.^_`|~`), if any.
fn other_scheme(parts: &Parts) -> Option<&str> {
    let mut values = parts.headers.get_all(header::AUTHORIZATION).iter();
    let value = values.next()?.to_str().ok()?;
    if values.next().is_some() {
        return None;
    }
    let scheme = value.split(' ').next()?;
    let token =
        !scheme.is_empty() && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    (token && !scheme.eq_ignore_ascii_case("bearer")).then_some(scheme)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_scheme_gets_the_plain_challenge_not_invalid_token() {
        let c = Challenge::default();
        for header in ["Basic YWxpY2U6cHc=", "DPoP eyJhbGciOiJFUzI1NiJ9.e30.sig", "Negotiate"] {
            let r = c.bearer(&parts(&[header])).unwrap_err();
            assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{header}");
            let challenge = r.challenge.unwrap();
            assert!(!challenge.contains("error="), "{header}: {challenge}");
            assert!(r.message.contains("scheme is not accepted"), "{header}: {}", r.message);
        }
        for malformed in ["Bearer ", "Bearer a b"] {
            let challenge = c.bearer(&parts(&[malformed])).unwrap_err().challenge.unwrap();
            assert!(challenge.contains("invalid_token"), "{malformed}: {challenge}");
        }
    }

    fn parts(auth: &[&str]) -> Parts {
        let mut builder = http::Request::builder().uri("/mcp");
        for a in auth {
            builder = builder.header(header::AUTHORIZATION, *a);
        }
        builder.body(()).unwrap().into_parts().0
    }

    #[test]
    fn bearer_tokens_are_read_strictly() {
        assert_eq!(bearer_token(&parts(&[])), Ok(None));
        assert_eq!(bearer_token(&parts(&["Bearer abc"])), Ok(Some("abc")));
        assert_eq!(bearer_token(&parts(&["bearer abc"])), Ok(Some("abc")));
        assert!(bearer_token(&parts(&["Basic abc"])).is_err());
        assert!(bearer_token(&parts(&["Bearer "])).is_err());
        assert!(bearer_token(&parts(&["Bearer a", "Bearer b"])).is_err());
    }

    #[test]
    fn challenges_name_the_metadata_and_scopes() {
        let c = Challenge::new(Some("https://x/.well-known/oauth-protected-resource/mcp".into()), vec!["mcp".into()]);
        assert_eq!(
            c.missing_token().challenge.unwrap(),
            r#"Bearer scope="mcp", resource_metadata="https://x/.well-known/oauth-protected-resource/mcp""#
        );
        let invalid = c.invalid_token("token \"expired\"").challenge.unwrap();
        assert!(invalid.starts_with(r#"Bearer error="invalid_token", error_description="token \"expired\"""#));
        let forbidden = c.insufficient_scope(&["deploy".into(), "mcp".into()]);
        assert_eq!(forbidden.status, StatusCode::FORBIDDEN);
        assert!(forbidden.challenge.unwrap().contains(r#"scope="mcp deploy""#));
    }
}
