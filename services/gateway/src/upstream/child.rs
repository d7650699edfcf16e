//! What keeps a stdio upstream child from reaching past its own pipes: a
//! clean environment ([`child_env`]), its stdout screened on the way to rmcp
//! ([`screen_answer`]: an answer rmcp could not parse fails its own request
//! at once), and its stderr logged line by line, escaped and cut
//! ([`escape_log_line`], [`STDERR_LINE_MAX`]).

use std::{collections::BTreeMap, ffi::OsString};

use rmcp::{RoleClient, model::ErrorCode, service::RxJsonRpcMessage, transport::async_rw::DEFAULT_MAX_LINE_LENGTH};
use serde_json::Value;

/// The longest stderr line of a stdio child logged, in bytes; the rest of
/// the line is dropped.
pub const STDERR_LINE_MAX: usize = 2048;

/// How the message of the error that replaces an answer rmcp could not
/// parse begins ([`screen_answer`]): such a request may still run upstream.
pub const INVALID_ANSWER: &str = "the upstream answered with a message that is not valid MCP";

/// The variables of the gateway's environment every stdio child gets (those
/// set), besides every `LC_*`: what a program needs to run, nothing secret.
const BASE_ENV: &[&str] = &["PATH", "HOME", "LANG", "TZ", "TMPDIR"];

/// A stdio child's environment: of the gateway's own `vars`, only
/// `PATH`, `HOME`, `LANG`, `TZ`, `TMPDIR` (those set), `LC_*` and the names in `inherit` (a `PRESA_*` variable
/// only when named there); then `env`, which wins.
pub fn child_env(
    vars: impl Iterator<Item = (OsString, OsString)>,
    inherit: &[String],
    env: &BTreeMap<String, String>,
) -> Vec<(OsString, OsString)> {
    let mut out: Vec<(OsString, OsString)> = vars
        .filter(|(k, _)| {
            k.to_str()
                .is_some_and(|k| BASE_ENV.contains(&k) || k.starts_with("LC_") || inherit.iter().any(|name| name == k))
        })
        .filter(|(k, _)| !env.contains_key(k.to_str().unwrap_or_default()))
        .collect();
    out.extend(env.iter().map(|(k, v)| (k.into(), v.into())));
    out
}

/// Pass a stdio child's stdout on to rmcp line by line, screening the
/// answers: rmcp drops a line it cannot parse, so an answer to one of the
/// gateway's requests that is not a valid MCP message would leave that
/// request waiting out its whole timeout. Such an answer (a JSON object with
/// an `id`, a `result` or `error`, and no `method`) becomes an error response
/// for that request ([`screen_answer`]); other lines pass unchanged. A line
/// longer than rmcp's limit ends the connection (rmcp would drop it too, and
/// its request with it): the child goes, and the calls on it fail at once.
pub(super) async fn screen_stdout(
    upstream: String,
    stdout: impl tokio::io::AsyncRead + Unpin,
    mut out: impl tokio::io::AsyncWrite + Unpin,
) {
    use tokio::io::AsyncWriteExt;
    screen_lines(&upstream, stdout, &mut out).await;
    // The child's stdout ended (or the connection's reader did): rmcp sees
    // the end of its stream and closes the connection.
    let _ = out.shutdown().await;
}

async fn screen_lines(
    upstream: &str,
    stdout: impl tokio::io::AsyncRead + Unpin,
    out: &mut (impl tokio::io::AsyncWrite + Unpin),
) {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    let mut reader = tokio::io::BufReader::new(stdout);
    let mut line = Vec::new();
    loop {
        line.clear();
        let limit = DEFAULT_MAX_LINE_LENGTH as u64 + 1;
        match (&mut reader).take(limit).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line.len() > DEFAULT_MAX_LINE_LENGTH {
            tracing::warn!(upstream = %upstream, bytes = line.len(),
                "the upstream sent a message over the size limit; closing its connection");
            return;
        }
        let replaced = screen_answer(&line);
        if replaced.is_some() {
            tracing::warn!(upstream = %upstream, "the upstream answered with an invalid message; failing that request");
        }
        if out.write_all(replaced.as_deref().unwrap_or(&line)).await.is_err() {
            return;
        }
    }
}

/// The error response that replaces `line`, when it is an answer to a
/// request that rmcp could not parse; `None` for anything else (a valid
/// message, a notification or request, a line that is no message at all:
/// rmcp skips or refuses those itself). An answer is a JSON object with an
/// `id` and a `result` or `error` and no `method`; one that is not even JSON
/// (cut short, a bad escape) counts when it starts like one (`{"jsonrpc"`,
/// no `"method"`) and its first `"id"` names a request.
pub fn screen_answer(line: &[u8]) -> Option<Vec<u8>> {
    const BOM: &[u8] = b"\xef\xbb\xbf";
    let line = line.trim_ascii();
    let line = line.strip_prefix(BOM).unwrap_or(line);
    let invalid = serde_json::from_slice::<RxJsonRpcMessage<RoleClient>>(line).err()?;
    let id = match serde_json::from_slice::<Value>(line) {
        Ok(Value::Object(message)) => {
            let answer = message.contains_key("result") || message.contains_key("error");
            if message.contains_key("method") || !answer {
                return None;
            }
            message.get("id").filter(|id| id.is_string() || id.is_number())?.clone()
        }
        Ok(_) => return None,
        Err(_) => {
            let text = std::str::from_utf8(line).ok()?;
            let looks_like_one = text.starts_with('{') && text.contains("\"jsonrpc\"");
            if !looks_like_one || text.contains("\"method\"") {
                return None;
            }
            first_id(text)?
        }
    };
    let error = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": ErrorCode::INTERNAL_ERROR.0,
            "message": format!("{INVALID_ANSWER}: {invalid}"),
        },
    });
    let mut bytes = serde_json::to_vec(&error).ok()?;
    bytes.push(b'\n');
    Some(bytes)
}

/// The value of the first `"id":` in `text` when it is a number or a string.
fn first_id(text: &str) -> Option<Value> {
    let at = text.find("\"id\"")? + "\"id\"".len();
    let rest = text[at..].trim_start().strip_prefix(':')?;
    let id = serde_json::Deserializer::from_str(rest).into_iter::<Value>().next()?.ok()?;
    (id.is_string() || id.is_number()).then_some(id)
}

/// Log a stdio child's stderr, one line at a time: control characters
/// escaped, at most [`STDERR_LINE_MAX`] bytes of a line (the rest dropped),
/// so what a child prints can neither forge presa's log lines nor grow the
/// gateway's memory.
pub(super) async fn log_stderr(upstream: String, stderr: impl tokio::io::AsyncRead + Unpin) {
    use tokio::io::AsyncReadExt;
    let mut stderr = stderr;
    let mut line: Vec<u8> = Vec::new();
    let mut cut = false;
    let mut buf = [0u8; 4096];
    let emit = |line: &[u8], cut: bool| {
        let text = escape_log_line(line);
        let more = if cut { " …(truncated)" } else { "" };
        tracing::info!(upstream = %upstream, "upstream stderr: {text}{more}");
    };
    loop {
        let n = match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
            if b == b'\n' {
                emit(&line, cut);
                line.clear();
                cut = false;
            } else if line.len() < STDERR_LINE_MAX {
                line.push(b);
            } else {
                cut = true;
            }
        }
    }
    if !line.is_empty() {
        emit(&line, cut);
    }
}

/// Bytes from a child as one log line: invalid UTF-8 replaced, control
/// characters (newlines, escapes, carriage returns) written as `\u{..}`.
pub fn escape_log_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::with_capacity(text.len());
    for c in text.trim_end_matches('\r').chars() {
        if c.is_control() && c != '\t' {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_child_gets_only_what_it_is_given() {
        let gateway = [
            ("PATH", "/usr/bin"),
            ("HOME", "/root"),
            ("LC_ALL", "C.UTF-8"),
            ("PRESA_STATE_SECRET", "s3cret"),
            ("PRESA_REDIS_URL", "redis://:pw@redis:6379"),
            ("HF_TOKEN", "hf"),
            ("PRESA_PASSED", "yes"),
            ("OTHER", "x"),
        ];
        let vars = || gateway.iter().map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let env = BTreeMap::from([("MODEL_DIR".to_string(), "/models".to_string()), ("HOME".into(), "/srv".into())]);
        let inherit = ["HF_TOKEN".to_string(), "PRESA_PASSED".to_string()];
        let got: BTreeMap<String, String> = child_env(vars(), &inherit, &env)
            .into_iter()
            .map(|(k, v)| (k.into_string().unwrap(), v.into_string().unwrap()))
            .collect();
        let expected = [
            ("HF_TOKEN", "hf"),
            ("HOME", "/srv"),
            ("LC_ALL", "C.UTF-8"),
            ("MODEL_DIR", "/models"),
            ("PATH", "/usr/bin"),
            ("PRESA_PASSED", "yes"),
        ];
        assert_eq!(got, expected.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        assert!(child_env(vars(), &[], &BTreeMap::new()).iter().all(|(k, _)| !k.to_string_lossy().contains("PRESA")));
    }

    #[test]
    fn an_unparseable_answer_becomes_an_error_for_its_request() {
        let cut = br#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"cut sho"#;
        let wrong = br#"{"jsonrpc":"1.0","id":"r-7","result":{}}"#;
        for (bad, id) in [(&cut[..], json!(7)), (&wrong[..], json!("r-7"))] {
            let replaced = screen_answer(bad).expect("replaced");
            let error: Value = serde_json::from_slice(&replaced).unwrap();
            assert_eq!(error["id"], id);
            assert_eq!(error["error"]["code"], -32603);
            assert!(error["error"]["message"].as_str().unwrap().contains("not valid MCP"), "{error}");
            // What rmcp's reader makes of the same bytes.
            let parsed: RxJsonRpcMessage<RoleClient> = serde_json::from_slice(&replaced).unwrap();
            assert!(matches!(parsed, rmcp::model::JsonRpcMessage::Error(_)));
        }
        assert_eq!(screen_answer(br#"{"jsonrpc":"2.0","id":7,"method":"elicitation/create","params":"#), None);
        // What rmcp parses, and what it skips on its own, pass unchanged.
        let good = br#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"ok"}]}}"#;
        assert_eq!(screen_answer(good), None);
        assert_eq!(screen_answer(b"not json at all\n"), None);
        assert_eq!(screen_answer(br#"{"jsonrpc":"2.0","method":"notifications/custom","params":{}}"#), None);
        assert_eq!(screen_answer(b"\n"), None);
    }

    #[test]
    fn stderr_lines_cannot_forge_log_lines() {
        let line = escape_log_line(b"boom\x1b[31m\rfake INFO line\r");
        assert_eq!(line, "boom\\u{1b}[31m\\u{d}fake INFO line");
        assert_eq!(escape_log_line(b"caf\xc3\xa9\tok"), "café\tok");
    }
}
