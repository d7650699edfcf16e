//! [`Queue`]: the work queue part of the store, what
//! [`presa_store::WorkQueue`] is about: work claims over the partition
//! streams and their consumer group, leases, release, removal and the
//! queue's statistics, each with its script.
//!
//! **Leases live in the pending-entries list.** Recovery is always
//! `XAUTOCLAIM` with min-idle = H (`RedisConfig::max_lease`); granting a lease
//! L sets the entry's idle time to H − L (`XCLAIM … IDLE`), so the entry
//! becomes recoverable exactly when the holder's lease ends, whatever lease
//! the recovering worker asks for. No extra key is needed.
//!
//! - **claim**: new entries first (`read.lua`: `XREADGROUP … >` over every
//!   partition, without blocking), then entries whose lease lapsed
//!   (`recover.lua`: `XAUTOCLAIM`, each partition's sweep going on from the
//!   cursor the last look left in Redis, so a look costs what it takes, not
//!   what is pending; see `recovery.rs`); when there is neither, wait for new
//!   entries with a blocking `XREAD` (which delivers nothing) on a dedicated
//!   connection, from the cursors `read.lua` returned, in slices so lapsed
//!   leases are noticed during a long wait. The delivered entries' docs
//!   come with the read (standalone `read.lua`) or are read together
//!   (recovered entries, cluster mode), then one `claim_batch.lua` (per
//!   partition on a cluster) claims them all: for each entry it bumps the task's fencing
//!   `attempt` (and `rev`), sets the lease (or keeps the one its delivery
//!   set, when that is younger than an eighth of a lease) and publishes the snapshot, or
//!   drops the entry when the task is terminal or gone, exactly as
//!   `claim.lua` does for one; an entry whose task moved in between is
//!   retried alone with `claim.lua`. `deliveries` is the bumped attempt less the fence of the last deferral (`Task::deliveries`):
//!   every claim of the task's one work entry counts.
//! - **recovery bound**: an entry is never pending at idle ≈ 0. `read.lua`
//!   and `recover.lua` set the idle time of what they deliver to H − lease in
//!   the same step, and `claim.lua` only claims an entry still pending for
//!   its own consumer. So whatever instant a worker dies at (after the read,
//!   before the claim, while holding a lease, while waiting), each entry it
//!   held is recoverable at most one lease after its last read, claim or
//!   renewal, and a reader that stalled past that lease loses the entry to
//!   the recoverer (and a recoverer that wins bumps the attempt, fencing
//!   off any writes of an older holder).
//!   On a Redis Cluster one script cannot span slots, so partitions are
//!   read one script each, and a waiting claim sleeps until a partition's
//!   sharded wake channel pings (`create.lua` and `release.lua` publish it),
//!   re-reading at least every second.
//! - **drained reads**: a standalone read that delivered work and drained
//!   every stream keeps its cursors, and the next claim waits from them
//!   before reading (an entry added since wakes it at once), so an idle
//!   worker runs `read.lua` once per task instead of twice.
//! - **renew**: `renew.lua` sets the idle time to H − lease again, if the stored
//!   attempt is still the holder's and the entry is pending.
//! - **remove**: `remove_work.lua` (XACK + XDEL) unless a newer attempt holds the
//!   work (a stale holder must not drop it).
//! - **release**: `release.lua` keeps the entry pending but sets its last
//!   delivery to the epoch (`XCLAIM … TIME 0`), so the next claimer's
//!   XAUTOCLAIM takes it at once whatever its lease; the entry id and its
//!   place in the stream are kept.
//!
//! Receipts are [`Receipt`](receipt::Receipt)s, `<partition>/<entry id>` as text.
//!
//! # Files
//!
//! - `claim.rs`: the claim loop (read, take held and lapsed work, wait).
//! - `read.rs`: new work (`read.lua`, the blocking wait), and [`Reader`],
//!   the rotation and the cursors of a drained read.
//! - `take.rs`: taking delivered entries (claim, hold, hand back, drop).
//! - `attempt.rs`: the claim scripts that bump a task's fencing attempt.
//! - `recovery.rs`: lapsed leases and held work, and [`Recovery`], when each was last looked for.
//! - `lease.rs`: renew, remove, release.
//! - `receipt.rs`: [`Receipt`](receipt::Receipt), where a claim's work is.
//! - `stats.rs`: the queue's statistics.
//!
//! Which scripts may span partitions, and how a claim waits, are the
//! [`Topology`](crate::topology::Topology)'s to say.

mod attempt;
mod claim;
mod delayed;
mod lease;
mod read;
mod receipt;
mod recovery;
mod stats;
mod take;
#[cfg(test)]
mod tests;

use std::{sync::Arc, time::Duration};

use futures::future::join_all;
use read::Reader;
use recovery::Recovery;
use redis::Value;

use crate::scripts::{STREAM, TASK_STREAM, script, task_script};
use crate::{claimed::Claimed, conn::Verbosity, error::RedisStoreError, keys::GROUP, link::Link, records::Records};

// The queue's scripts (see `scripts.rs`), each named as its operation.
task_script!(CLAIM, "claim.lua", "Bump a delivered task's attempt (CAS on rev), or drop its entry.");
task_script!(
    CLAIM_BATCH,
    "claim_batch.lua",
    "claim.lua for a batch of entries (standalone: any partitions; cluster: one)."
);
task_script!(RENEW, "renew.lua", "Reset a held entry's idle time if the attempt still matches.");
task_script!(RELEASE, "release.lua", "Make a held entry recoverable at once if the attempt still matches.");
task_script!(REMOVE_WORK, "remove_work.lua", "XACK and XDEL finished work, unless a newer attempt holds it.");
script!(ACK, "ack.lua", "XACK and XDEL a work entry together.");
task_script!(DEFER, "defer.lua", "Write a deferred task (CAS, fenced) and move its work entry to the delayed set.");
script!(PROMOTE, "promote.lua", Debug, "Queue the due members of the delayed sets (standalone: any partitions).");
script!(RETRY_NOW, "retry_now.lua", "Make a task's delayed work due now.");
script!(@ TASK_STREAM, READ, "read.lua", Debug, "Read up to N new entries over the partitions (standalone only).");
script!(@ STREAM, RECOVER, "recover.lua", Debug, "XAUTOCLAIM up to N lapsed entries over the partitions from their sweep cursors (standalone only).");
script!(@ STREAM, UNHOLD, "unhold.lua", Debug, "Hand held entries of scopes with room to a worker (standalone: any partitions).");
script!(@ STREAM, WORK_STATS, "work_stats.lua", Debug, "Count a partition's queued and pending work, and the oldest pending age.");

/// The work queue, over the store's [`Link`]; cheap to clone (its state is shared).
#[derive(Debug, Clone)]
pub(crate) struct Queue {
    link: Arc<Link>,
    /// The records claims bump and conclusions write.
    records: Records,
    /// How it reads and waits, fixed by the topology.
    reads: Reads,
    state: Arc<QueueState>,
}

/// How the queue reads work and waits for it: fixed when it is built, by
/// the [`Topology`](crate::topology::Topology).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reads {
    /// Standalone: one script reads every partition, and a claim waits on
    /// the streams with blocking reads.
    Spanning,
    /// A cluster: one script per partition, and a claim waits for the
    /// partitions' wake channels (or polls).
    PerPartition,
}

/// What a queue keeps between claims.
#[derive(Debug, Default)]
struct QueueState {
    /// The read side: partition rotation, drained cursors.
    reader: Reader,
    /// When the queue last looked for lapsed leases and held work.
    recovery: Recovery,
    /// When the queue last promoted delayed work, and the next due time it knows.
    delayed: delayed::Delayed,
    /// The tasks this process runs, watched through the claimed channels.
    claimed: Claimed,
}

/// Longest single blocking read while waiting for work: lapsed leases are
/// looked for again after each one.
const MAX_SLICE: Duration = Duration::from_secs(1);
/// How often a cluster-mode claim polls while waiting when it has no wake-up
/// subscription (no blocking reads there: one XREADGROUP cannot span slots).
const CLUSTER_POLL: Duration = Duration::from_millis(100);

/// What a blocking wait saw: the partitions it woke on, and the cursors
/// (each partition's last entry id) it waited from.
type Woke = (Vec<u16>, Vec<(u16, String)>);

/// One delivered stream entry.
#[derive(Debug)]
struct Entry {
    partition: u16,
    id: String,
    task: Option<String>,
    /// The task's doc when the read fetched it with the entry (standalone
    /// `read.lua`): `Some(None)` when the task is gone. `None`: not fetched.
    doc: Option<Option<String>>,
}

impl Queue {
    pub(crate) fn new(link: Arc<Link>, records: Records) -> Queue {
        let reads = if link.topology.spans_slots() { Reads::Spanning } else { Reads::PerPartition };
        Queue { link, records, reads, state: Arc::default() }
    }

    /// Create the consumer group on every partition stream (MKSTREAM; an
    /// existing group is fine). Reading from id 0 so entries added before a
    /// lost group was re-created are still delivered. Claims call it
    /// themselves when a group is missing; `RedisStore::connect` calls it
    /// up front.
    pub(crate) async fn ensure_groups(&self) -> Result<(), RedisStoreError> {
        let creates = (0..self.link.keys.partitions()).map(|p| async move {
            let cmd = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(self.link.keys.work(p))
                .arg(GROUP)
                .arg("0")
                .arg("MKSTREAM")
                .to_owned();
            match self.link.query::<Value>(Verbosity::Info, &cmd).await {
                Err(RedisStoreError::Redis(e)) if e.code() == Some("BUSYGROUP") => Ok(()),
                other => other.map(|_| ()),
            }
        });
        join_all(creates).await.into_iter().collect()
    }
}

/// What per-partition reads delivered: entries some partitions handed to this
/// consumer must be claimed (or handed back), even if another partition
/// failed; the failure counts only when nothing was delivered.
fn delivered(entries: Vec<Entry>, failure: Option<RedisStoreError>) -> Result<Vec<Entry>, RedisStoreError> {
    match failure {
        Some(e) if entries.is_empty() => Err(e),
        Some(e) => {
            tracing::warn!(error = %e, "a partition read failed; using what the others delivered");
            Ok(entries)
        }
        None => Ok(entries),
    }
}

/// Decode `read.lua` / `recover.lua` replies: `{key index, entry id, task id, …}`
/// where the key index (1-based) points into `parts`.
fn flat_entries(parts: &[u16], flat: Vec<Value>) -> Result<Vec<Entry>, RedisStoreError> {
    let bad = |why: &str| RedisStoreError::Corrupt(format!("unexpected work read reply: {why}"));
    if !flat.len().is_multiple_of(3) {
        return Err(bad("not triples"));
    }
    flat.chunks(3)
        .map(|t| {
            let index: usize = redis::from_redis_value_ref(&t[0]).map_err(|_| bad("index"))?;
            let id: String = redis::from_redis_value_ref(&t[1]).map_err(|_| bad("entry id"))?;
            let task: String = redis::from_redis_value_ref(&t[2]).map_err(|_| bad("task"))?;
            let partition = *index.checked_sub(1).and_then(|i| parts.get(i)).ok_or_else(|| bad("index"))?;
            Ok(Entry { partition, id, task: (!task.is_empty()).then_some(task), doc: None })
        })
        .collect()
}

impl Entry {
    /// Where this entry is, as its claim carries it.
    fn receipt(&self) -> receipt::Receipt {
        receipt::Receipt { partition: self.partition, entry: self.id.clone() }
    }
}

fn is_nogroup(e: &RedisStoreError) -> bool {
    matches!(e, RedisStoreError::Redis(r) if r.code() == Some("NOGROUP"))
}
