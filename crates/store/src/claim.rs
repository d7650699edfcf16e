//! What a write and a claim are made of: who writes ([`Writer`], with the
//! fence a worker holds), what a compare-and-set answered ([`Cas`]), a
//! unit of claimed work ([`Claim`]) and a partition's work queue for
//! metrics ([`PartitionStats`]).

use presa_tasks::Task;

/// The outcome of a compare-and-set.
#[derive(Debug, Clone, PartialEq)]
pub enum Cas {
    /// Written; the stored task is now this.
    Applied(Task),
    /// Refused: the stored task (if it still exists) differs from what the
    /// writer expected (revision, fence, or already terminal).
    Conflict(Option<Task>),
}

/// Who writes a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer {
    /// An API request on behalf of the owner (`tasks/update`, `tasks/cancel`).
    Client,
    /// A worker holding the claim with this attempt number.
    Worker {
        /// The fencing attempt the worker claimed.
        attempt: u64,
    },
}

/// A claimed unit of work: run `task.work`, then `finish` or `release` it.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    /// The task as stored right after the claim (with the bumped `attempt`).
    pub task: Task,
    /// How many times this work has been delivered, this delivery included.
    pub deliveries: u64,
    /// Backend-specific handle of the work item (a stream entry id for Redis).
    pub receipt: String,
}

impl Writer {
    /// Whether this writer's fence still holds on `task`: always for the
    /// client; for a worker, while the stored attempt is the one it claimed.
    pub fn fence_holds(&self, task: &Task) -> bool {
        match self {
            Writer::Client => true,
            Writer::Worker { attempt } => *attempt == task.attempt,
        }
    }

    /// Whether work running under this writer may go on with `task`: it is
    /// not terminal and the fence holds. Work that may not stops at once;
    /// whoever ended it (a cancel, the worker that took over) owns the outcome.
    pub fn may_continue(&self, task: &Task) -> bool {
        !task.status.is_terminal() && self.fence_holds(task)
    }
}

impl Claim {
    /// The fencing token of this claim.
    pub fn writer(&self) -> Writer {
        Writer::Worker { attempt: self.task.attempt }
    }
}

/// The work queue of one partition, for metrics ([`WorkQueue::work_stats`](crate::WorkQueue::work_stats)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PartitionStats {
    /// The partition (the `pNN` a task id names).
    pub partition: u16,
    /// Work items waiting for a worker (never claimed, or handed back).
    pub queued: u64,
    /// Work items delivered to a worker and not finished yet (running,
    /// parked on input, or with a lapsed lease awaiting recovery).
    pub pending: u64,
    /// Milliseconds since the oldest pending item was enqueued; `None` when
    /// nothing is pending.
    pub oldest_pending_age_ms: Option<u64>,
    /// Milliseconds since the oldest queued item (waiting for a worker) was
    /// enqueued; `None` when nothing is queued.
    pub oldest_queued_age_ms: Option<u64>,
    /// Work items put off until a time ([`WorkQueue::defer`](crate::WorkQueue::defer)), due or not.
    pub delayed: u64,
    /// Milliseconds since the earliest waiting item came due (how late it
    /// is); `None` when none is due yet.
    pub oldest_due_age_ms: Option<u64>,
}

/// A task either borrowed or boxed: a pointer either way, so a future that
/// holds one across an await stays small (a `Cow<Task>` would hold an owned
/// task inline, about 720 bytes). The Redis store's writes take one (a
/// worker's last write gives its task up, and an applied write answers with
/// it instead of a copy), and the server's `TaskWriter` keeps its guess
/// (borrowed) or the stored task (boxed) in one.
#[derive(Debug)]
pub enum TaskRef<'a> {
    /// The caller's task: an owned one is a copy.
    Borrowed(&'a Task),
    /// Given up: the owned one is itself.
    Boxed(Box<Task>),
}

impl TaskRef<'_> {
    /// The task, owned (a copy only when borrowed).
    #[must_use]
    pub fn into_owned(self) -> Task {
        match self {
            TaskRef::Borrowed(task) => task.clone(),
            TaskRef::Boxed(task) => *task,
        }
    }
}

impl std::ops::Deref for TaskRef<'_> {
    type Target = Task;

    fn deref(&self) -> &Task {
        match self {
            TaskRef::Borrowed(task) => task,
            TaskRef::Boxed(task) => task,
        }
    }
}

impl<'a> From<&'a Task> for TaskRef<'a> {
    fn from(task: &'a Task) -> Self {
        TaskRef::Borrowed(task)
    }
}

impl From<Box<Task>> for TaskRef<'_> {
    fn from(task: Box<Task>) -> Self {
        TaskRef::Boxed(task)
    }
}
