//! `server/discover`: the versions, capabilities and instructions of this server.

use presa_protocol::result::DiscoverResult;

use super::Server;

impl Server {
    pub(super) fn discover(&self) -> DiscoverResult {
        let config = self.config();
        DiscoverResult::presa(config.list_ttl_ms, config.instructions.clone())
    }
}
