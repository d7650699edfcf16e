//! Wire projections of a [`Task`] (SEP-2663).
//!
//! - [`create_result`]: the flat `CreateTaskResult` (`resultType: "task"`),
//!   with no payload keys at all; [`create_result_written`], the same as
//!   JSON text, what a task-creating call answers.
//! - [`detailed`]: the `DetailedTask` fields, with exactly the one payload
//!   the status allows: `inputRequests`, `result` or `error`.
//! - [`get_result`]: `tasks/get`'s result (`resultType: "complete"`).
//! - [`GetView`]: what `tasks/get` needs of a task (owner, tool, expiry and
//!   [`get_result`] as JSON text), also read straight from the stored JSON
//!   document ([`GetView::from_doc`]) without building the whole [`Task`]
//!   or any value: the result is written as text, the payload copied.
//! - [`notification_params`]: `notifications/tasks` params for one subscription.
//!
//! `requestState`, `ttl`, `pollInterval` and the v1 `related-task` meta never appear.

use std::{
    borrow::Cow,
    time::{Duration, UNIX_EPOCH},
};

use presa_protocol::{
    ResultType,
    meta::{RELATED_TASK_KEY, SUBSCRIPTION_ID_KEY},
    written::{ObjectWriter, Written},
};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::{model::Scope, model::Status, model::Task};

/// An ISO 8601 UTC timestamp with milliseconds, e.g. `2026-11-30T12:00:00.123Z`.
///
/// Written by hand for years 1970 to 9999 (every task's two timestamps, in
/// every reply about it: `humantime`'s `Display` cost several times as much),
/// the same text as `humantime::format_rfc3339_millis`, which is left the
/// rest as before (past 9999 its `Display` fails and `to_string` panics,
/// unchanged: no clock reads such a date).
pub fn iso8601(ms: u64) -> String {
    match iso8601_bytes(ms) {
        // ASCII digits and separators: always UTF-8, allocated once at its size.
        Some(out) => String::from_utf8_lossy(&out).into_owned(),
        None => humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string(),
    }
}

/// [`iso8601`]'s 24 bytes, for years 1970 to 9999 (`None` past them).
fn iso8601_bytes(ms: u64) -> Option<[u8; 24]> {
    /// 10000-01-01T00:00:00Z in Unix ms: the first instant of five-digit years.
    const YEAR_10000_MS: u64 = 253_402_300_800_000;
    if ms >= YEAR_10000_MS {
        return None;
    }
    let (secs, millis) = (ms / 1000, ms % 1000);
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = presa_protocol::calendar::civil_from_days(days);
    let fields: [(u64, usize); 7] =
        [(year, 4), (month, 2), (day, 2), (rest / 3600, 2), (rest / 60 % 60, 2), (rest % 60, 2), (millis, 3)];
    let mut out = [0u8; 24];
    let mut at = 0;
    for ((value, width), after) in fields.into_iter().zip(*b"--T::.Z") {
        let mut v = value;
        for i in (0..width).rev() {
            out[at + i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
        out[at + width] = after;
        at += width + 1;
    }
    Some(out)
}

/// A timestamp member, as [`iso8601`] writes it.
fn write_time(w: &mut ObjectWriter, name: &str, ms: u64) {
    match iso8601_bytes(ms) {
        Some(text) => w.plain_str(name, &text),
        None => w.str(name, &iso8601(ms)),
    };
}

/// The fields every projection starts from, borrowed from a [`Task`] or
/// from a stored document ([`GetView::from_doc`]).
struct Header<'a> {
    id: &'a str,
    status: Status,
    status_message: Option<&'a str>,
    created_at_ms: u64,
    updated_at_ms: u64,
    ttl_ms: Option<u64>,
    poll_interval_ms: Option<u64>,
}

impl<'a> From<&'a Task> for Header<'a> {
    fn from(task: &'a Task) -> Self {
        Header {
            id: task.id.as_str(),
            status: task.status,
            status_message: task.status_message.as_deref(),
            created_at_ms: task.created_at_ms,
            updated_at_ms: task.updated_at_ms,
            ttl_ms: task.ttl_ms,
            poll_interval_ms: task.poll_interval_ms,
        }
    }
}

fn base(h: &Header<'_>) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("taskId".into(), json!(h.id));
    m.insert("status".into(), json!(h.status.as_str()));
    if let Some(msg) = h.status_message {
        m.insert("statusMessage".into(), json!(msg));
    }
    m.insert("createdAt".into(), json!(iso8601(h.created_at_ms)));
    m.insert("lastUpdatedAt".into(), json!(iso8601(h.updated_at_ms)));
    m.insert("ttlMs".into(), h.ttl_ms.map_or(Value::Null, Value::from));
    if let Some(p) = h.poll_interval_ms {
        m.insert("pollIntervalMs".into(), json!(p));
    }
    m
}

/// [`base`]'s members, the status's `payload` (its member name and JSON
/// text) and `resultType`, written straight as JSON text: the same bytes as
/// the `Map` of them serialised ([`Written`]), without building it.
fn write_base(h: &Header<'_>, payload: Option<(&str, &[u8])>, result_type: ResultType) -> Written {
    let mut w = ObjectWriter::with_capacity(240 + payload.map_or(0, |(_, text)| text.len()));
    // Members in a `Map`'s order (sorted by name), the payload's among them.
    let mut pending = payload;
    let mut payload_before = |w: &mut ObjectWriter, next: &str| {
        if let Some((name, text)) = pending.filter(|(name, _)| *name < next) {
            w.raw(name, text);
            pending = None;
        }
    };
    payload_before(&mut w, "createdAt");
    write_time(&mut w, "createdAt", h.created_at_ms);
    payload_before(&mut w, "lastUpdatedAt");
    write_time(&mut w, "lastUpdatedAt", h.updated_at_ms);
    payload_before(&mut w, "pollIntervalMs");
    if let Some(p) = h.poll_interval_ms {
        w.u64("pollIntervalMs", p);
    }
    payload_before(&mut w, "resultType");
    w.plain_str("resultType", result_type.as_str().as_bytes());
    payload_before(&mut w, "status");
    w.plain_str("status", h.status.as_str().as_bytes());
    payload_before(&mut w, "statusMessage");
    if let Some(msg) = h.status_message {
        w.str("statusMessage", msg);
    }
    payload_before(&mut w, "taskId");
    w.str("taskId", h.id);
    payload_before(&mut w, "ttlMs");
    match h.ttl_ms {
        Some(ttl) => w.u64("ttlMs", ttl),
        None => w.null("ttlMs"),
    };
    if let Some((name, text)) = pending {
        w.raw(name, text);
    }
    w.finish()
}

/// A completed task's `result` with no related-task `_meta` (the task's own
/// id is no news to its reader).
fn without_related_task(mut result: Value) -> Value {
    if let Some(meta) = result.get_mut("_meta").and_then(Value::as_object_mut) {
        meta.remove(RELATED_TASK_KEY);
    }
    result
}

/// What a failed task with no stored error answers.
const DEFAULT_ERROR: &[u8] = br#"{"code":-32603,"message":"Internal error"}"#;
/// What a completed task with no stored result answers.
const DEFAULT_RESULT: &[u8] = br#"{"content":[]}"#;

/// The one payload a status carries; each is taken (and so cloned, for a
/// [`Task`]) only when the status needs it.
struct Payload<I, R, E> {
    input_requests: I,
    result: R,
    error: E,
}

impl<I, R, E> Payload<I, R, E>
where
    I: FnOnce() -> Map<String, Value>,
    R: FnOnce() -> Option<Value>,
    E: FnOnce() -> Option<Value>,
{
    fn insert_into(self, m: &mut Map<String, Value>, status: Status) {
        match status {
            Status::InputRequired => {
                m.insert("inputRequests".into(), Value::Object((self.input_requests)()));
            }
            Status::Completed => {
                let result = (self.result)().unwrap_or_else(|| json!({"content": []}));
                m.insert("result".into(), without_related_task(result));
            }
            Status::Failed => {
                let error = (self.error)().unwrap_or_else(|| json!({"code": -32603, "message": "Internal error"}));
                m.insert("error".into(), error);
            }
            Status::Working | Status::Cancelled => {}
        }
    }
}

/// The `CreateTaskResult` for a freshly created task.
pub fn create_result(task: &Task) -> Map<String, Value> {
    let mut m = base(&task.into());
    m.insert("resultType".into(), ResultType::Task.into());
    m
}

/// [`create_result`] written as JSON text (the same bytes as its `Map`
/// serialised): what a task-creating call answers.
pub fn create_result_written(task: &Task) -> Written {
    write_base(&task.into(), None, ResultType::Task)
}

/// The `DetailedTask` fields for the task's current status.
pub fn detailed(task: &Task) -> Map<String, Value> {
    let mut m = base(&task.into());
    let payload = Payload {
        input_requests: || task.input_requests.clone().into_iter().collect(),
        result: || task.result.clone(),
        error: || task.error.clone(),
    };
    payload.insert_into(&mut m, task.status);
    m
}

/// The result of `tasks/get`.
pub fn get_result(task: &Task) -> Map<String, Value> {
    let mut m = detailed(task);
    m.insert("resultType".into(), ResultType::Complete.into());
    m
}

/// `notifications/tasks` params: the DetailedTask tagged with the subscription id.
pub fn notification_params(task: &Task, subscription_id: &Value) -> Map<String, Value> {
    let mut m = detailed(task);
    m.insert("_meta".into(), json!({ SUBSCRIPTION_ID_KEY: subscription_id }));
    m
}

/// What `tasks/get` needs of a task: who owns it, which tool it runs (the
/// caller's scopes are checked against it), when it expires, and the result
/// to answer with. [`GetView::of`] a task and [`GetView::from_doc`] of its
/// stored JSON are equal.
#[derive(Debug, Clone, PartialEq)]
pub struct GetView {
    /// The owner.
    pub scope: Scope,
    /// The tool the task runs.
    pub tool: String,
    /// When the task stops existing (Unix ms), if ever.
    pub expires_at_ms: Option<u64>,
    /// [`get_result`] of the task, written as JSON text (the same bytes as
    /// its `Map` serialised): `tasks/get` answers it as it is.
    pub result: Written,
}

/// The part of a stored [`Task`] document a [`GetView`] reads: everything
/// else (arguments, capabilities, issued inputs, responses…) is skipped
/// without being built. Field names and defaults follow [`Task`]'s.
#[derive(Deserialize)]
struct Lean<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    scope: Scope,
    status: Status,
    #[serde(default, borrow)]
    status_message: Option<Cow<'a, str>>,
    created_at_ms: u64,
    updated_at_ms: u64,
    ttl_ms: Option<u64>,
    #[serde(default)]
    poll_interval_ms: Option<u64>,
    work: LeanWork,
    // The payloads, as the JSON text the document holds: copied into the
    // view as they are, never built as values.
    #[serde(default, borrow)]
    input_requests: Option<&'a RawValue>,
    #[serde(default, borrow)]
    result: Option<&'a RawValue>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
}

/// The part of [`crate::Work`] a [`GetView`] reads.
#[derive(Deserialize)]
struct LeanWork {
    tool: String,
}

impl GetView {
    /// The view of `task`.
    pub fn of(task: &Task) -> Self {
        GetView {
            scope: task.scope.clone(),
            tool: task.work.tool.clone(),
            expires_at_ms: task.expires_at_ms(),
            result: Written::of(&get_result(task)),
        }
    }

    /// The view of a task stored as JSON (a serialised [`Task`]), reading
    /// only the fields it needs; its result is written straight from the
    /// document, the payload copied as the document has it (the same bytes
    /// as [`GetView::of`] the task: `serde_json` wrote both).
    pub fn from_doc(doc: &[u8]) -> serde_json::Result<Self> {
        // UTF-8 checked once for the whole document, then read as a `str`:
        // `from_slice` checks each string (each member name) on its own,
        // about a hundred instructions a string, twenty-odd a document.
        let doc = std::str::from_utf8(doc).map_err(|e| serde::de::Error::custom(e.to_string()))?;
        let lean: Lean<'_> = serde_json::from_str(doc)?;
        let header = Header {
            id: &lean.id,
            status: lean.status,
            status_message: lean.status_message.as_deref(),
            created_at_ms: lean.created_at_ms,
            updated_at_ms: lean.updated_at_ms,
            ttl_ms: lean.ttl_ms,
            poll_interval_ms: lean.poll_interval_ms,
        };
        fn text<'a>(raw: Option<&'a RawValue>, default: &'static [u8]) -> &'a [u8] {
            raw.map_or(default, |r| r.get().as_bytes())
        }
        let completed: Cow<'_, [u8]>;
        let payload = match lean.status {
            Status::InputRequired => Some(("inputRequests", text(lean.input_requests, b"{}"))),
            Status::Completed => {
                completed = match lean.result {
                    // Only a result that names the related task anywhere is
                    // read as a value, to drop it from `_meta`.
                    Some(raw) if raw.get().contains(RELATED_TASK_KEY) => {
                        let result = without_related_task(serde_json::from_str(raw.get())?);
                        Cow::Owned(serde_json::to_vec(&result)?)
                    }
                    raw => Cow::Borrowed(text(raw, DEFAULT_RESULT)),
                };
                Some(("result", &*completed))
            }
            Status::Failed => Some(("error", text(lean.error, DEFAULT_ERROR))),
            Status::Working | Status::Cancelled => None,
        };
        let result = write_base(&header, payload, ResultType::Complete);
        Ok(GetView {
            scope: lean.scope,
            tool: lean.work.tool,
            expires_at_ms: crate::model::expires_at_ms(lean.created_at_ms, lean.ttl_ms),
            result,
        })
    }

    /// Whether the task's lifetime has passed at `now_ms`.
    pub fn is_expired(&self, now_ms: u64) -> bool {
        self.expires_at_ms.is_some_and(|e| now_ms >= e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{id::TaskId, model::NewTask, model::Scope, model::Work, reducer::Event, reducer::apply};
    use std::collections::BTreeMap;

    fn task() -> Task {
        Task::new(
            TaskId::from_random(3, [1; 16]),
            NewTask {
                scope: Scope::anonymous(),
                work: Work::default(),
                ttl_ms: Some(3_600_000),
                poll_interval_ms: Some(100),
                status_message: Some("Task accepted".into()),
            },
            1_764_504_000_123,
        )
    }

    const PAYLOADS: [&str; 3] = ["inputRequests", "result", "error"];

    #[test]
    fn create_result_is_flat_and_payload_free() {
        let m = create_result(&task());
        assert_eq!(m["resultType"], "task");
        assert_eq!(m["status"], "working");
        assert_eq!(m["ttlMs"], 3_600_000);
        assert_eq!(m["createdAt"], "2025-11-30T12:00:00.123Z");
        for k in PAYLOADS.iter().chain(&["task", "requestState", "ttl", "pollInterval"]) {
            assert!(!m.contains_key(*k), "{k}");
        }
    }

    #[test]
    fn get_view_reads_a_document_with_escapes_and_no_optional_fields() {
        let mut t = task();
        t.ttl_ms = None;
        t.poll_interval_ms = None;
        t.status_message = Some("quote \" and \\ and \u{e9}".into());
        t.work.tool = "tool \"x\"".into();
        t.scope.subject = "sub\\ject".into();
        let doc = serde_json::to_vec(&t).unwrap();
        let view = GetView::from_doc(&doc).unwrap();
        assert_eq!(view, GetView::of(&t));
        assert_eq!(view.expires_at_ms, None);
        assert!(!view.is_expired(u64::MAX));
        assert!(GetView::from_doc(b"{\"id\": 1}").is_err());
        assert!(GetView::from_doc(b"not json").is_err());
    }

    #[test]
    fn written_create_results_are_their_maps_serialised() {
        let mut t = task();
        assert_eq!(create_result_written(&t), Written::of(&create_result(&t)));
        t.ttl_ms = None;
        t.poll_interval_ms = None;
        t.status_message = None;
        assert_eq!(create_result_written(&t), Written::of(&create_result(&t)));
        t.status_message = Some("quote \" and \\ and \u{e9} \u{1}".into());
        t.created_at_ms = 253_402_300_799_999; // 9999-12-31T23:59:59.999, the last written by hand
        assert_eq!(create_result_written(&t), Written::of(&create_result(&t)));
    }

    #[test]
    fn a_view_drops_the_related_task_from_a_stored_result_only() {
        let done = |result: Value| {
            let t = apply(&task(), &Event::Complete(result), 1_764_504_001_000).unwrap().unwrap();
            let doc = serde_json::to_vec(&t).unwrap();
            let view = GetView::from_doc(&doc).unwrap();
            assert_eq!(view, GetView::of(&t));
            view.result.to_value().unwrap()["result"].clone()
        };
        let meta = json!({RELATED_TASK_KEY: {"taskId": "x"}, "other": 1});
        let named = done(json!({"content": [], "_meta": meta}));
        assert_eq!(named["_meta"], json!({"other": 1}));
        // Named in the content only: kept, and the text copied as it is.
        let text = json!({"content": [{"type": "text", "text": RELATED_TASK_KEY}]});
        assert_eq!(done(text.clone()), text);
    }

    #[test]
    fn iso8601_writes_what_humantime_writes() {
        let humantime = |ms| humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string();
        let edges = [
            0,
            999,
            1_000,
            86_399_999,
            86_400_000,
            951_782_400_000,     // 2000-02-29
            4_107_542_399_999,   // 2100-02-28T23:59:59.999
            4_107_542_400_000,   // 2100-03-01 (no 29 February in 2100)
            1_764_504_000_123,   // 2025-11-30T12:00:00.123
            253_402_300_799_999, // 9999-12-31T23:59:59.999
        ];
        for ms in edges {
            assert_eq!(iso8601(ms), humantime(ms), "{ms}");
        }
        // Every day from 1970 to past 2400, at a time that moves through the day.
        let mut ms = 0;
        while ms < 14_000_000_000_000 {
            assert_eq!(iso8601(ms), humantime(ms), "{ms}");
            ms += 86_400_000 + 3_723_457;
        }
    }

    #[test]
    fn get_view_refuses_a_document_that_is_not_utf8() {
        let mut bytes = serde_json::to_vec(&task()).unwrap();
        let at = bytes.windows(4).position(|w| w == b"Task").unwrap();
        bytes[at] = 0xff;
        assert!(serde_json::from_slice::<Value>(&bytes).is_err());
        assert!(GetView::from_doc(&bytes).is_err());
    }

    #[test]
    fn null_ttl_is_present_as_null() {
        let mut t = task();
        t.ttl_ms = None;
        assert_eq!(create_result(&t)["ttlMs"], Value::Null);
    }

    #[test]
    fn each_status_carries_exactly_its_payload() {
        let req = BTreeMap::from([("k".to_string(), json!({"method": "elicitation/create", "params": {}}))]);
        let cases = [
            (Event::SetMessage("x".into()), None),
            (Event::RequestInput(req), Some("inputRequests")),
            (
                Event::Complete(json!({"content": [{"type": "text", "text": "ok"}], "_meta": {RELATED_TASK_KEY: {}}})),
                Some("result"),
            ),
            (Event::Fail(json!({"code": -32603, "message": "Internal error"})), Some("error")),
            (Event::Cancel, None),
        ];
        for (event, payload) in cases {
            let t = apply(&task(), &event, 1_764_504_001_000).unwrap().unwrap();
            let g = get_result(&t);
            assert_eq!(g["resultType"], "complete");
            assert!(!g.contains_key("requestState"));
            for k in PAYLOADS {
                assert_eq!(g.contains_key(k), payload == Some(k), "{:?} {k}", t.status);
            }
            if t.status == Status::Completed {
                assert!(g["result"]["_meta"].get(RELATED_TASK_KEY).is_none());
            }
            let doc = serde_json::to_vec(&t).unwrap();
            assert_eq!(GetView::from_doc(&doc).unwrap(), GetView::of(&t), "{:?}", t.status);
            assert_eq!(GetView::of(&t).result, Written::of(&g));
            let n = notification_params(&t, &json!(42));
            assert_eq!(n["_meta"][SUBSCRIPTION_ID_KEY], 42);
            assert!(!n.contains_key("resultType"));
        }
    }
}
