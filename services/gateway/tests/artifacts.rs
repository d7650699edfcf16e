//! presa-gateway in front of `@modelcontextprotocol/server-filesystem` (npm,
//! not written by presa): reading a 5 MB file as a task completes with
//! artifact links instead of failing on the result's size, and the caller
//! reads identical bytes back through `resources/read` and the download;
//! on a virtual server (`[[server]]`, `/mcp/<name>`) too, where the
//! download is served on that server's path only.

mod common;

use common::{embedded, fixtures, gateway_bin};
use presa_testkit::{Client, Pod, TASKS, free_port, task_id};
use serde_json::json;
use sha2::{Digest, Sha256};

fn hex(d: impl AsRef<[u8]>) -> String {
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// A text file of `bytes` letters in `dir`: the directory (canonical, the
/// one the filesystem server is given), the file, and its text.
fn big_file(dir: &std::path::Path, bytes: u32) -> (std::path::PathBuf, std::path::PathBuf, String) {
    let root = dir.canonicalize().expect("canonical dir");
    let text: String = (0..bytes).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
    let file = root.join("big.txt");
    std::fs::write(&file, &text).expect("big file");
    (root, file, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_five_megabyte_file_read_as_a_task_comes_back_as_an_artifact() {
    let f = fixtures();
    let dir = tempfile::tempdir().expect("dir");
    let (root, file, text) = big_file(dir.path(), 5_000_000);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_virtual_servers_artifact_is_read_and_downloaded_on_that_server() {
    let f = fixtures();
    let dir = tempfile::tempdir().expect("dir");
    let (root, file, text) = big_file(dir.path(), 3_000_000);
    let upstream = serde_json::to_string(&format!("{} {}", f.filesystem_stdio, root.display())).expect("json");
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[[upstream]]\nname = \"fs\"\ncommand = {upstream}\n\n[[server]]\nname = \"files\"\nupstreams = [\"fs\"]\n"
        ),
    )
    .expect("config");
    let args = ["--gateway-config", config.to_str().expect("path"), "--upstream-settle-ms", "0"];
    let gw = Pod::start("gw-fs-server", &gateway_bin(), free_port(), &args, &[]).await;
    let url = format!("{}/mcp/files", gw.base());

    let c = Client::new(&url, json!({ "extensions": { TASKS: {} } }));
    let created = c.call_tool("read_text_file", json!({ "path": file.to_string_lossy() })).await;
    let id = task_id(&created);
    let done = c.wait_status(&id, "completed").await;
    let result = &done["result"];
    let content = result["content"].as_array().expect("content");
    let text_link = content
        .iter()
        .find(|l| l["type"] == "resource_link" && l["mimeType"] == "text/plain; charset=utf-8")
        .unwrap_or_else(|| panic!("the text's link: {result}\n{}", gw.log()));
    let expected = hex(Sha256::digest(text.as_bytes()));

    let read = c.ok("resources/read", json!({ "uri": text_link["uri"] })).await;
    let back = read["contents"][0]["text"].as_str().expect("text");
    assert_eq!(hex(Sha256::digest(back.as_bytes())), expected);

    // The link's path is relative to the server's URL and resolves to its own download route.
    let path = text_link["_meta"]["io.presa/download"].as_str().expect("path");
    let key = path.strip_prefix("files/artifacts/").unwrap_or_else(|| panic!("a path on the server: {path}"));
    let download = reqwest::Url::parse(&url).and_then(|u| u.join(path)).expect("url");
    assert_eq!(download.path(), format!("/mcp/files/artifacts/{key}"));
    let resp = reqwest::get(download).await.expect("download");
    assert_eq!(resp.status(), 200);
    assert_eq!(hex(Sha256::digest(resp.bytes().await.expect("bytes"))), expected);

    // Bound to the server, like its task: the root's download route does not serve it.
    let at_root = reqwest::get(format!("{}/artifacts/{key}", gw.base())).await.expect("root download");
    assert_eq!(at_root.status(), 404);
}
