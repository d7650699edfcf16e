//! MCP header values (`Mcp-Name`, `Mcp-Param-*`), including the
//! `=?base64?…?=` sentinel: `presa_protocol::headers::decode_value`.
#![no_main]

use base64::{Engine, engine::general_purpose::STANDARD};
use libfuzzer_sys::fuzz_target;
use presa_protocol::headers::decode_value;

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    let _ = decode_value(raw);
    // Whatever a client encodes in the sentinel form decodes back to itself.
    let encoded = format!("=?base64?{}?=", STANDARD.encode(raw));
    assert_eq!(decode_value(&encoded).as_deref(), Ok(raw), "sentinel round trip");
    assert_eq!(decode_value(&format!(" \t{encoded}\t ")).as_deref(), Ok(raw), "with optional whitespace");
});
