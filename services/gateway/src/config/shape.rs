//! How an `[[upstream]]`'s tools are shown to clients and called, as the
//! TOML file gives it ([`UpstreamShape`]): which of them are served
//! (`expose`, `hide`: globs over the upstream's own tool names) and, per
//! `[[upstream.tool]]` table ([`ToolShape`]), a tool's new name, its
//! description, title and annotations, arguments pinned or defaulted, and a
//! cap on its result's size.
//!
//! Checked here is what needs no listing: the globs, the names, an argument
//! both pinned and defaulted, a zero cap. What needs the upstream's listing
//! (a pinned argument the tool does not have, a rename that collides, a
//! table that matches no tool) is checked by `catalog::shape`, which applies
//! all of it to the listing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ConfigError;

/// The longest tool name a rename may give (the MCP specification's guidance).
const MAX_NAME_LEN: usize = 128;

/// One upstream's catalog shaping (all empty: every tool served as listed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpstreamShape {
    /// Only tools whose upstream name matches one of these are served (`None`: all).
    pub expose: Option<Vec<glob::Pattern>>,
    /// Tools whose upstream name matches one of these are not served, whatever `expose` says.
    pub hide: Vec<glob::Pattern>,
    /// The `[[upstream.tool]]` tables, in file order: the first whose glob
    /// matches a served tool's upstream name shapes it.
    pub tools: Vec<ToolShape>,
}

/// An `[[upstream.tool]]` table: how the tools it matches are shown and called.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolShape {
    /// A glob over the tool's name as the upstream lists it (no prefix).
    #[serde(rename = "match")]
    pub pattern: String,
    /// The name clients see and call instead (the upstream's `prefix` is
    /// still put before it); the upstream is called with its own.
    #[serde(default)]
    pub rename: Option<String>,
    /// The description clients see instead of the upstream's.
    #[serde(default)]
    pub description: Option<String>,
    /// The title clients see instead of the upstream's.
    #[serde(default)]
    pub title: Option<String>,
    /// Annotations that replace the upstream's, key by key (the others are kept).
    #[serde(default)]
    pub annotations: Option<AnnotationsRule>,
    /// Arguments set on every call, taken out of the schema clients see; a
    /// call that gives one is refused.
    #[serde(default)]
    pub pin: BTreeMap<String, Value>,
    /// Arguments set when a call leaves them out; they stay in the schema
    /// (with this value as their `default`, no longer required).
    #[serde(default)]
    pub defaults: BTreeMap<String, Value>,
    /// The most bytes a result may take (its JSON); a bigger one becomes a tool error.
    #[serde(default)]
    pub max_output_bytes: Option<u64>,
}

/// `annotations = { … }` in an `[[upstream.tool]]` table: MCP's tool
/// annotations, each one given replacing the upstream's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AnnotationsRule {
    /// A human-readable title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The tool does not change its environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// The tool may destroy or overwrite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// Calling it again with the same arguments has no further effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// The tool reaches outside a closed world (the web, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

impl UpstreamShape {
    /// Check the file's `expose`, `hide` and `[[upstream.tool]]` tables of
    /// the upstream `name`; each error names the upstream and the table.
    pub(super) fn resolve(
        name: &str,
        expose: Option<Vec<String>>,
        hide: Vec<String>,
        tools: Vec<ToolShape>,
    ) -> Result<UpstreamShape, ConfigError> {
        let globs = |key: &str, list: Vec<String>| -> Result<Vec<glob::Pattern>, ConfigError> {
            list.iter()
                .map(|g| {
                    glob::Pattern::new(g)
                        .map_err(|e| ConfigError::Invalid(format!("upstream {name:?}: {key}: {g:?}: {e}")))
                })
                .collect()
        };
        if expose.as_ref().is_some_and(Vec::is_empty) {
            return Err(ConfigError::Invalid(format!(
                "upstream {name:?}: expose = [] would serve none of its tools; leave it out to serve them all"
            )));
        }
        let expose = expose.map(|e| globs("expose", e)).transpose()?;
        let hide = globs("hide", hide)?;
        for t in &tools {
            t.check().map_err(|why| {
                ConfigError::Invalid(format!("upstream {name:?}: [[upstream.tool]] match = {:?}: {why}", t.pattern))
            })?;
        }
        Ok(UpstreamShape { expose, hide, tools })
    }

    /// Whether the tool the upstream names `tool` is served.
    pub fn serves(&self, tool: &str) -> bool {
        self.expose.as_ref().is_none_or(|e| e.iter().any(|p| p.matches(tool)))
            && !self.hide.iter().any(|p| p.matches(tool))
    }

    /// The `[[upstream.tool]]` table that shapes the tool the upstream names `tool`, if any.
    pub fn tool(&self, tool: &str) -> Option<&ToolShape> {
        self.tool_index(tool).and_then(|i| self.tools.get(i))
    }

    /// Where in [`tools`](Self::tools) that table is: the first whose glob matches.
    pub fn tool_index(&self, tool: &str) -> Option<usize> {
        self.tools.iter().position(|t| glob::Pattern::new(&t.pattern).is_ok_and(|p| p.matches(tool)))
    }
}

impl ToolShape {
    /// What is wrong with the table on its own, if anything.
    fn check(&self) -> Result<(), String> {
        glob::Pattern::new(&self.pattern).map_err(|e| e.to_string())?;
        if let Some(name) = &self.rename
            && !is_tool_name(name)
        {
            return Err(format!(
                "rename = {name:?}: a tool name is 1 to {MAX_NAME_LEN} of the characters A-Z a-z 0-9 _ - ."
            ));
        }
        if let Some(arg) = self.pin.keys().find(|k| self.defaults.contains_key(*k)) {
            return Err(format!("the argument {arg:?} is both pinned and defaulted; give it in one of them"));
        }
        if let Some(arg) = self.pin.keys().chain(self.defaults.keys()).find(|k| k.is_empty()) {
            return Err(format!("an argument name is empty ({arg:?})"));
        }
        if self.max_output_bytes == Some(0) {
            return Err("max_output_bytes must be at least 1".into());
        }
        Ok(())
    }
}

/// A tool name clients can use: 1 to 128 ASCII letters, digits, `_`, `-` and `.`.
fn is_tool_name(name: &str) -> bool {
    (1..=MAX_NAME_LEN).contains(&name.len())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

#[cfg(test)]
mod tests {
    use super::super::{GatewayArgs, file::parse_file};

    fn resolve(upstream: &str) -> Result<super::super::GatewayConfig, String> {
        let text = format!("[[upstream]]\nname = 'fs'\ncommand = 'x'\n{upstream}");
        let file = parse_file(&text)?;
        let args = GatewayArgs { upstream_pool: 1, ..GatewayArgs::default() };
        args.resolve_with(Some(file)).map_err(|e| e.to_string())
    }

    #[test]
    fn expose_and_hide_are_globs_over_the_upstream_s_names() {
        let c = resolve("expose = ['read_*', 'list_*']\nhide = ['read_media_file']").unwrap();
        let shape = &c.upstreams[0].shape;
        assert!(shape.serves("read_file") && shape.serves("list_directory"));
        assert!(!shape.serves("read_media_file"), "hide wins over expose");
        assert!(!shape.serves("write_file"), "not exposed");
        let all = resolve("hide = ['write_*']").unwrap();
        assert!(all.upstreams[0].shape.serves("move_file") && !all.upstreams[0].shape.serves("write_file"));
    }

    #[test]
    fn the_first_matching_table_shapes_a_tool() {
        let c = resolve(
            "[[upstream.tool]]\nmatch = 'list_directory'\nrename = 'ls'\n\
             [[upstream.tool]]\nmatch = 'list_*'\ndescription = 'listed'\n",
        )
        .unwrap();
        let shape = &c.upstreams[0].shape;
        assert_eq!(shape.tool("list_directory").and_then(|t| t.rename.as_deref()), Some("ls"));
        assert_eq!(shape.tool("list_allowed").and_then(|t| t.description.as_deref()), Some("listed"));
        assert!(shape.tool("read_file").is_none());
    }

    #[test]
    fn bad_shaping_is_refused_naming_the_upstream_and_the_table() {
        let err = |t: &str| resolve(t).unwrap_err();
        let e = err("expose = ['read_[']");
        assert!(e.contains("upstream \"fs\": expose: \"read_[\""), "{e}");
        assert!(err("expose = []").contains("would serve none"));
        assert!(err("hide = ['[']").contains("hide"));
        let e = err("[[upstream.tool]]\nmatch = 'x'\nrename = 'two words'");
        assert!(e.contains("[[upstream.tool]] match = \"x\": rename = \"two words\""), "{e}");
        let e = err("[[upstream.tool]]\nmatch = 'x'\npin = { path = '/a' }\ndefaults = { path = '/b' }");
        assert!(e.contains("\"path\" is both pinned and defaulted"), "{e}");
        assert!(err("[[upstream.tool]]\nmatch = 'x'\nmax_output_bytes = 0").contains("at least 1"));
        assert!(err("[[upstream.tool]]\nmatch = '[x'").contains("match = \"[x\""));
        // Unknown keys, in the table and in its annotations, stop the file's parsing.
        assert!(err("[[upstream.tool]]\nmatch = 'x'\npinned = { a = 1 }").contains("unknown field `pinned`"));
        let e = err("[[upstream.tool]]\nmatch = 'x'\nannotations = { idempotent = true }");
        assert!(e.contains("unknown field `idempotent`"), "{e}");
        assert!(err("expose = 'read_*'").contains("invalid type"));
    }
}
