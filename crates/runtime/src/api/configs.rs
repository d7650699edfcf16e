//! The settings each part of an API process gets, made from [`ApiArgs`]
//! where its flags are declared: the dispatcher's ([`ServerConfig`]), the
//! HTTP layer's ([`HttpConfig`]
//! with its [`LegacyConfig`] and [`AdminConfig`]) and the listeners'
//! ([`ServeLimits`]). `run.rs` only wires them together.

use std::{net::SocketAddr, time::Duration};

use presa_http::{HttpConfig, LegacyConfig, ServeLimits, admin::AdminConfig};
use presa_server::ServerConfig;

use super::ApiArgs;
use crate::{auth::allowed_hosts, storage::Storage, storage::Switch};

/// `n`, or no limit for 0.
fn unless_zero(n: u64) -> Option<u64> {
    (n > 0).then_some(n)
}

impl ApiArgs {
    /// The dispatcher's limits and lifetimes, on top of `base` (the app's identity).
    pub(super) fn server_config(&self, base: ServerConfig) -> ServerConfig {
        base.with(|c| {
            c.task_ttl_ms = self.task_ttl_ms.0;
            c.poll_interval_ms = Some(self.poll_interval_ms);
            c.max_task_input_bytes = self.max_task_input_bytes;
            c.max_idempotency_key_bytes = self.max_idempotency_key_bytes;
            c.max_task_bytes = self.max_task_bytes;
            c.max_bytes_per_scope = unless_zero(self.max_bytes_per_scope);
            c.max_result_bytes = self.max_result_bytes;
            c.max_active_tasks_per_scope = unless_zero(self.max_active_tasks_per_scope);
            c.max_queued_per_partition = unless_zero(self.max_queued);
            c.max_listen_streams = self.max_listen_streams;
            c.max_listen_streams_per_scope = self.max_listen_streams_per_scope;
            c.max_inflight_calls = self.max_inflight_calls;
            c.max_inflight_calls_per_scope = self.max_inflight_calls_per_scope;
            c.call_timeout = (self.call_timeout_ms > 0).then(|| Duration::from_millis(self.call_timeout_ms));
            c.permit_wait = Duration::from_millis(self.permit_wait_ms);
        })
    }

    /// The grace period on SIGTERM/SIGINT.
    pub(super) fn grace(&self) -> Duration {
        Duration::from_millis(self.grace_ms)
    }

    /// The HTTP layer's settings for `/mcp` (the admin API's own listener
    /// takes them with `admin_listener`): `storage`'s probes,
    /// `metrics`, and who may call (`access`).
    pub(super) fn http_config(
        &self,
        storage: &Storage,
        metrics: presa_http::RenderMetrics,
        access: presa_http::Access,
    ) -> HttpConfig {
        HttpConfig::default().with(|c| {
            c.allowed_origins = self.allowed_origins.clone();
            c.allowed_hosts = allowed_hosts(&self.allowed_hosts, self.listen);
            c.max_token_bytes = self.max_token_bytes;
            c.max_body_bytes = self.max_body_bytes;
            c.probes.ready = Some(storage.ready.clone());
            c.probes.ready_detail = Some(storage.ready_detail.clone());
            c.probes.live = Some(storage.live.clone());
            c.probes.metrics = Some(metrics);
            // With Redis, presa-worker pods report the shared work queue.
            c.probes.queue_metrics = !storage.durable;
            c.access = access;
            c.legacy = self.legacy_config();
            c.admin = self.admin_config();
        })
    }

    /// `http` for the admin API's own listener (`--admin-listen`), when it has one.
    pub(super) fn admin_listener(&self, http: &HttpConfig) -> Option<(SocketAddr, HttpConfig)> {
        let at = self.admin_listen.filter(|_| self.admin == Switch::On)?;
        Some((
            at,
            http.clone().with(|c| {
                c.allowed_hosts = allowed_hosts(&self.allowed_hosts, at);
            }),
        ))
    }

    /// The 2025-11-25 era's settings.
    fn legacy_config(&self) -> LegacyConfig {
        LegacyConfig {
            enabled: self.legacy == Switch::On,
            session_ttl: Duration::from_secs(self.legacy_session_ttl_secs.max(1)),
            max_subscription_uri_bytes: self.max_subscription_uri_bytes,
            max_subscriptions_per_session: self.max_subscriptions_per_session,
            max_session_bytes: self.max_legacy_session_bytes,
            max_sessions_per_scope: self.max_legacy_sessions_per_scope,
            max_sessions: self.max_legacy_sessions,
            ..LegacyConfig::default()
        }
    }

    /// The admin API's settings.
    fn admin_config(&self) -> AdminConfig {
        AdminConfig {
            enabled: self.admin == Switch::On,
            admin_scope: self.admin_scope.clone(),
            tenant_admin_scope: self.tenant_admin_scope.clone(),
            max_streams: self.admin_max_streams,
            max_streams_per_tenant: self.admin_max_streams_per_tenant,
            usage_cache: Duration::from_millis(self.admin_usage_cache_ms),
            history_every: Duration::from_millis(self.admin_history_interval_ms),
            history_window: Duration::from_millis(self.admin_history_window_ms),
            own_listener: self.admin_listen.is_some(),
        }
    }

    /// Every listener's connection limits.
    pub(super) fn serve_limits(&self) -> ServeLimits {
        ServeLimits {
            header_read_timeout: Duration::from_millis(self.header_read_timeout_ms),
            body_read_timeout: Duration::from_millis(self.body_read_timeout_ms),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
            max_connections: self.max_connections,
            probe_connections: self.probe_connections,
        }
    }
}
