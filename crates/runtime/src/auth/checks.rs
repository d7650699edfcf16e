//! The start-up refusals of `presa-api` that keep a deployment from running
//! open by mistake, or with settings it cannot serve: each is a function
//! over the flags, and each refusal a [`CheckError`] (the process exits 2 with it).

use std::net::SocketAddr;

use super::{AuthArgs, AuthMode};

/// The placeholder of the k8s Secret template: never a key.
pub const STATE_SECRET_PLACEHOLDER: &str = "CHANGE-ME";
/// Shortest accepted `PRESA_STATE_SECRET`, in bytes.
pub const MIN_STATE_SECRET_BYTES: usize = 32;

/// Why the flags may not start a process; the text names the flags and
/// variables to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// `--resource-url` is not an `http(s)://` URL presa can serve the metadata of.
    #[error(
        "--resource-url (PRESA_RESOURCE_URL) must be an http(s):// URL without query or fragment, \
         its path made of plain URL characters: {0}"
    )]
    ResourceUrl(String),
    /// `--auth none` on a non-loopback address without `--allow-anonymous`.
    #[error(
        "refusing to serve {0} without authentication: set --auth jwt|tokens (PRESA_AUTH), \
         or --allow-anonymous (PRESA_ALLOW_ANONYMOUS) to accept every caller as one anonymous principal"
    )]
    AnonymousListen(SocketAddr),
    /// The admin API without authentication on a non-loopback address.
    #[error(
        "refusing to serve the admin API on {0} without authentication: set --auth jwt|tokens \
         (PRESA_AUTH), or --admin off (PRESA_ADMIN)"
    )]
    AnonymousAdmin(SocketAddr),
    /// `PRESA_STATE_SECRET` is the k8s template's [`STATE_SECRET_PLACEHOLDER`].
    #[error(
        "PRESA_STATE_SECRET (--state-secret) is the template's placeholder: set a real key \
         (e.g. `openssl rand -base64 48`)"
    )]
    StateSecretPlaceholder,
    /// `PRESA_STATE_SECRET` is shorter than [`MIN_STATE_SECRET_BYTES`].
    #[error(
        "PRESA_STATE_SECRET (--state-secret) must be at least {MIN_STATE_SECRET_BYTES} bytes \
         (e.g. `openssl rand -base64 48`)"
    )]
    StateSecretShort,
}

/// `--resource-url` must be an absolute `http(s)://` URL without query or
/// fragment whose path can be served (its metadata lives at that path, RFC 9728 §3.1).
pub fn check_resource_url(url: &str) -> Result<(), CheckError> {
    let lower = url.to_ascii_lowercase();
    let rest = lower.strip_prefix("https://").or_else(|| lower.strip_prefix("http://"));
    let authority = rest.map(|r| r.split('/').next().unwrap_or_default()).unwrap_or_default();
    let path = presa_http::auth::metadata::resource_path(url);
    if authority.is_empty()
        || url.contains(['?', '#'])
        || !(path.is_empty() || presa_http::auth::metadata::routable(path))
    {
        return Err(CheckError::ResourceUrl(url.to_string()));
    }
    Ok(())
}

/// `--auth none` serves everyone as one anonymous principal: only on a
/// loopback address, unless `--allow-anonymous` says so.
pub fn check_listen(args: &AuthArgs, listen: SocketAddr) -> Result<(), CheckError> {
    if args.auth == AuthMode::None && !listen.ip().is_loopback() && !args.allow_anonymous {
        return Err(CheckError::AnonymousListen(listen));
    }
    Ok(())
}

/// The admin API without authentication makes every caller an admin of
/// everything: only on a loopback address (`--allow-anonymous` does not
/// stretch to it; `--admin off` turns it off).
pub fn check_admin(args: &AuthArgs, listen: SocketAddr, admin_on: bool) -> Result<(), CheckError> {
    if admin_on && args.auth == AuthMode::None && !listen.ip().is_loopback() {
        return Err(CheckError::AnonymousAdmin(listen));
    }
    Ok(())
}

/// A given `PRESA_STATE_SECRET` must be at least 32 bytes and not the template's placeholder.
pub fn check_state_secret(secret: &str) -> Result<(), CheckError> {
    if secret.trim() == STATE_SECRET_PLACEHOLDER {
        return Err(CheckError::StateSecretPlaceholder);
    }
    if secret.len() < MIN_STATE_SECRET_BYTES {
        return Err(CheckError::StateSecretShort);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::auth_args;

    #[test]
    fn anonymous_serving_is_loopback_only_unless_allowed() {
        let none = auth_args(&[]);
        assert!(check_listen(&none, "127.0.0.1:8080".parse().unwrap()).is_ok());
        let e = check_listen(&none, "0.0.0.0:8080".parse().unwrap()).unwrap_err().to_string();
        assert!(e.contains("--auth") && e.contains("--allow-anonymous"), "{e}");
        let allowed = auth_args(&["--allow-anonymous"]);
        assert!(check_listen(&allowed, "0.0.0.0:8080".parse().unwrap()).is_ok());
        let jwt = auth_args(&["--auth", "jwt"]);
        assert!(check_listen(&jwt, "0.0.0.0:8080".parse().unwrap()).is_ok());
    }

    #[test]
    fn anonymous_admin_is_loopback_only_even_when_anonymous_is_allowed() {
        let (public, local) = ("0.0.0.0:8080".parse().unwrap(), "127.0.0.1:8080".parse().unwrap());
        let allowed = auth_args(&["--allow-anonymous"]);
        assert!(check_admin(&allowed, local, true).is_ok());
        let e = check_admin(&allowed, public, true).unwrap_err();
        assert_eq!(e, CheckError::AnonymousAdmin(public));
        assert!(e.to_string().contains("--admin off") && e.to_string().contains("--auth"), "{e}");
        assert!(check_admin(&allowed, public, false).is_ok(), "--admin off");
        let tokens = auth_args(&["--auth", "tokens"]);
        assert!(check_admin(&tokens, public, true).is_ok());
    }

    #[test]
    fn resource_urls_must_be_servable() {
        for ok in ["https://h.example/mcp", "http://127.0.0.1:8080/api/v1/mcp", "https://h.example"] {
            assert!(check_resource_url(ok).is_ok(), "{ok}");
        }
        for bad in
            ["h.example/mcp", "ftp://h/mcp", "https:///mcp", "https://h/{id}", "https://h/mcp?x=1", "https://h/mcp#f"]
        {
            let e = check_resource_url(bad).unwrap_err();
            assert!(e.to_string().contains("PRESA_RESOURCE_URL") && e.to_string().ends_with(bad), "{bad}");
        }
    }

    #[test]
    fn state_secrets_are_long_and_not_the_placeholder() {
        assert_eq!(check_state_secret("CHANGE-ME"), Err(CheckError::StateSecretPlaceholder));
        assert!(CheckError::StateSecretPlaceholder.to_string().contains("PRESA_STATE_SECRET"));
        assert!(check_state_secret("short").unwrap_err().to_string().contains("32 bytes"));
        assert!(check_state_secret(&"k".repeat(32)).is_ok());
    }
}
