//! Redis implementation of the presa task store ([`presa_store::TaskStore`])
//! and event bus ([`presa_store::EventBus`]), for a cluster of stateless API
//! pods and worker pods sharing one Redis (standalone, found through Sentinel, or Redis Cluster).
//!
//! # Data model
//!
//! Every task id names its partition (`p07.<random>`); all keys of a task
//! carry that partition's hash tag, so each Lua script touches one slot.
//! Key names are built only in [`keys`]:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `{prefix}:{pNN}:task:<id>` | hash | `rev`, `attempt`, `status`, and `doc`: the whole [`presa_store::Task`] as JSON ([`record`], `lua/task.lua`); under a byte quota also `q`, the size it is counted at and its expiry bucket (`lua/bytes.lua`); `PEXPIREAT createdAt+ttlMs` |
//! | `{prefix}:{pNN}:work` | stream | one entry (`task` = id) per task with work; consumer group `workers` |
//! | `{prefix}:{pNN}:events:<id>` | channel | committed snapshots of the task (JSON) |
//! | `{prefix}:{pNN}:wake` | channel | cluster mode: a ping when work is enqueued or released |
//! | `{prefix}:{s.<tenant hex>.<subject hex>}:active` | sorted set | a scope's active tasks scored by their expiry, for `max_active_per_scope` |
//! | `{prefix}:{s.<tenant hex>.<subject hex>}:bytes_q` | hash | a scope's counted bytes by expiry bucket and their `total`, for `max_bytes_per_scope` (`lua/bytes.lua`); the layout before the buckets (`bytes`, `bytes_sizes`, `bytes_total`) is no longer read or written |
//! | `{prefix}:{s.<tenant hex>.<subject hex>}:session:<hex id>` | hash | a legacy session's state and its size (`#bytes`, `#n`), expiring with it (`lua/write_session.lua`) |
//! | `{prefix}:{s.<tenant hex>.<subject hex>}:sessions` | sorted set | a scope's legacy sessions holding state, scored by expiry, for `max_per_scope` |
//! | `{prefix}:sessions` | sorted set | every legacy session holding state, scored by expiry, for `max_sessions` (`lua/session_admit.lua`) |
//! | `{prefix}:{pNN}:dead:<id>` | string | a poison task's dead letter, `"<hex tenant> <replayed as or ->\n<JSON>"`, expiring after the dead-letter retention (`lua/conclude_dead.lua`) |
//! | `{prefix}:{pNN}:dead_t:<tenant hex>` | sorted set | a tenant's dead letters in the partition (member `<died at, 20 digits>.<id>`, lexical order), expiring with the last |
//! | `{prefix}:{pNN}:dead_s:<tenant hex>.<subject hex>` | sorted set | the same, of one scope |
//! | `{prefix}:bus` | channel | server-wide events (at most `presa_store::MAX_EVENT_BYTES` each) |
//! | `{prefix}:topic:<hex name>` | channel | one bus topic's messages (a legacy session's answers), read by that topic's subscribers only |
//!
//! The header's `rev`, `attempt` and `status` mirror the doc so the scripts
//! compare-and-set without parsing JSON; every new doc is computed in Rust (by
//! the reducer, or by the claim bumping `attempt`), so the two never disagree.
//!
//! # Modules
//!
//! - [`keys`]: key and channel names, one doc line each.
//! - [`record`] + `lua/task.lua`: how a task is stored (and records of the
//!   older hash layout read).
//! - `store/`: [`RedisStore`], the facade composed of the parts below,
//!   each a struct owning its state and its operations (one name per
//!   operation, from the trait down to the Lua file: `release` is
//!   `Queue::release` is `release.lua`); `store/traits.rs` implements
//!   every `presa-store` trait by delegating to the part it is about.
//! - `link`: what the parts share (`Link`): configuration, key
//!   layout, the command connection, the `Topology`,
//!   the hub; one round trip (bounded, traced, timed).
//! - `records/`: the task records ([`presa_store::TaskStore`]): create (one
//!   script standalone, steps on a cluster, idempotency replays), reads,
//!   the compare-and-set write, watches, and the per-scope limit and byte
//!   quota steps with the races they tolerate.
//! - `work/`: the work queue ([`presa_store::WorkQueue`]): claim, renew,
//!   remove, release over streams (see its docs for the exact semantics,
//!   and its files' for the parts), and the queue statistics.
//! - `dead`: dead letters of poison tasks ([`presa_store::DeadLetters`];
//!   recorded by `conclude_dead.lua` with the write that ends the task;
//!   listed per partition, marked, discarded).
//! - `session`: legacy sessions' state ([`presa_store::SessionStore`]).
//! - `admin` and `nodes`: the admin task index and the node registry
//!   ([`presa_store::AdminStore`]).
//! - `bus`: the event bus ([`presa_store::EventBus`]) over the hub.
//! - `epoch`: data-loss detection.
//! - `scripts` + `lua/*.lua`: how scripts are embedded and run; each part
//!   declares its own, named as its operation, every file with its
//!   contract header (KEYS, ARGV, Returns).
//! - `topology`: standalone or cluster, chosen once at open: the publish
//!   and wake commands, blocking reads or wake-ups, which scripts may span
//!   slots.
//! - `hub`: one pub/sub connection per store fanning out to every watcher,
//!   each through its own queue bounded in items and bytes (`hub/live.rs`:
//!   the connection itself).
//! - `conn`: the command connection and timeouts; `conn/endpoint.rs` the
//!   URLs, Sentinels and TLS settings, `conn/blocking.rs` the blocking-read
//!   pool, `conn/trace.rs` the client span of every round trip.
//! - `batch`: group commit, a combining queue that runs concurrent creates
//!   (standalone) and a worker's concluding writes as one `batch.lua` call
//!   per batch (per partition on a cluster), with one `WAIT` per batch
//!   (`RedisConfig::batch_max`).
//! - `durability`: `--durability replicated`, writes confirmed by `WAIT` on
//!   connections of their own.
//! - `sentinel`: finding the primary through Redis Sentinel (asked by every
//!   new connection, confirmed by `ROLE`), so connections follow a failover.
//!
//! # Invariants
//!
//! - Every Redis command is bounded by [`RedisConfig::op_timeout`] (blocking
//!   reads by their block time plus `op_timeout`): an unreachable Redis fails
//!   promptly with [`presa_store::StoreError::Unavailable`], never hangs.
//! - A task and its work entry are written by one script; `create` returns
//!   after it did, so any process's `get` resolves the task.
//! - Terminal tasks never change; a worker's write carries its fencing attempt
//!   and every claim bumps the attempt, so a zombie's late write is refused.
//! - Pub/sub is a wake-up only; the task record is the truth.
//!
//! # Observability
//!
//! Every Redis round trip runs in a client span `redis <COMMAND>` (scripts:
//! `redis EVALSHA <script>`) with `db.system.name`, `db.operation.name`,
//! `db.namespace` (the key prefix), `server.address`/`server.port` (standalone)
//! and, on failure, `error.type`: at info level, except the polls idle workers
//! run all the time (work reads, lease recovery, queue statistics, PING),
//! which are at debug level. Pub/sub reconnects are logged (warn) and counted
//! in [`RECONNECTS_METRIC`]. Every round trip on the command connection is
//! timed and its failures counted by kind, and the epoch check sets whether
//! Redis answers: see [`metrics`].

mod epoch;
pub mod keys;

mod admin;
mod batch;
mod breakers;
mod bus;
mod claimed;
mod config;
mod conn;
mod dead;
mod durability;
mod error;
mod hub;
mod link;
pub mod metrics;
mod nodes;
mod permits;
mod rates;
pub mod record;
mod records;
mod scripts;
mod session;
mod store;
mod topology;
mod work;

pub use metrics::{DATA_LOSS_METRIC, RECONNECTS_METRIC};

pub use epoch::Epoch;

pub use config::Durability;
pub use config::{RedisConfig, SentinelConfig};
pub use error::RedisStoreError;
pub use store::RedisStore;
