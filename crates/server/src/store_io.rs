//! Every store call the server makes, traced the same way:
//! `store_call` / `store_call_at` run one store operation in a client span
//! (`store.<op>`), its failures counted, whatever the backend. The one
//! read-modify-write of a task, [`TaskWriter`], is in `task_writer.rs`
//! (re-exported here with its outcome and limits).

use std::future::Future;

use presa_store::StoreError;
use presa_telemetry::metrics;
use tracing::{Instrument, field::Empty};

pub(crate) use crate::task_writer::{Concluding, TaskWriter, UpdateError, Updated, WriteLimits};

/// How loudly a store call is traced (the same two levels as the Redis
/// store's own per-round-trip spans).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verbosity {
    /// An `info` span: exported by default.
    Info,
    /// A `debug` span: for calls that repeat while idle (claim polls, lease
    /// renewals), exported only when `PRESA_TRACE_FILTER` asks for debug.
    Debug,
}

/// Run `call`, the store operation `operation`, inside a client span named
/// `store.<operation>` (attribute `presa.store.operation`), marking the span
/// and counting `presa_store_errors_total` when it fails.
///
/// The span is trace-only (`log.omit`, see `presa_telemetry::LOG_OMIT`): a
/// line logged during a store call shows the span of the request or task
/// that made it, and without OpenTelemetry no span is built at all. Built
/// for the text log layer, it cost about 5,000 instructions a call (its
/// fields formatted, entered and left at every poll and at its drop), one
/// or more calls a request, and no log line showed it.
pub(crate) async fn store_call<T>(
    operation: &'static str,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    store_call_at(Verbosity::Info, operation, call).await
}

/// [`store_call`] at a chosen span level.
pub(crate) async fn store_call_at<T>(
    verbosity: Verbosity,
    operation: &'static str,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    // A span's level is part of its static callsite, hence one macro per level.
    macro_rules! store_span {
        ($level:ident) => {
            tracing::$level!(
                "store",
                // Formatted only by a layer that reads it (the
                // OpenTelemetry one; text logs leave `otel.*` out): no
                // string is built per call for nothing.
                otel.name = %format_args!("store.{operation}"),
                otel.kind = "client",
                presa.store.operation = operation,
                otel.status_code = Empty,
                error.type = Empty,
                log.omit = Empty,
            )
        };
    }
    let span = match verbosity {
        Verbosity::Info => store_span!(info_span),
        Verbosity::Debug => store_span!(debug_span),
    };
    let result = call.instrument(span.clone()).await;
    if let Err(e) = &result {
        metrics::store_error(operation);
        span.record("otel.status_code", "error");
        span.record("error.type", store_error_type(e));
    }
    result
}

/// A low-cardinality name for a store failure.
fn store_error_type(e: &StoreError) -> &'static str {
    match e {
        StoreError::Unavailable(_) => "unavailable",
        StoreError::Unconfirmed { .. } => "unconfirmed",
        StoreError::Capacity { .. } => "capacity",
        StoreError::QueueFull => "queue_full",
        StoreError::Corrupt(_) => "corrupt",
        StoreError::Unsupported(_) => "unsupported",
        StoreError::BadCursor(_) => "bad_cursor",
        StoreError::Lagged => "lagged",
        StoreError::TooLarge { .. } => "too_large",
        StoreError::KeyReused => "key_reused",
    }
}
