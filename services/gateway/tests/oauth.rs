//! An upstream that needs sign-in: the gateway (embedded, its own process)
//! in front of a presa server in this test process that takes only bearer
//! JWTs signed by the test kit's issuer, which can also revoke a token
//! early (answering 401 to it). The gateway gets its tokens from a token
//! endpoint served here too (`POST /token`, OAuth client credentials with
//! HTTP Basic), which checks the client's id and secret and hands out
//! short-lived JWTs.

mod common;

use std::{
    collections::HashSet,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{
    Json, Router,
    extract::State,
    http::{HeaderMap, StatusCode, request::Parts},
    response::IntoResponse,
    routing::post,
};
use base64::{Engine, engine::general_purpose::STANDARD};
use common::gateway_bin;
use presa_auth::jwt::{Jwks, JwksSource, JwtAuthenticator, JwtConfig};
use presa_http::{Authenticated, Authenticator, Caller, Challenge, HttpConfig, Refusal};
use presa_server::ServerConfig;
use presa_testkit::{
    Client, Embedded, Pod, embedded_with, free_port,
    jwt::{Key, TestIssuer, now_secs},
};
use serde_json::{Value, json};

const ISSUER: &str = "https://issuer.test";
const CLIENT_ID: &str = "presa-gateway";
const SECRET: &str = "gw-s3cret-Do-Not-Log";

/// The token endpoint's state: the secret it accepts, what it issued.
struct TokenEndpoint {
    issuer: Arc<TestIssuer>,
    secret: Mutex<String>,
    /// `expires_in` of its tokens (a JWT's `exp` is one second later).
    lifetime_s: u64,
    fetches: AtomicUsize,
    issued: Mutex<Vec<String>>,
}

async fn token(State(ep): State<Arc<TokenEndpoint>>, headers: HeaderMap, body: String) -> axum::response::Response {
    let form: Vec<(String, String)> = url::form_urlencoded::parse(body.as_bytes()).into_owned().collect();
    let basic =
        headers.get("authorization").and_then(|v| v.to_str().ok()?.strip_prefix("Basic ")?.parse::<String>().ok());
    let credentials = basic.and_then(|b| String::from_utf8(STANDARD.decode(b).ok()?).ok());
    let expected = format!("{CLIENT_ID}:{}", ep.secret.lock().unwrap());
    if credentials.as_deref() != Some(expected.as_str()) {
        let body = json!({ "error": "invalid_client", "error_description": "client authentication failed" });
        return (StatusCode::UNAUTHORIZED, Json(body)).into_response();
    }
    assert!(form.contains(&("grant_type".into(), "client_credentials".into())), "{form:?}");
    assert!(form.contains(&("scope".into(), "mcp".into())), "{form:?}");
    let n = ep.fetches.fetch_add(1, Ordering::SeqCst);
    let mut claims = ep.issuer.claims(&format!("gateway-{n}"), &["mcp"]);
    claims["exp"] = json!(now_secs() + ep.lifetime_s + 1);
    let access_token = ep.issuer.sign(Key::Ec, &claims);
    ep.issued.lock().unwrap().push(access_token.clone());
    Json(json!({ "access_token": access_token, "token_type": "Bearer", "expires_in": ep.lifetime_s })).into_response()
}

/// The upstream's authenticator: the issuer's JWTs (no leeway on `exp`),
/// except those revoked here, which get a 401 `invalid_token`.
struct Revocable {
    jwt: JwtAuthenticator,
    challenge: Challenge,
    revoked: Mutex<HashSet<String>>,
    refusals: AtomicUsize,
}

impl Revocable {
    fn check(&self, parts: &Parts) -> Result<(), Refusal> {
        let token = self.challenge.bearer(parts).inspect_err(|_| self.refuse())?;
        if self.revoked.lock().unwrap().contains(token) {
            self.refuse();
            return Err(self.challenge.invalid_token("the token was revoked"));
        }
        Ok(())
    }

    fn refuse(&self) {
        self.refusals.fetch_add(1, Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl Authenticator for Revocable {
    async fn authenticate(&self, parts: &Parts) -> Result<Caller, Refusal> {
        self.check(parts)?;
        self.jwt.authenticate(parts).await.inspect_err(|_| self.refuse())
    }

    async fn authenticate_until(&self, parts: &Parts) -> Result<Authenticated, Refusal> {
        self.check(parts)?;
        self.jwt.authenticate_until(parts).await.inspect_err(|_| self.refuse())
    }
}

struct Fixture {
    gateway: Pod,
    client: Client,
    endpoint: Arc<TokenEndpoint>,
    auth: Arc<Revocable>,
    token_url: String,
    secret_file: PathBuf,
    _upstream: Embedded,
    _dir: tempfile::TempDir,
}

/// A presa server on 127.0.0.1:`port` taking only `issuer`'s JWTs (no
/// leeway on `exp`) that are not revoked; its JWKS a file in `dir`.
async fn protected_upstream(dir: &Path, port: u16, issuer: &TestIssuer) -> (Embedded, Arc<Revocable>) {
    let jwks_file = dir.join("jwks.json");
    std::fs::write(&jwks_file, issuer.jwks().to_string()).unwrap();
    let jwks = Arc::new(Jwks::new(JwksSource::File(jwks_file), Duration::from_secs(60), None).unwrap());
    jwks.load().await.unwrap();
    let challenge = Challenge::new(None, vec!["mcp".into()]);
    let config = JwtConfig {
        issuer: ISSUER.into(),
        audience: issuer.audience.clone(),
        tenant_claim: "iss".into(),
        leeway: Duration::ZERO,
        min_refresh: Duration::from_secs(60),
    };
    let auth = Arc::new(Revocable {
        jwt: JwtAuthenticator::new(config, jwks, challenge.clone()),
        challenge: challenge.clone(),
        revoked: Mutex::default(),
        refusals: AtomicUsize::new(0),
    });
    let as_authenticator: Arc<dyn Authenticator> = auth.clone();
    let http = HttpConfig::default().with(|c| {
        c.access.authenticator = as_authenticator;
        c.access.challenge = challenge;
    });
    (embedded_with(ServerConfig::default(), http, port).await, auth)
}

/// The token endpoint, handing out `issuer`'s tokens living `lifetime_s`; its URL.
async fn token_endpoint(issuer: Arc<TestIssuer>, lifetime_s: u64) -> (Arc<TokenEndpoint>, String) {
    let endpoint = Arc::new(TokenEndpoint {
        issuer,
        secret: Mutex::new(SECRET.into()),
        lifetime_s,
        fetches: AtomicUsize::new(0),
        issued: Mutex::default(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let token_url = format!("http://{}/token", listener.local_addr().unwrap());
    let app = Router::new().route("/token", post(token)).with_state(endpoint.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (endpoint, token_url)
}

/// Everything but the gateway: the upstream, the token endpoint, the
/// gateway's config file (in `f.dir`) with `secret` in its secret file.
struct Setup {
    upstream: Embedded,
    auth: Arc<Revocable>,
    endpoint: Arc<TokenEndpoint>,
    token_url: String,
    secret_file: PathBuf,
    config: PathBuf,
    dir: tempfile::TempDir,
}

async fn setup(lifetime_s: u64, secret: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let issuer = Arc::new(TestIssuer::new(ISSUER, resource.clone()));
    let (upstream, auth) = protected_upstream(dir.path(), port, &issuer).await;
    let (endpoint, token_url) = token_endpoint(issuer, lifetime_s).await;
    let secret_file = dir.path().join("client-secret");
    std::fs::write(&secret_file, format!("{secret}\n")).unwrap();
    let config = dir.path().join("gateway.toml");
    let toml = format!(
        "[[upstream]]\nname = \"secure\"\nurl = \"{resource}\"\n\
         auth = {{ client_credentials = {{ token_url = \"{token_url}\", client_id = \"{CLIENT_ID}\", \
         client_secret_file = \"{}\", scope = \"mcp\", refresh_percent = 80, min_refresh_ms = 500 }} }}\n",
        secret_file.display()
    );
    std::fs::write(&config, toml).unwrap();
    Setup { upstream, auth, endpoint, token_url, secret_file, config, dir }
}

/// The upstream, the token endpoint (tokens living `lifetime_s`) and a gateway in front.
async fn fixture(lifetime_s: u64) -> Fixture {
    let p = setup(lifetime_s, SECRET).await;
    let args = ["--gateway-config", p.config.to_str().unwrap()];
    let gateway = Pod::start("gateway", &gateway_bin(), free_port(), &args, &[]).await;
    let client = Client::new(format!("{}/mcp", gateway.base()), json!({}));
    let Setup { upstream, auth, endpoint, token_url, secret_file, dir, .. } = p;
    Fixture { gateway, client, endpoint, auth, token_url, secret_file, _upstream: upstream, _dir: dir }
}

/// A plain call of the upstream's `test_simple_text` through the gateway: its JSON-RPC reply.
async fn call(c: &Client) -> Value {
    c.send("tools/call", json!({ "name": "test_simple_text", "arguments": {} })).await.1
}

fn assert_ok(reply: &Value) {
    let text = reply["result"]["content"][0]["text"].as_str();
    assert!(text.is_some_and(|t| !t.is_empty()) && reply["result"]["isError"] != true, "{reply}");
}

/// Nothing secret in the gateway's log: neither the client secret nor a token.
fn assert_log_clean(f: &Fixture) {
    let log = f.gateway.log();
    assert!(!log.contains(SECRET), "the client secret was logged:\n{log}");
    for token in f.endpoint.issued.lock().unwrap().iter() {
        assert!(!log.contains(token.as_str()), "a token was logged:\n{log}");
    }
}

/// Tokens live 2 s: across 5 s of calls the gateway fetches new ones
/// before each expires (the upstream never refuses one), and no call fails.
#[tokio::test(flavor = "multi_thread")]
async fn calls_keep_working_across_the_tokens_expiry() {
    let f = fixture(2).await;
    let started = std::time::Instant::now();
    let mut calls = 0;
    while started.elapsed() < Duration::from_secs(5) {
        assert_ok(&call(&f.client).await);
        calls += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let fetches = f.endpoint.fetches.load(Ordering::SeqCst);
    assert!(fetches >= 3, "{fetches} token fetches over 5 s of 2 s tokens ({calls} calls)");
    assert!(fetches <= 6, "{fetches} token fetches: one per refresh, not one per call ({calls} calls)");
    assert_eq!(f.auth.refusals.load(Ordering::SeqCst), 0, "a token was used past its expiry");
    assert_log_clean(&f);
}

/// A token the upstream revokes early is replaced: one more fetch, the
/// request sent once more, and the call succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn a_revoked_token_is_replaced_and_the_call_sent_once_more() {
    let f = fixture(3600).await;
    assert_ok(&call(&f.client).await);
    let before = f.endpoint.fetches.load(Ordering::SeqCst);
    let current = f.endpoint.issued.lock().unwrap().last().cloned().unwrap();
    f.auth.revoked.lock().unwrap().insert(current);
    assert_ok(&call(&f.client).await);
    assert_eq!(f.endpoint.fetches.load(Ordering::SeqCst), before + 1, "one new token");
    assert_eq!(f.auth.refusals.load(Ordering::SeqCst), 1, "the revoked token was refused once, then replaced");
    // Concurrent calls on the new token share it: no fetch more.
    let calls = (0..8).map(|_| call(&f.client));
    futures::future::join_all(calls).await.iter().for_each(assert_ok);
    assert_eq!(f.endpoint.fetches.load(Ordering::SeqCst), before + 1);
    assert_log_clean(&f);
}

/// The token endpoint stops taking the gateway's secret: a call that needs
/// a new token fails with a clear, retryable error naming the token
/// endpoint (never the secret); once the secret file holds the new secret,
/// the next call fetches with it and succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_client_secret_is_a_clear_error_naming_the_token_endpoint() {
    let f = fixture(3600).await;
    assert_ok(&call(&f.client).await);
    let rotated = "rotated-s3cret";
    *f.endpoint.secret.lock().unwrap() = rotated.into();
    let current = f.endpoint.issued.lock().unwrap().last().cloned().unwrap();
    f.auth.revoked.lock().unwrap().insert(current);

    let reply = call(&f.client).await;
    let error = &reply["error"];
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains(&f.token_url), "the error names the token endpoint: {reply}");
    assert!(message.contains("HTTP 401 (invalid_client)"), "{reply}");
    assert!(message.contains("upstream \"secure\""), "{reply}");
    assert!(!reply.to_string().contains(SECRET), "{reply}");
    assert_eq!(error["data"]["retryable"], true, "{reply}");
    let log = f.gateway.wait_log("fetching an access token failed", Duration::from_secs(5)).await;
    assert!(log.contains(&f.token_url), "{log}");
    assert_log_clean(&f);

    // The secret file is read again at the next fetch.
    std::fs::write(&f.secret_file, rotated).unwrap();
    assert_ok(&call(&f.client).await);
}

/// A gateway whose secret the token endpoint never took does not start,
/// and says why naming the token endpoint (not the secret).
#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_client_secret_at_start_stops_the_gateway_naming_the_token_endpoint() {
    let wrong = "not-the-Secret-42";
    let p = setup(3600, wrong).await;
    let listen = format!("127.0.0.1:{}", free_port());
    let run = tokio::process::Command::new(gateway_bin())
        .args(["--gateway-config", p.config.to_str().unwrap(), "--listen", &listen])
        .env("RUST_LOG", "info")
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), run).await.expect("it stopped").unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("could not get an access token from {}", p.token_url)), "{stderr}");
    assert!(stderr.contains("HTTP 401 (invalid_client)"), "{stderr}");
    assert!(!stderr.contains(wrong) && !stderr.contains(SECRET), "{stderr}");
    assert_eq!(p.endpoint.fetches.load(Ordering::SeqCst), 0, "no token was handed out");
}
