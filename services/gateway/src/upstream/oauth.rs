//! The access token of a Streamable HTTP upstream that needs sign-in
//! (`[[upstream]] auth = { client_credentials = { … } }`, see
//! `config/auth.rs`): [`TokenSource`] fetches it from the token endpoint with
//! the OAuth 2.1 client credentials grant (RFC 6749 §4.4, a form-encoded
//! POST, the client authenticated by HTTP Basic or in the form), caches it,
//! and fetches a new one once `refresh_percent` of its `expires_in` has
//! passed (never sooner than `min_refresh_ms`).
//!
//! One fetch serves every caller: while it runs, callers with a token still
//! valid keep using it, and callers without one wait for that fetch and
//! share its outcome, failure included, so a burst of calls (or of 401s)
//! never becomes a burst at the token endpoint. A token the upstream refused
//! is dropped ([`TokenSource::invalidate`]); `upstream/http.rs` then fetches
//! a new one and sends the request once more.
//!
//! Neither the client secret nor a token appears in a log line, an error or
//! a `Debug`: errors name the upstream and the token endpoint, and say what
//! the endpoint answered (its status and OAuth `error` code).

use std::time::{Duration, Instant};

use serde::Deserialize;

use super::UpstreamError;
use crate::config::{ClientAuth, ClientCredentials, Secret};

#[cfg(test)]
mod tests;

/// The most bytes of a token endpoint's answer read.
const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// The most bytes of a token endpoint's `error_description` passed on.
const MAX_DESCRIPTION: usize = 200;

/// The access token of one upstream, shared by all its connections.
pub struct TokenSource {
    upstream: String,
    config: ClientCredentials,
    client: reqwest::Client,
    state: std::sync::Mutex<State>,
    /// Held by the one fetch running.
    fetching: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSource")
            .field("upstream", &self.upstream)
            .field("token_url", &presa_telemetry::redact_url(&self.config.token_url))
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    token: Option<Cached>,
    /// Bumped when a fetch ends, whatever its outcome.
    generation: u64,
    /// Why the last fetch failed (`None` after a success).
    failure: Option<String>,
}

#[derive(Clone)]
struct Cached {
    value: Secret,
    /// When a new one is fetched.
    refresh_at: Instant,
    /// When it expires (`None`: the endpoint gave no `expires_in`).
    expires_at: Option<Instant>,
}

impl Cached {
    fn valid(&self, now: Instant) -> bool {
        self.expires_at.is_none_or(|e| now < e)
    }
}

/// A token endpoint's answer (RFC 6749 §5.1 and §5.2).
#[derive(Deserialize)]
struct Answer {
    access_token: Option<String>,
    token_type: Option<String>,
    expires_in: Option<f64>,
    error: Option<String>,
    error_description: Option<String>,
}

impl TokenSource {
    /// The token source of the upstream `upstream`; nothing is fetched yet.
    pub fn new(upstream: &str, config: ClientCredentials) -> Self {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(config.timeout)
            .build()
            .unwrap_or_default();
        TokenSource {
            upstream: upstream.to_string(),
            config,
            client,
            state: std::sync::Mutex::default(),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    /// A token to send: the cached one while it is fresh, else a new one
    /// (one fetch for every concurrent caller; a token still valid is used
    /// while a new one is fetched, and kept when that fetch fails).
    pub async fn token(&self) -> Result<Secret, UpstreamError> {
        let (generation, current) = {
            let state = self.lock();
            (state.generation, state.token.clone())
        };
        let now = Instant::now();
        if let Some(current) = current.filter(|c| c.valid(now) || now < c.refresh_at) {
            if now < current.refresh_at {
                return Ok(current.value);
            }
            // Due for a refresh but still valid: one caller refreshes, the others go on with it.
            let Ok(_fetching) = self.fetching.try_lock() else { return Ok(current.value) };
            if self.lock().generation != generation {
                // Another caller refreshed it meanwhile.
                return Ok(self.lock().token.as_ref().map_or(current.value, |t| t.value.clone()));
            }
            return match self.fetch_and_keep().await {
                Ok(fresh) => Ok(fresh),
                Err(e) => {
                    tracing::warn!(upstream = %self.upstream, error = %e, "refreshing the access token failed; using the current one while it is valid");
                    Ok(current.value)
                }
            };
        }
        let _fetching = self.fetching.lock().await;
        {
            // A fetch ended while this caller waited: its outcome is this caller's.
            let state = self.lock();
            if state.generation != generation {
                if let Some(t) = state.token.as_ref().filter(|t| t.valid(Instant::now())) {
                    return Ok(t.value.clone());
                }
                if let Some(why) = &state.failure {
                    return Err(self.error(why.clone()));
                }
            }
        }
        self.fetch_and_keep().await
    }

    /// Drop `refused` (the upstream answered 401 to it): the next
    /// [`token`](Self::token) fetches a new one. A token already replaced is left alone.
    pub fn invalidate(&self, refused: &Secret) {
        let mut state = self.lock();
        if state.token.as_ref().is_some_and(|t| &t.value == refused) {
            state.token = None;
        }
    }

    /// The upstream's name.
    pub fn upstream(&self) -> &str {
        &self.upstream
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn error(&self, why: String) -> UpstreamError {
        let token_url = presa_telemetry::redact_url(&self.config.token_url);
        UpstreamError::Token { upstream: self.upstream.clone(), token_url, why }
    }

    /// Fetch a token and keep it (or keep why not), for the callers waiting.
    async fn fetch_and_keep(&self) -> Result<Secret, UpstreamError> {
        let started = Instant::now();
        let outcome = self.fetch(started).await;
        let mut state = self.lock();
        state.generation = state.generation.wrapping_add(1);
        let label = if outcome.is_ok() { "ok" } else { "error" };
        metrics::counter!("presa_gateway_token_fetches_total", "upstream" => self.upstream.clone(), "outcome" => label)
            .increment(1);
        match outcome {
            Ok(cached) => {
                tracing::debug!(upstream = %self.upstream, "fetched an access token");
                state.failure = None;
                let value = cached.value.clone();
                state.token = Some(cached);
                Ok(value)
            }
            Err(why) => {
                tracing::warn!(upstream = %self.upstream, token_url = %presa_telemetry::redact_url(&self.config.token_url),
                    error = %why, "fetching an access token failed");
                state.failure = Some(why.clone());
                Err(self.error(why))
            }
        }
    }

    /// One token request; `Err` says why in words (never the secret).
    async fn fetch(&self, started: Instant) -> Result<Cached, String> {
        let c = &self.config;
        let request = self.request(&c.secret.read()?);
        let response = request.send().await.map_err(|e| {
            if e.is_timeout() {
                format!("no answer within {:?}", c.timeout)
            } else if e.is_connect() {
                "the token endpoint could not be reached".to_string()
            } else {
                "the token request failed on its way".to_string()
            }
        })?;
        let status = response.status();
        let body = read_capped(response).await?;
        let answer: Option<Answer> = serde_json::from_slice(&body).ok();
        if !status.is_success() {
            let code = answer.as_ref().and_then(|a| a.error.as_deref()).map(|e| format!(" ({})", cut(e)));
            let description =
                answer.as_ref().and_then(|a| a.error_description.as_deref()).map(|d| format!(": {}", cut(d)));
            return Err(format!(
                "the token endpoint answered HTTP {}{}{}",
                status.as_u16(),
                code.unwrap_or_default(),
                description.unwrap_or_default()
            ));
        }
        let answer = answer.ok_or("the token endpoint answered with something other than a JSON token")?;
        self.cached(answer, started)
    }

    /// The token request (RFC 6749 §4.4.2), the client authenticated as configured.
    fn request(&self, secret: &Secret) -> reqwest::RequestBuilder {
        let c = &self.config;
        let mut form = url::form_urlencoded::Serializer::new(String::new());
        form.append_pair("grant_type", "client_credentials");
        if let Some(scope) = &c.scope {
            form.append_pair("scope", scope);
        }
        if let Some(audience) = &c.audience {
            form.append_pair("audience", audience);
        }
        let mut request = self
            .client
            .post(&c.token_url)
            .header(http::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(http::header::ACCEPT, "application/json");
        match c.client_auth {
            // RFC 6749 §2.3.1: the id and secret form-encoded, then Basic.
            ClientAuth::Basic => {
                let encode = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
                request = request.basic_auth(encode(&c.client_id), Some(encode(secret.expose())));
            }
            ClientAuth::Post => {
                form.append_pair("client_id", &c.client_id);
                form.append_pair("client_secret", secret.expose());
            }
        }
        request.body(form.finish())
    }

    /// The token of a successful answer, with when to refresh it.
    fn cached(&self, answer: Answer, started: Instant) -> Result<Cached, String> {
        let token =
            answer.access_token.filter(|t| !t.is_empty()).ok_or("the token endpoint's answer has no access_token")?;
        if http::HeaderValue::from_str(&format!("Bearer {token}")).is_err() {
            return Err("the token endpoint's access_token cannot be sent in a header".into());
        }
        match answer.token_type.as_deref() {
            Some(t) if t.eq_ignore_ascii_case("bearer") => {}
            other => {
                return Err(format!("the token endpoint's token_type is {:?}, not Bearer", other.map(cut)));
            }
        }
        let lifetime = answer.expires_in.filter(|s| s.is_finite() && *s >= 0.0).map(Duration::from_secs_f64);
        let (refresh_at, expires_at) = match lifetime {
            Some(life) => {
                let after = (life * u32::from(self.config.refresh_percent) / 100).max(self.config.min_refresh);
                (started + after, Some(started + life))
            }
            // No `expires_in`: kept until the upstream refuses it.
            None => (started + Duration::from_secs(365 * 24 * 3600), None),
        };
        Ok(Cached { value: Secret::new(token), refresh_at, expires_at })
    }
}

/// The body of a token endpoint's answer, at most [`MAX_ANSWER_BYTES`].
async fn read_capped(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|_| "the token endpoint's answer was cut short")? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(format!("the token endpoint's answer is over {MAX_ANSWER_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// `text` cut at [`MAX_DESCRIPTION`] bytes, control characters dropped.
fn cut(text: &str) -> String {
    let clean: String = text.chars().filter(|c| !c.is_control()).collect();
    if clean.len() <= MAX_DESCRIPTION {
        return clean;
    }
    let mut end = MAX_DESCRIPTION;
    while !clean.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &clean[..end])
}
