//! Following tasks to the end.
//!
//! [`follow`] starts a background loop that sends a [`FollowEvent`] for every
//! change of the watched tasks until each of them is terminal:
//!
//! 1. one `tasks/get` per task, so the caller sees the state at once;
//! 2. `subscriptions/listen` for the tasks still running, each
//!    `notifications/tasks` becoming a snapshot;
//! 3. when the stream ends or breaks (a pod going away, a proxy timeout): one
//!    round of `tasks/get` to catch up, a pause of `pollIntervalMs`, then a new
//!    subscription;
//! 4. when the server does not offer `subscriptions/listen` (`-32601`, HTTP
//!    404/405), or more than 100 tasks are watched: `tasks/get` every
//!    `pollIntervalMs`.
//!
//! A stream that stays silent for [`QUIET_CHECK`] is checked with a round of
//! `tasks/get` (a half-open connection never says it broke). When no request
//! succeeds for [`GIVE_UP_AFTER`] the loop ends with the last error.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use futures::StreamExt;
use tokio::{sync::mpsc, task::JoinHandle};

use crate::{client::Client, error::Error, sse::Messages, task::Task};

/// How long a silent stream is trusted before a round of `tasks/get`.
pub const QUIET_CHECK: Duration = Duration::from_secs(30);
/// How long the server may stay unreachable before following gives up.
pub const GIVE_UP_AFTER: Duration = Duration::from_secs(60);
/// The most task ids one `subscriptions/listen` may carry.
pub const MAX_LISTEN_IDS: usize = 100;

/// What the follower reports.
#[derive(Debug, Clone)]
pub enum FollowEvent {
    /// A task changed (or was seen for the first time).
    Snapshot(Task),
    /// How the tasks are followed changed: subscribed, the stream broke,
    /// polling. For a verbose display; never needed for correctness.
    Transport(String),
}

/// How to follow.
#[derive(Debug, Clone, Copy)]
pub struct FollowOptions {
    /// Use `subscriptions/listen` (else only poll).
    pub listen: bool,
}

impl Default for FollowOptions {
    fn default() -> Self {
        FollowOptions { listen: true }
    }
}

/// A running follower: receive its events with [`Following::next`]; dropping
/// it stops the loop.
#[derive(Debug)]
pub struct Following {
    rx: mpsc::Receiver<Result<FollowEvent, Error>>,
    handle: JoinHandle<()>,
}

impl Following {
    /// The next event; `None` once every task is terminal (or after an error).
    pub async fn next(&mut self) -> Option<Result<FollowEvent, Error>> {
        self.rx.recv().await
    }
}

impl Drop for Following {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// Follow the tasks `ids` (see the module docs).
pub fn follow(client: Client, ids: Vec<String>, options: FollowOptions) -> Following {
    let (tx, rx) = mpsc::channel(64);
    let follower = Follower { client, tx, pending: dedup(ids), last: HashMap::new(), last_ok: Instant::now() };
    let handle = tokio::spawn(follower.run(options));
    Following { rx, handle }
}

fn dedup(ids: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for id in ids {
        if !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

/// Whether `e` says the server has no `subscriptions/listen`.
fn listen_unsupported(e: &Error) -> bool {
    matches!(e, Error::Rpc { code: -32601, .. } | Error::Http { status: 404 | 405, .. })
}

enum StreamEnd {
    AllDone,
    Closed(String),
    Unsupported(Error),
}

struct Follower {
    client: Client,
    tx: mpsc::Sender<Result<FollowEvent, Error>>,
    /// Not yet terminal, in the caller's order.
    pending: Vec<String>,
    last: HashMap<String, Task>,
    last_ok: Instant,
}

/// The receiver is gone: stop.
struct Gone;

impl Follower {
    async fn run(mut self, options: FollowOptions) {
        let _ = self.run_inner(options).await;
    }

    async fn run_inner(&mut self, options: FollowOptions) -> Result<(), Gone> {
        // 1. The current state of every task; an unknown task ends it all.
        if let Err(e) = self.poll_round().await? {
            self.send(Err(e)).await?;
            return Ok(());
        }
        let mut listen = options.listen;
        while !self.pending.is_empty() {
            if listen && self.pending.len() > MAX_LISTEN_IDS {
                self.note(format!("{} tasks are more than one subscription holds; polling", self.pending.len()))
                    .await?;
                listen = false;
            }
            if listen {
                match self.client.listen(&self.pending).await {
                    Ok(stream) => {
                        self.last_ok = Instant::now();
                        self.note("subscribed to task notifications (subscriptions/listen)").await?;
                        match self.consume(stream).await? {
                            StreamEnd::AllDone => return Ok(()),
                            StreamEnd::Closed(why) => self.note(format!("{why}; re-subscribing")).await?,
                            StreamEnd::Unsupported(e) => {
                                self.note(format!("the server does not offer subscriptions/listen ({e}); polling"))
                                    .await?;
                                listen = false;
                            }
                        }
                    }
                    Err(e) if listen_unsupported(&e) => {
                        self.note(format!("the server does not offer subscriptions/listen ({e}); polling")).await?;
                        listen = false;
                    }
                    Err(e) => self.note(format!("could not subscribe ({e}); polling, then re-subscribing")).await?,
                }
            }
            // Catch up (or poll), then wait before the next round or subscription.
            if let Err(e) = self.poll_round().await? {
                if !e.is_connection() || self.last_ok.elapsed() > GIVE_UP_AFTER {
                    self.send(Err(e)).await?;
                    return Ok(());
                }
                self.note(format!("{e}; retrying")).await?;
            }
            if self.pending.is_empty() {
                break;
            }
            self.pause().await?;
        }
        Ok(())
    }

    /// Read a subscription until every task is terminal or the stream ends.
    async fn consume(&mut self, mut stream: Messages) -> Result<StreamEnd, Gone> {
        loop {
            let next = tokio::select! {
                n = tokio::time::timeout(QUIET_CHECK, stream.next()) => n,
                () = self.tx.closed() => return Err(Gone),
            };
            let message = match next {
                Err(_quiet) => {
                    // A silent stream: check the tasks, keep listening.
                    if let Err(e) = self.poll_round().await? {
                        return Ok(StreamEnd::Closed(format!("the stream is silent and tasks/get failed ({e})")));
                    }
                    if self.pending.is_empty() {
                        return Ok(StreamEnd::AllDone);
                    }
                    continue;
                }
                Ok(None) => return Ok(StreamEnd::Closed("the notification stream ended".into())),
                Ok(Some(Err(e))) => return Ok(StreamEnd::Closed(format!("the notification stream broke ({e})"))),
                Ok(Some(Ok(m))) => m,
            };
            self.last_ok = Instant::now();
            if let Some(err) = message.get("error") {
                let e = Error::Rpc {
                    code: err["code"].as_i64().unwrap_or(0),
                    message: err["message"].as_str().unwrap_or_default().to_string(),
                    data: err.get("data").cloned(),
                };
                return Ok(if listen_unsupported(&e) {
                    StreamEnd::Unsupported(e)
                } else {
                    StreamEnd::Closed(format!("the server ended the subscription ({e})"))
                });
            }
            if message.get("result").is_some() {
                return Ok(StreamEnd::Closed("the server closed the notification stream".into()));
            }
            if message["method"] == "notifications/tasks"
                && let Ok(task) = Task::from_value(message["params"].clone())
                && self.pending.iter().any(|p| p == task.id())
            {
                self.emit(task).await?;
                if self.pending.is_empty() {
                    return Ok(StreamEnd::AllDone);
                }
            }
        }
    }

    /// One `tasks/get` per pending task. The outer result is whether the
    /// caller still listens; the inner one the first request error.
    async fn poll_round(&mut self) -> Result<Result<(), Error>, Gone> {
        for id in self.pending.clone() {
            match self.client.get_task(&id).await {
                Ok(task) => {
                    self.last_ok = Instant::now();
                    self.emit(task).await?;
                }
                Err(e) => return Ok(Err(e)),
            }
        }
        Ok(Ok(()))
    }

    /// Send a snapshot if it differs from the last one of its task.
    async fn emit(&mut self, task: Task) -> Result<(), Gone> {
        let id = task.id().to_string();
        if task.status().is_terminal() {
            self.pending.retain(|p| *p != id);
        }
        if self.last.get(&id).is_some_and(|t| t.substance() == task.substance()) {
            return Ok(());
        }
        self.last.insert(id, task.clone());
        self.send(Ok(FollowEvent::Snapshot(task))).await
    }

    async fn pause(&self) -> Result<(), Gone> {
        let interval = self
            .pending
            .iter()
            .filter_map(|id| self.last.get(id).map(Task::poll_interval))
            .min()
            .unwrap_or(Duration::from_secs(1));
        tokio::select! {
            () = tokio::time::sleep(interval) => Ok(()),
            () = self.tx.closed() => Err(Gone),
        }
    }

    async fn note(&self, text: impl Into<String>) -> Result<(), Gone> {
        self.send(Ok(FollowEvent::Transport(text.into()))).await
    }

    async fn send(&self, event: Result<FollowEvent, Error>) -> Result<(), Gone> {
        self.tx.send(event).await.map_err(|_| Gone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_followed_once_in_order() {
        assert_eq!(dedup(vec!["b".into(), "a".into(), "b".into()]), vec!["b".to_string(), "a".to_string()]);
        assert!(listen_unsupported(&Error::Rpc { code: -32601, message: String::new(), data: None }));
        assert!(!listen_unsupported(&Error::Unreachable { url: String::new(), reason: String::new() }));
    }
}
