//! Virtual servers: several MCP endpoints served by one [`Server`](crate::Server)
//! (presa-gateway's `[[server]]` tables, served at `/mcp/<name>` by
//! `crates/http/src/router.rs`). Each [`Endpoint`] has its own catalog (a
//! [`CatalogCell`], replaced while it is served), the OAuth scopes every request to
//! it needs, and its identity (`serverInfo`, `server/discover`'s instructions).
//!
//! An endpoint selects from the catalog the workers run; it does not rename:
//! its tools keep their names there, so a worker runs any endpoint's task from
//! the catalog of its [`Core`](crate::Core). A task belongs to the endpoint it
//! was created on (`presa_store::Scope::endpoint`): another endpoint, and
//! the root one, answer it like an unknown id.

use std::{collections::BTreeMap, sync::Arc};

use crate::catalog::CatalogCell;

/// A URL path segment an endpoint may be named by: `[a-z0-9][a-z0-9_-]*`, at most 64 bytes.
pub fn valid_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    name.len() <= 64
        && bytes.next().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// One virtual server.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// Its name: the path segment of `/mcp/<name>`, its `serverInfo.name`, and
    /// what its tasks are bound to.
    pub name: String,
    /// What it serves.
    pub catalog: CatalogCell,
    /// OAuth scopes every request to it needs (when authentication is on).
    pub scopes: Vec<String>,
    /// Its `serverInfo.title`.
    pub title: Option<String>,
    /// Its `server/discover` instructions.
    pub instructions: Option<String>,
}

/// The endpoints a server serves, and whether it serves its whole catalog at the root too.
#[derive(Debug, Clone)]
pub struct Endpoints {
    by_name: BTreeMap<String, Arc<Endpoint>>,
    root: bool,
}

impl Default for Endpoints {
    fn default() -> Self {
        Endpoints { by_name: BTreeMap::new(), root: true }
    }
}

/// Why a set of endpoints cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EndpointError(pub String);

impl Endpoints {
    /// `endpoints`, and the root endpoint when `root`; names must be valid
    /// ([`valid_name`]) and unique.
    pub fn new(endpoints: Vec<Endpoint>, root: bool) -> Result<Endpoints, EndpointError> {
        let mut by_name = BTreeMap::new();
        for e in endpoints {
            if !valid_name(&e.name) {
                return Err(EndpointError(format!(
                    "server name {:?} must be a URL path segment: [a-z0-9][a-z0-9_-]*, at most 64 bytes",
                    e.name
                )));
            }
            if by_name.contains_key(&e.name) {
                return Err(EndpointError(format!("two servers are named {:?}", e.name)));
            }
            by_name.insert(e.name.clone(), Arc::new(e));
        }
        Ok(Endpoints { by_name, root })
    }

    /// The endpoint called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<Endpoint>> {
        self.by_name.get(name)
    }

    /// Every endpoint, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Endpoint>> {
        self.by_name.values()
    }

    /// Whether `/mcp` serves the whole catalog.
    pub fn root(&self) -> bool {
        self.root
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(name: &str) -> Endpoint {
        Endpoint {
            name: name.into(),
            catalog: crate::Catalog::builder().build().expect("empty").into(),
            scopes: vec![],
            title: None,
            instructions: None,
        }
    }

    #[test]
    fn names_are_path_segments_and_unique() {
        for ok in ["a", "ops", "team-2", "x_y", "0"] {
            assert!(valid_name(ok), "{ok}");
        }
        let long = "a".repeat(65);
        for bad in ["", "A", "-a", "_a", "a/b", "a b", "é", "a.b", long.as_str()] {
            assert!(!valid_name(bad), "{bad}");
            let e = Endpoints::new(vec![endpoint(bad)], true).expect_err(bad);
            assert!(e.0.contains("URL path segment"), "{e}");
        }
        let e = Endpoints::new(vec![endpoint("a"), endpoint("a")], true).expect_err("duplicate");
        assert_eq!(e.0, "two servers are named \"a\"");
        let two = Endpoints::new(vec![endpoint("b"), endpoint("a")], false).expect("valid");
        assert_eq!(two.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert!(!two.root() && two.get("a").is_some() && two.get("c").is_none());
    }
}
