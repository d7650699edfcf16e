//! JSON-RPC and MCP error codes, and the HTTP status each one maps to.

/// Invalid JSON was received.
pub const PARSE_ERROR: i64 = -32700;
/// The JSON sent is not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;
/// The method does not exist or is not available.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid method parameters.
pub const INVALID_PARAMS: i64 = -32602;
/// Internal JSON-RPC error.
pub const INTERNAL_ERROR: i64 = -32603;
/// HTTP headers do not match the body, or a required header is missing.
pub const HEADER_MISMATCH: i64 = -32020;
/// The request needs a client capability the client did not declare.
pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
/// The requested protocol version is not supported.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
/// A resource the server does not have (2025-11-25: `resources/read` or
/// `resources/subscribe` of an unknown URI).
pub const RESOURCE_NOT_FOUND: i64 = -32002;

/// Too many requests: the server is at a capacity it frees on its own (a
/// full work queue), or the caller at its own quota (active tasks, bytes,
/// listen streams); `data.retryAfterMs` says when to try again. Sent with
/// HTTP 429 and `Retry-After` (the draft rate-limit SEP).
pub const RATE_LIMITED: i64 = -32023;

/// The HTTP status a JSON-RPC error with `code` is sent with.
///
/// `retryable` marks transient server trouble (a store that is unreachable,
/// a capacity limit): 503 tells load balancers and clients to retry.
pub fn http_status(code: i64, retryable: bool) -> u16 {
    match code {
        METHOD_NOT_FOUND | RESOURCE_NOT_FOUND => 404,
        PARSE_ERROR
        | INVALID_REQUEST
        | INVALID_PARAMS
        | HEADER_MISMATCH
        | MISSING_REQUIRED_CLIENT_CAPABILITY
        | UNSUPPORTED_PROTOCOL_VERSION => 400,
        RATE_LIMITED => 429,
        INTERNAL_ERROR if retryable => 503,
        _ => 500,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_the_transport_spec() {
        assert_eq!(http_status(METHOD_NOT_FOUND, false), 404);
        assert_eq!(http_status(RESOURCE_NOT_FOUND, false), 404);
        assert_eq!(http_status(PARSE_ERROR, false), 400);
        assert_eq!(http_status(HEADER_MISMATCH, false), 400);
        assert_eq!(http_status(MISSING_REQUIRED_CLIENT_CAPABILITY, false), 400);
        assert_eq!(http_status(UNSUPPORTED_PROTOCOL_VERSION, false), 400);
        assert_eq!(http_status(INTERNAL_ERROR, false), 500);
        assert_eq!(http_status(INTERNAL_ERROR, true), 503);
        assert_eq!(http_status(RATE_LIMITED, true), 429);
    }
}
