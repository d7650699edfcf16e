//! JSON Schema helpers for a client: typing `key=value` arguments from a
//! tool's `inputSchema`, describing a tool's arguments, and turning an
//! elicitation's `requestedSchema` into form fields.

use serde_json::{Map, Value};

/// Why a `key=value` argument does not fit its tool's `inputSchema`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ArgumentError {
    /// The text has no `=`.
    #[error("{0:?} is not key=value (for example seconds=2)")]
    NotAssignment(String),
    /// An `integer` property got something else.
    #[error("expected an integer, got {0:?}")]
    NotInteger(String),
    /// A `number` property got something else.
    #[error("expected a number, got {0:?}")]
    NotNumber(String),
    /// A `boolean` property got something else.
    #[error("expected true or false, got {0:?}")]
    NotBoolean(String),
    /// An `array` or `object` property got text that is not JSON.
    #[error("expected a JSON {kind}: {reason}")]
    NotJson {
        /// `array` or `object`.
        kind: String,
        /// What the JSON parser said.
        reason: String,
    },
    /// An `array` or `object` property got JSON of another kind.
    #[error("expected a JSON {kind}, got {value}")]
    WrongJson {
        /// `array` or `object`.
        kind: String,
        /// What it got.
        value: Value,
    },
    /// The value of `key` does not fit.
    #[error("{key}: {problem}")]
    Key {
        /// The property.
        key: String,
        /// What is wrong with its value.
        problem: Box<ArgumentError>,
    },
}

/// The JSON type a schema property declares (the first non-null of a type list).
fn declared_type(prop: &Value) -> Option<&str> {
    match &prop["type"] {
        Value::String(t) => Some(t.as_str()),
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).find(|t| *t != "null"),
        _ if prop.get("enum").is_some() || prop.get("oneOf").is_some() => Some("string"),
        _ => None,
    }
}

/// Type `raw` (the text after `key=`) with the property's schema: numbers,
/// integers and booleans are parsed, arrays and objects read as JSON, strings
/// taken as they are. Without a declared type, JSON is tried, then a string.
pub fn typed_value(prop: Option<&Value>, raw: &str) -> Result<Value, ArgumentError> {
    let ty = prop.and_then(declared_type);
    match ty {
        Some("string") => Ok(Value::String(raw.to_string())),
        Some("integer") => {
            raw.trim().parse::<i64>().map(Value::from).map_err(|_| ArgumentError::NotInteger(raw.to_string()))
        }
        Some("number") => match raw.trim().parse::<i64>() {
            Ok(i) => Ok(Value::from(i)),
            Err(_) => raw
                .trim()
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map(Value::Number)
                .ok_or_else(|| ArgumentError::NotNumber(raw.to_string())),
        },
        Some("boolean") => match raw.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "y" | "1" | "on" => Ok(Value::Bool(true)),
            "false" | "no" | "n" | "0" | "off" => Ok(Value::Bool(false)),
            _ => Err(ArgumentError::NotBoolean(raw.to_string())),
        },
        Some(t @ ("array" | "object")) => {
            let v: Value = serde_json::from_str(raw)
                .map_err(|e| ArgumentError::NotJson { kind: t.to_string(), reason: e.to_string() })?;
            let ok = if t == "array" { v.is_array() } else { v.is_object() };
            if ok { Ok(v) } else { Err(ArgumentError::WrongJson { kind: t.to_string(), value: v }) }
        }
        _ => Ok(serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()))),
    }
}

/// Parse `key=value` assignments against an object schema (`inputSchema`).
pub fn parse_assignments(schema: &Value, pairs: &[String]) -> Result<Map<String, Value>, ArgumentError> {
    let mut out = Map::new();
    for pair in pairs {
        let (key, raw) = pair.split_once('=').ok_or_else(|| ArgumentError::NotAssignment(pair.clone()))?;
        let value = typed_value(schema["properties"].get(key), raw)
            .map_err(|e| ArgumentError::Key { key: key.to_string(), problem: Box::new(e) })?;
        out.insert(key.to_string(), value);
    }
    Ok(out)
}

/// One argument of a tool, for `presa tools`.
#[derive(Debug, Clone, PartialEq)]
pub struct ArgumentDoc {
    /// The property name.
    pub name: String,
    /// `string`, `number`, `one of a|b`…
    pub kind: String,
    /// Listed in `required`.
    pub required: bool,
    /// `description`, default, bounds: everything else worth a line.
    pub notes: Vec<String>,
}

/// Describe the properties of an object schema, required ones first.
pub fn describe_arguments(schema: &Value) -> Vec<ArgumentDoc> {
    let required: Vec<&str> =
        schema["required"].as_array().map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let mut docs: Vec<ArgumentDoc> = schema["properties"]
        .as_object()
        .map(|props| {
            props
                .iter()
                .map(|(name, p)| {
                    let kind = match p["enum"].as_array() {
                        Some(values) => format!("one of {}", values.iter().map(show).collect::<Vec<_>>().join("|")),
                        None => match declared_type(p) {
                            Some("array") => match declared_type(&p["items"]) {
                                Some(t) => format!("array of {t} (JSON)"),
                                None => "array (JSON)".into(),
                            },
                            Some("object") => "object (JSON)".into(),
                            Some(t) => t.to_string(),
                            None => "any (JSON)".into(),
                        },
                    };
                    let mut notes = Vec::new();
                    if let Some(d) = p["description"].as_str() {
                        notes.push(d.to_string());
                    }
                    if let Some(d) = p.get("default") {
                        notes.push(format!("default {}", show(d)));
                    }
                    match (p.get("minimum"), p.get("maximum")) {
                        (Some(lo), Some(hi)) => notes.push(format!("{}..{}", show(lo), show(hi))),
                        (Some(lo), None) => notes.push(format!(">= {}", show(lo))),
                        (None, Some(hi)) => notes.push(format!("<= {}", show(hi))),
                        _ => {}
                    }
                    ArgumentDoc { name: name.clone(), kind, required: required.contains(&name.as_str()), notes }
                })
                .collect()
        })
        .unwrap_or_default();
    docs.sort_by_key(|d| !d.required);
    docs
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// What kind of answer a form field takes.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldKind {
    /// Free text.
    String,
    /// A number.
    Number,
    /// An integer.
    Integer,
    /// Yes or no.
    Boolean,
    /// One of fixed values: (value sent, label shown).
    Enum(Vec<(Value, String)>),
}

/// One field of an elicitation form.
#[derive(Debug, Clone, PartialEq)]
pub struct FormField {
    /// The property name (the key in `content`).
    pub name: String,
    /// `title`, else the name.
    pub label: String,
    /// `description`.
    pub description: Option<String>,
    /// The kind of answer.
    pub kind: FieldKind,
    /// Listed in `required`.
    pub required: bool,
    /// `default`.
    pub default: Option<Value>,
}

/// The fields of an elicitation's `requestedSchema` (a flat object of
/// primitive properties), required ones first.
pub fn form_fields(requested_schema: &Value) -> Vec<FormField> {
    let required: Vec<&str> = requested_schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut fields: Vec<FormField> = requested_schema["properties"]
        .as_object()
        .map(|props| {
            props
                .iter()
                .map(|(name, p)| {
                    let kind = if let Some(values) = p["enum"].as_array() {
                        let names = p["enumNames"].as_array();
                        FieldKind::Enum(
                            values
                                .iter()
                                .enumerate()
                                .map(|(i, v)| {
                                    let label = names.and_then(|n| n.get(i)).and_then(Value::as_str);
                                    (v.clone(), label.map_or_else(|| show(v), str::to_string))
                                })
                                .collect(),
                        )
                    } else if let Some(options) = p["oneOf"].as_array().or_else(|| p["anyOf"].as_array()) {
                        FieldKind::Enum(
                            options
                                .iter()
                                .filter_map(|o| {
                                    let v = o.get("const")?.clone();
                                    let label = o["title"].as_str().map_or_else(|| show(&v), str::to_string);
                                    Some((v, label))
                                })
                                .collect(),
                        )
                    } else {
                        match declared_type(p) {
                            Some("boolean") => FieldKind::Boolean,
                            Some("number") => FieldKind::Number,
                            Some("integer") => FieldKind::Integer,
                            _ => FieldKind::String,
                        }
                    };
                    FormField {
                        name: name.clone(),
                        label: p["title"].as_str().unwrap_or(name).to_string(),
                        description: p["description"].as_str().map(str::to_string),
                        kind,
                        required: required.contains(&name.as_str()),
                        default: p.get("default").cloned(),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    fields.sort_by_key(|f| !f.required);
    fields
}

/// A short description of a field for a script's user: `approve (boolean, required)`.
pub fn describe_field(f: &FormField) -> String {
    let kind = match &f.kind {
        FieldKind::String => "string".to_string(),
        FieldKind::Number => "number".into(),
        FieldKind::Integer => "integer".into(),
        FieldKind::Boolean => "boolean".into(),
        FieldKind::Enum(values) => {
            format!("one of {}", values.iter().map(|(v, _)| show(v)).collect::<Vec<_>>().join("|"))
        }
    };
    let mut s = format!("{} ({kind}{})", f.name, if f.required { ", required" } else { "" });
    if let Some(d) = &f.description {
        s.push_str(&format!(": {d}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({ "type": "object", "properties": {
            "version": { "type": "string", "description": "The version to deploy" },
            "step_seconds": { "type": "number", "minimum": 0, "maximum": 60, "default": 1 },
            "count": { "type": "integer" }, "dry": { "type": "boolean" },
            "tags": { "type": "array", "items": { "type": "string" } }, "opts": { "type": "object" },
            "level": { "enum": ["low", "high"] } },
            "required": ["version"] })
    }

    #[test]
    fn assignments_are_typed_from_the_schema() {
        let pairs: Vec<String> = [
            "version=1.0",
            "step_seconds=0.5",
            "count=3",
            "dry=true",
            r#"tags=["a","b"]"#,
            r#"opts={"x":1}"#,
            "free=42",
            "other=hi",
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        let m = parse_assignments(&schema(), &pairs).unwrap();
        assert_eq!(
            Value::Object(m),
            json!({ "version": "1.0", "step_seconds": 0.5, "count": 3, "dry": true,
            "tags": ["a", "b"], "opts": { "x": 1 }, "free": 42, "other": "hi" })
        );
        let e = parse_assignments(&schema(), &["count=x".into()]).unwrap_err();
        assert_eq!(e.to_string(), r#"count: expected an integer, got "x""#);
        assert!(parse_assignments(&schema(), &["tags={}".into()]).is_err());
        assert!(parse_assignments(&schema(), &["novalue".into()]).is_err());
        assert_eq!(typed_value(Some(&json!({ "type": "number" })), "1").unwrap(), json!(1));
    }

    #[test]
    fn arguments_are_described_required_first() {
        let docs = describe_arguments(&schema());
        assert_eq!(docs[0].name, "version");
        assert!(docs[0].required);
        let step = docs.iter().find(|d| d.name == "step_seconds").unwrap();
        assert_eq!(step.notes, vec!["default 1".to_string(), "0..60".into()]);
        assert_eq!(docs.iter().find(|d| d.name == "level").unwrap().kind, "one of low|high");
    }

    #[test]
    fn elicitation_schema_becomes_fields() {
        let f = form_fields(&json!({ "type": "object", "properties": {
            "note": { "type": "string" }, "approve": { "type": "boolean" },
            "size": { "type": "string", "enum": ["s", "m"], "enumNames": ["Small", "Medium"] },
            "tier": { "type": "string", "oneOf": [{ "const": "a", "title": "A" }] } }, "required": ["approve"] }));
        assert_eq!(f[0].name, "approve");
        assert_eq!(f[0].kind, FieldKind::Boolean);
        let size = f.iter().find(|x| x.name == "size").unwrap();
        assert_eq!(size.kind, FieldKind::Enum(vec![(json!("s"), "Small".into()), (json!("m"), "Medium".into())]));
        assert_eq!(describe_field(&f[0]), "approve (boolean, required)");
        let tier = f.iter().find(|x| x.name == "tier").unwrap();
        assert_eq!(tier.kind, FieldKind::Enum(vec![(json!("a"), "A".into())]));
    }
}
