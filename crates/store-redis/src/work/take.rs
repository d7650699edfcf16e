//! Taking delivered entries: claiming them up to the claim's room (see
//! `attempt.rs` for the scripts), holding those of scopes without room,
//! handing back the rest, and dropping the work of tasks that are over.

use std::time::Duration;

use futures::future::join_all;
use presa_store::{Claim, Shares, TaskId};
use redis::Value;

use super::{
    Entry,
    attempt::{Claimed, Pending},
};
use super::{Queue, claim::Claimant};
use crate::{
    conn::Verbosity,
    error::RedisStoreError,
    keys::{GROUP, held_consumer},
};

impl Queue {
    /// Claim delivered entries until `out` holds `max`; hand back the rest
    /// (and, after an error, everything not claimed, so nothing waits for H).
    ///
    /// The docs of every entry to claim that the read did not bring along
    /// are read together (concurrent `GET`s, pipelined on the shared
    /// connection), then one
    /// `claim_batch.lua` claims them all (standalone) or each partition's
    /// (cluster, concurrently). Only an entry whose task moved between the
    /// read and the script goes through the one-by-one `claim.lua` loop, from
    /// the doc the script returned.
    pub(super) async fn take(
        &self,
        who: Claimant<'_>,
        entries: Vec<Entry>,
        max: usize,
        shares: &mut Shares,
        out: &mut Vec<Claim>,
    ) -> Result<(), RedisStoreError> {
        let Claimant { worker, lease } = who;
        let room = max.saturating_sub(out.len());
        let mut entries = entries;
        let over = entries.split_off(room.min(entries.len()));
        for e in &over {
            // Over-delivered: give it back untouched.
            if let Err(err) = self.requeue(worker, e).await {
                tracing::warn!(error = %err, entry = %e.id, "could not hand back an entry; it is recovered after max_lease");
            }
        }
        let failure = match self.claim_entries(worker, entries, lease, shares, out).await {
            Ok(()) => return Ok(()),
            Err(err) => err,
        };
        if out.is_empty() {
            return Err(failure);
        }
        // What was claimed stays claimed and is returned.
        tracing::warn!(error = %failure, "claim interrupted");
        Ok(())
    }

    /// Claim `entries` into `out` (see [`take`](Self::take)), holding those
    /// of scopes without room in `shares` instead (see [`hold`](Self::hold));
    /// on an error, every entry not claimed, held or dropped is handed back first.
    pub(super) async fn claim_entries(
        &self,
        worker: &str,
        entries: Vec<Entry>,
        lease: Duration,
        shares: &mut Shares,
        out: &mut Vec<Claim>,
    ) -> Result<(), RedisStoreError> {
        let mut located = self.locate_entries(entries).await?;
        let docs = match self.read_docs(&mut located).await {
            Ok(docs) => docs,
            Err(err) => {
                self.requeue_all(worker, located.iter().map(|(e, _, _)| e)).await;
                return Err(err);
            }
        };
        // The reducer records each claim (the fence moves, `updated_at` too).
        let mut batch = Vec::with_capacity(located.len());
        let mut held = Vec::new();
        let mut failure = None;
        for ((e, id, key), doc) in located.into_iter().zip(docs) {
            if failure.is_some() {
                let _ = self.requeue(worker, &e).await;
                continue;
            }
            match self.next_claimed(worker, &e, &id, doc.as_deref()).await {
                Ok(Some((_, next))) if !shares.take(&next.scope) => held.push((e, held_consumer(&next.scope))),
                Ok(Some((expected, next))) => batch.push(Pending { entry: e, id, key, expected, next }),
                Ok(None) => {}
                Err(err) => {
                    let _ = self.requeue(worker, &e).await;
                    failure = Some(err);
                }
            }
        }
        self.hold(held).await;
        if let Some(err) = failure {
            self.requeue_all(worker, batch.iter().map(|p| &p.entry)).await;
            return Err(err);
        }
        let groups = self.link.topology.script_groups(batch, |p| p.entry.partition);
        let replies = join_all(groups.iter().map(|g| self.claim_batch(worker, g, lease))).await;
        let mut retry = Vec::new();
        for (group, reply) in groups.into_iter().zip(replies) {
            let reply = match reply {
                Ok(r) => r,
                Err(err) => {
                    self.requeue_all(worker, group.iter().map(|p| &p.entry)).await;
                    failure = Some(err);
                    continue;
                }
            };
            for (p, r) in group.into_iter().zip(reply) {
                match r {
                    Claimed::Yes => out.push(Claim {
                        deliveries: p.next.deliveries(),
                        receipt: p.entry.receipt().to_string(),
                        task: p.next,
                    }),
                    Claimed::Dropped => {}
                    Claimed::Moved(doc) => retry.push((p, doc)),
                }
            }
        }
        for (p, doc) in retry {
            if failure.is_some() {
                let _ = self.requeue(worker, &p.entry).await;
                continue;
            }
            // Boxed: the rare path (a task that moved) would otherwise make
            // every claim's future kilobytes larger.
            match Box::pin(self.claim_entry(worker, &p, doc, lease)).await {
                Ok(Some(c)) => out.push(c),
                Ok(None) => {}
                Err(err) => {
                    let _ = self.requeue(worker, &p.entry).await;
                    failure = Some(err);
                }
            }
        }
        failure.map_or(Ok(()), Err)
    }

    /// Each entry with its task's id and key; an entry naming no task of its
    /// partition is dropped (acknowledged).
    async fn locate_entries(&self, entries: Vec<Entry>) -> Result<Vec<(Entry, TaskId, String)>, RedisStoreError> {
        let keys = &self.link.keys;
        let mut located = Vec::with_capacity(entries.len());
        for e in entries {
            let id = e.task.as_deref().map(TaskId::from_wire);
            let key = id
                .as_ref()
                .and_then(|id| (keys.partition_of(id) == Some(e.partition)).then(|| keys.task(id)).flatten());
            match (id, key) {
                (Some(id), Some(key)) => located.push((e, id, key)),
                _ => {
                    tracing::warn!(entry = %e.id, "work entry names no task of its partition; dropped");
                    self.ack(e.partition, &e.id).await?;
                }
            }
        }
        Ok(located)
    }

    /// The task docs of `located`: those the read brought along, the others read now.
    async fn read_docs(&self, located: &mut [(Entry, TaskId, String)]) -> Result<Vec<Option<String>>, RedisStoreError> {
        let fetched: Vec<_> = located.iter_mut().map(|(e, _, _)| e.doc.take()).collect();
        let reads = located.iter().zip(fetched).map(|((_, _, key), fetched)| async move {
            if let Some(doc) = fetched {
                return Ok(doc);
            }
            self.records.read_doc_text(key).await
        });
        join_all(reads).await.into_iter().collect()
    }

    /// Hand entries back (best effort: one that fails is recovered after H).
    pub(super) async fn requeue_all<'e>(&self, worker: &str, entries: impl Iterator<Item = &'e Entry>) {
        for e in entries {
            let _ = self.requeue(worker, e).await;
        }
    }
    /// Hold delivered entries this claim has no room for: each goes to its
    /// scope's held consumer (`XCLAIM … JUSTID`, one command per partition
    /// and scope), unclaimed, keeping its id; `unhold.lua` hands it to a
    /// worker with room. Best effort: an entry that fails to move stays with
    /// this worker and is recovered one lease later.
    pub(super) async fn hold(&self, entries: Vec<(Entry, String)>) {
        let mut groups: Vec<(u16, String, Vec<String>)> = Vec::new();
        for (e, consumer) in entries {
            match groups.iter_mut().find(|(p, c, _)| *p == e.partition && *c == consumer) {
                Some((_, _, ids)) => ids.push(e.id),
                None => groups.push((e.partition, consumer, vec![e.id])),
            }
        }
        for (partition, consumer, ids) in groups {
            let cmd = redis::cmd("XCLAIM")
                .arg(self.link.keys.work(partition))
                .arg(GROUP)
                .arg(&consumer)
                .arg(0)
                .arg(&ids)
                .arg("JUSTID")
                .to_owned();
            if let Err(e) = self.link.query::<Value>(Verbosity::Debug, &cmd).await {
                tracing::warn!(error = %e, held = ids.len(), "could not hold work; it is recovered after a lease");
            }
        }
    }
    /// Make an entry this consumer holds (but never claimed) recoverable at once.
    pub(super) async fn requeue(&self, worker: &str, e: &Entry) -> Result<(), RedisStoreError> {
        let cmd = redis::cmd("XCLAIM")
            .arg(self.link.keys.work(e.partition))
            .arg(GROUP)
            .arg(worker)
            .arg(0)
            .arg(&e.id)
            .arg("TIME")
            .arg(0)
            .arg("JUSTID")
            .to_owned();
        self.link.query::<Value>(Verbosity::Info, &cmd).await?;
        Ok(())
    }

    pub(super) async fn ack(&self, partition: u16, entry: &str) -> Result<(), RedisStoreError> {
        let mut inv = super::ACK.prepare_invoke();
        inv.key(self.link.keys.work(partition)).arg(GROUP).arg(entry);
        self.link.invoke::<i64>(&inv).await.map(|_| ())
    }
}
