//! Streamable HTTP (MCP 2026-07-28) for presa, on axum.
//!
//! - [`router`](fn@router): `POST /mcp`, `GET /artifacts/{key}` (an artifact's streamed
//!   download, for its owner: `artifacts`), `GET /healthz`, `GET /readyz`, `GET /metrics` when
//!   [`Probes::metrics`] is set (and 405 for GET/DELETE `/mcp`).
//! - [`metrics_router`]: `GET /metrics` alone, for a process without the MCP endpoint (a worker).
//! - [`admin`]: the admin API, `/admin/v1/…` (beside `/mcp`, or alone on
//!   its own listener: [`admin_router`]), and the [`console`] at `/console` beside it.
//! - [`serve`](mod@serve): run a router on a listener (TCP_NODELAY) until a shutdown
//!   future fires, with header, body and idle timeouts and a connection cap.
//! - [`inline`]: [`Inline`](inline::Inline), a future polled again at once when it
//!   wakes itself during its poll (each served connection runs in one).
//! - [`guard`]: `Host`, `Origin` and CSRF rules for the routes beside `/mcp`
//!   (the admin API, the console, `/metrics`).
//! - [`admission`]: the request admission order (Origin, envelope, `_meta`,
//!   `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, method, `Mcp-Param-*`).
//! - [`auth`]: who is calling ([`Authenticator`]); anonymous by default, or
//!   a scheme of the `presa-auth` crate (bearer JWTs, static tokens); run on
//!   the request head before the body is read. With [`Access::resource_metadata`] set, the RFC 9728
//!   metadata is served at `/.well-known/oauth-protected-resource`, with
//!   `/mcp` and with the resource URL's own path appended ([`auth::metadata`]).
//!
//! A server with virtual servers (`presa_server::Endpoints`) serves each at
//! `/mcp/<name>` too (`endpoints`): the same handlers, given the dispatcher
//! bound to that endpoint; an unknown name is 404.
//!
//! `POST /mcp` has one entry for both eras (`mcp`): the transport checks,
//! authentication and the body, then a 2026-07-28 request goes to `modern`
//! and a 2025-11-25 one (`initialize`, or a message in a session) to
//! `legacy`; both answer through `respond` and `observe`, which import neither.
//!
//! A reply is one JSON body unless the handler streams notifications first
//! (progress, logs) or the method is `subscriptions/listen`: then SSE with
//! `X-Accel-Buffering: no`. Closing an SSE stream cancels the request's work.
//! A listen stream (and a legacy `GET` stream) ends when the credential that
//! opened it expires ([`Authenticated::expires_at`]): a listen stream with a
//! JSON-RPC error on its request id, a legacy stream by closing.
//!
//! Every parsed request runs in one server span (`<method> <tool>`, the MCP
//! semantic conventions; parent from `_meta.traceparent`, else the HTTP
//! `traceparent` header) and is counted in `presa_requests_total` and
//! `presa_request_duration_seconds` (see `presa_telemetry::metrics`).

pub mod admin;
pub mod admission;
mod app;
mod artifacts;
pub mod auth;
mod config;
pub mod console;
mod endpoints;
pub mod guard;
pub mod inline;
mod legacy;
mod mcp;
mod modern;
mod observe;
mod respond;
mod router;
pub mod serve;

pub use auth::{Anonymous, Authenticated, Authenticator, Caller, Challenge, Refusal, metadata::ResourceMetadata};
pub use config::{
    Access, DEFAULT_MAX_LEGACY_SESSIONS, DEFAULT_MAX_LEGACY_SESSIONS_PER_SCOPE, DEFAULT_MAX_TOKEN_BYTES, HttpConfig,
    LegacyConfig, Probes, ReadyCheck, ReadyDetail, RefreshGauges, RenderMetrics,
};
pub use router::{admin_router, liveness, metrics_router, readiness, refresh_queue_gauges, router};
pub use serve::{ServeLimits, serve, serve_with};
