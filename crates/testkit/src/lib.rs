//! Test support shared by presa's test suites (never used by the binaries).
//!
//! - [`redis`]: a real Redis for a test: testcontainers when a Docker engine
//!   answers, else a spawned `redis-server`, else a failure saying how to get one.
//! - [`redis_cluster`]: a local 3-master Redis Cluster shared by a test binary, and private ones with replicas for failover tests.
//! - [`redis_sentinel`]: a local primary, replicas and Sentinels, for failover tests.
//! - [`cli`]: running the `presa` command-line client as a shell would.
//! - [`client`]: an MCP client for the stateless wire (JSON and SSE, listen streams).
//! - [`legacy`]: a 2025-11-25 client (`initialize`, `Mcp-Session-Id`, server requests on SSE).
//! - [`embedded()`]: an in-process embedded server on a loopback port.
//! - [`jwt`]: a throw-away token issuer (fresh RSA and EC keys, JWKS, good and forged tokens).
//! - [`principals`]: the cross-principal scenario (a task belongs to its creator alone).
//! - [`breakers`]: the circuit-breaker scenario (an upstream dies, tasks wait, it comes back).
//! - [`pods`]: `presa-api` / `presa-worker` processes for cluster and crash tests.
//! - [`reference`](mod@reference): the configuration reference (`docs/configuration.md`), checked against `--help`.

pub mod breakers;
pub mod cli;
pub mod client;
pub mod embedded;
pub mod jwt;
pub mod legacy;
pub mod pods;
pub mod principals;
pub mod redis;
pub mod redis_cluster;
pub mod redis_sentinel;
pub mod reference;
pub mod s3;

pub use client::{Client, TASKS, next_within, task_id, tasks_caps};
pub use embedded::{Embedded, HeaderScopes, embedded, embedded_artifacts, embedded_limited, embedded_with};
pub use legacy::LegacyClient;
pub use pods::{Pod, free_port};
pub use redis::TestRedis;
