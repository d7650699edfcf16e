//! What a handler may return: anything [`IntoToolOutput`]. `String` and
//! `&str` become one text item, [`Json`] a text item plus
//! `structuredContent` (and the tool's `outputSchema`, derived from its
//! type), [`ToolOutput`] is taken as is, and `Result<T, E>` works for any
//! error that converts into [`ToolError`] (so `?` does).

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Value, json};

use crate::{
    tool::{ToolError, ToolOutput},
    typed::schema_of,
};

/// Converts a handler's return value into its output.
pub trait IntoToolOutput {
    /// The output, or why there is none.
    fn into_tool_output(self) -> Result<ToolOutput, ToolError>;

    /// The `outputSchema` every output of this type conforms to, if it has
    /// one: [`crate::Tool::typed`] declares it. `Some` for [`Json`] and
    /// [`JsonWithText`] (the schema of their `T`), and for a `Result` of
    /// them; `None` otherwise.
    fn output_schema() -> Option<Value> {
        None
    }
}

impl IntoToolOutput for ToolOutput {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        Ok(self)
    }
}

impl IntoToolOutput for String {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(self))
    }
}

impl IntoToolOutput for &'static str {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(self))
    }
}

impl<T: IntoToolOutput, E: Into<ToolError>> IntoToolOutput for Result<T, E> {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        self.map_err(Into::into)?.into_tool_output()
    }

    fn output_schema() -> Option<Value> {
        T::output_schema()
    }
}

/// A structured result: `structuredContent` is `T` serialised (it must be a
/// JSON object, as MCP requires), and one text item carries the same JSON for
/// clients that read only `content`. A tool built with [`crate::Tool::typed`]
/// whose handler returns it (or a `Result` of it) declares `T`'s schema as
/// its `outputSchema`, so clients can rely on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Json<T>(pub T);

impl<T> Json<T> {
    /// The same structured result with `text` as its one text item instead
    /// of the JSON (a sentence for a person; `structuredContent` and the
    /// `outputSchema` are unchanged).
    pub fn with_text(self, text: impl Into<String>) -> JsonWithText<T> {
        JsonWithText { value: self.0, text: text.into() }
    }
}

impl<T: Serialize + JsonSchema> IntoToolOutput for Json<T> {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        structured(&self.0, None)
    }

    fn output_schema() -> Option<Value> {
        Some(schema_of::<T>())
    }
}

impl<T> From<T> for Json<T> {
    fn from(value: T) -> Self {
        Json(value)
    }
}

/// A [`Json`] result whose text item is a text of its own ([`Json::with_text`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonWithText<T> {
    value: T,
    text: String,
}

impl<T: Serialize + JsonSchema> IntoToolOutput for JsonWithText<T> {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        structured(&self.value, Some(self.text))
    }

    fn output_schema() -> Option<Value> {
        Some(schema_of::<T>())
    }
}

/// `value` as `structuredContent`, with `text` (or the JSON) as the one text item.
fn structured<T: Serialize>(value: &T, text: Option<String>) -> Result<ToolOutput, ToolError> {
    let value = serde_json::to_value(value)?;
    if !value.is_object() {
        return Err(ToolError::internal("Json<T> must serialise to a JSON object (structuredContent)"));
    }
    let text = text.unwrap_or_else(|| value.to_string());
    Ok(ToolOutput::Complete(json!({
        "content": [{ "type": "text", "text": text }],
        "structuredContent": value,
    })))
}

/// `Value`s are returned as a complete `CallToolResult` object as they are.
impl IntoToolOutput for Value {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::Complete(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, JsonSchema)]
    struct Report {
        files: u32,
    }

    #[test]
    fn conversions() {
        assert_eq!("hi".into_tool_output().unwrap(), ToolOutput::text("hi"));
        assert_eq!(String::from("hi").into_tool_output().unwrap(), ToolOutput::text("hi"));
        let json = Json(Report { files: 3 }).into_tool_output().unwrap().into_value();
        assert_eq!(json["structuredContent"], json!({ "files": 3 }));
        assert_eq!(json["content"][0]["text"], "{\"files\":3}");
        assert!(Json(5).into_tool_output().is_err(), "structuredContent must be an object");
        let io: Result<String, std::io::Error> = Err(std::io::Error::other("disk on fire"));
        match io.into_tool_output() {
            Err(ToolError::Internal(cause)) => assert_eq!(cause, "disk on fire"),
            other => panic!("{other:?}"),
        }
        let rpc: Result<&'static str, ToolError> = Err(ToolError::invalid_params("no"));
        assert!(matches!(rpc.into_tool_output(), Err(ToolError::Rpc(e)) if e.code == -32602));
    }

    #[test]
    fn a_text_of_its_own_keeps_the_structured_content() {
        let out = Json(Report { files: 2 }).with_text("2 files").into_tool_output().unwrap().into_value();
        assert_eq!(
            out,
            json!({ "content": [{ "type": "text", "text": "2 files" }], "structuredContent": { "files": 2 } })
        );
        assert!(Json(5).with_text("five").into_tool_output().is_err(), "structuredContent must be an object");
    }

    #[test]
    fn only_structured_results_have_an_output_schema() {
        let report = Json::<Report>::output_schema().expect("Json<T> has T's schema");
        assert_eq!(report["properties"]["files"]["type"], "integer");
        assert_eq!(<Result<Json<Report>, ToolError>>::output_schema(), Some(report.clone()));
        assert_eq!(<Result<JsonWithText<Report>, std::io::Error>>::output_schema(), Some(report));
        assert_eq!(String::output_schema(), None);
        assert_eq!(<Result<ToolOutput, ToolError>>::output_schema(), None);
        assert_eq!(Value::output_schema(), None);
    }
}
