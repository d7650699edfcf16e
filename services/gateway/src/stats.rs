//! What one process's pool of an upstream has seen, for the heartbeat's
//! upstream report (`presa_store::UpstreamReport`, shown by the admin API's
//! `GET /admin/v1/upstreams`): connections replaced, the last failure
//! (redacted), the catalog's version and size, calls and errors per tool.
//! Counters only: reading them costs no request to the upstream.

use std::{
    collections::BTreeMap,
    sync::{
        Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
};

use presa_store::ToolCalls;

/// An upstream's figures in this process.
#[derive(Debug, Default)]
pub struct Stats {
    restarts: AtomicU64,
    opened: AtomicBool,
    failing: AtomicBool,
    last_error: Mutex<Option<String>>,
    /// Catalog version and the tool count of its listing.
    listing: Mutex<(u64, u64)>,
    calls: Mutex<BTreeMap<String, (u64, u64)>>,
}

impl Stats {
    /// A connection went away and is replaced, or an operator restarted the pool.
    pub(crate) fn restarted(&self) {
        self.restarts.fetch_add(1, Ordering::Relaxed);
    }

    /// A connection opened: the upstream is ready.
    pub(crate) fn opened(&self) {
        self.opened.store(true, Ordering::Relaxed);
        self.failing.store(false, Ordering::Relaxed);
    }

    /// Opening a connection failed with `why`.
    pub(crate) fn start_failed(&self, why: &str) {
        self.failing.store(true, Ordering::Relaxed);
        self.failed(why);
    }

    /// The upstream failed with `why` (kept redacted).
    pub(crate) fn failed(&self, why: &str) {
        *self.last_error.lock().expect("stats lock") = Some(redact(why));
    }

    /// The upstream was listed, offering `tools` tools; `changed`: the
    /// listing differs from the one before (the first one always does).
    pub(crate) fn listed(&self, tools: usize, changed: bool) {
        let mut l = self.listing.lock().expect("stats lock");
        *l = (l.0 + u64::from(changed), tools as u64);
    }

    /// A call of upstream tool `tool` ended; `error`: it failed or answered `isError`.
    pub(crate) fn called(&self, tool: &str, error: bool) {
        let mut calls = self.calls.lock().expect("stats lock");
        // One lookup for a tool seen before; its name is copied only the
        // first time (`entry` would copy it on every call).
        if let Some(c) = calls.get_mut(tool) {
            (c.0, c.1) = (c.0 + 1, c.1 + u64::from(error));
        } else if calls.len() < presa_store::upstreams::MAX_REPORTED_TOOLS {
            calls.insert(tool.to_string(), (1, u64::from(error)));
        }
    }

    /// `starting`, `ready` or `failing`.
    pub fn state(&self) -> &'static str {
        match (self.failing.load(Ordering::Relaxed), self.opened.load(Ordering::Relaxed)) {
            (true, _) => "failing",
            (false, true) => "ready",
            (false, false) => "starting",
        }
    }

    /// Restarts so far.
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// The last failure, redacted.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().expect("stats lock").clone()
    }

    /// The catalog version and its tool count.
    pub fn listing(&self) -> (u64, u64) {
        *self.listing.lock().expect("stats lock")
    }

    /// Calls and errors per tool, by name.
    pub fn calls(&self) -> Vec<ToolCalls> {
        let calls = self.calls.lock().expect("stats lock");
        calls
            .iter()
            .map(|(tool, (calls, errors))| ToolCalls { tool: tool.clone(), calls: *calls, errors: *errors })
            .collect()
    }
}

/// `text` without what may be a secret: a URL's user info, query and
/// fragment are cut (tokens and passwords travel there), and anything that
/// looks like a credential after `Bearer`, `token=`, `password=` or
/// `secret=`; then held to `presa_store::upstreams::MAX_ERROR_CHARS`.
pub fn redact(text: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut hide_next = false;
    for word in text.split(' ') {
        if hide_next {
            out.push("[redacted]".into());
            hide_next = false;
            continue;
        }
        let lower = word.to_ascii_lowercase();
        if lower == "bearer" || lower == "basic" {
            hide_next = true;
            out.push(word.into());
        } else if let Some(scheme_end) = word.find("://") {
            // Before `token=` and the like: a URL's query goes whole.
            out.push(redact_url(word, scheme_end));
        } else if let Some(at) =
            ["token=", "password=", "secret=", "key="].iter().find_map(|k| lower.find(k).map(|i| i + k.len()))
        {
            out.push(format!("{}[redacted]", &word[..at]));
        } else {
            out.push(word.into());
        }
    }
    out.join(" ").chars().take(presa_store::upstreams::MAX_ERROR_CHARS).collect()
}

fn redact_url(word: &str, scheme_end: usize) -> String {
    let (scheme, rest) = word.split_at(scheme_end + 3);
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, path) = rest.split_once('/').map_or((rest, None), |(a, p)| (a, Some(p)));
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    match path {
        Some(p) => format!("{scheme}{host}/{p}"),
        None => format!("{scheme}{host}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_cuts_credentials_from_errors() {
        assert_eq!(
            redact("connecting to https://me:pw@up.example/mcp?token=abc failed"),
            "connecting to https://up.example/mcp failed"
        );
        assert_eq!(redact("refused: Bearer eyJabc expired"), "refused: Bearer [redacted] expired");
        assert_eq!(redact("bad api_key=s3cret"), "bad api_key=[redacted]");
        assert_eq!(redact(&"x".repeat(1000)).len(), presa_store::upstreams::MAX_ERROR_CHARS);
    }

    #[test]
    fn state_follows_starts_and_calls_count_per_tool() {
        let s = Stats::default();
        assert_eq!(s.state(), "starting");
        s.opened();
        assert_eq!(s.state(), "ready");
        s.start_failed("starting \"nope\": not found");
        assert_eq!((s.state(), s.last_error().as_deref()), ("failing", Some("starting \"nope\": not found")));
        s.called("echo", false);
        s.called("echo", true);
        s.listed(3, true);
        s.listed(3, false);
        assert_eq!(s.calls(), vec![ToolCalls { tool: "echo".into(), calls: 2, errors: 1 }]);
        assert_eq!(s.listing(), (1, 3));
    }
}
