//! `x-mcp-header` annotations (SEP-2243): which tool arguments a client
//! mirrors into `Mcp-Param-*` headers, checked once when the catalog is built.

use serde_json::{Map, Value};

/// A parameter mirrored into an `Mcp-Param-{name}` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderParam {
    /// The chain of `properties` keys from the schema root.
    pub path: Vec<String>,
    /// The header name suffix.
    pub header: String,
}

impl HeaderParam {
    /// The argument value at this parameter's path, if present and not null.
    pub fn value<'a>(&self, arguments: &'a Value) -> Option<&'a Value> {
        let mut v = arguments;
        for k in &self.path {
            v = v.get(k)?;
        }
        (!v.is_null()).then_some(v)
    }
}

/// Collect `x-mcp-header` annotations reachable through `properties` chains,
/// enforcing SEP-2243: non-empty token names, case-insensitively unique,
/// on string/integer/boolean properties only, and nowhere else in the schema.
pub(super) fn header_params(schema: &Value) -> Result<Vec<HeaderParam>, String> {
    fn walk(node: &Map<String, Value>, path: &mut Vec<String>, out: &mut Vec<HeaderParam>) -> Result<(), String> {
        let Some(Value::Object(props)) = node.get("properties") else {
            return Ok(());
        };
        for (key, sub) in props {
            let Value::Object(sub) = sub else { continue };
            path.push(key.clone());
            if let Some(h) = sub.get("x-mcp-header") {
                let name = h.as_str().ok_or("x-mcp-header must be a string")?;
                let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
                if name.is_empty() || !name.chars().all(token) {
                    return Err(format!("{name:?} is not an HTTP token"));
                }
                let ty = sub.get("type").and_then(Value::as_str);
                if !matches!(ty, Some("string" | "integer" | "boolean")) {
                    return Err(format!("{name:?} annotates a non-primitive (or number) property"));
                }
                if out.iter().any(|p| p.header.eq_ignore_ascii_case(name)) {
                    return Err(format!("{name:?} is used twice"));
                }
                out.push(HeaderParam { path: path.clone(), header: name.to_string() });
            }
            walk(sub, path, out)?;
            path.pop();
        }
        Ok(())
    }
    fn count(v: &Value) -> usize {
        match v {
            Value::Object(m) => usize::from(m.contains_key("x-mcp-header")) + m.values().map(count).sum::<usize>(),
            Value::Array(a) => a.iter().map(count).sum(),
            _ => 0,
        }
    }
    let mut out = Vec::new();
    if let Value::Object(root) = schema {
        walk(root, &mut Vec::new(), &mut out)?;
    }
    if count(schema) != out.len() {
        return Err("x-mcp-header is only allowed on properties reachable through `properties` keys".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn header_annotations_follow_sep_2243() {
        let ok = json!({"type":"object","properties":{
            "region":{"type":"string","x-mcp-header":"Region"},
            "o":{"type":"object","properties":{"n":{"type":"integer","x-mcp-header":"N"}}}}});
        let h = header_params(&ok).unwrap();
        assert_eq!(
            h,
            vec![
                HeaderParam { path: vec!["o".into(), "n".into()], header: "N".into() },
                HeaderParam { path: vec!["region".into()], header: "Region".into() },
            ]
        );
        for bad in [
            json!({"type":"object","properties":{"a":{"type":"number","x-mcp-header":"A"}}}),
            json!({"type":"object","properties":{"a":{"type":"string","x-mcp-header":"A B"}}}),
            json!({"type":"object","properties":{"a":{"type":"string","x-mcp-header":"A"},"b":{"type":"string","x-mcp-header":"a"}}}),
            json!({"type":"object","anyOf":[{"properties":{"a":{"type":"string","x-mcp-header":"A"}}}]}),
            json!({"type":"object","properties":{"a":{"type":"array","items":{"type":"string","x-mcp-header":"A"}}}}),
        ] {
            assert!(header_params(&bad).is_err(), "{bad}");
        }
    }
}
