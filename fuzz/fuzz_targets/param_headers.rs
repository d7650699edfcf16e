//! `Mcp-Param-*` headers against a `tools/call`'s arguments:
//! `presa_http::admission::check_param_headers` with the demo catalog
//! (`test_header_param` mirrors its `region` argument in `Mcp-Param-Region`).
//! Input: the raw header bytes, a newline, then the JSON `arguments`.
#![no_main]

use std::sync::LazyLock;

use base64::{Engine, engine::general_purpose::STANDARD};
use http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use presa_http::admission::check_param_headers;
use presa_server::Catalog;
use serde_json::{Map, Value, json};

static CATALOG: LazyLock<Catalog> = LazyLock::new(|| presa_demo::catalog().expect("the demo catalog"));

fn params(arguments: Value) -> Map<String, Value> {
    let Value::Object(m) = json!({ "name": "test_header_param", "arguments": arguments }) else { unreachable!() };
    m
}

fn headers(value: HeaderValue) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("mcp-param-region", value);
    h
}

fuzz_target!(|data: &[u8]| {
    let (header, body) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b""[..]),
    };
    let arguments = serde_json::from_slice::<Value>(body).unwrap_or_else(|_| json!({ "region": "eu-west-1" }));
    let params = params(arguments);
    let tool = CATALOG.tool("test_header_param");
    if let Ok(value) = HeaderValue::from_bytes(header) {
        if let Err(e) = check_param_headers(&headers(value), tool, &params) {
            assert_eq!(e.code, presa_protocol::codes::HEADER_MISMATCH, "{e:?}");
        }
    }
    let _ = check_param_headers(&HeaderMap::new(), tool, &params);
    // A string argument a client mirrors in the sentinel form is always accepted.
    if let Some(Value::String(region)) = params["arguments"].get("region") {
        let mirrored = HeaderValue::from_str(&format!("=?base64?{}?=", STANDARD.encode(region))).expect("ASCII");
        let verdict = check_param_headers(&headers(mirrored), tool, &params);
        assert!(verdict.is_ok(), "sentinel-mirrored {region:?} refused: {verdict:?}");
    }
});
