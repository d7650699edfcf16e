//! The results the dispatcher answers with (`crates/server/src/dispatch`),
//! as types: `server/discover`, the four lists, `resources/read`,
//! `completion/complete` and MRTR's `InputRequiredResult`. Each becomes JSON
//! once, where the dispatcher hands its answer on ([`into_value`]); what
//! they carry from a catalog (descriptors, contents, a completion, input
//! requests) stays JSON, as the catalog holds it.

use std::collections::BTreeMap;

use serde::{Serialize, ser::SerializeMap};
use serde_json::Value;

use crate::{PROTOCOL_VERSION, ResultType, TASKS_EXTENSION};

/// A result as the JSON the transport sends (`null` if it cannot be, which
/// none of these types can fail to be).
pub fn into_value(result: impl Serialize) -> Value {
    serde_json::to_value(result).unwrap_or(Value::Null)
}

/// Who may cache a result (SEP-2549 `cacheScope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheScope {
    /// Anyone: the same for every caller.
    Public,
    /// Only the caller.
    Private,
}

/// `server/discover`'s result: the versions, capabilities and instructions of the server.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoverResult {
    /// The revisions served.
    pub supported_versions: Vec<&'static str>,
    /// What the server offers.
    pub capabilities: Value,
    /// How long the answer may be cached, in ms.
    pub ttl_ms: u64,
    /// By whom.
    pub cache_scope: CacheScope,
    /// Instructions for clients, when the server has any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
}

impl DiscoverResult {
    /// What presa offers (every list changes, completions, logging, Tasks),
    /// cacheable by anyone for `ttl_ms`.
    pub fn presa(ttl_ms: u64, instructions: Option<String>) -> Self {
        DiscoverResult {
            supported_versions: vec![PROTOCOL_VERSION],
            capabilities: serde_json::json!({
                "tools": { "listChanged": true },
                "prompts": { "listChanged": true },
                "resources": { "listChanged": true },
                "completions": {},
                "logging": {},
                "extensions": { TASKS_EXTENSION: {} },
            }),
            ttl_ms,
            cache_scope: CacheScope::Public,
            instructions,
        }
    }
}

/// Which list a [`ListResult`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum List {
    /// `tools/list`.
    Tools,
    /// `prompts/list`.
    Prompts,
    /// `resources/list`.
    Resources,
    /// `resources/templates/list`.
    ResourceTemplates,
}

impl List {
    /// The key its items go under.
    pub fn key(self) -> &'static str {
        match self {
            List::Tools => "tools",
            List::Prompts => "prompts",
            List::Resources => "resources",
            List::ResourceTemplates => "resourceTemplates",
        }
    }
}

/// A list's result: its items under the list's key, cacheable by anyone for `ttl_ms`.
#[derive(Debug, Clone, PartialEq)]
pub struct ListResult {
    /// Which list.
    pub list: List,
    /// The descriptors.
    pub items: Vec<Value>,
    /// How long it may be cached, in ms.
    pub ttl_ms: u64,
}

impl Serialize for ListResult {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut m = serializer.serialize_map(Some(3))?;
        m.serialize_entry(self.list.key(), &self.items)?;
        m.serialize_entry("ttlMs", &self.ttl_ms)?;
        m.serialize_entry("cacheScope", &CacheScope::Public)?;
        m.end()
    }
}

/// `resources/read`'s result: the contents, cacheable by the caller only.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadResult {
    /// The `contents` array the reader returned.
    pub contents: Value,
    /// How long it may be cached, in ms.
    pub ttl_ms: u64,
    /// Always [`CacheScope::Private`]: a reader may answer each caller differently.
    pub cache_scope: CacheScope,
}

/// `completion/complete`'s result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompleteResult {
    /// `{ values, total?, hasMore? }`.
    pub completion: Value,
}

/// MRTR's `InputRequiredResult`: the questions, the sealed state, or both.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InputRequiredResult {
    /// Always [`ResultType::InputRequired`].
    pub result_type: ResultType,
    /// The questions by key (absent when there are none).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub input_requests: BTreeMap<String, Value>,
    /// The sealed `requestState` to send back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_state: Option<String>,
}

impl InputRequiredResult {
    /// Whether it asks anything or carries state (one of the two is required).
    pub fn is_valid(&self) -> bool {
        !self.input_requests.is_empty() || self.request_state.is_some()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn results_have_their_wire_shape() {
        let list = ListResult { list: List::ResourceTemplates, items: vec![json!({ "name": "t" })], ttl_ms: 5 };
        assert_eq!(
            into_value(list),
            json!({ "resourceTemplates": [{ "name": "t" }], "ttlMs": 5, "cacheScope": "public" })
        );
        let read = ReadResult { contents: json!([]), ttl_ms: 7, cache_scope: CacheScope::Private };
        assert_eq!(into_value(read), json!({ "contents": [], "ttlMs": 7, "cacheScope": "private" }));
        let asked = InputRequiredResult {
            result_type: ResultType::InputRequired,
            input_requests: BTreeMap::new(),
            request_state: Some("s".into()),
        };
        assert!(asked.is_valid());
        assert_eq!(into_value(asked), json!({ "resultType": "input_required", "requestState": "s" }));
        let d = into_value(DiscoverResult::presa(9, None));
        assert_eq!((d["supportedVersions"].clone(), d.get("instructions")), (json!([PROTOCOL_VERSION]), None));
        assert_eq!(d["capabilities"]["extensions"], json!({ TASKS_EXTENSION: {} }));
    }
}
