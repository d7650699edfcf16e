//! What the catalog answers without running a handler: the four lists,
//! `resources/read` and `completion/complete`.

use serde_json::{Map, Value, json};

use super::{Server, invalid, required_str};
use crate::{catalog::ResourceError, error::ServerError};

/// The most values one `completion/complete` answer carries (the spec's cap).
const MAX_COMPLETION_VALUES: usize = 100;

impl Server {
    pub(super) fn list_tools(&self) -> Value {
        self.list("tools", self.catalog().tools().map(|t| t.descriptor().clone()).collect())
    }

    pub(super) fn list_resources(&self) -> Value {
        self.list("resources", self.catalog().resources().iter().map(|r| r.descriptor.clone()).collect())
    }

    pub(super) fn list_resource_templates(&self) -> Value {
        self.list("resourceTemplates", self.catalog().templates().iter().map(|t| t.descriptor.clone()).collect())
    }

    pub(super) fn list_prompts(&self) -> Value {
        self.list("prompts", self.catalog().prompts().iter().map(|p| p.descriptor.clone()).collect())
    }

    /// A list result: the items under `key`, cacheable by anyone for the list TTL.
    fn list(&self, key: &str, items: Vec<Value>) -> Value {
        json!({ key: items, "ttlMs": self.config().list_ttl_ms, "cacheScope": "public" })
    }

    pub(super) fn read_resource(&self, p: &Map<String, Value>) -> Result<Value, ServerError> {
        let uri = required_str(p, "uri")?;
        match self.catalog().read(uri) {
            Some(Ok(contents)) => Ok(json!({
                "contents": contents, "ttlMs": self.config().read_ttl_ms, "cacheScope": "private",
            })),
            Some(Err(ResourceError::Failed(cause))) => Err(ServerError::Internal(cause)),
            Some(Err(ResourceError::NotFound)) | None => Err(ServerError::InvalidParamsData {
                message: format!("Resource not found: {uri}"),
                data: json!({ "uri": uri }),
            }),
        }
    }

    pub(super) fn complete(&self, p: &Map<String, Value>) -> Result<Value, ServerError> {
        let r#ref = p.get("ref").filter(|v| v.is_object()).ok_or_else(|| invalid("ref must be an object"))?;
        let argument =
            p.get("argument").filter(|v| v.is_object()).ok_or_else(|| invalid("argument must be an object"))?;
        let mut completion = match self.catalog().completer() {
            Some(f) => f(r#ref, argument),
            None => json!({ "values": [] }),
        };
        if let Some(values) = completion.get_mut("values").and_then(Value::as_array_mut) {
            values.truncate(MAX_COMPLETION_VALUES);
        }
        Ok(json!({ "completion": completion }))
    }
}
