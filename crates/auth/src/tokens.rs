//! Static bearer tokens for service-to-service use without an identity
//! provider (`--auth tokens --tokens-file PATH`).
//!
//! One token per line: `<sha256 hex of the token> <tenant> <subject> [scope …]`
//! (whitespace separated; blank lines and `#` comments skipped). Only
//! digests are stored; a presented token's digest is compared with every
//! entry in constant time. [`StaticTokens::reload`] re-reads the file
//! (the binaries call it on SIGHUP); a file that fails to parse keeps the
//! previous table. A token a reload drops is revoked: the streams it opened
//! (`subscriptions/listen`, legacy `GET`) end at once.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, RwLock},
};

use http::request::Parts;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use tokio_util::sync::CancellationToken;

use presa_http::{Authenticated, Authenticator, Caller, Challenge, Refusal};

use crate::AuthError;

#[derive(Debug)]
struct Entry {
    digest: [u8; 32],
    caller: Caller,
    /// Cancelled when a reload drops this token (or changes whom it names).
    revoked: CancellationToken,
}

/// The `tokens` authenticator.
#[derive(Debug)]
pub struct StaticTokens {
    path: PathBuf,
    entries: RwLock<Arc<Vec<Entry>>>,
    challenge: Challenge,
}

impl StaticTokens {
    /// Load `path`.
    pub fn load(path: impl Into<PathBuf>, challenge: Challenge) -> Result<Self, AuthError> {
        let path = path.into();
        let entries = read(&path)?;
        Ok(StaticTokens { path, entries: RwLock::new(Arc::new(entries)), challenge })
    }

    /// Re-read the file; on error the previous table stays. Returns the
    /// number of tokens. A token no longer in the file (or naming another
    /// principal) is revoked: the streams it opened end.
    pub fn reload(&self) -> Result<usize, AuthError> {
        let mut entries = read(&self.path)?;
        let n = entries.len();
        let mut table = self.entries.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        for entry in &mut entries {
            if let Some(kept) = table.iter().find(|old| old.digest == entry.digest && old.caller == entry.caller) {
                entry.revoked = kept.revoked.clone();
            }
        }
        for old in table.iter() {
            if !entries.iter().any(|e| e.digest == old.digest && e.caller == old.caller) {
                old.revoked.cancel();
            }
        }
        *table = Arc::new(entries);
        Ok(n)
    }

    /// Reload the file on every SIGHUP, for as long as the process runs (Unix only).
    pub fn reload_on_hangup(self: &Arc<Self>) {
        #[cfg(unix)]
        {
            let this = Arc::clone(self);
            tokio::spawn(async move {
                use tokio::signal::unix::{SignalKind, signal};
                let Ok(mut hup) = signal(SignalKind::hangup()) else {
                    tracing::warn!("cannot listen for SIGHUP: the tokens file will not be reloaded");
                    return;
                };
                while hup.recv().await.is_some() {
                    match this.reload() {
                        Ok(n) => tracing::info!(tokens = n, path = %this.path.display(), "tokens file reloaded"),
                        Err(e) => tracing::error!(error = %e, "tokens file not reloaded; keeping the previous one"),
                    }
                }
            });
        }
    }

    fn find(&self, token: &str) -> Option<Authenticated> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let entries = self.entries.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        // Every entry is compared (no early exit), each in constant time.
        let mut found = None;
        for entry in entries.iter() {
            if bool::from(entry.digest.ct_eq(&digest)) {
                found = Some(Authenticated {
                    revoked: Some(entry.revoked.clone()),
                    ..Authenticated::new(entry.caller.clone())
                });
            }
        }
        found
    }
}

#[async_trait::async_trait]
impl Authenticator for StaticTokens {
    async fn authenticate(&self, parts: &Parts) -> Result<Caller, Refusal> {
        self.authenticate_until(parts).await.map(|a| a.caller)
    }

    async fn authenticate_until(&self, parts: &Parts) -> Result<Authenticated, Refusal> {
        let token = self.challenge.bearer(parts)?;
        self.find(token).ok_or_else(|| self.challenge.invalid_token("unknown token"))
    }
}

fn read(path: &Path) -> Result<Vec<Entry>, AuthError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| AuthError::Io { path: name.clone(), source })?;
    parse(&text, &name)
}

fn parse(text: &str, name: &str) -> Result<Vec<Entry>, AuthError> {
    let mut entries = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad =
            |message: &str| AuthError::TokensLine { path: name.to_string(), line: i + 1, message: message.into() };
        let mut fields = line.split_whitespace();
        let (Some(hex), Some(tenant), Some(subject)) = (fields.next(), fields.next(), fields.next()) else {
            return Err(bad("expected: <sha256 hex> <tenant> <subject> [scope ...]"));
        };
        let digest = decode_digest(hex).ok_or_else(|| bad("the first field must be 64 hex digits (SHA-256)"))?;
        let caller = Caller::new(tenant, subject, fields.map(str::to_string).collect());
        entries.push(Entry { digest, caller, revoked: CancellationToken::new() });
    }
    Ok(entries)
}

fn decode_digest(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// The lower-case SHA-256 hex of `token`: what a tokens file line starts with.
pub fn token_digest(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(token: Option<&str>) -> Parts {
        let mut b = http::Request::builder().uri("/mcp");
        if let Some(t) = token {
            b = b.header("authorization", format!("Bearer {t}"));
        }
        b.body(()).unwrap().into_parts().0
    }

    #[tokio::test]
    async fn tokens_map_to_their_principal_and_reload() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        let line = format!("# ci\n{} acme deployer deploy read\n", token_digest("s3cret"));
        std::fs::write(&path, line).unwrap();
        let tokens = StaticTokens::load(&path, Challenge::default()).unwrap();
        let caller = tokens.authenticate(&parts(Some("s3cret"))).await.unwrap();
        assert_eq!(caller, Caller::new("acme", "deployer", vec!["deploy".into(), "read".into()]));
        let kept_first = tokens.authenticate_until(&parts(Some("s3cret"))).await.unwrap();
        let refused = tokens.authenticate(&parts(Some("other"))).await.unwrap_err();
        assert!(refused.challenge.unwrap().contains("invalid_token"));
        let missing = tokens.authenticate(&parts(None)).await.unwrap_err();
        assert!(!missing.challenge.unwrap().contains("error="));

        std::fs::write(&path, format!("{} acme other\n", token_digest("other"))).unwrap();
        assert_eq!(tokens.reload().unwrap(), 1);
        assert!(tokens.authenticate(&parts(Some("s3cret"))).await.is_err());
        assert_eq!(tokens.authenticate(&parts(Some("other"))).await.unwrap().subject(), "other");
        // "s3cret" was dropped: what it authenticated is revoked; "other" is not.
        assert!(kept_first.revoked.as_ref().unwrap().is_cancelled(), "a dropped token is revoked");
        let other = tokens.authenticate_until(&parts(Some("other"))).await.unwrap();
        std::fs::write(&path, format!("{} acme other\n", token_digest("other"))).unwrap();
        tokens.reload().unwrap();
        assert!(!other.revoked.as_ref().unwrap().is_cancelled(), "a kept token is not revoked by a reload");
        // A broken file keeps the previous table.
        std::fs::write(&path, "nothex acme x\n").unwrap();
        assert!(tokens.reload().is_err());
        assert!(tokens.authenticate(&parts(Some("other"))).await.is_ok());
    }
}
