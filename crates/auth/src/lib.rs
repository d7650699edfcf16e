//! How presa recognises callers: the credential schemes behind the
//! transport's [`Authenticator`](presa_http::Authenticator) trait.
//!
//! - [`jwt::JwtAuthenticator`] (`--auth jwt`): OAuth 2.1 bearer JWTs
//!   verified against a JWKS, fetched over HTTP(S) by [`fetch::JwksClient`]
//!   or read from a file.
//! - [`tokens::StaticTokens`] (`--auth tokens`): hashed static bearer tokens
//!   from a file, reloaded on SIGHUP.
//!
//! presa-http defines the trait, the [`Refusal`](presa_http::Refusal) and the
//! [`Challenge`](presa_http::Challenge) these render their refusals with, and
//! serves the RFC 9728 metadata (`presa_http::auth::metadata`); this crate
//! depends on it, never the reverse, so the transport links no JWT, JWKS or
//! TLS-client code.

pub mod fetch;
pub mod jwt;
pub mod tokens;

/// Why an authenticator could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A line of a tokens file is malformed.
    #[error("{path}:{line}: {message}")]
    TokensLine {
        /// The file.
        path: String,
        /// The line number (from 1).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A JWKS could not be fetched or parsed.
    #[error("JWKS {source_name}: {message}")]
    Jwks {
        /// The URL or file.
        source_name: String,
        /// What went wrong.
        message: String,
    },
    /// A JWKS fetch, or the set-up of its HTTP(S) client, failed
    /// ([`fetch::JwksClient`]); the message is for operators.
    #[error("{0}")]
    Fetch(String),
}
