//! The signing keys of `--auth jwt`: where they come from ([`JwksSource`]),
//! their cache ([`Jwks`]: loaded at start, retried until it loads, refetched
//! one at a time on an unknown `kid`) and the choice of a token's key by its
//! `kid` and `alg`.

use std::{
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex, PoisonError, RwLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use jsonwebtoken::{
    Algorithm, DecodingKey,
    jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm},
};
use serde_json::Value;
use tokio::sync::watch;

use crate::{AuthError, fetch::JwksClient};

/// Where the signing keys come from.
#[derive(Debug, Clone)]
pub enum JwksSource {
    /// Fetched with HTTP GET (`http://` or `https://`, see [`crate::fetch`]).
    Url(String),
    /// Read from a file (offline setups, tests).
    File(PathBuf),
}

impl JwksSource {
    /// For logs and errors: a URL's password redacted.
    fn name(&self) -> String {
        match self {
            JwksSource::Url(u) => presa_telemetry::redact_url(u),
            JwksSource::File(p) => p.display().to_string(),
        }
    }
}

/// The first delay between two attempts of [`Jwks::retry_until_loaded`],
/// doubled after each failure up to [`LOAD_RETRY_MAX`].
pub const LOAD_RETRY_FIRST: Duration = Duration::from_millis(250);
/// The longest delay between two attempts of [`Jwks::retry_until_loaded`].
pub const LOAD_RETRY_MAX: Duration = Duration::from_secs(5);

/// A cached JWKS, refetched on an unknown `kid`: one fetch at a time
/// (single flight: every request that needs it waits for that one), and a
/// new one no sooner than [`JwtConfig::min_refresh`](super::JwtConfig::min_refresh)
/// after the last ended. Requests whose key is cached never wait for a fetch.
#[derive(Debug)]
pub struct Jwks {
    source: JwksSource,
    keys: RwLock<Arc<Vec<Jwk>>>,
    /// Whether a fetch has ever succeeded (`/readyz` waits for it).
    loaded: AtomicBool,
    refresh: Mutex<Refresh>,
    min_refresh: Duration,
    client: JwksClient,
    fetches: AtomicU64,
}

/// The refetch state of a [`Jwks`].
#[derive(Debug, Default)]
struct Refresh {
    /// When the last refetch ended, either way.
    last_ended: Option<Instant>,
    /// The refetch running now: turns `Some(fetched)` when it ends.
    running: Option<watch::Receiver<Option<bool>>>,
}

impl Jwks {
    /// A cache over `source`, with nothing fetched yet. An `https://` URL is
    /// checked against the Mozilla roots and the PEM certificates in
    /// `extra_ca` (for an issuer with a private CA); a CA file that cannot be
    /// read is a configuration error.
    pub fn new(source: JwksSource, min_refresh: Duration, extra_ca: Option<&Path>) -> Result<Self, AuthError> {
        let client = JwksClient::new(extra_ca)
            .map_err(|e| AuthError::Jwks { source_name: source.name(), message: e.to_string() })?;
        Ok(Jwks {
            source,
            keys: RwLock::new(Arc::new(Vec::new())),
            loaded: AtomicBool::new(false),
            refresh: Mutex::new(Refresh::default()),
            min_refresh,
            client,
            fetches: AtomicU64::new(0),
        })
    }

    /// Fetch now (at start-up: a file that cannot be read is a configuration error).
    pub async fn load(&self) -> Result<usize, AuthError> {
        self.fetch().await
    }

    /// Whether keys were ever fetched: until then every token is refused,
    /// and the process is not ready.
    pub fn loaded(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
    }

    /// After a failed [`Jwks::load`] (the issuer down at start): fetch again
    /// in the background, after [`LOAD_RETRY_FIRST`] and then twice as long
    /// each time up to [`LOAD_RETRY_MAX`], until a fetch succeeds.
    pub fn retry_until_loaded(self: &Arc<Self>) {
        let this = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut pause = LOAD_RETRY_FIRST;
            loop {
                tokio::time::sleep(pause).await;
                let Some(jwks) = this.upgrade() else { return };
                if jwks.loaded() || jwks.refetch(false).await {
                    return;
                }
                pause = (pause * 2).min(LOAD_RETRY_MAX);
            }
        });
    }

    /// How many fetches were made (for tests and logs).
    pub fn fetches(&self) -> u64 {
        self.fetches.load(Ordering::Relaxed)
    }

    pub(super) fn current(&self) -> Arc<Vec<Jwk>> {
        self.keys.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// For an unknown `kid`: refetch, unless one ended less than the interval
    /// ago; `true` when keys were fetched.
    pub(super) async fn refresh(self: &Arc<Self>) -> bool {
        self.refetch(true).await
    }

    /// Wait for the refetch running, or start one (when `rate_limited`, only
    /// if the last ended at least the interval ago); `true` when it fetched keys.
    async fn refetch(self: &Arc<Self>, rate_limited: bool) -> bool {
        let mut outcome = {
            let mut state = self.refresh.lock().unwrap_or_else(PoisonError::into_inner);
            match &state.running {
                // Its sender still alive: it is still running (or has just told).
                Some(running) if running.has_changed().is_ok() => running.clone(),
                _ => {
                    if rate_limited && state.last_ended.is_some_and(|t| t.elapsed() < self.min_refresh) {
                        return false;
                    }
                    let (tell, running) = watch::channel(None);
                    state.running = Some(running.clone());
                    // Its own task: a request that gives up does not abandon the fetch others wait for.
                    let this = self.clone();
                    tokio::spawn(async move {
                        let fetched = match this.fetch().await {
                            Ok(n) => {
                                tracing::info!(keys = n, source = %this.source.name(), "JWKS fetched");
                                true
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "JWKS fetch failed; keeping the cached keys");
                                false
                            }
                        };
                        let mut state = this.refresh.lock().unwrap_or_else(PoisonError::into_inner);
                        state.running = None;
                        state.last_ended = Some(Instant::now());
                        drop(state);
                        let _ = tell.send(Some(fetched));
                    });
                    running
                }
            }
        };
        outcome.wait_for(Option::is_some).await.is_ok_and(|fetched| *fetched == Some(true))
    }

    async fn fetch(&self) -> Result<usize, AuthError> {
        self.fetches.fetch_add(1, Ordering::Relaxed);
        let err = |message: String| AuthError::Jwks { source_name: self.source.name(), message };
        let body: Value = match &self.source {
            JwksSource::Url(url) => {
                let body = self.client.get(url).await.map_err(|e| err(e.to_string()))?;
                serde_json::from_slice(&body).map_err(|e| err(e.to_string()))?
            }
            JwksSource::File(path) => {
                let text = tokio::fs::read_to_string(path).await.map_err(|e| err(e.to_string()))?;
                serde_json::from_str(&text).map_err(|e| err(e.to_string()))?
            }
        };
        let listed = body.get("keys").and_then(Value::as_array).ok_or_else(|| err("no \"keys\" array".into()))?;
        // Keys presa cannot use (unknown types, symmetric keys) are skipped, not fatal.
        let keys: Vec<Jwk> = listed
            .iter()
            .filter_map(|k| serde_json::from_value::<Jwk>(k.clone()).ok())
            .filter(|k| !matches!(k.algorithm, AlgorithmParameters::OctetKey(_) | AlgorithmParameters::Other(_)))
            .collect();
        let n = keys.len();
        *self.keys.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(keys);
        self.loaded.store(true, Ordering::Release);
        Ok(n)
    }
}

/// Whether `alg` may verify with `key`: the key's type fits and, when the
/// key names its algorithm, it is that one. Never an HMAC algorithm.
fn fits(key: &Jwk, alg: Algorithm) -> bool {
    let by_type = match &key.algorithm {
        AlgorithmParameters::RSA(_) => matches!(
            alg,
            Algorithm::RS256
                | Algorithm::RS384
                | Algorithm::RS512
                | Algorithm::PS256
                | Algorithm::PS384
                | Algorithm::PS512
        ),
        AlgorithmParameters::EllipticCurve(ec) => matches!(
            (&ec.curve, alg),
            (EllipticCurve::P256, Algorithm::ES256) | (EllipticCurve::P384, Algorithm::ES384)
        ),
        AlgorithmParameters::OctetKeyPair(okp) => okp.curve == EllipticCurve::Ed25519 && alg == Algorithm::EdDSA,
        _ => false,
    };
    let named = match key.common.key_algorithm {
        None => true,
        Some(named) => key_algorithm(named) == Some(alg),
    };
    by_type && named
}

fn key_algorithm(k: KeyAlgorithm) -> Option<Algorithm> {
    Some(match k {
        KeyAlgorithm::ES256 => Algorithm::ES256,
        KeyAlgorithm::ES384 => Algorithm::ES384,
        KeyAlgorithm::RS256 => Algorithm::RS256,
        KeyAlgorithm::RS384 => Algorithm::RS384,
        KeyAlgorithm::RS512 => Algorithm::RS512,
        KeyAlgorithm::PS256 => Algorithm::PS256,
        KeyAlgorithm::PS384 => Algorithm::PS384,
        KeyAlgorithm::PS512 => Algorithm::PS512,
        KeyAlgorithm::EdDSA => Algorithm::EdDSA,
        _ => return None,
    })
}

/// The key for a token's `kid` and `alg`: matching `kid` (or, for a token
/// without one, the only key that fits `alg`).
pub(super) fn select(keys: &[Jwk], kid: Option<&str>, alg: Algorithm) -> Option<DecodingKey> {
    let mut candidates = keys.iter().filter(|k| fits(k, alg));
    let key = match kid {
        Some(kid) => candidates.find(|k| k.common.key_id.as_deref() == Some(kid))?,
        None => {
            let only = candidates.next()?;
            if candidates.next().is_some() {
                return None;
            }
            only
        }
    };
    DecodingKey::from_jwk(key).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A password in the JWKS URL never reaches an error (logged at start) or a log line.
    #[tokio::test]
    async fn a_jwks_url_password_is_never_shown() {
        let jwks =
            Jwks::new(JwksSource::Url("http://svc:hunter2@127.0.0.1:1/jwks".into()), Duration::ZERO, None).unwrap();
        let err = jwks.load().await.unwrap_err().to_string();
        assert!(err.contains("http://svc:***@127.0.0.1:1/jwks"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }
}
