//! Streamable HTTP request headers (SEP-2243) and the Base64 sentinel
//! encoding `=?base64?…?=` used by `Mcp-Name` and `Mcp-Param-*`. Which params
//! field `Mcp-Name` mirrors is [`crate::Method::name_param`].

use base64::Engine;

/// `MCP-Protocol-Version`.
pub const PROTOCOL_VERSION: &str = "mcp-protocol-version";
/// `Mcp-Method`.
pub const METHOD: &str = "mcp-method";
/// `Mcp-Name`.
pub const NAME: &str = "mcp-name";
/// `Mcp-Session-Id` (2025-11-25 era only).
pub const SESSION_ID: &str = "mcp-session-id";
/// Prefix of tool-parameter headers: `Mcp-Param-{Name}`.
pub const PARAM_PREFIX: &str = "mcp-param-";
/// `Idempotency-Key` (IETF httpapi draft): names a `tools/call` that creates
/// a task, so a retry returns the first task; carried to the server as
/// `_meta` [`IDEMPOTENCY_KEY_META`](crate::meta::IDEMPOTENCY_KEY_META).
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// Why a header value could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderValueError {
    /// The sentinel payload is not strict, padded Base64.
    #[error("invalid Base64 in header value")]
    Base64,
    /// The decoded bytes are not UTF-8.
    #[error("header value is not UTF-8")]
    Utf8,
}

/// Decode a mirrored header value: trim optional whitespace, then, if it is
/// wrapped in the `=?base64?…?=` sentinel, decode strict Base64 (padded,
/// standard alphabet). Anything else is taken literally.
pub fn decode_value(raw: &str) -> Result<String, HeaderValueError> {
    let v = raw.trim_matches([' ', '\t']);
    match v.strip_prefix("=?base64?").and_then(|r| r.strip_suffix("?=")) {
        Some(payload) => {
            let bytes =
                base64::engine::general_purpose::STANDARD.decode(payload).map_err(|_| HeaderValueError::Base64)?;
            String::from_utf8(bytes).map_err(|_| HeaderValueError::Utf8)
        }
        None => Ok(v.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_sentinel_and_literals() {
        assert_eq!(decode_value("=?base64?SGVsbG8=?=").unwrap(), "Hello");
        assert_eq!(decode_value("  greet  ").unwrap(), "greet");
        assert_eq!(decode_value("SGVsbG8=").unwrap(), "SGVsbG8=");
        assert_eq!(decode_value("=?base64?SGVsbG8=").unwrap(), "=?base64?SGVsbG8=");
        assert_eq!(decode_value("=?base64?SGVsbG8sIOS4lueVjA==?=").unwrap(), "Hello, 世界");
    }

    #[test]
    fn rejects_bad_base64() {
        assert_eq!(decode_value("=?base64?SGVsbG8?="), Err(HeaderValueError::Base64));
        assert_eq!(decode_value("=?base64?SGVs!!!bG8=?="), Err(HeaderValueError::Base64));
        assert_eq!(decode_value("=?base64?/w==?="), Err(HeaderValueError::Utf8));
    }
}
