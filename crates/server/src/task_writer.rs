//! [`TaskWriter`]: the one read-modify-write of a task. Load (or start
//! from a guess), reduce, compare-and-set (a worker's last write as
//! `WorkQueue::conclude`, which removes the work of a write that ends the
//! task, or for a poison task `WorkQueue::conclude_dead`, which records its
//! dead letter too, or for a try put off, `Event::Defer`, `WorkQueue::defer`,
//! which moves its work to the delayed work), retry from the task the refusal returned. The reducer
//! decides; the store only persists with a CAS. Conflicts (a concurrent
//! `tasks/update`, a cancel) are retried on the fresh record; a worker
//! whose claim was superseded stops (`Fenced`). A worker's write also waits
//! out a store that is briefly unavailable (a Redis restart, a failover)
//! for up to a lease instead of failing the task or dropping its outcome
//! ([`TaskWriter::write_patiently`]).

use std::time::Duration;

use presa_store::{Cas, Claim, StoreError, TaskId, TaskRef, TaskStore, WorkQueue, Writer, util::now_ms};
use presa_tasks::{Event, Task, apply};
use presa_telemetry::metrics;

use crate::store_io::store_call;

/// The outcome of a [`TaskWriter`]'s write.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Updated {
    /// The event changed the task; this is the stored result.
    Applied(Task),
    /// The event changed nothing (terminal task, unknown input keys…).
    Unchanged(Task),
    /// The task no longer exists (expired or never did).
    Gone,
    /// The writer is a worker whose claim was taken over.
    Fenced,
}

/// Why an update failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpdateError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The event is invalid for this task (a reused input key…).
    #[error(transparent)]
    Reduce(#[from] presa_tasks::ReduceError),
    /// The event would make the stored task larger than its byte limit.
    #[error("the task would be {bytes} bytes, more than the {limit}-byte limit (max_task_bytes)")]
    TooLarge {
        /// The task's size with the event applied.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// Too many concurrent writers.
    #[error("task {0} is contended; gave up after {1} attempts")]
    Contended(TaskId, usize),
}

const MAX_ATTEMPTS: usize = 32;

/// A worker's last write ([`TaskWriter::concluding`]).
#[derive(Clone, Copy)]
pub(crate) struct Concluding<'a> {
    /// The queue the claim is of.
    pub(crate) queue: &'a dyn WorkQueue,
    /// The claim the write ends.
    pub(crate) claim: &'a Claim,
    /// For a poison task: why it died, recorded in its dead letter with the write.
    pub(crate) dead: Option<&'a str>,
}

/// What a write may grow a task to ([`TaskWriter::new`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WriteLimits {
    /// The task, serialised, at most (a task already past it may still
    /// shrink or finish).
    pub(crate) max_task_bytes: usize,
    /// Its scope's byte quota, which a client's write may not grow the
    /// scope's tasks past ([`TaskStore::transition_within`]).
    pub(crate) max_bytes_per_scope: Option<u64>,
}

impl WriteLimits {
    /// No limit.
    #[cfg(test)]
    pub(crate) const NONE: WriteLimits = WriteLimits { max_task_bytes: usize::MAX, max_bytes_per_scope: None };

    /// Only the task's own size is bounded (a worker's write: the scope's
    /// quota counts it but never refuses it).
    pub(crate) fn task(max_task_bytes: usize) -> WriteLimits {
        WriteLimits { max_task_bytes, max_bytes_per_scope: None }
    }
}

/// Who writes a task, to which store, within what, from which guess: the
/// arguments every write of a task shares, given once.
#[derive(Clone)]
pub(crate) struct TaskWriter<'a> {
    store: &'a dyn TaskStore,
    writer: Writer,
    limits: WriteLimits,
    guess: Option<&'a Task>,
    concluding: Option<Concluding<'a>>,
}

impl<'a> TaskWriter<'a> {
    /// Writes to `store` as `writer`, within `limits`.
    pub(crate) fn new(store: &'a dyn TaskStore, writer: Writer, limits: WriteLimits) -> Self {
        TaskWriter { store, writer, limits, guess: None, concluding: None }
    }

    /// Try `guess` (the task as the writer last saw it) before loading it.
    pub(crate) fn guessing(mut self, guess: Option<&'a Task>) -> Self {
        self.guess = guess;
        self
    }

    /// A worker's last write under a claim (see [`Concluding`]).
    pub(crate) fn concluding(mut self, concluding: Option<Concluding<'a>>) -> Self {
        self.concluding = concluding;
        self
    }

    /// Apply `event` to task `id`, retrying on CAS conflicts, and refusing
    /// an event that would grow the stored task past the writer's limits.
    ///
    /// `guess`: the task as the writer last saw it ([`guessing`](Self::guessing)) (a worker's claim), tried
    /// first instead of loading it: when nothing changed it since, the write
    /// costs one round trip. Only a successful compare-and-set is taken from a
    /// guess (it proves the guess was current); any other decision is made
    /// again on the stored task. A refused write answers with the stored task,
    /// which the next attempt starts from.
    ///
    /// The writer's claim, for a worker's last write ([`concluding`](Self::concluding)): it is made
    /// with [`WorkQueue::conclude`], so an `Applied` write that ends the task has
    /// removed the claim's work too; for a poison task with
    /// [`WorkQueue::conclude_dead`], which also records its dead letter.
    pub(crate) async fn write(&self, id: &TaskId, event: &Event) -> Result<Updated, UpdateError> {
        self.write_from(id, event, self.guess).await
    }

    /// [`write`](Self::write) for a worker holding a claim: a retryable
    /// store failure (unavailable, out of memory) is retried with backoff
    /// (50 ms doubling to 1 s) for up to `patience`, normally the lease.
    /// Retrying is safe: the write is a fenced compare-and-set of a reduced
    /// event, so one that landed before its reply was lost is `Unchanged`
    /// (or re-applied identically) the second time, and a claim that lapsed
    /// meanwhile is `Fenced`. A concluding write starts each try from the
    /// task as claimed (its guess).
    pub(crate) async fn write_patiently(
        &self,
        id: &TaskId,
        event: &Event,
        patience: Duration,
    ) -> Result<Updated, UpdateError> {
        let deadline = tokio::time::Instant::now() + patience;
        const FIRST_PAUSE: Duration = Duration::from_millis(50);
        let mut pause = FIRST_PAUSE;
        loop {
            let guess = self.concluding.map(|c| &c.claim.task);
            // Only the error is kept across the pause (a match over the
            // write's answer would keep the whole answer, a task, in this
            // future's state while it sleeps).
            let e = match self.write_from(id, event, guess).await {
                Err(UpdateError::Store(e)) if e.is_retryable() && tokio::time::Instant::now() + pause < deadline => e,
                other => return other,
            };
            if pause == FIRST_PAUSE {
                tracing::info!(error = %e, "store unavailable; retrying the task write for up to a lease");
            }
            drop(e);
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// One write, starting from `guess` when there is one: borrowed, as the
    /// reducer only reads it (a worker's guess is its claim's task, which a
    /// copy per write would only clone and drop).
    ///
    /// What this future holds across its awaits is every worker run's too
    /// (copied whole when the run is spawned), so the tasks it holds are
    /// boxed, and each try's decision is made by [`decide`](Self::decide),
    /// whose locals live on the stack, not in the future.
    async fn write_from(&self, id: &TaskId, event: &Event, guess: Option<&Task>) -> Result<Updated, UpdateError> {
        let (mut known, mut guessed) = (guess.map(TaskRef::Borrowed), true);
        for _ in 0..MAX_ATTEMPTS {
            let task = match known.take() {
                Some(task) => task,
                None => {
                    guessed = false;
                    match store_call("load", self.store.load(id)).await? {
                        Some(task) => TaskRef::Boxed(Box::new(task)),
                        None => return Ok(Updated::Gone),
                    }
                }
            };
            let (next, before) = match self.decide(task, event, guessed) {
                Decision::Write(next, before) => (next, before),
                Decision::Again => {
                    // Decided on a guess: decide again on the stored task.
                    guessed = false;
                    continue;
                }
                Decision::Done(done) => return *done,
            };
            // `next` is given to the write or dropped with this match (not
            // held across the pause below).
            let write = match (self.concluding, next) {
                (Some(Concluding { queue, claim, .. }), next)
                    if matches!(event, Event::Defer { .. } | Event::Wait { .. }) =>
                {
                    let due_at_ms = next.retries.due_at_ms.unwrap_or_default();
                    store_call("defer", queue.defer(&next, claim, due_at_ms)).await
                }
                (Some(Concluding { queue, claim, dead: Some(reason) }), next) => {
                    store_call("conclude_dead", queue.conclude_dead(&next, claim, reason)).await
                }
                // The task is not needed after a concluding write: the store
                // answers with it rather than a copy.
                (Some(Concluding { queue, claim, dead: None }), next) => {
                    store_call("conclude", queue.conclude_owned(next, claim)).await
                }
                (None, next) => {
                    let within = self.limits.max_bytes_per_scope;
                    store_call("transition", self.store.transition_within(&next, self.writer, within)).await
                }
            };
            let current = match write? {
                Cas::Applied(stored) => {
                    if stored.status != before {
                        metrics::task_transition(stored.status.as_str());
                    }
                    return Ok(Updated::Applied(stored));
                }
                Cas::Conflict(current) => current,
            };
            // The stored task as the refusal found it (`None`: gone or
            // unreadable there; loaded again to tell).
            (known, guessed) = (current.map(|t| TaskRef::Boxed(Box::new(t))), false);
            tokio::task::yield_now().await;
        }
        Err(UpdateError::Contended(id.clone(), MAX_ATTEMPTS))
    }

    /// What one try of [`write_from`](Self::write_from) does with `task`
    /// (`guessed`: the writer's guess, not read from the store): write the
    /// reduced task (and the status it had), decide again on the stored
    /// task, or answer.
    fn decide(&self, task: TaskRef<'_>, event: &Event, guessed: bool) -> Decision {
        let (writer, max_bytes) = (self.writer, self.limits.max_task_bytes);
        let size = |t: &Task| presa_tasks::json_len(t);
        let too_large = |next: &Task| {
            max_bytes < usize::MAX && {
                let bytes = size(next);
                bytes > max_bytes && bytes > size(&task)
            }
        };
        let applied = if writer.fence_holds(&task) { apply(&task, event, now_ms()) } else { Ok(None) };
        Decision::Done(Box::new(match applied {
            Ok(Some(next)) if !too_large(&next) => return Decision::Write(Box::new(next), task.status),
            _ if guessed => return Decision::Again,
            Err(e) => Err(e.into()),
            Ok(_) if !writer.fence_holds(&task) => Ok(Updated::Fenced),
            Ok(None) => Ok(Updated::Unchanged(task.into_owned())),
            Ok(Some(next)) => Err(UpdateError::TooLarge { bytes: size(&next), limit: max_bytes }),
        }))
    }
}

/// What [`TaskWriter::decide`] made of a try.
enum Decision {
    /// Write this task (boxed: it is held across the write's await); the
    /// status is the one it had before.
    Write(Box<Task>, presa_tasks::Status),
    /// The guess decided something other than a write: decide again on
    /// the stored task.
    Again,
    /// The write's answer (boxed: taken on the rare paths only, and a task
    /// inline would make every decision as large as one).
    Done(Box<Result<Updated, UpdateError>>),
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use presa_store::{CreateLimits, NewTask, Scope, memory::MemoryStore};
    use presa_tasks::Work;
    use serde_json::json;

    use super::*;

    /// Apply `event` to task `id` as `writer`, retrying on CAS conflicts.
    async fn update_task(
        store: &dyn TaskStore,
        id: &TaskId,
        writer: Writer,
        event: &Event,
    ) -> Result<Updated, UpdateError> {
        TaskWriter::new(store, writer, WriteLimits::NONE).write(id, event).await
    }

    /// Apply `event` from `guess`, within `limits`.
    async fn update_task_within(
        store: &dyn TaskStore,
        (id, writer): (&TaskId, Writer),
        event: &Event,
        limits: WriteLimits,
        guess: Option<Task>,
    ) -> Result<Updated, UpdateError> {
        TaskWriter::new(store, writer, limits).guessing(guess.as_ref()).write(id, event).await
    }

    /// A store holding one claimed task (of a tool named `echo`).
    pub(crate) async fn claimed() -> (MemoryStore, Claim) {
        let store = MemoryStore::new();
        let new = NewTask {
            scope: Scope::anonymous(),
            work: Work { tool: "echo".into(), ..Work::default() },
            ttl_ms: Some(60_000),
            poll_interval_ms: None,
            status_message: None,
        };
        store.create(new, CreateLimits::NONE).await.expect("create");
        let mut claims = store.claim("w1", 1, Duration::from_secs(30), Duration::from_secs(5)).await.expect("claim");
        (store, claims.pop().expect("one claim"))
    }

    fn done() -> Event {
        Event::Complete(json!({"content": [], "isError": false}))
    }

    /// A write's future does not grow back: every byte of it is in every
    /// worker run's future, which is copied whole when it is spawned (it
    /// was 4,496 bytes with the task and the refusal's answer held across
    /// the write's await; 3,944 without; with its tasks boxed and each
    /// try decided outside the future, under 1 KB).
    #[tokio::test]
    async fn a_write_holds_few_tasks_across_its_awaits() {
        let (store, claim) = claimed().await;
        let writer = TaskWriter::new(&store, claim.writer(), WriteLimits::NONE);
        let event = done();
        let write = writer.write_from(&claim.task.id, &event, Some(&claim.task));
        let size = size_of_val(&write);
        assert!(size < 1_024, "{size} bytes");
        assert!(matches!(write.await, Ok(Updated::Applied(_))));
    }

    #[tokio::test]
    async fn a_current_guess_is_written_as_is() {
        let (store, claim) = claimed().await;
        let (id, writer) = (&claim.task.id, claim.writer());
        let out = update_task_within(&store, (id, writer), &done(), WriteLimits::NONE, Some(claim.task.clone())).await;
        let Ok(Updated::Applied(t)) = out else { panic!("{out:?}") };
        assert_eq!((t.status, t.revision), (presa_tasks::Status::Completed, claim.task.revision + 1));
        assert_eq!(store.load(id).await.unwrap(), Some(t));
    }

    #[tokio::test]
    async fn a_stale_guess_is_written_over_what_is_stored() {
        let (store, claim) = claimed().await;
        let (id, writer) = (&claim.task.id, claim.writer());
        // The handler changed the task after the claim: the guess is stale.
        let said = Event::SetMessage("half way".into());
        update_task(&store, id, writer, &said).await.expect("message");
        let out = update_task_within(&store, (id, writer), &done(), WriteLimits::NONE, Some(claim.task.clone())).await;
        let Ok(Updated::Applied(t)) = out else { panic!("{out:?}") };
        assert_eq!(t.status, presa_tasks::Status::Completed);
        assert_eq!(t.revision, claim.task.revision + 2, "applied on the stored task, not the guess");
        assert_eq!(t.status_message.as_deref(), Some("half way"));
    }

    #[tokio::test]
    async fn a_guess_never_decides_anything_but_a_write() {
        // Cancelled by the client meanwhile: unchanged, as stored.
        let (store, claim) = claimed().await;
        let (id, writer) = (&claim.task.id, claim.writer());
        update_task(&store, id, Writer::Client, &Event::Cancel).await.expect("cancel");
        let out = update_task_within(&store, (id, writer), &done(), WriteLimits::NONE, Some(claim.task.clone())).await;
        let Ok(Updated::Unchanged(t)) = out else { panic!("{out:?}") };
        assert_eq!(t.status, presa_tasks::Status::Cancelled);

        // A guess the event does not change (already finished in the guess),
        // while the stored task is still running: the stored task decides.
        let (store, claim) = claimed().await;
        let (id, writer) = (&claim.task.id, claim.writer());
        let finished = apply(&claim.task, &done(), now_ms()).unwrap().expect("finishes");
        let out = update_task_within(
            &store,
            (id, writer),
            &Event::Fail(json!({"code": -1})),
            WriteLimits::NONE,
            Some(finished),
        )
        .await;
        let Ok(Updated::Applied(t)) = out else { panic!("{out:?}") };
        assert_eq!(t.status, presa_tasks::Status::Failed);

        // A guess over the byte limit, while the stored task is small enough.
        let (store, claim) = claimed().await;
        let (id, writer) = (&claim.task.id, claim.writer());
        let mut bloated = claim.task.clone();
        bloated.status_message = Some("x".repeat(10_000));
        let limit = serde_json::to_vec(&claim.task).unwrap().len() + 200;
        let out = update_task_within(&store, (id, writer), &done(), WriteLimits::task(limit), Some(bloated)).await;
        assert!(matches!(out, Ok(Updated::Applied(_))), "{out:?}");

        // Taken over by another worker: fenced; and gone: gone.
        let (store, claim) = claimed().await;
        let id = &claim.task.id;
        let stale = Writer::Worker { attempt: claim.task.attempt - 1 };
        let out = update_task_within(&store, (id, stale), &done(), WriteLimits::NONE, Some(claim.task.clone())).await;
        assert!(matches!(out, Ok(Updated::Fenced)), "{out:?}");
        let gone = MemoryStore::new();
        let out =
            update_task_within(&gone, (id, claim.writer()), &done(), WriteLimits::NONE, Some(claim.task.clone())).await;
        assert!(matches!(out, Ok(Updated::Gone)), "{out:?}");
    }
}
