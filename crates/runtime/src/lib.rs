//! The processes of a presa server, for any catalog: [`App`] runs the API
//! process ([`ApiArgs`]) or a worker process ([`WorkerArgs`]) with every flag,
//! environment variable, health endpoint, metric, trace and the graceful
//! drain of the shipped `presa-api` and `presa-worker`, whose `main`s are a
//! few lines around the demo catalog. Underneath, the plumbing they share: configuration ([`config::load`], `--print-config`),
//! shutdown signals, and choosing the storage (in-memory,
//! or Redis) behind the store traits ([`Storage`]), and setting up logs,
//! traces and metrics once ([`telemetry`], on top of `presa-telemetry`);
//! the authentication flags and start-up refusals ([`auth`]).

mod alloc;
mod api;
mod app;
mod artifacts;
pub mod auth;
mod checked;
pub mod config;
mod error;
mod pool;
mod process;
mod retry;
pub mod secret_file;
mod storage;
mod worker;

#[cfg(feature = "jemalloc")]
pub use alloc::Jemalloc;
pub use alloc::jemalloc_in_use;
pub use api::ApiArgs;
pub use app::{App, Defaults, Process, parse_args, parse_args_with};
pub use artifacts::ArtifactArgs;
pub use error::RuntimeError;
pub use pool::{PoolArgs, ShareArgs};
pub use process::{Telemetry, shutdown_signal, telemetry};
pub use retry::RetryArgs;
pub use storage::{DurabilityLevel, RedisArgs, Storage, StorageError, Switch};
pub use worker::WorkerArgs;
