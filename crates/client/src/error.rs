//! The crate's error type: every failure a client can meet, each with the
//! words a user needs to act on it.

use serde_json::Value;

/// Why a request to an MCP server failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No HTTP answer at all: refused, DNS, TLS, reset, timeout.
    #[error("cannot reach the MCP server at {url}: {reason}")]
    Unreachable {
        /// The endpoint.
        url: String,
        /// What the transport said.
        reason: String,
    },
    /// HTTP 401: no token, or a token the server does not accept.
    #[error("{}", unauthorized_message(.resource_metadata, .detail))]
    Unauthorized {
        /// `resource_metadata` from `WWW-Authenticate: Bearer …`: where to learn how to get a token.
        resource_metadata: Option<String>,
        /// `error_description` or the raw challenge, if any.
        detail: Option<String>,
    },
    /// HTTP 403: authenticated, but not allowed.
    #[error("{}", forbidden_message(.scope, .detail))]
    Forbidden {
        /// The scopes the server asks for (`scope="…"` with `error="insufficient_scope"`).
        scope: Option<String>,
        /// `error_description`, the challenge or the body, if any.
        detail: Option<String>,
    },
    /// `-32022`: the server does not speak this client's protocol revision.
    #[error(
        "the server does not support protocol version {requested}{}",
        if .supported.is_empty() { String::new() } else { format!("; it supports: {}", .supported.join(", ")) }
    )]
    UnsupportedVersion {
        /// The version this client sent.
        requested: String,
        /// The versions the server listed in the error data.
        supported: Vec<String>,
    },
    /// `tasks/*` answered `-32602`: the id is unknown, expired or not the caller's.
    #[error("unknown task {id} (it may have expired, or belong to another caller): {message}")]
    UnknownTask {
        /// The task id.
        id: String,
        /// The server's message.
        message: String,
    },
    /// Any other JSON-RPC error.
    #[error("the server answered error {code}: {message}{}", data_suffix(.data))]
    Rpc {
        /// The JSON-RPC error code.
        code: i64,
        /// Its message.
        message: String,
        /// Its data, if any.
        data: Option<Value>,
    },
    /// An HTTP error without a JSON-RPC body.
    #[error("the server answered HTTP {status}{}", if .body.is_empty() { String::new() } else { format!(": {}", .body) })]
    Http {
        /// The status code.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// presa's admin API refused: `{"error": {"code", "message"}}` with its status.
    #[error("the admin API answered HTTP {status} {code}: {message}")]
    Admin {
        /// The HTTP status (400, 403, 404, 409…).
        status: u16,
        /// The error's code (`bad_request`, `forbidden`, `not_found`, `conflict`…).
        code: String,
        /// What it says.
        message: String,
    },
    /// An answer that is not MCP (not JSON-RPC, a stream without a response…).
    #[error("unexpected answer from the server: {0}")]
    Protocol(String),
}

impl Error {
    /// Whether the failure is in reaching or being admitted by the server
    /// (unreachable, HTTP status, auth, version), not in the request itself.
    pub fn is_connection(&self) -> bool {
        matches!(
            self,
            Error::Unreachable { .. }
                | Error::Unauthorized { .. }
                | Error::Forbidden { .. }
                | Error::UnsupportedVersion { .. }
                | Error::Http { .. }
                | Error::Protocol(_)
        )
    }

    /// Whether the request may have reached the server without its answer
    /// reaching us (no answer, a reset, or a proxy's 502/503/504): the
    /// server may or may not have acted on it. A task-creating `tools/call`
    /// sent with an idempotency key can be retried with the same key
    /// ([`Client::call_tool_keyed`](crate::Client::call_tool_keyed)).
    pub fn reply_lost(&self) -> bool {
        matches!(self, Error::Unreachable { .. } | Error::Http { status: 502..=504, .. })
    }

    /// The JSON-RPC error code, for [`Error::Rpc`].
    pub fn rpc_code(&self) -> Option<i64> {
        match self {
            Error::Rpc { code, .. } => Some(*code),
            _ => None,
        }
    }
}

fn unauthorized_message(metadata: &Option<String>, detail: &Option<String>) -> String {
    let mut s = String::from("the server requires authentication (HTTP 401)");
    if let Some(d) = detail {
        s.push_str(&format!(": {d}"));
    }
    match metadata {
        Some(m) => s.push_str(&format!("; it says how to get a token at {m}; pass it with --token or PRESA_TOKEN")),
        None => s.push_str("; pass a bearer token with --token or PRESA_TOKEN"),
    }
    s
}

fn forbidden_message(scope: &Option<String>, detail: &Option<String>) -> String {
    let mut s = String::from("the server refused the request (HTTP 403)");
    match scope {
        Some(sc) => s.push_str(&format!(": the token lacks the scope(s) {sc}; get a token that has them")),
        None => {
            if let Some(d) = detail {
                s.push_str(&format!(": {d}"));
            }
        }
    }
    s
}

fn data_suffix(data: &Option<Value>) -> String {
    match data {
        Some(d) if !d.is_null() => format!(" ({d})"),
        _ => String::new(),
    }
}
