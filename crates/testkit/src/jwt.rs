//! A throw-away token issuer for tests and local runs: an RSA (RS256) and an
//! EC P-256 (ES256) key pair generated on the spot, their JWKS, and tokens
//! (well-formed ones, and the forged kinds a resource server must refuse).

use std::time::{SystemTime, UNIX_EPOCH};

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use p256::{elliptic_curve::Generate, pkcs8::EncodePrivateKey};
use rsa::{pkcs1::EncodeRsaPrivateKey, traits::PublicKeyParts};
use serde_json::{Value, json};

/// The `kid` of the RSA key.
pub const RSA_KID: &str = "test-rsa";
/// The `kid` of the EC key.
pub const EC_KID: &str = "test-ec";

/// Which key signs a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// RS256 with the RSA key.
    Rsa,
    /// ES256 with the EC P-256 key.
    Ec,
}

/// An issuer with fresh keys.
pub struct TestIssuer {
    /// The `iss` of its tokens.
    pub issuer: String,
    /// The `aud` of its tokens.
    pub audience: String,
    rsa: EncodingKey,
    rsa_jwk: Value,
    rsa_public_der: Vec<u8>,
    ec: EncodingKey,
    ec_jwk: Value,
}

impl std::fmt::Debug for TestIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestIssuer").field("issuer", &self.issuer).field("audience", &self.audience).finish()
    }
}

/// Seconds since the Unix epoch.
pub fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default()
}

impl TestIssuer {
    /// Fresh RSA-2048 and P-256 keys for `issuer`'s tokens to `audience`.
    pub fn new(issuer: impl Into<String>, audience: impl Into<String>) -> Self {
        let mut rng = rand::rng();
        let rsa_key = rsa::PrivateKey::new(&mut rng, 2048).expect("RSA key generation");
        let public = rsa_key.to_public_key();
        let rsa_jwk = json!({
            "kty": "RSA", "kid": RSA_KID, "use": "sig", "alg": "RS256",
            "n": URL_SAFE_NO_PAD.encode(public.n().to_be_bytes_trimmed_vartime()),
            "e": URL_SAFE_NO_PAD.encode(public.e().to_be_bytes_trimmed_vartime()),
        });
        let rsa_der = rsa_key.to_pkcs1_der().expect("PKCS#1 encoding");
        let rsa_public_der = {
            use rsa::pkcs1::EncodeRsaPublicKey;
            public.to_pkcs1_der().expect("PKCS#1 encoding").as_bytes().to_vec()
        };
        let ec_key = <p256::ecdsa::SigningKey as Generate>::generate_from_rng(&mut rng);
        let point = ec_key.verifying_key().to_sec1_point(false);
        let ec_jwk = json!({
            "kty": "EC", "kid": EC_KID, "use": "sig", "alg": "ES256", "crv": "P-256",
            "x": URL_SAFE_NO_PAD.encode(point.x().expect("uncompressed point")),
            "y": URL_SAFE_NO_PAD.encode(point.y().expect("uncompressed point")),
        });
        let ec_der = ec_key.to_pkcs8_der().expect("PKCS#8 encoding");
        TestIssuer {
            issuer: issuer.into(),
            audience: audience.into(),
            rsa: EncodingKey::from_rsa_der(rsa_der.as_bytes()),
            rsa_jwk,
            rsa_public_der,
            ec: EncodingKey::from_ec_der(ec_der.as_bytes()),
            ec_jwk,
        }
    }

    /// The public keys, as a JWKS document.
    pub fn jwks(&self) -> Value {
        json!({ "keys": [self.rsa_jwk, self.ec_jwk] })
    }

    /// Valid claims for `subject` with `scopes`, expiring in an hour.
    pub fn claims(&self, subject: &str, scopes: &[&str]) -> Value {
        let now = now_secs();
        json!({
            "iss": self.issuer, "aud": self.audience, "sub": subject,
            "iat": now, "nbf": now, "exp": now + 3600, "scope": scopes.join(" "),
        })
    }

    /// `claims` signed with `key` (its own `kid`).
    pub fn sign(&self, key: Key, claims: &Value) -> String {
        let kid = match key {
            Key::Rsa => RSA_KID,
            Key::Ec => EC_KID,
        };
        self.sign_with_kid(key, kid, claims)
    }

    /// `claims` signed with `key` under any `kid` (an unknown one, say).
    pub fn sign_with_kid(&self, key: Key, kid: &str, claims: &Value) -> String {
        let (alg, secret) = match key {
            Key::Rsa => (Algorithm::RS256, &self.rsa),
            Key::Ec => (Algorithm::ES256, &self.ec),
        };
        let mut header = Header::new(alg);
        header.kid = Some(kid.to_string());
        encode(&header, claims, secret).expect("signing")
    }

    /// A valid token for `subject` with `scopes`, signed with `key`.
    pub fn token(&self, key: Key, subject: &str, scopes: &[&str]) -> String {
        self.sign(key, &self.claims(subject, scopes))
    }

    /// A forged token: `alg: none`, no signature.
    pub fn unsigned(&self, claims: &Value) -> String {
        let header = json!({ "alg": "none", "typ": "JWT", "kid": RSA_KID });
        format!("{}.{}.", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()))
    }

    /// A forged token: HS256 with the RSA *public* key as the HMAC secret
    /// (the classic algorithm-confusion attack), under the RSA key's `kid`.
    pub fn hmac_with_public_key(&self, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some(RSA_KID.to_string());
        encode(&header, claims, &EncodingKey::from_secret(&self.rsa_public_der).expect("an HMAC key")).expect("signing")
    }
}
