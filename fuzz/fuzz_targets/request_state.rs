//! MRTR `requestState` tokens from clients: `StateCodec::open`.
//! Three ways in, chosen by the first byte: the raw token as sent; a token
//! whose body is the fuzz input with a valid HMAC tag (so mutations reach the
//! payload decoding behind the integrity check); and a seal/open round trip.
#![no_main]

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD as B64};
use hmac::{Hmac, Mac};
use libfuzzer_sys::fuzz_target;
use presa_server::{
    StateCodec,
    state::{Binding, StateError, digest},
};
use serde_json::{Value, json};
use sha2::Sha256;

const KEY: &[u8] = b"fuzz-state-key";
const NOW: u64 = 1_800_000_000_000;

fn binding() -> Binding {
    Binding { principal: "t\u{1f}alice".into(), method: "tools/call".into(), digest: digest(&json!({"name": "count"})) }
}

fn tag(body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(KEY).expect("any key length");
    mac.update(body.as_bytes());
    B64.encode(mac.finalize().into_bytes())
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let codec = StateCodec::new(KEY);
    match mode % 3 {
        0 => {
            let Ok(token) = std::str::from_utf8(rest) else {
                return;
            };
            // Without the key nothing opens (a forged tag is a 1 in 2^256 find).
            assert!(codec.open(token, &binding(), NOW).is_err());
        }
        1 => {
            // The payload as bytes, base64url'd and correctly tagged.
            let body = B64.encode(rest);
            let token = format!("{body}.{}", tag(&body));
            let _ = codec.open(&token, &binding(), NOW);
            if let Ok(body) = std::str::from_utf8(rest) {
                let _ = codec.open(&format!("{body}.{}", tag(body)), &binding(), NOW);
            }
        }
        _ => {
            let state = serde_json::from_slice::<Value>(rest).unwrap_or_else(|_| json!(String::from_utf8_lossy(rest)));
            let token = codec.seal(&binding(), state.clone(), NOW + 1);
            assert_eq!(codec.open(&token, &binding(), NOW), Ok(state), "round trip");
            assert_eq!(codec.open(&token, &binding(), NOW + 1), Err(StateError::Expired));
            let other = Binding { method: "prompts/get".into(), ..binding() };
            assert_eq!(codec.open(&token, &other, NOW), Err(StateError::Mismatch));
            assert!(StateCodec::new(b"another key").open(&token, &binding(), NOW).is_err());
        }
    }
});
