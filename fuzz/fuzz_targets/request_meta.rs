//! Request `_meta`: `presa_protocol::meta::RequestMeta::from_params`.
//! The input is the params object, or (when it is not an object) the `_meta`
//! value itself, wrapped as `{"_meta": …}` so mutations reach the inner checks.
#![no_main]

use libfuzzer_sys::fuzz_target;
use presa_protocol::meta::RequestMeta;
use serde_json::{Map, Value};

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let params = match value {
        Value::Object(m) if m.contains_key("_meta") => m,
        other => Map::from_iter([("_meta".to_string(), other)]),
    };
    match RequestMeta::from_params(&params) {
        Ok(meta) => {
            let _ = meta.declares_tasks();
        }
        Err(e) => assert_eq!(e.code, -32602, "a bad _meta is -32602: {e:?}"),
    }
});
