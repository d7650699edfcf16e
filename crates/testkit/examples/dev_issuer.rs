//! A throw-away issuer for local runs (`deploy/local-cluster.sh --auth-jwt`):
//! fresh keys, their JWKS written to a file, one long-lived token printed
//! (and with `DEV_ISSUER_MORE="NAME=SCOPES;..."`, one more per entry, written
//! to `token-NAME` beside the JWKS file).
//!
//! `cargo run -q -p presa-testkit --example dev_issuer -- ISSUER AUDIENCE JWKS_OUT [SUBJECT] [SCOPES]`
//!
//! Never for production: the private keys live only in this process, and
//! the token is valid for 30 days.

use presa_testkit::jwt::{Key, TestIssuer, now_secs};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [issuer, audience, jwks_out, rest @ ..] = args.as_slice() else {
        eprintln!("usage: dev_issuer ISSUER AUDIENCE JWKS_OUT [SUBJECT] [SCOPES (space-separated)]");
        std::process::exit(2);
    };
    let subject = rest.first().map_or("conformance", String::as_str);
    let scopes: Vec<&str> = rest.get(1).map_or("deploy", String::as_str).split_whitespace().collect();
    let dev = TestIssuer::new(issuer.as_str(), audience.as_str());
    if let Err(e) = std::fs::write(jwks_out, dev.jwks().to_string()) {
        eprintln!("dev_issuer: writing {jwks_out}: {e}");
        std::process::exit(1);
    }
    let token = |scopes: &[&str]| {
        let mut claims = dev.claims(subject, scopes);
        claims["exp"] = (now_secs() + 30 * 24 * 3600).into();
        dev.sign(Key::Rsa, &claims)
    };
    // More tokens of the same subject with other scopes: DEV_ISSUER_MORE="NAME=SCOPES;...",
    // each written to token-NAME beside JWKS_OUT.
    let dir = std::path::Path::new(jwks_out).parent().unwrap_or(std::path::Path::new("."));
    for spec in std::env::var("DEV_ISSUER_MORE").unwrap_or_default().split(';').filter(|s| !s.trim().is_empty()) {
        let Some((name, more)) = spec.split_once('=') else {
            eprintln!("dev_issuer: DEV_ISSUER_MORE entries are NAME=SCOPES, not {spec:?}");
            std::process::exit(2);
        };
        let path = dir.join(format!("token-{}", name.trim()));
        if let Err(e) = std::fs::write(&path, token(&more.split_whitespace().collect::<Vec<_>>())) {
            eprintln!("dev_issuer: writing {}: {e}", path.display());
            std::process::exit(1);
        }
    }
    println!("{}", token(&scopes));
}
