//! [`Method`]: every request method of MCP 2026-07-28 plus the Tasks
//! extension that presa answers, named once.
//!
//! The transport parses the body's `method` into a [`Method`] during
//! admission (an unknown name is `-32601`), checks the `Mcp-Name` header
//! against [`Method::name_param`], labels spans and metrics with
//! [`Method::as_str`], and hands the dispatcher the enum, which matches on it
//! exhaustively: adding a method is a compile error everywhere it matters.

use std::{fmt, str::FromStr};

/// A request method presa answers. Anything else is `-32601` (HTTP 404),
/// including the removed `tasks/result` and `tasks/list`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// `server/discover`: versions, capabilities, instructions.
    Discover,
    /// `tools/list`.
    ToolsList,
    /// `tools/call`: runs a tool, inside the request or as a task.
    ToolsCall,
    /// `resources/list`.
    ResourcesList,
    /// `resources/read`.
    ResourcesRead,
    /// `resources/templates/list`.
    ResourceTemplatesList,
    /// `prompts/list`.
    PromptsList,
    /// `prompts/get`.
    PromptsGet,
    /// `completion/complete`.
    Complete,
    /// `subscriptions/listen`: a long-lived SSE stream of notifications.
    Listen,
    /// `tasks/get` (Tasks extension).
    TasksGet,
    /// `tasks/update` (Tasks extension): answers a task's input requests.
    TasksUpdate,
    /// `tasks/cancel` (Tasks extension).
    TasksCancel,
}

impl Method {
    /// Every method, in the order `server/discover` documents them.
    pub const ALL: [Method; 13] = [
        Method::Discover,
        Method::ToolsList,
        Method::ToolsCall,
        Method::ResourcesList,
        Method::ResourcesRead,
        Method::ResourceTemplatesList,
        Method::PromptsList,
        Method::PromptsGet,
        Method::Complete,
        Method::Listen,
        Method::TasksGet,
        Method::TasksUpdate,
        Method::TasksCancel,
    ];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Method::Discover => "server/discover",
            Method::ToolsList => "tools/list",
            Method::ToolsCall => "tools/call",
            Method::ResourcesList => "resources/list",
            Method::ResourcesRead => "resources/read",
            Method::ResourceTemplatesList => "resources/templates/list",
            Method::PromptsList => "prompts/list",
            Method::PromptsGet => "prompts/get",
            Method::Complete => "completion/complete",
            Method::Listen => "subscriptions/listen",
            Method::TasksGet => "tasks/get",
            Method::TasksUpdate => "tasks/update",
            Method::TasksCancel => "tasks/cancel",
        }
    }

    /// The params field mirrored into the `Mcp-Name` header (SEP-2243), if any.
    pub const fn name_param(self) -> Option<&'static str> {
        match self {
            Method::ToolsCall | Method::PromptsGet => Some("name"),
            Method::ResourcesRead => Some("uri"),
            Method::TasksGet | Method::TasksUpdate | Method::TasksCancel => Some("taskId"),
            Method::Discover
            | Method::ToolsList
            | Method::ResourcesList
            | Method::ResourceTemplatesList
            | Method::PromptsList
            | Method::Complete
            | Method::Listen => None,
        }
    }

    /// Whether this is one of the Tasks extension's `tasks/*` methods.
    pub const fn is_task_method(self) -> bool {
        matches!(self, Method::TasksGet | Method::TasksUpdate | Method::TasksCancel)
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A method name presa does not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Method not found: {0}")]
pub struct UnknownMethod(pub String);

impl FromStr for Method {
    type Err = UnknownMethod;

    /// Exact, case-sensitive match on the wire name.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Method::ALL.into_iter().find(|m| m.as_str() == s).ok_or_else(|| UnknownMethod(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in Method::ALL {
            assert_eq!(m.as_str().parse::<Method>(), Ok(m));
            assert_eq!(m.to_string(), m.as_str());
        }
    }

    #[test]
    fn unknown_and_removed_methods_are_refused() {
        for name in ["tasks/result", "tasks/list", "Tools/Call", "tools/call ", "initialize", ""] {
            assert_eq!(name.parse::<Method>(), Err(UnknownMethod(name.to_string())), "{name:?}");
        }
    }

    #[test]
    fn name_params() {
        assert_eq!(Method::TasksGet.name_param(), Some("taskId"));
        assert_eq!(Method::ResourcesRead.name_param(), Some("uri"));
        assert_eq!(Method::ToolsCall.name_param(), Some("name"));
        assert_eq!(Method::ToolsList.name_param(), None);
        assert_eq!(Method::ALL.iter().filter(|m| m.is_task_method()).count(), 3);
    }
}
