//! A running task's view of its own record through the store's watch: the
//! snapshots it publishes, each newer than the last one seen. The lease
//! keeper (`worker/lease.rs`) and a handler parked on input
//! (`context/inputs.rs`) both decide on them, falling back on re-reads of
//! their own on a timer.

use futures::StreamExt;
use presa_store::TaskStream;
use presa_tasks::Task;

/// The snapshots of one task newer than the last one seen.
pub(crate) struct Snapshots {
    changes: TaskStream,
    seen: u64,
}

impl Snapshots {
    /// Snapshots from `changes` (the store's watch of one task), skipping
    /// those no newer than revision `seen`.
    pub(crate) fn new(changes: TaskStream, seen: u64) -> Self {
        Snapshots { changes, seen }
    }

    /// A re-read found revision `revision`: older snapshots are skipped.
    pub(crate) fn saw(&mut self, revision: u64) {
        self.seen = self.seen.max(revision);
    }

    /// The next snapshot newer than any seen. A published snapshot was
    /// committed, so it decides like a read, without the round trip. One no
    /// newer than what was last seen (published before a read, e.g. by the
    /// claim itself, yet delivered after) is skipped: taken, a snapshot of an
    /// earlier attempt would fence the run out. Once the watch has ended this
    /// never resolves, and the caller's timer takes over. Cancel-safe.
    pub(crate) async fn next(&mut self) -> Task {
        loop {
            match self.changes.next().await {
                Some(task) if task.revision > self.seen => {
                    self.seen = task.revision;
                    return task;
                }
                Some(_) => {}
                None => std::future::pending::<()>().await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::{FutureExt, StreamExt, stream};
    use presa_store::{NewTask, Scope};
    use presa_tasks::{TaskId, Work};

    use super::*;

    #[tokio::test]
    async fn only_newer_snapshots_come_out_and_an_ended_watch_stays_silent() {
        let new = NewTask {
            scope: Scope::anonymous(),
            work: Work::default(),
            ttl_ms: None,
            poll_interval_ms: None,
            status_message: None,
        };
        let task = Task::new(TaskId::from_wire("t1"), new, 0);
        let at = |revision| Task { revision, ..task.clone() };
        let changes = stream::iter([at(3), at(2), at(5), at(4)]).boxed();
        let mut snapshots = Snapshots::new(changes, 2);
        assert_eq!(snapshots.next().await.revision, 3);
        snapshots.saw(4);
        assert_eq!(snapshots.next().await.revision, 5, "2 and 4 are no newer than what was seen");
        assert!(snapshots.next().now_or_never().is_none(), "an ended watch never resolves");
    }
}
