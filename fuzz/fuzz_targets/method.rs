//! Method names: `str::parse::<presa_protocol::Method>`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use presa_protocol::Method;

fuzz_target!(|data: &[u8]| {
    let Ok(name) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(method) = name.parse::<Method>() {
        // Only exact wire names parse, and they print back unchanged.
        assert_eq!(method.to_string(), name);
        let _ = method.name_param();
    }
});
