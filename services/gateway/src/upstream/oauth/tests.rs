//! [`TokenSource`] against a token endpoint served here: one fetch for
//! concurrent callers (a failure too), refreshes by `refresh_percent`, a
//! token kept while a refresh fails, how the client authenticates, and no
//! secret in errors or `Debug`.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{Json, Router, extract::State, http::HeaderMap, http::StatusCode, response::IntoResponse, routing::post};
use serde_json::json;

use super::TokenSource;
use crate::config::{ClientAuth, ClientCredentials, Secret, SecretSource};

const SECRET: &str = "p@ss:w0rd s3cret";

#[derive(Default)]
struct Knobs {
    delay_ms: AtomicU64,
    refuse: AtomicBool,
    expires_in: AtomicU64,
    fetches: AtomicUsize,
    /// The last request's Authorization header and body.
    seen: Mutex<(Option<String>, String)>,
}

async fn token(State(k): State<Arc<Knobs>>, headers: HeaderMap, body: String) -> axum::response::Response {
    let n = k.fetches.fetch_add(1, Ordering::SeqCst);
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_string);
    *k.seen.lock().unwrap() = (auth, body);
    tokio::time::sleep(Duration::from_millis(k.delay_ms.load(Ordering::SeqCst))).await;
    if k.refuse.load(Ordering::SeqCst) {
        let body = json!({ "error": "invalid_client", "error_description": "bad\nclient" });
        return (StatusCode::UNAUTHORIZED, Json(body)).into_response();
    }
    let body = json!({ "access_token": format!("token-{n}"), "token_type": "bearer",
        "expires_in": k.expires_in.load(Ordering::SeqCst) });
    Json(body).into_response()
}

/// A token endpoint; its URL.
async fn endpoint(knobs: Arc<Knobs>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/token", listener.local_addr().unwrap());
    let app = Router::new().route("/token", post(token)).with_state(knobs);
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

fn credentials(token_url: String, refresh_percent: u8, client_auth: ClientAuth) -> ClientCredentials {
    ClientCredentials {
        token_url,
        client_id: "gw:one".into(),
        secret: SecretSource::Env { name: "UNUSED".into(), value: Secret::new(SECRET.into()) },
        scope: Some("mcp tools".into()),
        audience: None,
        client_auth,
        refresh_percent,
        min_refresh: Duration::from_millis(100),
        timeout: Duration::from_secs(5),
    }
}

async fn source(knobs: &Arc<Knobs>, refresh_percent: u8) -> Arc<TokenSource> {
    let url = endpoint(knobs.clone()).await;
    Arc::new(TokenSource::new("up", credentials(url, refresh_percent, ClientAuth::Basic)))
}

#[tokio::test]
async fn one_fetch_serves_concurrent_callers_and_its_failure_too() {
    let knobs = Arc::new(Knobs::default());
    knobs.expires_in.store(3600, Ordering::SeqCst);
    knobs.delay_ms.store(200, Ordering::SeqCst);
    let tokens = source(&knobs, 80).await;
    let got = futures::future::join_all((0..16).map(|_| tokens.token())).await;
    assert!(got.iter().all(|t| t.as_ref().unwrap().expose() == "token-0"));
    assert_eq!(knobs.fetches.load(Ordering::SeqCst), 1);

    // A refused token is dropped once, however many callers saw it refused.
    let refused = Secret::new("token-0".into());
    tokens.invalidate(&refused);
    tokens.invalidate(&refused);
    knobs.refuse.store(true, Ordering::SeqCst);
    let got = futures::future::join_all((0..8).map(|_| tokens.token())).await;
    assert_eq!(knobs.fetches.load(Ordering::SeqCst), 2, "the failing fetch was shared");
    let message = got[3].as_ref().unwrap_err().to_string();
    assert!(message.starts_with("upstream \"up\" could not get an access token from http://127.0.0.1:"), "{message}");
    assert!(message.ends_with("the token endpoint answered HTTP 401 (invalid_client): badclient"), "{message}");
    assert!(!message.contains("s3cret") && !format!("{tokens:?}").contains("s3cret"));

    // A caller that comes later tries again.
    knobs.refuse.store(false, Ordering::SeqCst);
    assert_eq!(tokens.token().await.unwrap().expose(), "token-2");
}

#[tokio::test]
async fn a_token_is_refreshed_after_its_share_of_expires_in_and_kept_while_a_refresh_fails() {
    let knobs = Arc::new(Knobs::default());
    knobs.expires_in.store(1, Ordering::SeqCst);
    let tokens = source(&knobs, 50).await;
    assert_eq!(tokens.token().await.unwrap().expose(), "token-0");
    assert_eq!(tokens.token().await.unwrap().expose(), "token-0", "fresh: no fetch");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(tokens.token().await.unwrap().expose(), "token-1", "refreshed after half its life");
    knobs.refuse.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(tokens.token().await.unwrap().expose(), "token-1", "still valid: kept while the refresh fails");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(tokens.token().await.is_err(), "expired, and no new one");
}

#[tokio::test]
async fn the_client_authenticates_with_basic_or_in_the_form() {
    use base64::{Engine, engine::general_purpose::STANDARD};
    let knobs = Arc::new(Knobs::default());
    let url = endpoint(knobs.clone()).await;
    let basic = TokenSource::new("up", credentials(url.clone(), 80, ClientAuth::Basic));
    basic.token().await.unwrap();
    let (auth, body) = knobs.seen.lock().unwrap().clone();
    // RFC 6749 §2.3.1: form-encoded, then base64.
    let expected = format!("Basic {}", STANDARD.encode("gw%3Aone:p%40ss%3Aw0rd+s3cret"));
    assert_eq!(auth.as_deref(), Some(expected.as_str()));
    assert_eq!(body, "grant_type=client_credentials&scope=mcp+tools");

    let form = TokenSource::new("up", credentials(url, 80, ClientAuth::Post));
    form.token().await.unwrap();
    let (auth, body) = knobs.seen.lock().unwrap().clone();
    assert_eq!(auth, None);
    assert_eq!(
        body,
        "grant_type=client_credentials&scope=mcp+tools&client_id=gw%3Aone&client_secret=p%40ss%3Aw0rd+s3cret"
    );
}
