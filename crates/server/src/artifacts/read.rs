//! `resources/read` of an artifact: the owner check, then the whole artifact
//! as one `contents` item (text for text types that are UTF-8, else a base64
//! blob), up to [`Artifacts::max_read_bytes`]; a bigger one is refused with a
//! pointer to the streamed download.

use base64::{Engine, engine::general_purpose::STANDARD};
use futures::TryStreamExt;
use presa_store::{Scope, TaskStore};
use serde_json::{Value, json};

use super::{Artifacts, ArtifactsError, META_DOWNLOAD, META_SHA256, download_path, key_of};

impl Artifacts {
    /// The `contents` item of the artifact at `uri` for `scope`; `Ok(None)`
    /// when `uri` is not an artifact `scope` may read (another scope's, gone,
    /// never written): the caller answers as for an unknown URI.
    pub async fn read(&self, tasks: &dyn TaskStore, scope: &Scope, uri: &str) -> Result<Option<Value>, ArtifactsError> {
        let Some(key) = key_of(uri) else { return Ok(None) };
        let Some(meta) = self.authorize(tasks, scope, key).await? else { return Ok(None) };
        if meta.size > self.max_read_bytes() {
            return Err(ArtifactsError::TooBig { size: meta.size, limit: self.max_read_bytes(), key: key.to_owned() });
        }
        let read = self.store().open(&meta.key, None).await?;
        let bytes = read
            .stream
            .try_fold(Vec::with_capacity(usize::try_from(meta.size).unwrap_or(0)), |mut all, chunk| async move {
                all.extend_from_slice(&chunk);
                Ok(all)
            })
            .await?;
        let mut item = json!({
            "uri": uri,
            "mimeType": meta.mime,
            "_meta": { META_SHA256: meta.sha256, META_DOWNLOAD: download_path(scope, key) },
        });
        let body = if is_text(&meta.mime) {
            String::from_utf8(bytes).map_err(std::string::FromUtf8Error::into_bytes)
        } else {
            Err(bytes)
        };
        match body {
            Ok(text) => item["text"] = Value::String(text),
            Err(bytes) => item["blob"] = Value::String(STANDARD.encode(bytes)),
        }
        Ok(Some(item))
    }
}

/// Whether `mime` is read as text: `text/*`, JSON, XML and their `+json`/`+xml` kin.
fn is_text(mime: &str) -> bool {
    let essence = mime.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    essence.starts_with("text/")
        || matches!(essence.as_str(), "application/json" | "application/xml" | "application/yaml")
        || essence.ends_with("+json")
        || essence.ends_with("+xml")
}

#[cfg(test)]
mod tests {
    use super::is_text;

    #[test]
    fn text_types() {
        for t in ["text/plain; charset=utf-8", "application/json", "application/ld+json", "image/svg+xml"] {
            assert!(is_text(t), "{t}");
        }
        for b in ["image/png", "application/octet-stream", "application/pdf"] {
            assert!(!is_text(b), "{b}");
        }
    }
}
