//! What a handler may return: anything [`IntoToolOutput`]. `String` and
//! `&str` become one text item, [`Json`] a text item plus
//! `structuredContent` (and the tool's `outputSchema`, derived from its
//! type), [`ToolOutput`] is taken as is, and `Result<T, E>` works for any
//! error that converts into [`ToolError`] (so `?` does).

use std::{collections::BTreeMap, fmt};

use presa_protocol::{ResultType, jsonrpc::ErrorObject};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Value, json};

use crate::schema::schema_of;

/// What a handler returns.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutput {
    /// A `CallToolResult` (`content`, optional `structuredContent`, `isError`).
    Complete(Value),
    /// MRTR: ask the client for input and retry (sync calls only). `state`
    /// is signed into `requestState` and handed back on the retry.
    InputRequired {
        /// The input requests, by key.
        requests: BTreeMap<String, Value>,
        /// Opaque tool state to get back on the retry.
        state: Option<Value>,
    },
}

impl ToolOutput {
    /// A result with one text item.
    pub fn text(text: impl Into<String>) -> Self {
        ToolOutput::Complete(json!({ "content": [{ "type": "text", "text": text.into() }] }))
    }

    /// A tool-level error: `isError: true` with one text item. Tasks end `completed`.
    pub fn error(text: impl Into<String>) -> Self {
        ToolOutput::Complete(json!({ "content": [{ "type": "text", "text": text.into() }], "isError": true }))
    }

    /// A result from a `content` array.
    pub fn content(content: Value) -> Self {
        ToolOutput::Complete(json!({ "content": content }))
    }

    /// The output as a JSON value (`InputRequired` becomes its wire shape without state).
    pub fn into_value(self) -> Value {
        match self {
            ToolOutput::Complete(v) => v,
            ToolOutput::InputRequired { requests, .. } => {
                json!({ "resultType": ResultType::InputRequired, "inputRequests": requests })
            }
        }
    }
}

/// Why a handler did not produce an output.
///
/// Any `std::error::Error + Send + Sync + 'static` converts into
/// [`ToolError::Internal`] (its message is logged, never sent), so `?` on an
/// `io::Error` or a client library's error works in a handler. For that
/// reason `ToolError` itself is not a `std::error::Error` (like `anyhow::Error`).
#[derive(Debug)]
#[non_exhaustive]
pub enum ToolError {
    /// A JSON-RPC error to send as is (e.g. `-32602`, `-32021`). In a task it
    /// ends the task `failed` with this error.
    Rpc(ErrorObject),
    /// The handler failed. Sent as `-32603 Internal error`; the cause is logged only.
    Internal(String),
    /// The work was cancelled (the task was cancelled or the request went away).
    Cancelled,
    /// The handler needs input it does not have yet (raised by
    /// [`ToolContext::input`](crate::ToolContext::input) in a sync call; becomes an `InputRequiredResult`).
    NeedInput(BTreeMap<String, Value>),
    /// The try failed in a way worth trying again ([`ToolError::transient`],
    /// [`ToolError::retry_after`]): a task is tried again under its tool's
    /// [`RetryPolicy`](crate::RetryPolicy) (the work waits, holding no
    /// worker); a sync call answers a retryable error.
    Retry(crate::retry::Retry),
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolError::Rpc(e) => f.write_str(&e.message),
            ToolError::Internal(cause) => f.write_str(cause),
            ToolError::Cancelled => f.write_str("cancelled"),
            ToolError::NeedInput(_) => f.write_str("input required"),
            ToolError::Retry(r) => write!(f, "worth trying again: {r}"),
        }
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for ToolError {
    fn from(e: E) -> Self {
        ToolError::Internal(e.to_string())
    }
}

impl ToolError {
    /// An internal failure with a cause to log.
    pub fn internal(cause: impl fmt::Display) -> Self {
        ToolError::Internal(cause.to_string())
    }

    /// `-32602 Invalid params` with `message` (sent to the client as is).
    pub fn invalid_params(message: impl Into<String>) -> Self {
        ToolError::Rpc(ErrorObject::new(presa_protocol::codes::INVALID_PARAMS, message))
    }
}

impl ToolError {
    /// A transient failure (a network blip, an upstream restarting, a 503):
    /// a task tries again after the tool's backoff, until its attempts are
    /// spent. Only for work that did not happen, or is safe to repeat.
    pub fn transient(reason: impl Into<String>) -> Self {
        ToolError::Retry(crate::retry::Retry { reason: reason.into(), after: None })
    }

    /// [`transient`](Self::transient), trying again after `after` (a `Retry-After`, a rate limit's reset).
    pub fn retry_after(after: std::time::Duration, reason: impl Into<String>) -> Self {
        ToolError::Retry(crate::retry::Retry { reason: reason.into(), after: Some(after) })
    }
}

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
