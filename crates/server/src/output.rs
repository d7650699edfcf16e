//! What a handler may return: anything [`IntoToolOutput`]. `String` and
//! `&str` become one text item, [`Json`] a text item plus
//! `structuredContent`, [`ToolOutput`] is taken as is, and `Result<T, E>`
//! works for any error that converts into [`ToolError`] (so `?` does).

use serde::Serialize;
use serde_json::{Value, json};

use crate::tool::{ToolError, ToolOutput};

/// Converts a handler's return value into its output.
pub trait IntoToolOutput {
    /// The output, or why there is none.
    fn into_tool_output(self) -> Result<ToolOutput, ToolError>;
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
}

/// A structured result: `structuredContent` is `T` serialised (it must be a
/// JSON object, as MCP requires), and one text item carries the same JSON for
/// clients that read only `content`. Declare its schema with
/// [`crate::Tool::output`] so clients can rely on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Json<T>(pub T);

impl<T: Serialize> IntoToolOutput for Json<T> {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        let value = serde_json::to_value(&self.0)?;
        if !value.is_object() {
            return Err(ToolError::internal("Json<T> must serialise to a JSON object (structuredContent)"));
        }
        let text = value.to_string();
        Ok(ToolOutput::Complete(json!({
            "content": [{ "type": "text", "text": text }],
            "structuredContent": value,
        })))
    }
}

impl<T> From<T> for Json<T> {
    fn from(value: T) -> Self {
        Json(value)
    }
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

    #[derive(Serialize)]
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
}
