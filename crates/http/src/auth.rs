//! Who is calling: an [`Authenticator`] maps request headers to the
//! [`Scope`] that owns the caller's tasks.
//!
//! presa ships [`Anonymous`] (one shared scope, for local use). A deployment
//! with real authentication plugs in its own (e.g. verifying a bearer token
//! and taking tenant and subject from its claims).

use axum::http::HeaderMap;
use presa_store::Scope;

/// Maps a request to its scope, or refuses it.
pub trait Authenticator: Send + Sync + 'static {
    /// The caller's scope; `Err` answers 401 with the message.
    fn authenticate(&self, headers: &HeaderMap) -> Result<Scope, String>;
}

/// Every caller shares one anonymous scope.
#[derive(Debug, Clone, Copy, Default)]
pub struct Anonymous;

impl Authenticator for Anonymous {
    fn authenticate(&self, _headers: &HeaderMap) -> Result<Scope, String> {
        Ok(Scope::anonymous())
    }
}
