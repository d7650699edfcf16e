//! `server/discover`: the versions, capabilities and instructions of this server.

use presa_protocol::{PROTOCOL_VERSION, TASKS_EXTENSION};
use serde_json::{Value, json};

use super::Server;

impl Server {
    pub(super) fn discover(&self) -> Value {
        let config = self.config();
        let mut r = json!({
            "supportedVersions": [PROTOCOL_VERSION],
            "capabilities": {
                "tools": { "listChanged": true },
                "prompts": { "listChanged": true },
                "resources": { "listChanged": true },
                "completions": {},
                "logging": {},
                "extensions": { TASKS_EXTENSION: {} },
            },
            "ttlMs": config.list_ttl_ms,
            "cacheScope": "public",
        });
        if let Some(i) = &config.instructions {
            r["instructions"] = json!(i);
        }
        r
    }
}
