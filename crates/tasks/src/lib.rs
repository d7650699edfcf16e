//! The Tasks extension (SEP-2663) as a pure state machine.
//!
//! - [`model`]: the task record every store keeps ([`Task`]), its [`Status`],
//!   the [`Scope`] that owns it and the [`Work`] it runs.
//! - [`reducer`]: [`apply`], the only way a task changes. Stores persist what
//!   it returns with a compare-and-set on [`Task::revision`].
//! - [`wire`]: the three wire projections (CreateTaskResult, DetailedTask,
//!   `notifications/tasks` params), and the `tasks/get` view ([`wire::GetView`]),
//!   which can be read from a stored document without building the whole task.
//! - [`id`]: task ids that name their partition.
//!
//! Invariants upheld here and tested exhaustively:
//! - `completed`, `failed` and `cancelled` are terminal: every event on them is a no-op;
//! - an input key is issued at most once per task lifetime (re-issuing the
//!   identical request while it is outstanding is idempotent);
//! - every change bumps `revision` by exactly one;
//! - a projection carries exactly the one payload its status allows.
//!
//! No IO, no clock: callers pass `now_ms`.

pub mod id;
pub mod model;
pub mod reducer;
pub mod wire;

pub use id::TaskId;
pub use model::{
    Caller, FailedTry, MAX_TRIES_KEPT, NewTask, Retries, Scope, Status, StatusChange, Task, Work, json_len,
};
pub use reducer::{Event, ReduceError, apply, claim};
