//! MRTR `requestState` (SEP-2322): opaque to clients, integrity-protected
//! with HMAC-SHA256 under a key every API process shares.
//!
//! The sealed payload binds the principal, the method, a digest of the
//! salient params and an expiry, plus a nonce so two rounds never produce
//! the same state. Token form: `base64url(payload) "." base64url(tag)`.

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD as B64};
use hmac::{Hmac, Mac};
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// What a state is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// The principal (scope key).
    pub principal: String,
    /// The JSON-RPC method.
    pub method: String,
    /// A digest of the salient params (see [`digest`]).
    pub digest: String,
}

/// Why a state was refused. Every variant becomes `-32602`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// Not a token this server produced, or modified.
    #[error("requestState integrity check failed")]
    Tampered,
    /// Past its expiry.
    #[error("requestState has expired")]
    Expired,
    /// Sealed for another method or params.
    #[error("requestState does not belong to this request")]
    Mismatch,
    /// Sealed for this method and params, but for another principal.
    #[error("requestState does not belong to this request")]
    OtherPrincipal,
}

#[derive(Serialize, Deserialize)]
struct Payload {
    p: String,
    m: String,
    d: String,
    e: u64,
    n: String,
    s: Value,
}

/// Seals and opens request states.
#[derive(Clone)]
pub struct StateCodec {
    key: Vec<u8>,
}

impl std::fmt::Debug for StateCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StateCodec(<redacted>)")
    }
}

impl StateCodec {
    /// A codec with a shared secret (all API processes must use the same).
    pub fn new(secret: &[u8]) -> Self {
        StateCodec { key: secret.to_vec() }
    }

    /// A codec with a random key: fine for one process, wrong for several.
    pub fn random() -> Self {
        let mut key = vec![0u8; 32];
        rand::rng().fill_bytes(&mut key);
        StateCodec { key }
    }

    fn tag(&self, data: &[u8]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC accepts any key length");
        mac.update(data);
        mac
    }

    /// Seal `state` for `binding`, valid until `expires_at_ms`.
    pub fn seal(&self, binding: &Binding, state: Value, expires_at_ms: u64) -> String {
        let mut nonce = [0u8; 12];
        rand::rng().fill_bytes(&mut nonce);
        let payload = Payload {
            p: binding.principal.clone(),
            m: binding.method.clone(),
            d: binding.digest.clone(),
            e: expires_at_ms,
            n: B64.encode(nonce),
            s: state,
        };
        let body = B64.encode(serde_json::to_vec(&payload).expect("payload serialises"));
        let tag = B64.encode(self.tag(body.as_bytes()).finalize().into_bytes());
        format!("{body}.{tag}")
    }

    /// Verify a token for `binding` at `now_ms` and return the sealed state.
    pub fn open(&self, token: &str, binding: &Binding, now_ms: u64) -> Result<Value, StateError> {
        let (body, tag) = token.split_once('.').ok_or(StateError::Tampered)?;
        let tag = B64.decode(tag).map_err(|_| StateError::Tampered)?;
        self.tag(body.as_bytes()).verify_slice(&tag).map_err(|_| StateError::Tampered)?;
        let bytes = B64.decode(body).map_err(|_| StateError::Tampered)?;
        let payload: Payload = serde_json::from_slice(&bytes).map_err(|_| StateError::Tampered)?;
        if payload.m != binding.method || payload.d != binding.digest {
            return Err(StateError::Mismatch);
        }
        if payload.p != binding.principal {
            return Err(StateError::OtherPrincipal);
        }
        if now_ms >= payload.e {
            return Err(StateError::Expired);
        }
        Ok(payload.s)
    }
}

/// A digest of a JSON value that does not depend on object key order.
pub fn digest(value: &Value) -> String {
    fn canonical(v: &Value, out: &mut String) {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    canonical(&m[k], out);
                }
                out.push('}');
            }
            Value::Array(a) => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    canonical(x, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut s = String::new();
    canonical(value, &mut s);
    B64.encode(Sha256::digest(s.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn binding() -> Binding {
        Binding { principal: "local/anonymous".into(), method: "tools/call".into(), digest: digest(&json!({"a": 1})) }
    }

    #[test]
    fn round_trip_and_nonce() {
        let c = StateCodec::new(b"secret");
        let t1 = c.seal(&binding(), json!({"step": 1}), 2_000);
        let t2 = c.seal(&binding(), json!({"step": 1}), 2_000);
        assert_ne!(t1, t2);
        assert_eq!(c.open(&t1, &binding(), 1_000).unwrap(), json!({"step": 1}));
    }

    #[test]
    fn refuses_tampering_expiry_and_rebinding() {
        let c = StateCodec::new(b"secret");
        let t = c.seal(&binding(), json!(null), 2_000);
        assert_eq!(c.open(&format!("{t}-TAMPERED"), &binding(), 1_000), Err(StateError::Tampered));
        assert_eq!(c.open("garbage", &binding(), 1_000), Err(StateError::Tampered));
        assert_eq!(StateCodec::new(b"other").open(&t, &binding(), 1_000), Err(StateError::Tampered));
        assert_eq!(c.open(&t, &binding(), 2_000), Err(StateError::Expired));
        let mut other = binding();
        other.principal = "acme/eve".into();
        assert_eq!(c.open(&t, &other, 1_000), Err(StateError::OtherPrincipal));
        assert_eq!(StateError::OtherPrincipal.to_string(), StateError::Mismatch.to_string(), "one message on the wire");
        let mut other = binding();
        other.digest = digest(&json!({"a": 2}));
        assert_eq!(c.open(&t, &other, 1_000), Err(StateError::Mismatch));
    }

    #[test]
    fn digest_ignores_key_order() {
        assert_eq!(
            digest(&json!({"a": 1, "b": [1, {"c": 2, "d": 3}]})),
            digest(&json!({"b": [1, {"d": 3, "c": 2}], "a": 1}))
        );
        assert_ne!(digest(&json!({"a": 1})), digest(&json!({"a": "1"})));
    }
}
