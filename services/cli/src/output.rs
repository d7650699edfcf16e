//! Rendering results for people: text content printed, images and audio
//! saved to files (their paths printed), embedded resources printed or saved,
//! artifacts a result links to downloaded (streamed) into the output directory,
//! `structuredContent` pretty-printed; and the exit code of an outcome.

use std::path::{Path, PathBuf};

use anyhow::Context;
use base64::Engine;
use presa_client::{Status, Task};
use serde_json::Value;

use crate::{exit, input};

/// The exit code of a `CallToolResult`.
pub(crate) fn result_code(result: &Value) -> u8 {
    if result["isError"] == true { exit::TOOL_ERROR } else { exit::OK }
}

/// The exit code of a terminal task.
pub(crate) fn task_code(task: &Task) -> u8 {
    match task.status() {
        Status::Completed => task.result().map_or(exit::OK, result_code),
        Status::Failed => exit::FAILED,
        Status::Cancelled => exit::CANCELLED,
        Status::InputRequired => exit::INPUT_REQUIRED,
        Status::Working => exit::OK,
    }
}

/// Print a value as one JSON line (for scripts).
pub(crate) fn json_line(v: &Value) {
    println!("{v}");
}

fn extension(mime: &str) -> &str {
    match mime {
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "image/svg+xml" => "svg",
        "audio/wav" | "audio/x-wav" | "audio/wave" => "wav",
        "audio/mpeg" => "mp3",
        "audio/ogg" => "ogg",
        "application/pdf" => "pdf",
        "application/json" => "json",
        m if m.starts_with("text/") => "txt",
        _ => "bin",
    }
}

fn safe(label: &str) -> String {
    label.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' { c } else { '_' }).collect()
}

/// Save base64 `data` as `<dir>/<label>-<n>.<ext>`; the path.
fn save(dir: &Path, label: &str, n: usize, mime: &str, data: &str) -> anyhow::Result<PathBuf> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .context("the server sent content that is not base64")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("{}-{n}.{}", safe(label), extension(mime)));
    std::fs::write(&path, &bytes).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// An artifact a result links to, to be downloaded ([`save_links`]).
#[derive(Debug)]
pub(crate) struct Link {
    /// Its download path, relative to the MCP endpoint.
    path: String,
    /// Where it goes.
    file: PathBuf,
    /// How to name it to a person (`name (mime)`).
    what: String,
}

/// Stream every linked artifact to its file; print each path.
pub(crate) async fn save_links(client: &presa_client::Client, links: Vec<Link>) -> anyhow::Result<()> {
    for link in links {
        if let Some(dir) = link.file.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let bytes = client
            .download(&link.path, &link.file)
            .await
            .with_context(|| format!("downloading {} to {}", link.what, link.file.display()))?;
        println!("artifact {} ({bytes} bytes) saved to {}", link.what, link.file.display());
    }
    Ok(())
}

/// Print a `CallToolResult` for a person; files are named after `label`.
/// Artifact links (presa's `resource_link`s with a download path) are
/// returned, for [`save_links`] to fetch into `dir`.
pub(crate) fn print_result(result: &Value, dir: &Path, label: &str) -> anyhow::Result<Vec<Link>> {
    let mut links = Vec::new();
    let is_error = result["isError"] == true;
    let mut n = 0;
    for item in result["content"].as_array().into_iter().flatten() {
        let mime = item["mimeType"].as_str().unwrap_or("application/octet-stream");
        match item["type"].as_str() {
            Some("text") => {
                let text = item["text"].as_str().unwrap_or_default();
                if is_error { eprintln!("{text}") } else { println!("{text}") }
            }
            Some(kind @ ("image" | "audio")) => {
                n += 1;
                let path = save(dir, label, n, mime, item["data"].as_str().unwrap_or_default())?;
                println!("{kind} ({mime}) saved to {}", path.display());
            }
            Some("resource") => {
                let r = &item["resource"];
                let uri = r["uri"].as_str().unwrap_or("(no uri)");
                if let Some(text) = r["text"].as_str() {
                    println!("resource {uri}:\n{text}");
                } else if let Some(blob) = r["blob"].as_str() {
                    n += 1;
                    let mime = r["mimeType"].as_str().unwrap_or("application/octet-stream");
                    let path = save(dir, label, n, mime, blob)?;
                    println!("resource {uri} ({mime}) saved to {}", path.display());
                }
            }
            Some("resource_link") => {
                let name = item["name"].as_str().unwrap_or("");
                match item["_meta"][presa_client::DOWNLOAD_META].as_str() {
                    Some(path) => links.push(Link {
                        path: path.to_owned(),
                        file: dir.join(format!("{}-{}", safe(label), safe(name))),
                        what: format!("{name} ({mime})"),
                    }),
                    None => println!("link: {} {name}", item["uri"].as_str().unwrap_or_default()),
                }
            }
            _ => println!("{item}"),
        }
    }
    if let Some(s) = result.get("structuredContent").filter(|s| !s.is_null()) {
        println!("{}", serde_json::to_string_pretty(s).unwrap_or_else(|_| s.to_string()));
    }
    if is_error {
        eprintln!("presa: the tool reported an error");
    }
    Ok(links)
}

/// Print how a terminal task ended (its result, error or cancellation); the
/// artifacts its result links to.
pub(crate) fn print_outcome(task: &Task, dir: &Path) -> anyhow::Result<Vec<Link>> {
    match task.status() {
        Status::Completed => match task.result() {
            Some(r) => return print_result(r, dir, task.id()),
            None => println!("completed (no result)"),
        },
        Status::Failed => {
            let e = task.error().cloned().unwrap_or(Value::Null);
            eprintln!(
                "presa: task {} failed: {} ({})",
                task.id(),
                e["message"].as_str().unwrap_or("no error given"),
                e["code"]
            );
        }
        Status::Cancelled => eprintln!(
            "presa: task {} was cancelled{}",
            task.id(),
            task.status_message().map(|m| format!(": {m}")).unwrap_or_default()
        ),
        _ => {}
    }
    Ok(Vec::new())
}

/// Print a task snapshot for `presa get`; the artifacts its result links to.
pub(crate) fn print_task(task: &Task, dir: &Path) -> anyhow::Result<Vec<Link>> {
    let v = &task.0;
    println!("task     {}", task.id());
    println!("status   {}", task.status());
    if let Some(m) = task.status_message() {
        println!("message  {m}");
    }
    for (key, label) in [("createdAt", "created "), ("lastUpdatedAt", "updated ")] {
        if let Some(t) = v[key].as_str() {
            println!("{label} {t}");
        }
    }
    if let Some(requests) = task.input_requests() {
        println!("waiting for:");
        for (key, request) in requests {
            println!("  {}", input::describe(key, request).replace('\n', "\n  "));
            println!("  answer: presa answer {} {}", task.id(), input::example_answer(key, request));
        }
    }
    if task.status().is_terminal() {
        println!();
        return print_outcome(task, dir);
    }
    Ok(Vec::new())
}

/// Print what `server/discover` says.
pub(crate) fn print_discover(d: &Value) {
    let info = &d["_meta"]["io.modelcontextprotocol/serverInfo"];
    if info.is_object() {
        println!("server        {} {}", info["name"].as_str().unwrap_or("?"), info["version"].as_str().unwrap_or(""));
    }
    let versions: Vec<&str> =
        d["supportedVersions"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    println!("versions      {}", versions.join(", "));
    if let Some(caps) = d["capabilities"].as_object() {
        let names: Vec<&str> = caps.keys().map(String::as_str).filter(|k| *k != "extensions").collect();
        println!("capabilities  {}", names.join(", "));
        if let Some(ext) = caps.get("extensions").and_then(Value::as_object) {
            println!("extensions    {}", ext.keys().map(String::as_str).collect::<Vec<_>>().join(", "));
        }
    }
    if let Some(i) = d["instructions"].as_str() {
        println!("\n{i}");
    }
}

/// Print the tools with their arguments.
pub(crate) fn print_tools(tools: &[Value]) {
    for (i, t) in tools.iter().enumerate() {
        if i > 0 {
            println!();
        }
        let name = t["name"].as_str().unwrap_or("?");
        let task = t["execution"]["taskSupport"].as_str().map(|s| format!("  [task: {s}]")).unwrap_or_default();
        println!("{name}{task}");
        if let Some(d) = t["description"].as_str() {
            println!("  {d}");
        }
        let docs = presa_client::schema::describe_arguments(&t["inputSchema"]);
        let width = docs.iter().map(|d| d.name.len()).max().unwrap_or(0);
        for d in docs {
            let req = if d.required { ", required" } else { "" };
            let notes = if d.notes.is_empty() { String::new() } else { format!("  {}", d.notes.join("; ")) };
            println!("    {:width$}  {}{req}{notes}", d.name, d.kind);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn exit_codes_follow_the_outcome() {
        let t = |v: Value| task_code(&Task(v));
        assert_eq!(t(json!({ "status": "completed", "result": { "content": [] } })), exit::OK);
        assert_eq!(t(json!({ "status": "completed", "result": { "isError": true } })), exit::TOOL_ERROR);
        assert_eq!(t(json!({ "status": "failed" })), exit::FAILED);
        assert_eq!(t(json!({ "status": "cancelled" })), exit::CANCELLED);
    }

    #[test]
    fn images_are_saved_with_their_extension() {
        let dir = tempfile::tempdir().unwrap();
        let p = save(dir.path(), "p00.x/y", 1, "image/png", "iVBORw0KGgo=").unwrap();
        assert_eq!(p.file_name().unwrap(), "p00.x_y-1.png");
        assert_eq!(std::fs::read(p).unwrap()[..4], [0x89, b'P', b'N', b'G']);
    }
}
