//! presa-gateway in front of `@modelcontextprotocol/server-filesystem` (npm,
//! not written by presa): reading a 5 MB file as a task completes with
//! artifact links instead of failing on the result's size, and the caller
//! reads identical bytes back through `resources/read` and the download.

mod common;

use common::{embedded, fixtures};
use presa_testkit::{Client, TASKS, task_id};
use serde_json::json;
use sha2::{Digest, Sha256};

fn hex(d: impl AsRef<[u8]>) -> String {
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_five_megabyte_file_read_as_a_task_comes_back_as_an_artifact() {
    let f = fixtures();
    let dir = tempfile::tempdir().expect("dir");
    let root = dir.path().canonicalize().expect("canonical dir");
    let text: String = (0..5_000_000u32).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
    let file = root.join("big.txt");
    std::fs::write(&file, &text).expect("big file");
    let upstream = format!("{} {}", f.filesystem_stdio, root.display());
    let (gw, url) = embedded("gw-fs", &upstream, &[], &[]).await;

    let c = Client::new(&url, json!({ "extensions": { TASKS: {} } }));
    let created = c.call_tool("read_text_file", json!({ "path": file.to_string_lossy() })).await;
    let id = task_id(&created);
    let done = c.wait_status(&id, "completed").await;
    let result = &done["result"];
    let links: Vec<_> = result["content"].as_array().expect("content").iter().collect();
    assert!(!links.is_empty() && links.iter().all(|l| l["type"] == "resource_link"), "{result}\n{}", gw.log());
    let expected = hex(Sha256::digest(text.as_bytes()));
    let text_link = links.iter().find(|l| l["mimeType"] == "text/plain; charset=utf-8").expect("the text's link");
    assert_eq!(text_link["_meta"]["io.presa/sha256"], expected.as_str());

    let read = c.ok("resources/read", json!({ "uri": text_link["uri"] })).await;
    let back = read["contents"][0]["text"].as_str().expect("text");
    assert_eq!(hex(Sha256::digest(back.as_bytes())), expected);

    let path = text_link["_meta"]["io.presa/download"].as_str().expect("path");
    let download = reqwest::Url::parse(&url).and_then(|u| u.join(path)).expect("url");
    let bytes = reqwest::get(download).await.expect("download").bytes().await.expect("bytes");
    assert_eq!(hex(Sha256::digest(&bytes)), expected);
}
