//! Spilling a big task result into artifacts (the "claim check").
//!
//! A result whose serialised size passes [`Artifacts::threshold`] sheds, biggest
//! first, content blocks of at least [`MIN_SPILL_BYTES`] (text, image, audio,
//! embedded resource) until it fits: each block's bytes (decoded from base64
//! for images, audio and blobs) go to an artifact, and a `resource_link` takes
//! its place. If it still does not fit, its `structuredContent` goes to an
//! `application/json` artifact: the result then has no `structuredContent`,
//! and names the artifact in `_meta["io.presa/structuredContent"]` and in a
//! link appended to `content` (see docs/tasks.md, "Large results").
//!
//! A run's artifacts (spilled, or written by the tool through
//! `ToolContext::artifact`) share one prefix: if the run's result is not
//! kept (a failed spill, a cancelled or failed task, a lost claim), the
//! worker removes them together, so no object is left behind.

use base64::{Engine, engine::general_purpose::STANDARD};
use bytes::Bytes;
use presa_artifacts::{ArtifactError, ArtifactMeta};

use super::ArtifactsError;
use serde_json::{Map, Value};

use super::{META_STRUCTURED, RunArtifacts, link, uri, uri_key};

/// Blocks smaller than this stay inline, whatever the result's size.
pub(crate) const MIN_SPILL_BYTES: usize = 1024;

/// The most bytes handed to an artifact writer at once.
const CHUNK_BYTES: usize = 1024 * 1024;

/// What one content block holds, ready to be written.
struct Payload {
    bytes: Bytes,
    mime: String,
    name: String,
}

impl RunArtifacts {
    /// `result` with its biggest parts moved into this run's artifacts until
    /// it is at most [`Artifacts::threshold`] bytes (see the module docs). On
    /// an error the caller [`discard`](Self::discard)s the run's artifacts.
    pub(crate) async fn spill(&self, result: Value) -> Result<Value, ArtifactsError> {
        let Value::Object(mut result) = result else { return Ok(result) };
        let threshold = self.artifacts.threshold();
        let mut size = presa_tasks::json_len(&result);

        let mut blocks = biggest_blocks(&result);
        while size > threshold {
            let Some((i, len)) = blocks.pop() else { break };
            let Some(block) = result.get_mut("content").and_then(|c| c.get_mut(i)) else { break };
            let Some(payload) = payload(block, i) else { continue };
            self.check_quota(payload.bytes.len() as u64).await?;
            let meta = self.write(payload.bytes, &payload.mime).await?;
            let mut replacement = link(&meta, &payload.name, &self.scope);
            if let Some(a) = block.get("annotations") {
                replacement["annotations"] = a.clone();
            }
            size = size - len + presa_tasks::json_len(&replacement);
            *block = replacement;
        }
        if size > threshold
            && let Some(structured) = result.get("structuredContent")
            && presa_tasks::json_len(structured) >= MIN_SPILL_BYTES
        {
            let bytes = Bytes::from(serde_json::to_vec(structured).unwrap_or_default());
            self.check_quota(bytes.len() as u64).await?;
            let meta = self.write(bytes, "application/json").await?;
            result.remove("structuredContent");
            let content = result.entry("content").or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(items) = content {
                items.push(link(&meta, "structuredContent.json", &self.scope));
            }
            let meta_entry = result.entry("_meta").or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(m) = meta_entry {
                m.insert(META_STRUCTURED.into(), Value::String(uri(uri_key(&meta.key))));
            }
        }
        Ok(Value::Object(result))
    }

    /// Removes every artifact of this run (the task will not show them),
    /// logging a failure: the sweeper removes them once their task is gone.
    pub(crate) async fn discard(&self) {
        if let Err(e) = self.artifacts.store().delete_prefix(&self.prefix).await {
            tracing::warn!(error = %e, prefix = self.prefix, "removing a run's artifacts failed; the sweeper will");
        }
    }

    /// Writes `bytes` as the run's next artifact, in chunks.
    async fn write(&self, mut bytes: Bytes, mime: &str) -> Result<ArtifactMeta, ArtifactError> {
        let mut writer = self.artifacts.store().create(&self.next_key(), mime).await?;
        while !bytes.is_empty() {
            let chunk = bytes.split_to(bytes.len().min(CHUNK_BYTES));
            writer.write(chunk).await?;
        }
        writer.finish().await
    }
}

/// The content blocks worth spilling, as (index, serialised size), smallest
/// first (so `pop` gives the biggest).
fn biggest_blocks(result: &Map<String, Value>) -> Vec<(usize, usize)> {
    let Some(Value::Array(items)) = result.get("content") else { return Vec::new() };
    let mut blocks: Vec<(usize, usize)> = items
        .iter()
        .enumerate()
        .map(|(i, b)| (i, presa_tasks::json_len(b)))
        .filter(|&(_, len)| len >= MIN_SPILL_BYTES)
        .collect();
    blocks.sort_by_key(|&(i, len)| (len, std::cmp::Reverse(i)));
    blocks
}

/// The bytes, MIME type and name of a content block that can become an
/// artifact; `None` for other blocks (links, unknown types, bad base64).
fn payload(block: &Value, i: usize) -> Option<Payload> {
    let str_of = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    let named = |ext: &str| format!("content-{i}{ext}");
    match block.get("type").and_then(Value::as_str)? {
        "text" => Some(Payload {
            bytes: Bytes::from(str_of(block, "text")?),
            mime: "text/plain; charset=utf-8".into(),
            name: named(".txt"),
        }),
        "image" | "audio" => {
            let mime = str_of(block, "mimeType").unwrap_or_else(|| "application/octet-stream".into());
            let bytes = STANDARD.decode(block.get("data")?.as_str()?).ok()?;
            Some(Payload { bytes: bytes.into(), name: named(&extension(&mime)), mime })
        }
        "resource" => {
            let resource = block.get("resource")?;
            let name = str_of(resource, "uri")
                .and_then(|u| u.rsplit('/').next().filter(|s| !s.is_empty()).map(str::to_owned))
                .unwrap_or_else(|| named(""));
            if let Some(text) = str_of(resource, "text") {
                let mime = str_of(resource, "mimeType").unwrap_or_else(|| "text/plain; charset=utf-8".into());
                return Some(Payload { bytes: Bytes::from(text), mime, name });
            }
            let mime = str_of(resource, "mimeType").unwrap_or_else(|| "application/octet-stream".into());
            let bytes = STANDARD.decode(resource.get("blob")?.as_str()?).ok()?;
            Some(Payload { bytes: bytes.into(), mime, name })
        }
        _ => None,
    }
}

/// `.png` for `image/png`: the subtype when it is a plain word, else nothing.
fn extension(mime: &str) -> String {
    let subtype = mime.split(';').next().and_then(|e| e.split_once('/')).map(|(_, s)| s.trim()).unwrap_or_default();
    if !subtype.is_empty() && subtype.len() <= 8 && subtype.bytes().all(|b| b.is_ascii_alphanumeric()) {
        format!(".{subtype}")
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use presa_artifacts::ArtifactConfig;
    use serde_json::json;

    use presa_store::Scope;
    use presa_tasks::TaskId;

    use super::*;

    fn scope() -> Scope {
        Scope::anonymous()
    }
    use crate::artifacts::{Artifacts, META_DOWNLOAD, META_SHA256, key_of};

    fn run(dir: &std::path::Path, threshold: usize) -> RunArtifacts {
        let url = format!("file://{}", dir.display());
        let artifacts = Artifacts::new(ArtifactConfig::new(url).open().expect("store")).with_threshold(threshold);
        RunArtifacts::new(artifacts, &Scope::anonymous(), &TaskId::from_wire("p00.t"))
    }

    async fn read(a: &RunArtifacts, link: &Value) -> Vec<u8> {
        use futures::TryStreamExt;
        let key = key_of(link["uri"].as_str().expect("uri")).expect("an artifact uri");
        let read = a.artifacts.store().open(&crate::artifacts::stored_key(&scope(), key), None).await.expect("open");
        read.stream.try_collect::<Vec<Bytes>>().await.expect("bytes").concat()
    }

    #[tokio::test]
    async fn a_small_result_stays_as_it_is() {
        let dir = tempfile::tempdir().expect("dir");
        let a = run(dir.path(), 4096);
        let result = json!({ "content": [{ "type": "text", "text": "x".repeat(2000) }] });
        assert_eq!(a.spill(result.clone()).await.expect("spill"), result);
        let stored: Vec<_> = futures::StreamExt::collect::<Vec<_>>(a.artifacts.store().list("")).await;
        assert!(stored.is_empty(), "{stored:?}");
    }

    #[tokio::test]
    async fn the_biggest_blocks_go_first_until_the_result_fits() {
        let dir = tempfile::tempdir().expect("dir");
        let a = run(dir.path(), 10_000);
        let png = vec![7u8; 9000];
        let result = json!({ "content": [
            { "type": "text", "text": "small" },
            { "type": "text", "text": "m".repeat(3000), "annotations": { "priority": 1 } },
            { "type": "image", "data": STANDARD.encode(&png), "mimeType": "image/png" },
        ]});
        let spilled = a.spill(result).await.expect("spill");
        let content = spilled["content"].as_array().expect("content").clone();
        assert_eq!(content[0], json!({ "type": "text", "text": "small" }));
        assert_eq!(content[1]["type"], "text", "the middle block fits once the image is out: {content:?}");
        let image = &content[2];
        assert_eq!(image["type"], "resource_link");
        assert_eq!(image["mimeType"], "image/png");
        assert_eq!(image["name"], "content-2.png");
        assert_eq!(image["size"], 9000);
        assert_eq!(read(&a, image).await, png, "the artifact holds the decoded bytes");
        let key = key_of(image["uri"].as_str().unwrap()).unwrap();
        assert!(a.prefix.ends_with(&format!("/{}", key.rsplit_once('/').unwrap().0)), "{key} under {}", a.prefix);
        assert_eq!(image["_meta"][META_DOWNLOAD], format!("artifacts/{key}"));
        assert_eq!(image["_meta"][META_SHA256].as_str().map(str::len), Some(64));
    }

    #[tokio::test]
    async fn a_big_structured_content_becomes_a_json_artifact() {
        let dir = tempfile::tempdir().expect("dir");
        let a = run(dir.path(), 4096);
        let text = "y".repeat(50_000);
        let result = json!({
            "content": [{ "type": "text", "text": text }],
            "structuredContent": { "content": text },
            "_meta": { "keep": true },
        });
        let r = &a.spill(result).await.expect("spill");
        assert!(r.get("structuredContent").is_none(), "{r}");
        let links = r["content"].as_array().expect("content");
        assert_eq!(links.len(), 2);
        assert_eq!(read(&a, &links[0]).await, text.as_bytes());
        assert_eq!(links[1]["mimeType"], "application/json");
        assert_eq!(r["_meta"][META_STRUCTURED], links[1]["uri"]);
        assert_eq!(r["_meta"]["keep"], true);
        let back: Value = serde_json::from_slice(&read(&a, &links[1]).await).expect("json");
        assert_eq!(back, json!({ "content": text }));
        assert!(presa_tasks::json_len(r) < 4096);
    }

    #[tokio::test]
    async fn a_failed_run_leaves_nothing_behind() {
        let dir = tempfile::tempdir().expect("dir");
        let store = ArtifactConfig::new(format!("file://{}", dir.path().display())).with_max_bytes(5000).open();
        let a = RunArtifacts::new(
            Artifacts::new(store.expect("store")).with_threshold(1000),
            &scope(),
            &TaskId::from_wire("p00.t"),
        );
        // The image goes first (its base64 is the biggest block) and fits;
        // the text's 5500 bytes do not: the image's artifact must go too.
        let result = json!({ "content": [
            { "type": "text", "text": "b".repeat(5500) },
            { "type": "image", "data": STANDARD.encode(vec![1u8; 4500]), "mimeType": "image/png" },
        ]});
        let err = a.spill(result).await.expect_err("too large");
        assert!(matches!(err, ArtifactsError::Store(ArtifactError::TooLarge { .. })), "{err}");
        let written: Vec<_> =
            futures::StreamExt::collect::<Vec<_>>(a.artifacts.store().list(&crate::artifacts::owner(&scope()))).await;
        assert_eq!(written.len(), 1, "the image was written before the text failed: {written:?}");
        a.discard().await;
        let left: Vec<_> =
            futures::StreamExt::collect::<Vec<_>>(a.artifacts.store().list(&crate::artifacts::owner(&scope()))).await;
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn extensions_come_from_plain_subtypes() {
        assert_eq!(extension("image/png"), ".png");
        assert_eq!(extension("audio/wav; rate=8000"), ".wav");
        assert_eq!(extension("application/vnd.ms-excel"), "");
    }
}
