//! `GET /admin/v1/events`: the console's live view, an SSE stream of
//! `overview` events, one a second: the queue totals, each partition's
//! queues and the nodes for a cluster admin, the time alone for a tenant admin (the cluster is not
//! theirs to see). Snapshots, not a feed of every task's changes: a stream
//! costs one queue read and one registry read a second, whatever the load.
//!
//! Bounded like listen streams: at most [`AdminConfig::max_streams`](super::AdminConfig::max_streams)
//! open on a process for cluster admins, as many for tenant admins with
//! [`AdminConfig::max_streams_per_tenant`](super::AdminConfig::max_streams_per_tenant)
//! for any one tenant (503 past either), and each ends when the credential
//! that opened it expires or is revoked.

use std::{convert::Infallible, time::Duration};

use axum::{
    extract::State,
    http::StatusCode,
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
};
use futures::StreamExt;
use presa_server::admin::Reach;
use presa_store::{Limit, Scope, util::now_ms};
use serde_json::json;

use super::{AdminState, Op, Refused, view};

/// How often an `overview` event is sent.
const EVERY: Duration = Duration::from_secs(1);

pub(crate) async fn events(State(s): State<AdminState>, op: Op) -> Response {
    let place = match &op.operator.reach {
        Reach::Cluster => s.streams.cluster.admit(&op.operator.caller.scope),
        // One share per tenant, whichever of its admins holds it.
        Reach::Tenant(tenant) => {
            s.streams.tenants.admit(&Scope { tenant: tenant.clone(), subject: String::new(), endpoint: None })
        }
    };
    let permit = match place {
        Ok(permit) => permit,
        Err(limit) => {
            let config = &s.app.config.admin;
            let max = if limit == Limit::AdminMaxStreams { config.max_streams } else { config.max_streams_per_tenant };
            let said = format!("{max} admin streams are open ({limit})");
            return Refused::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", &said).into_response();
        }
    };
    let ended = op.authenticated.ended();
    let shutdown = s.app.server.shutdown_token();
    let ticks = tokio_stream::wrappers::IntervalStream::new(tokio::time::interval(EVERY));
    let events = ticks
        .then(move |_| {
            let (admin, operator) = (s.admin.clone(), op.operator.clone());
            async move {
                let data = match operator.reach {
                    Reach::Tenant(_) => json!({ "nowMs": now_ms() }),
                    Reach::Cluster => {
                        let (queues, partitions) = match admin.queues(&operator).await {
                            Ok(stats) => {
                                let (total, partitions) = view::queues(&stats);
                                (Some(total), Some(partitions))
                            }
                            Err(_) => (None, None),
                        };
                        let nodes =
                            admin.cluster(&operator).await.ok().map(|n| n.iter().map(view::node).collect::<Vec<_>>());
                        json!({ "nowMs": now_ms(), "queues": queues, "partitions": partitions, "nodes": nodes })
                    }
                };
                Ok::<_, Infallible>(Event::default().event("overview").data(data.to_string()))
            }
        })
        .take_until(async move {
            let _permit = permit;
            match ended {
                Some(ended) => tokio::select! { _ = ended => {}, _ = shutdown.cancelled() => {} },
                None => shutdown.cancelled().await,
            }
        });
    let mut resp = Sse::new(events).keep_alive(KeepAlive::new().interval(s.app.config.keep_alive)).into_response();
    resp.headers_mut().insert("x-accel-buffering", http::HeaderValue::from_static("no"));
    resp
}
