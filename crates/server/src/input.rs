//! Asking the client: [`InputRequest`] builds the input requests a handler
//! passes to [`ToolContext::input`] (elicitation, sampling, roots), and
//! [`ToolContext::elicit`] asks for a typed form and decodes the answer.
//! In a task the question parks it as `input_required`; in a plain call it
//! becomes an MRTR `InputRequiredResult`. Handlers do not care which.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::{
    context::ToolContext,
    output::ToolError,
    typed::{decode, elicitation_schema},
};

/// One input request: an `elicitation/create`, `sampling/createMessage` or
/// `roots/list` request the client answers.
#[derive(Debug, Clone, PartialEq)]
pub struct InputRequest(Value);

impl InputRequest {
    /// An elicitation form: `message` and the `requestedSchema` (a flat object).
    pub fn elicitation(message: impl Into<String>, requested_schema: Value) -> Self {
        InputRequest(json!({ "method": "elicitation/create", "params": {
            "message": message.into(), "requestedSchema": requested_schema } }))
    }

    /// An elicitation form whose schema is derived from `T` (see [`ToolContext::elicit`]).
    pub fn form<T: JsonSchema>(message: impl Into<String>) -> Result<Self, ToolError> {
        Ok(Self::elicitation(message, elicitation_schema::<T>()?))
    }

    /// A sampling request with one user text message.
    pub fn sampling(prompt: impl Into<String>, max_tokens: u32) -> Self {
        Self::sampling_with(json!({
            "messages": [{ "role": "user", "content": { "type": "text", "text": prompt.into() } }],
            "maxTokens": max_tokens,
        }))
    }

    /// A sampling request with the given `CreateMessageRequest` params.
    pub fn sampling_with(params: Value) -> Self {
        InputRequest(json!({ "method": "sampling/createMessage", "params": params }))
    }

    /// A request for the client's roots.
    pub fn roots() -> Self {
        InputRequest(json!({ "method": "roots/list", "params": {} }))
    }

    /// The wire form.
    pub fn into_value(self) -> Value {
        self.0
    }
}

impl From<InputRequest> for Value {
    fn from(r: InputRequest) -> Self {
        r.0
    }
}

/// The user's answer to a typed elicitation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Elicited<T> {
    /// Accepted, with the form's content.
    Accept(T),
    /// Explicitly declined.
    Decline,
    /// Dismissed without a choice.
    Cancel,
}

impl ToolContext {
    /// Ask the user to fill in a form derived from `T` (a flat struct of
    /// strings, numbers, booleans and unit enums; `Option` fields are
    /// optional) under input key `key`, and decode the answer.
    ///
    /// A task parks as `input_required` until `tasks/update` answers (and a
    /// re-run after a crash gets the recorded answer back without asking
    /// again); a plain call answers with an MRTR `InputRequiredResult`.
    pub async fn elicit<T: JsonSchema + DeserializeOwned>(
        &self,
        key: &str,
        message: impl Into<String>,
    ) -> Result<Elicited<T>, ToolError> {
        let answer = self.input(key, InputRequest::form::<T>(message)?).await?;
        match answer["action"].as_str() {
            Some("accept") => {
                let content = answer.get("content").cloned().unwrap_or_else(|| json!({}));
                decode::<T>(content).map(Elicited::Accept).map_err(|why| {
                    ToolError::invalid_params(format!("The answer to {key} does not fit its form: {why}"))
                })
            }
            Some("decline") => Ok(Elicited::Decline),
            _ => Ok(Elicited::Cancel),
        }
    }
}
