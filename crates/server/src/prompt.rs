//! Prompts: a [`PromptHandler`] turns the prompt's arguments into a
//! [`PromptOutput`] (the `GetPromptResult` messages, or an MRTR question).
//! Prompt handlers get the same [`ToolContext`] as tools (MRTR answers,
//! `requestState`, progress and logs) and fail with the same [`ToolError`].

use std::{collections::BTreeMap, sync::Arc};

use serde_json::{Map, Value, json};

use crate::{
    context::ToolContext,
    output::{ToolError, ToolOutput},
    tool::ToolHandler,
};

/// What a prompt handler returns.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum PromptOutput {
    /// A `GetPromptResult`.
    Messages {
        /// An optional description of this rendering of the prompt.
        description: Option<String>,
        /// The `PromptMessage`s (`role` and `content`).
        messages: Vec<Value>,
    },
    /// MRTR: ask the client for input first; `state` is sealed into `requestState`.
    InputRequired {
        /// The input requests, by key.
        requests: BTreeMap<String, Value>,
        /// Opaque state to get back on the retry.
        state: Option<Value>,
    },
}

impl PromptOutput {
    /// A result with these messages.
    pub fn messages(messages: Vec<Value>) -> Self {
        PromptOutput::Messages { description: None, messages }
    }

    /// A result with one user text message.
    pub fn text(text: impl Into<String>) -> Self {
        Self::messages(vec![json!({ "role": "user", "content": { "type": "text", "text": text.into() } })])
    }

    /// Ask for these inputs first (MRTR), optionally carrying `state` to the retry.
    pub fn input_required(requests: BTreeMap<String, Value>, state: Option<Value>) -> Self {
        PromptOutput::InputRequired { requests, state }
    }

    /// Set the result's description.
    #[must_use]
    pub fn describe(self, text: impl Into<String>) -> Self {
        match self {
            PromptOutput::Messages { messages, .. } => {
                PromptOutput::Messages { description: Some(text.into()), messages }
            }
            other => other,
        }
    }
}

impl From<PromptOutput> for ToolOutput {
    fn from(out: PromptOutput) -> Self {
        match out {
            PromptOutput::Messages { description, messages } => {
                let mut result = Map::new();
                if let Some(d) = description {
                    result.insert("description".into(), Value::String(d));
                }
                result.insert("messages".into(), Value::Array(messages));
                ToolOutput::Complete(Value::Object(result))
            }
            PromptOutput::InputRequired { requests, state } => ToolOutput::InputRequired { requests, state },
        }
    }
}

/// A prompt's implementation. `arguments` is an object of strings, its
/// required arguments checked against the prompt's descriptor.
#[async_trait::async_trait]
pub trait PromptHandler: Send + Sync + 'static {
    /// Render the prompt.
    async fn get(&self, ctx: ToolContext, arguments: Value) -> Result<PromptOutput, ToolError>;
}

/// Any async closure `Fn(ToolContext, Value) -> Future<Result<PromptOutput, ToolError>>` is a prompt handler.
#[async_trait::async_trait]
impl<F, Fut> PromptHandler for F
where
    F: Fn(ToolContext, Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<PromptOutput, ToolError>> + Send + 'static,
{
    async fn get(&self, ctx: ToolContext, arguments: Value) -> Result<PromptOutput, ToolError> {
        self(ctx, arguments).await
    }
}

/// A prompt handler run where a tool handler runs (the dispatcher's request path).
pub(crate) struct AsTool(pub(crate) Arc<dyn PromptHandler>);

#[async_trait::async_trait]
impl ToolHandler for AsTool {
    async fn call(&self, ctx: ToolContext, arguments: Value) -> Result<ToolOutput, ToolError> {
        self.0.get(ctx, arguments).await.map(ToolOutput::from)
    }
}
