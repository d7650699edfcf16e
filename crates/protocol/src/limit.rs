//! [`Limit`]: every limit a request can be refused for, named once. Its
//! name is its setting's (what a refusal's `data.limit` and the
//! `presa_refusals_total{limit}` series say); what it bounds ([`Bound`])
//! decides how a refusal answers: the caller's own share is `-32023` (HTTP
//! 429, retry later), the server's room or a failing upstream `-32603`
//! (HTTP 503, retry later or on another pod), a request's own size `-32602`
//! (not retryable).

use std::fmt;

/// What a [`Limit`] bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// One principal's share (a `…_per_scope` or per-tenant limit): the
    /// caller asks for more than its share; others are not held back.
    Principal,
    /// One work partition's queue: it frees itself as workers catch up.
    Partition,
    /// What one tool may be asked across the cluster (its rate, its runs at
    /// once): it frees itself with time or as runs end, whoever asks.
    Tool,
    /// What a tool calls, which is failing (its circuit breaker is open):
    /// it frees itself once that recovers, whoever asks (HTTP 503).
    Upstream,
    /// The process or store as a whole: the server is full.
    Process,
    /// One request or record: it is too big, or its time ran out.
    Request,
}

/// When a refused caller may try again, in ms (`data.retryAfterMs`,
/// `Retry-After`), for the retryable limits.
pub const RETRY_AFTER_MS: u64 = 1000;

macro_rules! limits {
    ($($variant:ident => $name:literal, $bound:ident;)*) => {
        /// A limit a request can be refused for.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Limit {
            $(
                #[doc = concat!("`", $name, "`")]
                $variant,
            )*
        }

        impl Limit {
            /// Every limit, in a fixed order.
            pub const ALL: &[Limit] = &[$(Limit::$variant),*];

            /// Its name: the setting's, as refusals and metrics say it.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Limit::$variant => $name,)*
                }
            }

            /// What it bounds.
            pub const fn bound(self) -> Bound {
                match self {
                    $(Limit::$variant => Bound::$bound,)*
                }
            }
        }
    };
}

limits! {
    MaxActiveTasksPerScope => "max_active_tasks_per_scope", Principal;
    MaxBytesPerScope => "max_bytes_per_scope", Principal;
    MaxListenStreamsPerScope => "max_listen_streams_per_scope", Principal;
    MaxListenStreams => "max_listen_streams", Process;
    MaxInflightCallsPerScope => "max_inflight_calls_per_scope", Principal;
    MaxInflightCalls => "max_inflight_calls", Process;
    CallTimeout => "call_timeout", Request;
    MaxSubscriptionUriBytes => "max_subscription_uri_bytes", Request;
    MaxLegacySessionFields => "max_legacy_session_fields", Request;
    MaxLegacySessionBytes => "max_legacy_session_bytes", Request;
    MaxLegacySessionsPerScope => "max_legacy_sessions_per_scope", Principal;
    MaxLegacySessions => "max_legacy_sessions", Process;
    MaxQueued => "max_queued", Partition;
    MaxTaskInputBytes => "max_task_input_bytes", Request;
    MaxIdempotencyKeyBytes => "max_idempotency_key_bytes", Request;
    IdempotencyKeyReused => "idempotency_key_reused", Request;
    MaxTaskBytes => "max_task_bytes", Request;
    MaxTasks => "max_tasks", Process;
    MaxMemoryBytes => "max_memory_bytes", Process;
    AdminMaxStreams => "admin_max_streams", Process;
    AdminMaxStreamsPerTenant => "admin_max_streams_per_tenant", Principal;
    ToolRate => "tool_rate", Tool;
    CircuitOpen => "circuit_open", Upstream;
    ToolConcurrency => "tool_concurrency", Tool;
}

impl Limit {
    /// Whether a refusal for it is the caller's own doing, answered 429
    /// `-32023` (a share or a queue that frees itself), rather than the
    /// server being full (503) or the request too big (400).
    pub const fn is_callers(self) -> bool {
        matches!(self.bound(), Bound::Principal | Bound::Partition | Bound::Tool)
    }

    /// Whether retrying the same request later can pass it.
    pub const fn is_retryable(self) -> bool {
        !matches!(self.bound(), Bound::Request)
    }

    /// The HTTP status of a refusal for it.
    pub const fn http_status(self) -> u16 {
        match self.bound() {
            Bound::Principal | Bound::Partition | Bound::Tool => 429,
            Bound::Process | Bound::Upstream => 503,
            Bound::Request => 400,
        }
    }

    /// When to try again, in ms (`None`: retrying the same request will not pass).
    pub const fn retry_after_ms(self) -> Option<u64> {
        if self.is_retryable() { Some(RETRY_AFTER_MS) } else { None }
    }

    /// The limit named `name`, if any.
    pub fn from_name(name: &str) -> Option<Limit> {
        Limit::ALL.iter().copied().find(|l| l.as_str() == name)
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for Limit {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_every_share_is_the_callers() {
        let mut names: Vec<&str> = Limit::ALL.iter().map(|l| l.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Limit::ALL.len());
        for l in Limit::ALL {
            assert_eq!(Limit::from_name(l.as_str()), Some(*l));
            if l.as_str().ends_with("_per_scope") || l.as_str().ends_with("_per_tenant") {
                assert_eq!(l.bound(), Bound::Principal, "{l}");
            }
        }
        assert_eq!(Limit::MaxBytesPerScope.http_status(), 429);
        assert_eq!(Limit::MaxQueued.http_status(), 429);
        assert_eq!(Limit::ToolRate.http_status(), 429);
        assert!(Limit::ToolRate.is_callers() && Limit::ToolRate.is_retryable());
        assert_eq!(Limit::ToolConcurrency.http_status(), 429);
        assert!(Limit::ToolConcurrency.is_callers() && Limit::ToolConcurrency.retry_after_ms() == Some(1_000));
        assert_eq!(Limit::MaxTasks.http_status(), 503);
        assert_eq!(Limit::CircuitOpen.http_status(), 503);
        assert!(!Limit::CircuitOpen.is_callers() && Limit::CircuitOpen.is_retryable());
        assert_eq!(Limit::MaxTaskBytes.retry_after_ms(), None);
        assert_eq!(serde_json::to_value(Limit::MaxMemoryBytes).unwrap(), "max_memory_bytes");
    }
}
