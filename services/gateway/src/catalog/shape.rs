//! Catalog shaping: what one upstream's listed tools become in presa's
//! catalog, by its `[[upstream]]` table's `expose`, `hide` and
//! `[[upstream.tool]]` tables (`config::UpstreamShape`). Pure functions
//! over the listing's descriptors, used by `catalog::build` each time the
//! catalog is built (at start, and when the upstream's list changes):
//!
//! - [`shape_tools`]: the tools served, each with the name clients see
//!   (prefix, then `rename`), its descriptor as listed and what its calls
//!   go through (`proxy::CallShape`); and the checks that need the listing:
//!   a table that shapes no tool, a rename given to several tools or that
//!   collides with another tool's name, a pinned or default argument the
//!   tool's `inputSchema` does not have;
//! - [`input_schema`]: the schema clients see, pinned arguments taken out
//!   (`properties` and `required`), defaulted ones no longer required and
//!   shown with their `default`;
//! - [`descriptor`]: the descriptor clients see, with the table's name,
//!   description, title and annotations (which the crash and retry
//!   policies then read, as `catalog::build` hands this descriptor on).
//!
//! A hidden tool is not in the catalog at all, so a call to it by name is
//! refused exactly like one to a tool that does not exist.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::CatalogError;
use crate::{
    config::{ToolShape, UpstreamConfig},
    proxy::CallShape,
};

/// One served tool of an upstream, shaped.
#[derive(Debug, Clone, PartialEq)]
pub struct Shaped {
    /// Its name at the upstream, which calls it by that.
    pub upstream_name: String,
    /// Its name in presa's catalog: the upstream's prefix, then its `rename` or its own name.
    pub name: String,
    /// Its descriptor as presa lists it (`name` included).
    pub descriptor: Value,
    /// What its calls go through.
    pub call: CallShape,
    /// Whether the upstream's `inputSchema` marks arguments to travel as
    /// SEP-2243 `Mcp-Param-*` headers, which only rmcp's client sends: its
    /// calls never take the gateway's own POST (`upstream/direct.rs`).
    pub header_params: bool,
}

/// The tools of `up` that presa serves, shaped, in the listing's order;
/// an error names the upstream and the `[[upstream.tool]]` table at fault.
pub fn shape_tools(up: &UpstreamConfig, tools: &[Value]) -> Result<Vec<Shaped>, CatalogError> {
    let shape = &up.shape;
    let served: Vec<(&str, &Value)> =
        tools.iter().map(|d| (d["name"].as_str().unwrap_or_default(), d)).filter(|(n, _)| shape.serves(n)).collect();
    // Which served tools each table shapes (the first table that matches one does).
    let mut shaped_by: Vec<Vec<&str>> = vec![Vec::new(); shape.tools.len()];
    for (own, _) in &served {
        if let Some(names) = shape.tool_index(own).and_then(|i| shaped_by.get_mut(i)) {
            names.push(own);
        }
    }
    for (table, names) in shape.tools.iter().zip(&shaped_by) {
        if names.is_empty() {
            return Err(refuse(
                up,
                table,
                "it matches none of the tools the upstream lists and the gateway serves \
                 (hidden ones excluded), or an earlier table takes each",
            ));
        }
        if let Some(new) = &table.rename
            && names.len() > 1
        {
            let why = format!("rename = {new:?} would give {} tools one name ({})", names.len(), names.join(", "));
            return Err(refuse(up, table, &why));
        }
    }
    let mut listed: BTreeMap<String, &str> = BTreeMap::new();
    let mut out = Vec::with_capacity(served.len());
    for (own, d) in served {
        let table = shape.tool(own);
        let shaped = shape_tool(up, d, table)?;
        if let Some(other) = listed.insert(shaped.name.clone(), own) {
            return Err(collision(up, &shaped.name, other, own));
        }
        out.push(shaped);
    }
    Ok(out)
}

/// One served tool shaped by `table` (none: as the upstream lists it, with its prefix).
fn shape_tool(up: &UpstreamConfig, d: &Value, table: Option<&ToolShape>) -> Result<Shaped, CatalogError> {
    let own = d["name"].as_str().unwrap_or_default();
    let header_params = d["inputSchema"].to_string().contains("\"x-mcp-header\"");
    let name = format!("{}{}", up.prefix, table.and_then(|t| t.rename.as_deref()).unwrap_or(own));
    let Some(table) = table else {
        let mut descriptor = d.clone();
        descriptor["name"] = json!(name);
        let call = CallShape { tool: name.clone(), ..CallShape::default() };
        return Ok(Shaped { upstream_name: own.to_string(), name, descriptor, call, header_params });
    };
    for (what, args) in [("pin", &table.pin), ("defaults", &table.defaults)] {
        if let Some(arg) = args.keys().find(|a| d["inputSchema"]["properties"].get(a.as_str()).is_none()) {
            let has: Vec<&str> = d["inputSchema"]["properties"]
                .as_object()
                .map(|p| p.keys().map(String::as_str).collect())
                .unwrap_or_default();
            let why = format!(
                "{what}: the tool {own:?} has no argument {arg:?} in its inputSchema (it has: {})",
                if has.is_empty() { "none".to_string() } else { has.join(", ") }
            );
            return Err(refuse(up, table, &why));
        }
    }
    let to_map = |m: &BTreeMap<String, Value>| -> Map<String, Value> { m.clone().into_iter().collect() };
    let call = CallShape {
        tool: name.clone(),
        pin: to_map(&table.pin),
        defaults: to_map(&table.defaults),
        max_output_bytes: table.max_output_bytes,
    };
    Ok(Shaped { upstream_name: own.to_string(), descriptor: descriptor(d, table, &name), name, call, header_params })
}

/// The descriptor clients see of a tool shaped by `table`, listed as `name`:
/// its description, title and annotations (key by key) replaced by the
/// table's, its `inputSchema` rewritten by [`input_schema`].
pub fn descriptor(upstream: &Value, table: &ToolShape, name: &str) -> Value {
    let mut d = upstream.clone();
    d["name"] = json!(name);
    if let Some(description) = &table.description {
        d["description"] = json!(description);
    }
    if let Some(title) = &table.title {
        d["title"] = json!(title);
    }
    if let Some(Ok(Value::Object(given))) = table.annotations.as_ref().map(serde_json::to_value) {
        if !d["annotations"].is_object() {
            d["annotations"] = json!({});
        }
        if let Some(annotations) = d["annotations"].as_object_mut() {
            annotations.extend(given);
        }
    }
    d["inputSchema"] = input_schema(&upstream["inputSchema"], &table.pin, &table.defaults);
    d
}

/// `schema` as clients see it: every pinned argument out of its top-level
/// `properties` and `required`, each defaulted one shown with its property's
/// `default` and out of `required` (a call may leave it out); a `required`
/// left empty goes.
pub fn input_schema(schema: &Value, pin: &BTreeMap<String, Value>, defaults: &BTreeMap<String, Value>) -> Value {
    let mut schema = schema.clone();
    let Some(root) = schema.as_object_mut() else { return schema };
    if let Some(props) = root.get_mut("properties").and_then(Value::as_object_mut) {
        for arg in pin.keys() {
            props.remove(arg);
        }
        for (arg, value) in defaults {
            if let Some(prop) = props.get_mut(arg).and_then(Value::as_object_mut) {
                prop.insert("default".into(), value.clone());
            }
        }
    }
    if let Some(required) = root.get_mut("required").and_then(Value::as_array_mut) {
        required.retain(|r| r.as_str().is_none_or(|r| !pin.contains_key(r) && !defaults.contains_key(r)));
        if required.is_empty() {
            root.remove("required");
        }
    }
    schema
}

fn refuse(up: &UpstreamConfig, table: &ToolShape, why: &str) -> CatalogError {
    CatalogError::Invalid(format!("upstream {:?}: [[upstream.tool]] match = {:?}: {why}", up.name, table.pattern))
}

/// Two served tools of `up` (`a` and `b`, by the upstream's names) listed as `name`.
fn collision(up: &UpstreamConfig, name: &str, a: &str, b: &str) -> CatalogError {
    let renamed: Vec<String> = [a, b]
        .into_iter()
        .filter_map(|own| up.shape.tool(own).filter(|t| t.rename.is_some()).map(|t| (own, t)))
        .map(|(own, t)| format!("[[upstream.tool]] match = {:?} renames {own:?}", t.pattern))
        .collect();
    let by = if renamed.is_empty() { String::new() } else { format!(" ({})", renamed.join("; ")) };
    CatalogError::Invalid(format!(
        "upstream {:?}: the tools {a:?} and {b:?} would both be listed as {name:?}{by}: hide one of them \
         (`hide`) or rename it to a name of its own",
        up.name
    ))
}

#[cfg(test)]
mod tests;
