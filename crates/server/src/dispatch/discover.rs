//! `server/discover`: the versions, capabilities and instructions of this
//! server (on a virtual server's endpoint, its own instructions).

use presa_protocol::result::DiscoverResult;

use super::Server;

impl Server {
    pub(super) fn discover(&self) -> DiscoverResult {
        let config = self.config();
        let instructions = match &self.endpoint {
            Some(e) => e.instructions.clone(),
            None => config.instructions.clone(),
        };
        DiscoverResult::presa(config.list_ttl_ms, instructions)
    }
}
