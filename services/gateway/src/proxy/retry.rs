//! Which upstream failures a gateway task tries again, and which it may not
//! (see `presa_server::RetryPolicy` for how, and when, it is tried again).
//!
//! A failure is [`Transient`] by what it says about the call:
//!
//! - the upstream cannot have received it ([`Received::No`]): no connection
//!   (refused, a child that could not start or finish its handshake), no
//!   access token (the token endpoint failed, or the upstream refused a fresh
//!   token with 401), HTTP 429 or 503 (their `Retry-After` honoured): tried
//!   again for every tool;
//! - it may have received it ([`Received::Maybe`]): the child exited or the
//!   connection dropped mid-call, no answer in time, another 5xx: tried again
//!   only for a tool that is safe to repeat (`readOnlyHint`, `idempotentHint`,
//!   or `rerun = "always"`), exactly like the crash policy; the rest fail with
//!   an error that says why they were not tried again;
//! - it answered with a failure its `[[tool]]` rule names transient
//!   ([`Received::Answered`]: `retry_on_codes`, `retry_on_tool_error`): the
//!   rule's word is what makes it safe.
//!
//! Everything else (the upstream's other errors, an `isError` result no rule
//! names) is the call's answer, passed on as before. Each class is a bounded
//! label ([`RetryClass`]) of `presa_gateway_upstream_retries_total`.

use std::time::Duration;

use rmcp::{
    service::ServiceError,
    transport::{
        DynamicTransportError,
        streamable_http_client::{HttpStatusError, StreamableHttpError},
    },
};
use serde_json::Value;

use super::answer::cap_message;
use crate::upstream::{UpstreamError, auth_failure};

/// The longest an upstream's `Retry-After` puts a try off (a longer one is cut to this).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(15 * 60);

/// What kind of transient failure: the `reason` label of `presa_gateway_upstream_retries_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryClass {
    /// No connection: refused, a child that could not start or finish its handshake.
    Refused,
    /// No access token (the token endpoint failed), or the upstream refused
    /// a fresh one (HTTP 401): the call never reached the tool.
    SignIn,
    /// HTTP 429.
    RateLimited,
    /// HTTP 5xx.
    Unavailable,
    /// The child exited, or the connection dropped, mid-call.
    Exited,
    /// No answer within `--upstream-call-timeout-ms`.
    Timeout,
    /// A JSON-RPC error code the tool's rule names (`retry_on_codes`).
    RpcError,
    /// An `isError: true` result, under the rule's `retry_on_tool_error`.
    ToolError,
}

impl RetryClass {
    /// Whether it says the upstream is down (no connection, a 5xx, gone
    /// mid-call, silent): what its circuit breaker counts even when the
    /// call is not tried again. A 429 or an answer a rule names is the
    /// upstream alive, saying "not now".
    pub fn means_down(self) -> bool {
        matches!(
            self,
            RetryClass::Refused
                | RetryClass::SignIn
                | RetryClass::Unavailable
                | RetryClass::Exited
                | RetryClass::Timeout
        )
    }

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            RetryClass::Refused => "refused",
            RetryClass::SignIn => "sign_in",
            RetryClass::RateLimited => "rate_limited",
            RetryClass::Unavailable => "unavailable",
            RetryClass::Exited => "exited",
            RetryClass::Timeout => "timeout",
            RetryClass::RpcError => "rpc_error",
            RetryClass::ToolError => "tool_error",
        }
    }
}

/// Whether the upstream may have received the call that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// It cannot have: trying again is safe for every tool.
    No,
    /// It may have, and may have acted on it: only for tools safe to repeat.
    Maybe,
    /// It did, and answered with a failure the tool's rule names transient.
    Answered,
}

/// An upstream failure worth trying again, when trying again is safe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transient {
    /// What kind.
    pub class: RetryClass,
    /// Whether the upstream may have received the call.
    pub received: Received,
    /// When the upstream said to try again (`Retry-After`, at most [`MAX_RETRY_AFTER`]).
    pub after: Option<Duration>,
    /// What happened, in words (the task's status message; no internals).
    pub reason: String,
}

/// What a tool's rule adds to the failures tried again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetryOn {
    /// The upstream's JSON-RPC error codes that are transient (`retry_on_codes`).
    pub codes: Vec<i64>,
    /// Whether an `isError: true` result is (`retry_on_tool_error`).
    pub tool_error: bool,
}

impl Transient {
    fn new(class: RetryClass, received: Received, reason: String) -> Self {
        Transient { class, received, after: None, reason }
    }
}

/// A failure to get a connection for a call (before anything was sent):
/// transient for every tool, whatever its cause.
pub(super) fn classify_connect(upstream: &str, e: &UpstreamError, on: &RetryOn) -> Option<Transient> {
    match e {
        UpstreamError::Service(e) => classify_service(upstream, e, on),
        UpstreamError::Busy { .. } => None,
        e @ UpstreamError::Token { .. } => Some(Transient::new(RetryClass::SignIn, Received::No, e.to_string())),
        e => Some(Transient::new(
            RetryClass::Refused,
            Received::No,
            format!("upstream {upstream:?} is unavailable: {e}"),
        )),
    }
}

/// A failed request of a call (its `tools/call`, or a poll of its upstream task).
pub(super) fn classify_service(upstream: &str, e: &ServiceError, on: &RetryOn) -> Option<Transient> {
    match e {
        ServiceError::McpError(e) if on.codes.contains(&i64::from(e.code.0)) => Some(Transient::new(
            RetryClass::RpcError,
            Received::Answered,
            format!("upstream {upstream:?} answered error {}: {}", e.code.0, cap_message(&e.message)),
        )),
        ServiceError::Timeout { timeout } => Some(Transient::new(
            RetryClass::Timeout,
            Received::Maybe,
            format!("upstream {upstream:?} did not answer within {timeout:?}"),
        )),
        ServiceError::TransportClosed => Some(Transient::new(
            RetryClass::Exited,
            Received::Maybe,
            format!("upstream {upstream:?} went away during the call"),
        )),
        ServiceError::TransportSend(e) => Some(classify_transport(upstream, e)),
        _ => None,
    }
}

/// A request the transport failed to deliver, or delivered and then lost:
/// over HTTP by its status or connection error, over stdio by its pipe.
fn classify_transport(upstream: &str, e: &DynamicTransportError) -> Transient {
    use Received::{Maybe, No};
    use RetryClass::*;
    let lost = || Transient::new(Exited, Maybe, format!("upstream {upstream:?} went away during the call"));
    // A token that could not be had, or was refused: the tool was not reached.
    if let Some(why) = auth_failure(upstream, e) {
        return Transient::new(SignIn, No, why);
    }
    if let Some(http) = e.error.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
        return match http {
            StreamableHttpError::HttpStatus(status) => classify_status(upstream, status),
            StreamableHttpError::Client(c) if c.is_connect() => {
                Transient::new(Refused, No, format!("upstream {upstream:?} refused the connection"))
            }
            _ => lost(),
        };
    }
    match e.error.downcast_ref::<std::io::Error>().map(std::io::Error::kind) {
        // Nothing of the request reached a child whose pipe was already closed.
        Some(std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionRefused) => {
            Transient::new(Refused, No, format!("upstream {upstream:?} was gone before the call"))
        }
        _ => lost(),
    }
}

/// An HTTP 429 or 5xx answered to a call: 429 and 503 say the upstream did
/// not take the call; another 5xx may come after it did.
fn classify_status(upstream: &str, status: &HttpStatusError) -> Transient {
    let (class, received) = match status.status {
        429 => (RetryClass::RateLimited, Received::No),
        503 => (RetryClass::Unavailable, Received::No),
        _ => (RetryClass::Unavailable, Received::Maybe),
    };
    let after = status.retry_after.as_deref().and_then(retry_after);
    let reason = format!("upstream {upstream:?} answered HTTP {}", status.status);
    Transient { class, received, after, reason }
}

/// A `Retry-After` (delay-seconds, or an IMF-fixdate like `Wed, 21 Oct
/// 2015 07:28:00 GMT`, from now), at most [`MAX_RETRY_AFTER`]; `None` for
/// anything else (the policy's backoff then decides).
fn retry_after(value: &str) -> Option<Duration> {
    retry_after_at(value, std::time::SystemTime::now())
}

fn retry_after_at(value: &str, now: std::time::SystemTime) -> Option<Duration> {
    let value = value.trim();
    let after = match value.parse::<u64>() {
        Ok(seconds) => Duration::from_secs(seconds),
        Err(_) => {
            let at = std::time::UNIX_EPOCH + Duration::from_secs(imf_fixdate(value)?);
            at.duration_since(now).unwrap_or(Duration::ZERO)
        }
    };
    Some(after.min(MAX_RETRY_AFTER))
}

/// The Unix time of an IMF-fixdate (RFC 9110 §5.6.7), the only HTTP date
/// form a sender may generate: `Sun, 06 Nov 1994 08:49:37 GMT`.
fn imf_fixdate(value: &str) -> Option<u64> {
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let (_weekday, rest) = value.split_once(", ")?;
    let parts: Vec<&str> = rest.split(' ').collect();
    let [day, month, year, time, "GMT"] = parts[..] else { return None };
    let day: u64 = day.parse().ok()?;
    let month = MONTHS.iter().position(|m| *m == month)? as u64 + 1;
    let year: u64 = year.parse().ok()?;
    let hms: Vec<u64> = time.split(':').map(str::parse).collect::<Result<_, _>>().ok()?;
    let [h, m, sec] = hms[..] else { return None };
    if year < 1970 || !(1..=31).contains(&day) || h > 23 || m > 59 || sec > 60 {
        return None;
    }
    // Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
    let (y, mp) = if month <= 2 { (year - 1, month + 9) } else { (year, month - 3) };
    let (era, yoe) = (y / 400, y % 400);
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).checked_sub(719_468)?;
    Some(days * 86_400 + h * 3_600 + m * 60 + sec)
}

/// An `isError: true` result the tool's rule names transient; its reason is
/// the result's text, capped.
pub(super) fn classify_result(upstream: &str, result: &Value, on: &RetryOn) -> Option<Transient> {
    if !on.tool_error || result["isError"] != true {
        return None;
    }
    let text: Vec<&str> =
        result["content"].as_array().map(|c| c.iter().filter_map(|b| b["text"].as_str()).collect()).unwrap_or_default();
    let reason = format!("upstream {upstream:?} answered an error result: {}", cap_message(&text.join(" ")));
    Some(Transient::new(RetryClass::ToolError, Received::Answered, reason))
}

#[cfg(test)]
mod tests {
    use std::any::TypeId;

    use rmcp::model::{ErrorCode, ErrorData};
    use serde_json::json;

    use super::*;

    fn http(e: StreamableHttpError<reqwest::Error>) -> ServiceError {
        ServiceError::TransportSend(DynamicTransportError::from_parts("http", TypeId::of::<()>(), Box::new(e)))
    }

    fn status(code: u16, retry_after: Option<&str>) -> ServiceError {
        http(StreamableHttpError::HttpStatus(HttpStatusError::new(code, retry_after.map(str::to_string))))
    }

    fn classify(e: &ServiceError, on: &RetryOn) -> Option<(RetryClass, Received, Option<Duration>)> {
        classify_service("up", e, on).map(|t| (t.class, t.received, t.after))
    }

    #[test]
    fn failures_are_sorted_by_whether_the_upstream_may_have_received_the_call() {
        use Received::*;
        use RetryClass::*;
        let none = RetryOn::default();
        let secs = |s| Some(Duration::from_secs(s));
        // Not received: every tool is tried again, Retry-After honoured.
        assert_eq!(classify(&status(429, Some("7")), &none), Some((RateLimited, No, secs(7))));
        assert_eq!(classify(&status(503, Some(" 2 ")), &none), Some((Unavailable, No, secs(2))));
        assert_eq!(classify(&status(503, None), &none), Some((Unavailable, No, None)));
        assert_eq!(classify(&status(429, Some("99999999")), &none), Some((RateLimited, No, Some(MAX_RETRY_AFTER))));
        let past = status(429, Some("Wed, 21 Oct 2015 07:28:00 GMT"));
        assert_eq!(classify(&past, &none), Some((RateLimited, No, Some(Duration::ZERO))), "a date gone by: now");
        let garbled = status(429, Some("soon"));
        assert_eq!(classify(&garbled, &none), Some((RateLimited, No, None)), "the backoff decides");
        let pipe = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        let stdio_gone =
            ServiceError::TransportSend(DynamicTransportError::from_parts("stdio", TypeId::of::<()>(), Box::new(pipe)));
        assert_eq!(classify(&stdio_gone, &none), Some((Refused, No, None)));
        let spawn = UpstreamError::Spawn { program: "nope".into(), source: std::io::ErrorKind::NotFound.into() };
        let t = classify_connect("up", &spawn, &none).unwrap();
        assert_eq!((t.class, t.received), (Refused, No));
        assert!(t.reason.contains("\"up\" is unavailable"), "{}", t.reason);
        let handshake = UpstreamError::Initialize("the child exited".into());
        assert_eq!(classify_connect("up", &handshake, &none).map(|t| t.received), Some(No));
        let busy = UpstreamError::Busy { upstream: "up".into(), waited: Duration::from_secs(1) };
        assert_eq!(classify_connect("up", &busy, &none), None);

        // Maybe received: only a tool safe to repeat is tried again.
        assert_eq!(classify(&status(500, None), &none), Some((Unavailable, Maybe, None)));
        assert_eq!(classify(&status(502, Some("1")), &none), Some((Unavailable, Maybe, secs(1))));
        assert_eq!(classify(&ServiceError::TransportClosed, &none), Some((Exited, Maybe, None)));
        let timeout = ServiceError::Timeout { timeout: Duration::from_secs(3) };
        assert_eq!(classify(&timeout, &none), Some((Timeout, Maybe, None)));
        assert_eq!(classify(&http(StreamableHttpError::UnexpectedEndOfStream), &none), Some((Exited, Maybe, None)));

        // The upstream's own errors: only those the rule names.
        let rpc = ServiceError::McpError(ErrorData::new(ErrorCode(-32001), "busy, 1", None));
        assert_eq!(classify(&rpc, &none), None);
        let on = RetryOn { codes: vec![-32001], tool_error: true };
        assert_eq!(classify(&rpc, &on), Some((RpcError, Answered, None)));
        assert!(classify_service("up", &rpc, &on).unwrap().reason.contains("error -32001: busy, 1"));
        let other = ServiceError::McpError(ErrorData::new(ErrorCode(-32602), "bad", None));
        assert_eq!(classify(&other, &on), None);
        assert_eq!(classify(&ServiceError::UnexpectedResponse, &on), None);
    }

    #[test]
    fn sign_in_failures_never_reached_the_tool() {
        let why = "the token endpoint answered HTTP 401 (invalid_client)".to_string();
        let token = UpstreamError::Token { upstream: "up".into(), token_url: "http://idp/token".into(), why };
        let at_connect = classify_connect("up", &token, &RetryOn::default()).unwrap();
        assert_eq!((at_connect.class, at_connect.received), (RetryClass::SignIn, Received::No));
        let failed = http(StreamableHttpError::Io(std::io::Error::other(token)));
        let t = classify_service("up", &failed, &RetryOn::default()).unwrap();
        assert_eq!((t.class, t.received, t.class.label()), (RetryClass::SignIn, Received::No, "sign_in"));
        assert!(t.reason.contains("from http://idp/token: the token endpoint answered HTTP 401"), "{}", t.reason);
        let refused = http(StreamableHttpError::UnexpectedServerResponse("HTTP 401 Unauthorized: no".into()));
        let t = classify_service("up", &refused, &RetryOn::default()).unwrap();
        assert_eq!(
            (t.class, t.reason.as_str()),
            (RetryClass::SignIn, "upstream \"up\" refused the gateway's access token (HTTP 401)")
        );
    }

    #[test]
    fn only_failures_that_say_the_upstream_is_down_count_against_its_breaker() {
        use RetryClass::*;
        for class in [Refused, SignIn, Unavailable, Exited, Timeout] {
            assert!(class.means_down(), "{class:?}");
        }
        for class in [RateLimited, RpcError, ToolError] {
            assert!(!class.means_down(), "{class:?}: the upstream answered");
        }
    }

    #[test]
    fn retry_after_is_seconds_or_an_http_date() {
        assert_eq!(imf_fixdate("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(imf_fixdate("Sun, 06 Nov 1994 08:49:37 GMT"), Some(784_111_777));
        assert_eq!(imf_fixdate("Tue, 29 Feb 2028 23:59:59 GMT"), Some(1_835_481_599));
        for bad in ["Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994", "Sun, 06 Nov 1994 08:49 GMT", ""] {
            assert_eq!(imf_fixdate(bad), None, "{bad:?}");
        }
        let now = std::time::UNIX_EPOCH + Duration::from_secs(784_111_777);
        let at = |v| retry_after_at(v, now);
        assert_eq!(at("Sun, 06 Nov 1994 08:50:07 GMT"), Some(Duration::from_secs(30)));
        assert_eq!(at("Sun, 06 Nov 1994 08:00:00 GMT"), Some(Duration::ZERO), "past: now");
        assert_eq!(at("Mon, 07 Nov 1994 08:49:37 GMT"), Some(MAX_RETRY_AFTER), "capped");
        assert_eq!(at(" 12 "), Some(Duration::from_secs(12)));
        assert_eq!(at("-1"), None);
    }

    #[test]
    fn an_error_result_is_transient_only_under_its_rule() {
        let failed = json!({ "isError": true, "content": [{ "type": "text", "text": "busy, 2" }] });
        let ok = json!({ "content": [{ "type": "text", "text": "fine" }] });
        let on = RetryOn { codes: Vec::new(), tool_error: true };
        assert_eq!(classify_result("up", &failed, &RetryOn::default()), None);
        assert_eq!(classify_result("up", &ok, &on), None);
        let t = classify_result("up", &failed, &on).unwrap();
        assert_eq!((t.class, t.received), (RetryClass::ToolError, Received::Answered));
        assert!(t.reason.ends_with("an error result: busy, 2"), "{}", t.reason);
        let huge = json!({ "isError": true, "content": [{ "type": "text", "text": "x".repeat(100_000) }] });
        assert!(classify_result("up", &huge, &on).unwrap().reason.len() < 5_000, "capped");
    }
}
