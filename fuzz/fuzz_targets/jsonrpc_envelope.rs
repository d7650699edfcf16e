//! The JSON-RPC envelope of every POST body: `presa_protocol::jsonrpc::parse_message`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use presa_protocol::jsonrpc::{Incoming, parse_message};

fuzz_target!(|data: &[u8]| {
    match parse_message(data) {
        Ok(Incoming::Request(req)) => {
            // A parsed request's params, when present, feed `_meta` parsing next.
            let _ = presa_protocol::meta::RequestMeta::from_params(&req.params);
            let _ = req.method.parse::<presa_protocol::Method>();
        }
        Ok(Incoming::Notification { method, .. }) => {
            let _ = method.parse::<presa_protocol::Method>();
        }
        Err(e) => {
            let err = e.to_error();
            assert!(err.code == -32700 || err.code == -32600, "envelope errors are -32700 or -32600: {err:?}");
            let _ = e.id();
        }
    }
});
