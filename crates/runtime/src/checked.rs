//! What a process starts from: an [`App`](crate::App) whose catalog built
//! ([`Checked`]), with the server's identity and its own readiness check.

use presa_server::{CatalogCell, ServerConfig};

/// A server's own readiness check ([`App::ready_when`]).
#[derive(Clone)]
pub(crate) struct ExtraReady(pub(crate) presa_http::ReadyCheck);

impl std::fmt::Debug for ExtraReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReadyCheck")
    }
}

/// An [`App`] whose catalog built.
#[derive(Debug)]
pub(crate) struct Checked {
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) instructions: Option<String>,
    pub(crate) catalog: CatalogCell,
    pub(crate) ready: Option<ExtraReady>,
    /// What its heartbeats report of the upstreams it calls ([`App::report_upstreams`](crate::App::report_upstreams)).
    pub(crate) upstreams: Option<std::sync::Arc<dyn presa_server::UpstreamSource>>,
    /// The virtual servers it serves besides `/mcp` ([`App::endpoints`](crate::App::endpoints)).
    pub(crate) endpoints: presa_server::Endpoints,
}

impl Checked {
    /// The dispatcher settings this app starts from (its identity).
    pub(crate) fn server_config(&self) -> ServerConfig {
        ServerConfig::default().with(|c| {
            c.name = self.name.clone();
            c.version = self.version.clone();
            c.instructions = self.instructions.clone();
        })
    }
}
