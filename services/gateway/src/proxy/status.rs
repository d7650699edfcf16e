//! Status messages from upstream progress and log lines: at most one per
//! `status_interval`, the last one always kept.

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

/// Status messages from upstream progress, at most one per interval (not a
/// task's `Status`: the pace of its `statusMessage`).
#[derive(Debug)]
pub(super) struct StatusPace {
    pub(super) interval: Duration,
    pub(super) last: Option<Instant>,
    pub(super) pending: Option<String>,
}

impl StatusPace {
    pub(super) fn offer(&mut self, message: String) -> Option<String> {
        let now = Instant::now();
        if self.last.is_none_or(|l| now.duration_since(l) >= self.interval) {
            self.last = Some(now);
            self.pending = None;
            Some(message)
        } else {
            self.pending = Some(message);
            None
        }
    }

    pub(super) fn deadline(&self) -> Option<Instant> {
        self.pending.as_ref().and(self.last).map(|l| l + self.interval)
    }

    pub(super) fn flush(&mut self) -> Option<String> {
        self.last = Some(Instant::now());
        self.pending.take()
    }
}

pub(super) fn progress_text(progress: f64, total: Option<f64>, message: Option<&str>) -> String {
    match (message, total) {
        (Some(m), _) if !m.is_empty() => m.to_string(),
        (_, Some(t)) => format!("{progress}/{t}"),
        _ => format!("{progress}"),
    }
}

pub(super) fn log_text(data: &Value) -> String {
    match data {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn status_messages_are_rate_limited_and_the_last_is_kept() {
        let mut s = StatusPace { interval: Duration::from_millis(20), last: None, pending: None };
        assert_eq!(s.offer("1".into()).as_deref(), Some("1"));
        assert_eq!(s.offer("2".into()), None);
        assert_eq!(s.offer("3".into()), None);
        let due = s.deadline().expect("a pending message has a deadline");
        tokio::time::sleep_until(due).await;
        assert_eq!(s.flush().as_deref(), Some("3"));
        assert_eq!(s.deadline(), None);
        assert_eq!(progress_text(2.0, Some(5.0), None), "2/5");
        assert_eq!(progress_text(2.0, Some(5.0), Some("step 2")), "step 2");
    }
}
