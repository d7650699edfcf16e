//! Authentication over real HTTP: bearer JWTs checked against a JWKS served
//! by an in-test HTTP server (keys generated here, RSA and EC; plain http and
//! https with a private CA generated here), the 401/403 challenges, RFC 9728
//! metadata, tasks bound to their principal, and the start-up refusals of
//! `presa-api`.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{Json, Router, routing::get};
use presa_auth::jwt::{Jwks, JwksSource, JwtAuthenticator, JwtConfig};
use presa_http::{Challenge, HttpConfig, ResourceMetadata, auth::metadata::metadata_url};
use presa_server::ServerConfig;
use presa_testkit::{
    Client, Embedded, embedded_with,
    jwt::{Key, TestIssuer, now_secs},
    next_within,
    principals::tasks_stay_with_their_principal,
    tasks_caps,
};
use serde_json::{Value, json};

const ISSUER: &str = "https://issuer.test";

struct Fixture {
    srv: Embedded,
    issuer: Arc<TestIssuer>,
    fetches: Arc<AtomicUsize>,
    knobs: Arc<Knobs>,
    metadata: String,
}

/// How the test JWKS endpoint misbehaves: slow answers, or 503s.
#[derive(Debug, Default)]
struct Knobs {
    delay_ms: AtomicU64,
    down: AtomicBool,
}

/// A JWKS endpoint counting its fetches; returns its URL.
async fn serve_jwks(issuer: Arc<TestIssuer>, fetches: Arc<AtomicUsize>, knobs: Arc<Knobs>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/jwks", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, jwks_app(issuer, fetches, knobs)).await });
    url
}

fn jwks_app(issuer: Arc<TestIssuer>, fetches: Arc<AtomicUsize>, knobs: Arc<Knobs>) -> Router {
    Router::new().route(
        "/jwks",
        get(move || {
            fetches.fetch_add(1, Ordering::SeqCst);
            let keys = issuer.jwks();
            let (delay, down) = (knobs.delay_ms.load(Ordering::SeqCst), knobs.down.load(Ordering::SeqCst));
            async move {
                tokio::time::sleep(Duration::from_millis(delay)).await;
                if down { Err(axum::http::StatusCode::SERVICE_UNAVAILABLE) } else { Ok(Json(keys)) }
            }
        }),
    )
}

/// The JWKS endpoint over https, with a certificate for 127.0.0.1 issued by a
/// CA made here; returns its URL and the CA certificate (PEM).
async fn serve_jwks_tls(issuer: Arc<TestIssuer>, fetches: Arc<AtomicUsize>) -> (String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let ca = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap().signed_by(&leaf_key, &ca).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der()).unwrap();
    let tls = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}/jwks", listener.local_addr().unwrap());
    let app = jwks_app(issuer, fetches, Arc::default());
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                // A client that does not trust the CA aborts the handshake here.
                let Ok(stream) = acceptor.accept(tcp).await else { return };
                let service = hyper_util::service::TowerToHyperService::new(app);
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
            });
        }
    });
    (url, ca_cert.pem())
}

/// An embedded presa with `--auth jwt`, `--required-scope mcp` and a JWKS refetched at most every `min_refresh`.
async fn fixture(min_refresh: Duration) -> Fixture {
    fixture_with(min_refresh, Duration::from_secs(30)).await
}

/// [`fixture`] with the `exp`/`nbf` leeway given.
async fn fixture_with(min_refresh: Duration, leeway: Duration) -> Fixture {
    // The resource URL is only known once the port is: reserve one first.
    let port = presa_testkit::free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let issuer = Arc::new(TestIssuer::new(ISSUER, resource.clone()));
    let fetches = Arc::new(AtomicUsize::new(0));
    let knobs = Arc::new(Knobs::default());
    let jwks_url = serve_jwks(issuer.clone(), fetches.clone(), knobs.clone()).await;
    let metadata = metadata_url(&resource);
    let challenge = Challenge::new(Some(metadata.clone()), vec!["mcp".into()]);
    let config = JwtConfig {
        issuer: ISSUER.into(),
        audience: resource.clone(),
        tenant_claim: "iss".into(),
        leeway,
        min_refresh,
    };
    let jwks = Arc::new(Jwks::new(JwksSource::Url(jwks_url), min_refresh, None).unwrap());
    // As presa-api does at start (until it has, /readyz says 503).
    jwks.load().await.unwrap();
    let http = HttpConfig::default().with(|c| {
        c.access.authenticator = Arc::new(JwtAuthenticator::new(config, jwks, challenge.clone()));
        c.access.challenge = challenge;
        c.access.resource_metadata =
            Some(ResourceMetadata::new(resource, vec![ISSUER.into()], vec!["mcp".into(), "deploy".into()]));
    });
    let srv = embedded_with(ServerConfig::default(), http, port).await;
    Fixture { srv, issuer, fetches, knobs, metadata }
}

/// POST `tools/list` with `token`; (status, WWW-Authenticate, body).
async fn post(url: &str, token: Option<&str>, body: &str) -> (u16, String, Value) {
    let mut req = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/list")
        .body(body.to_string());
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let challenge = resp.headers().get("www-authenticate").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    (status, challenge, resp.json().await.unwrap_or(Value::Null))
}

const TOOLS_LIST: &str = r#"{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;

#[tokio::test]
async fn valid_tokens_pass_and_every_bad_one_gets_a_401_challenge() {
    let f = fixture(Duration::from_secs(60)).await;
    let url = &f.srv.url;
    for key in [Key::Rsa, Key::Ec] {
        let (status, _, body) = post(url, Some(&f.issuer.token(key, "alice", &["mcp"])), TOOLS_LIST).await;
        assert_eq!(status, 200, "{key:?}: {body}");
        assert!(body["result"]["tools"].is_array(), "{body}");
    }
    assert_eq!(f.fetches.load(Ordering::SeqCst), 1, "the JWKS is fetched once, then cached");

    // No token: the challenge names the metadata (and the required scope), no error code.
    // The body is not even read: an invalid one still gets the 401.
    let (status, challenge, body) = post(url, None, "not json").await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(challenge, format!(r#"Bearer scope="mcp", resource_metadata="{}""#, f.metadata));
    assert_eq!(body.get("id"), Some(&Value::Null), "{body}");
    assert_eq!(body["error"]["code"], -32600, "{body}");

    let i = &f.issuer;
    let now = now_secs();
    let claims = |patch: Value| {
        let mut c = i.claims("alice", &["mcp"]);
        for (k, v) in patch.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    };
    let bad = [
        ("wrong issuer", i.sign(Key::Rsa, &claims(json!({ "iss": "https://evil.test" })))),
        ("wrong audience", i.sign(Key::Ec, &claims(json!({ "aud": "https://other.test/mcp" })))),
        ("expired", i.sign(Key::Rsa, &claims(json!({ "exp": now - 120 })))),
        ("not yet valid", i.sign(Key::Ec, &claims(json!({ "nbf": now + 120 })))),
        ("alg none", i.unsigned(&claims(json!({})))),
        ("HS256 signed with the public key", i.hmac_with_public_key(&claims(json!({})))),
        ("no sub", i.sign(Key::Rsa, &claims(json!({ "sub": null })))),
        ("garbage", "abc.def.ghi".to_string()),
    ];
    for (what, token) in bad {
        let (status, challenge, body) = post(url, Some(&token), TOOLS_LIST).await;
        assert_eq!(status, 401, "{what}: {body}");
        assert!(challenge.starts_with(r#"Bearer error="invalid_token""#), "{what}: {challenge}");
        assert!(challenge.contains(&format!(r#"resource_metadata="{}""#, f.metadata)), "{what}: {challenge}");
        assert_eq!(body.get("id"), Some(&Value::Null), "{what}: {body}");
    }
    // The required scope: a valid token without it is 403 insufficient_scope.
    let (status, challenge, _) = post(url, Some(&i.token(Key::Rsa, "alice", &["read"])), TOOLS_LIST).await;
    assert_eq!(status, 403);
    assert!(challenge.starts_with(r#"Bearer error="insufficient_scope""#) && challenge.contains(r#"scope="mcp""#));
}

#[tokio::test]
async fn an_https_jwks_is_trusted_through_the_given_ca_only() {
    let issuer = Arc::new(TestIssuer::new(ISSUER, "http://127.0.0.1:1/mcp"));
    let fetches = Arc::new(AtomicUsize::new(0));
    let (url, ca_pem) = serve_jwks_tls(issuer.clone(), fetches.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, ca_pem).unwrap();

    // Only the built-in roots: the private CA is unknown, the handshake fails and nothing is fetched.
    let untrusted = Jwks::new(JwksSource::Url(url.clone()), Duration::ZERO, None).unwrap();
    let err = untrusted.load().await.unwrap_err().to_string();
    assert!(err.contains(&url) && err.to_lowercase().contains("certificate"), "{err}");
    assert_eq!(fetches.load(Ordering::SeqCst), 0);

    // With --jwks-ca-file: fetched over TLS, and its keys verify real tokens.
    let jwks = Arc::new(Jwks::new(JwksSource::Url(url), Duration::from_secs(60), Some(&ca)).unwrap());
    assert_eq!(jwks.load().await.unwrap(), issuer.jwks()["keys"].as_array().unwrap().len());
    assert_eq!(fetches.load(Ordering::SeqCst), 1);
    let config = JwtConfig {
        issuer: ISSUER.into(),
        audience: "http://127.0.0.1:1/mcp".into(),
        tenant_claim: "iss".into(),
        leeway: Duration::from_secs(30),
        min_refresh: Duration::from_secs(60),
    };
    let auth = JwtAuthenticator::new(config, jwks, Challenge::new(None, vec![]));
    for key in [Key::Rsa, Key::Ec] {
        let request = axum::http::Request::get("/mcp")
            .header("authorization", format!("Bearer {}", issuer.token(key, "alice", &["mcp"])))
            .body(())
            .unwrap();
        let caller = presa_http::Authenticator::authenticate(&auth, &request.into_parts().0).await;
        assert_eq!(caller.ok().map(|c| c.subject().to_string()).as_deref(), Some("alice"), "{key:?}");
    }

    // A CA file that is missing or holds no certificate is a configuration error, at once.
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    for bad in [empty, dir.path().join("missing.pem")] {
        let Err(err) = Jwks::new(JwksSource::Url("https://127.0.0.1:1/jwks".into()), Duration::ZERO, Some(&bad)) else {
            panic!("{} accepted", bad.display());
        };
        assert!(err.to_string().contains(&bad.display().to_string()), "{err}");
    }
}

#[tokio::test]
async fn unknown_kids_refetch_the_jwks_at_most_once_per_interval() {
    let f = fixture(Duration::from_millis(700)).await;
    let url = &f.srv.url;
    let good = f.issuer.token(Key::Rsa, "alice", &["mcp"]);
    assert_eq!(post(url, Some(&good), TOOLS_LIST).await.0, 200);
    assert_eq!(f.fetches.load(Ordering::SeqCst), 1);
    tokio::time::sleep(Duration::from_millis(800)).await;
    // A burst of made-up kids: one refetch, then 401 for all of them.
    let claims = f.issuer.claims("alice", &["mcp"]);
    let burst = (0..20).map(|n| {
        let token = f.issuer.sign_with_kid(Key::Rsa, &format!("rotated-{n}"), &claims);
        let url = url.clone();
        async move { post(&url, Some(&token), TOOLS_LIST).await }
    });
    for (status, challenge, _) in futures::future::join_all(burst).await {
        assert_eq!(status, 401);
        assert!(challenge.contains(r#"error="invalid_token""#), "{challenge}");
    }
    assert_eq!(f.fetches.load(Ordering::SeqCst), 2, "one refetch for the whole burst");
    let again = f.issuer.sign_with_kid(Key::Ec, "rotated-x", &claims);
    assert_eq!(post(url, Some(&again), TOOLS_LIST).await.0, 401);
    assert_eq!(f.fetches.load(Ordering::SeqCst), 2, "no refetch within the interval");
    // Known keys still work throughout.
    assert_eq!(post(url, Some(&good), TOOLS_LIST).await.0, 200);
}

/// A JWKS fetch slower than the refetch interval: a burst of unknown kids
/// costs one fetch that they all wait for together (not one after another),
/// and a token whose key is cached is served meanwhile without waiting.
#[tokio::test]
async fn a_slow_jwks_fetch_is_shared_and_never_delays_known_keys() {
    let f = fixture(Duration::from_millis(100)).await;
    let url = &f.srv.url;
    let good = f.issuer.token(Key::Rsa, "alice", &["mcp"]);
    assert_eq!(post(url, Some(&good), TOOLS_LIST).await.0, 200);
    assert_eq!(f.fetches.load(Ordering::SeqCst), 1);
    f.knobs.delay_ms.store(1500, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let claims = f.issuer.claims("alice", &["mcp"]);
    let started = std::time::Instant::now();
    let burst = (0..10).map(|n| {
        let token = f.issuer.sign_with_kid(Key::Rsa, &format!("rotated-{n}"), &claims);
        let url = url.clone();
        async move { post(&url, Some(&token), TOOLS_LIST).await.0 }
    });
    let known = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let asked = std::time::Instant::now();
        let status = post(url, Some(&good), TOOLS_LIST).await.0;
        (status, asked.elapsed())
    };
    let (statuses, (known_status, known_took)) = tokio::join!(futures::future::join_all(burst), known);
    assert!(statuses.iter().all(|s| *s == 401), "{statuses:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the burst was served one fetch after another: {:?}",
        started.elapsed()
    );
    assert_eq!(f.fetches.load(Ordering::SeqCst), 2, "one refetch for the whole burst");
    assert_eq!(known_status, 200);
    assert!(known_took < Duration::from_millis(500), "a cached key waited {known_took:?} for the fetch");
}

/// A token longer than `max_token_bytes` (8 KiB by default) is refused with
/// 401 `invalid_token` before it is parsed, even a validly signed one; a
/// shorter one with the same claims passes.
#[tokio::test]
async fn oversized_tokens_are_refused_before_parsing() {
    let f = fixture(Duration::from_secs(60)).await;
    let url = &f.srv.url;
    let signed = |pad: usize| {
        let mut claims = f.issuer.claims("alice", &["mcp"]);
        claims["pad"] = json!("p".repeat(pad));
        f.issuer.sign(Key::Ec, &claims)
    };
    let fits = signed(5000);
    assert!(fits.len() + "Bearer ".len() < presa_http::DEFAULT_MAX_TOKEN_BYTES, "{}", fits.len());
    assert_eq!(post(url, Some(&fits), TOOLS_LIST).await.0, 200);
    for token in [signed(7000), "x".repeat(300 * 1024)] {
        let (status, challenge, body) = post(url, Some(&token), TOOLS_LIST).await;
        assert_eq!(status, 401, "{body}");
        assert!(challenge.starts_with(r#"Bearer error="invalid_token""#), "{challenge}");
        assert!(challenge.contains("longer than 8192 bytes"), "{challenge}");
    }
}

/// A listen stream ends when the token that opened it expires: a JSON-RPC
/// error on its id, then the end of the stream (its place freed); one opened
/// with a longer-lived token stays open.
#[tokio::test]
async fn listen_streams_end_when_their_token_expires() {
    let f = fixture_with(Duration::from_secs(60), Duration::ZERO).await;
    let mut short = f.issuer.claims("alice", &["mcp"]);
    short["exp"] = json!(now_secs() + 2);
    let short = Client::new(&f.srv.url, json!({})).with_bearer(&f.issuer.sign(Key::Rsa, &short));
    let long = Client::new(&f.srv.url, json!({})).with_bearer(&f.issuer.token(Key::Ec, "alice", &["mcp"]));
    let (status, mut ending) = short.listen(json!({ "toolsListChanged": true })).await;
    assert_eq!(status, 200);
    let (_, mut lasting) = long.listen(json!({ "toolsListChanged": true })).await;
    for s in [&mut ending, &mut lasting] {
        assert_eq!(next_within(s, 5).await["method"], "notifications/subscriptions/acknowledged");
    }
    assert_eq!(f.srv.server.active_listeners(), 2);
    let last = next_within(&mut ending, 5).await;
    assert_eq!(last["id"], 77, "{last}");
    assert_eq!(last["error"]["code"], -32600, "{last}");
    assert!(last["error"]["message"].as_str().unwrap().contains("no longer valid"), "{last}");
    let end = tokio::time::timeout(Duration::from_secs(2), futures::StreamExt::next(&mut ending)).await;
    assert!(matches!(end, Ok(None)), "the stream goes on after its token expired: {end:?}");
    assert_eq!(f.srv.server.active_listeners(), 1, "the expired stream's place is freed");
    let quiet = tokio::time::timeout(Duration::from_millis(500), futures::StreamExt::next(&mut lasting)).await;
    assert!(quiet.is_err(), "the long-lived token's stream ended: {quiet:?}");
}

#[tokio::test]
async fn tools_and_their_tasks_need_their_scopes() {
    let f = fixture(Duration::from_secs(60)).await;
    let url = &f.srv.url;
    let deployer = Client::new(url, tasks_caps()).with_bearer(&f.issuer.token(Key::Rsa, "alice", &["mcp", "deploy"]));
    let reader = Client::new(url, tasks_caps()).with_bearer(&f.issuer.token(Key::Ec, "alice", &["mcp"]));
    let args = json!({ "name": "deploy_release", "arguments": { "version": "1.0", "step_seconds": 0 } });
    let resp = reader
        .http
        .post(url)
        .bearer_auth(reader.bearer.as_deref().unwrap())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "deploy_release")
        .body(
            json!({ "jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
                "name": "deploy_release", "arguments": args["arguments"],
                "_meta": { "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                           "io.modelcontextprotocol/clientCapabilities": tasks_caps() } } })
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 403);
    let challenge = resp.headers()["www-authenticate"].to_str().unwrap().to_string();
    assert_eq!(
        challenge,
        format!(
            r#"Bearer error="insufficient_scope", error_description="the token lacks a required scope", scope="mcp deploy", resource_metadata="{}""#,
            f.metadata
        )
    );
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["id"], 9, "{body}");
    assert_eq!(body["error"]["data"]["requiredScopes"], json!(["deploy"]), "{body}");

    // With the scope, the task is created; the same principal without it cannot act on it.
    let created = deployer.call_tool("deploy_release", args["arguments"].clone()).await;
    let id = created["taskId"].as_str().unwrap();
    for method in ["tasks/get", "tasks/cancel"] {
        let (status, e) = reader.err(method, json!({ "taskId": id })).await;
        assert_eq!(status, 403, "{method}: {e}");
    }
    let (status, e) = reader.err("subscriptions/listen", json!({ "notifications": { "taskIds": [id] } })).await;
    assert_eq!(status, 403, "{e}");
    assert_eq!(deployer.get_task(id).await["taskId"], id);
}

#[tokio::test]
async fn the_protected_resource_metadata_is_served_openly() {
    let f = fixture(Duration::from_secs(60)).await;
    let base = f.srv.url.trim_end_matches("/mcp").to_string();
    for path in ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"] {
        let doc: Value = reqwest::get(format!("{base}{path}")).await.unwrap().json().await.unwrap();
        assert_eq!(doc["resource"], f.srv.url.as_str(), "{doc}");
        assert_eq!(doc["authorization_servers"], json!([ISSUER]));
        assert_eq!(doc["scopes_supported"], json!(["mcp", "deploy"]));
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]));
    }
    assert_eq!(f.metadata, format!("{base}/.well-known/oauth-protected-resource/mcp"));
    for open in ["/healthz", "/readyz"] {
        assert_eq!(reqwest::get(format!("{base}{open}")).await.unwrap().status(), 200, "{open}");
    }
}

#[tokio::test]
async fn another_principals_task_is_unknown_embedded() {
    let f = fixture(Duration::from_secs(60)).await;
    let as_user = |sub: &str| {
        Client::new(&f.srv.url, tasks_caps()).with_bearer(&f.issuer.token(Key::Rsa, sub, &["mcp", "deploy"]))
    };
    tasks_stay_with_their_principal(&as_user("alice"), &as_user("bob"), ISSUER, "alice").await;
}

/// The binary refuses to start open or with a weak `requestState` key.
#[test]
fn presa_api_refuses_unsafe_configurations() {
    let bin = env!("CARGO_BIN_EXE_presa-api");
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let out = std::process::Command::new(bin)
            .args(args)
            .env_remove("PRESA_AUTH")
            .env_remove("PRESA_STATE_SECRET")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = run(&["--listen", "0.0.0.0:0"], &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--auth") && err.contains("--allow-anonymous"), "{err}");
    for secret in ["CHANGE-ME", "too-short"] {
        let (code, err) = run(&["--listen", "127.0.0.1:0"], &[("PRESA_STATE_SECRET", secret)]);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains("PRESA_STATE_SECRET"), "{err}");
    }
    let (code, err) = run(&["--listen", "127.0.0.1:0", "--auth", "jwt"], &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--jwt-issuer"), "{err}");
    let jwt = ["--listen", "127.0.0.1:0", "--auth", "jwt", "--jwt-issuer", ISSUER, "--jwt-audience", "x"];
    let (code, err) = run(&[&jwt[..], &["--jwks-url", "ftp://issuer.test/jwks"]].concat(), &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--jwks-url") && err.contains("https://"), "{err}");
    let https = ["--jwks-url", "https://127.0.0.1:1/jwks", "--jwks-ca-file", "/nonexistent/ca.pem"];
    let (code, err) = run(&[&jwt[..], &https].concat(), &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("/nonexistent/ca.pem"), "{err}");
}

/// `presa-api --jwks-url https://… --jwks-ca-file`: the binary fetches the keys over TLS and serves their tokens.
#[tokio::test]
async fn presa_api_fetches_an_https_jwks() {
    let port = presa_testkit::free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let issuer = Arc::new(TestIssuer::new(ISSUER, resource.clone()));
    let fetches = Arc::new(AtomicUsize::new(0));
    let (jwks_url, ca_pem) = serve_jwks_tls(issuer.clone(), fetches.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, ca_pem).unwrap();
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_presa-api"));
    let args = [
        "--auth",
        "jwt",
        "--jwt-issuer",
        ISSUER,
        "--resource-url",
        &resource,
        "--jwks-url",
        &jwks_url,
        "--jwks-ca-file",
        ca.to_str().unwrap(),
    ];
    let pod = presa_testkit::Pod::start("api", &bin, port, &args, &[]).await;
    let (status, _, body) = post(&pod.url, Some(&issuer.token(Key::Ec, "alice", &[])), TOOLS_LIST).await;
    assert_eq!(status, 200, "{body}\n{}", pod.log());
    assert_eq!(fetches.load(Ordering::SeqCst), 1, "fetched once at start-up, over TLS");
    assert_eq!(post(&pod.url, None, TOOLS_LIST).await.0, 401);
}

/// `presa-api` with its JWKS down at start: not ready and valid tokens
/// refused; once the JWKS answers it loads within seconds (a retry with a
/// short backoff, not the refetch interval), ready and serving those tokens.
#[tokio::test]
async fn presa_api_retries_a_jwks_that_is_down_at_start() {
    let port = presa_testkit::free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let issuer = Arc::new(TestIssuer::new(ISSUER, resource.clone()));
    let fetches = Arc::new(AtomicUsize::new(0));
    let knobs = Arc::new(Knobs::default());
    knobs.down.store(true, Ordering::SeqCst);
    let jwks_url = serve_jwks(issuer.clone(), fetches.clone(), knobs.clone()).await;
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_presa-api"));
    let args = ["--auth", "jwt", "--jwt-issuer", ISSUER, "--resource-url", &resource, "--jwks-url", &jwks_url];
    let pod = presa_testkit::Pod::start_unready("api", &bin, port, &args, &[]).await;
    let token = issuer.token(Key::Ec, "alice", &[]);
    let readyz = || async { reqwest::get(format!("{}/readyz", pod.base())).await.unwrap().status().as_u16() };
    assert_eq!(readyz().await, 503, "ready without keys:\n{}", pod.log());
    assert_eq!(post(&pod.url, Some(&token), TOOLS_LIST).await.0, 401);
    knobs.down.store(false, Ordering::SeqCst);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(8);
    while readyz().await != 200 {
        assert!(tokio::time::Instant::now() < deadline, "never loaded the JWKS:\n{}", pod.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, _, body) = post(&pod.url, Some(&token), TOOLS_LIST).await;
    assert_eq!(status, 200, "{body}\n{}", pod.log());
}

/// A `--resource-url` whose path is not `/mcp` (a proxy's `/api/mcp`): the
/// metadata URL a 401 advertises answers with the document (RFC 9728 §3.1).
#[tokio::test]
async fn the_advertised_metadata_url_answers_for_any_resource_path() {
    let port = presa_testkit::free_port();
    let resource = format!("http://127.0.0.1:{port}/api/mcp");
    let issuer = TestIssuer::new(ISSUER, resource.clone());
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, issuer.jwks().to_string()).unwrap();
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_presa-api"));
    let args =
        ["--auth", "jwt", "--jwt-issuer", ISSUER, "--resource-url", &resource, "--jwks-file", jwks.to_str().unwrap()];
    let pod = presa_testkit::Pod::start("api", &bin, port, &args, &[]).await;
    let (status, challenge, _) = post(&pod.url, None, TOOLS_LIST).await;
    assert_eq!(status, 401);
    let advertised = challenge.split("resource_metadata=\"").nth(1).and_then(|r| r.split('"').next()).unwrap();
    assert_eq!(advertised, format!("http://127.0.0.1:{port}/.well-known/oauth-protected-resource/api/mcp"));
    let resp = reqwest::get(advertised).await.unwrap();
    assert_eq!(resp.status(), 200, "{}", pod.log());
    let doc: Value = resp.json().await.unwrap();
    assert_eq!(doc["resource"], resource.as_str());
    assert_eq!(doc["authorization_servers"], json!([ISSUER]));
}

/// `--auth tokens`: hashed static tokens map to their principal; SIGHUP reloads the file.
#[tokio::test]
async fn static_tokens_authenticate_and_reload_on_sighup() {
    use presa_auth::tokens::token_digest;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    std::fs::write(&file, format!("{} acme ci deploy\n", token_digest("first-token"))).unwrap();
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_presa-api"));
    let args = ["--auth", "tokens", "--tokens-file", file.to_str().unwrap()];
    let pod = presa_testkit::Pod::start("api", &bin, presa_testkit::free_port(), &args, &[]).await;
    assert_eq!(post(&pod.url, Some("first-token"), TOOLS_LIST).await.0, 200);
    let (status, challenge, _) = post(&pod.url, Some("second-token"), TOOLS_LIST).await;
    assert_eq!(
        (status, challenge.as_str()),
        (401, r#"Bearer error="invalid_token", error_description="unknown token""#)
    );

    std::fs::write(&file, format!("{} acme ci deploy\n", token_digest("second-token"))).unwrap();
    pod.signal("HUP");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while post(&pod.url, Some("second-token"), TOOLS_LIST).await.0 != 200 {
        assert!(tokio::time::Instant::now() < deadline, "never reloaded:\n{}", pod.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(post(&pod.url, Some("first-token"), TOOLS_LIST).await.0, 401);
}

/// `--auth tokens`: a token dropped from the file (SIGHUP) is revoked: the
/// listen stream it opened ends with an error, while a kept token's stays open.
#[tokio::test]
async fn a_revoked_static_token_ends_its_streams() {
    use presa_auth::tokens::token_digest;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    let line = |t: &str, who: &str| format!("{} acme {who}\n", token_digest(t));
    std::fs::write(&file, line("doomed", "a") + &line("kept", "b")).unwrap();
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_presa-api"));
    let args = ["--auth", "tokens", "--tokens-file", file.to_str().unwrap()];
    let pod = presa_testkit::Pod::start("api", &bin, presa_testkit::free_port(), &args, &[]).await;
    let (_, mut doomed) =
        Client::new(&pod.url, json!({})).with_bearer("doomed").listen(json!({ "toolsListChanged": true })).await;
    let (_, mut kept) =
        Client::new(&pod.url, json!({})).with_bearer("kept").listen(json!({ "toolsListChanged": true })).await;
    for s in [&mut doomed, &mut kept] {
        assert_eq!(next_within(s, 5).await["method"], "notifications/subscriptions/acknowledged");
    }
    std::fs::write(&file, line("kept", "b")).unwrap();
    pod.signal("HUP");
    let last = next_within(&mut doomed, 5).await;
    assert!(last["error"]["message"].as_str().unwrap_or_default().contains("no longer valid"), "{last}\n{}", pod.log());
    let end = tokio::time::timeout(Duration::from_secs(2), futures::StreamExt::next(&mut doomed)).await;
    assert!(matches!(end, Ok(None)), "{end:?}");
    let quiet = tokio::time::timeout(Duration::from_millis(500), futures::StreamExt::next(&mut kept)).await;
    assert!(quiet.is_err(), "the kept token's stream ended: {quiet:?}");
    assert_eq!(post(&pod.url, Some("doomed"), TOOLS_LIST).await.0, 401);
}
