//! Downloading an artifact a result links to (`_meta["io.presa/download"]`,
//! a path relative to the MCP endpoint), streamed to a file with this
//! client's token: never held in memory whole.

use std::{io::Write, path::Path};

use futures::StreamExt;

use super::Client;
use crate::error::Error;

/// The `_meta` key of an artifact link's download path.
pub const DOWNLOAD_META: &str = "io.presa/download";

impl Client {
    /// Streams the artifact at `path` (relative to the endpoint URL, as in a
    /// link's `_meta["io.presa/download"]`) into the file `dest`; returns
    /// how many bytes were written. A failure leaves no partial file.
    pub async fn download(&self, path: &str, dest: &Path) -> Result<u64, Error> {
        let url = reqwest::Url::parse(&self.url)
            .and_then(|u| u.join(path))
            .map_err(|e| Error::Protocol(format!("bad download path {path:?}: {e}")))?;
        let unreachable = |e: reqwest::Error| Error::Unreachable { url: url.to_string(), reason: e.to_string() };
        let mut req = self.http.get(url.clone());
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        let resp = req.send().await.map_err(unreachable)?;
        let status = resp.status();
        if !status.is_success() {
            let body = resp.text().await.unwrap_or_default();
            return Err(Error::Http { status: status.as_u16(), body: body.chars().take(512).collect() });
        }
        let written = async {
            let mut file = std::fs::File::create(dest).map_err(|e| io_error(dest, &e))?;
            let mut body = resp.bytes_stream();
            let mut n = 0u64;
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(unreachable)?;
                file.write_all(&chunk).map_err(|e| io_error(dest, &e))?;
                n += chunk.len() as u64;
            }
            file.sync_all().map_err(|e| io_error(dest, &e))?;
            Ok(n)
        }
        .await;
        if written.is_err() {
            let _ = std::fs::remove_file(dest);
        }
        written
    }
}

fn io_error(dest: &Path, e: &std::io::Error) -> Error {
    Error::Protocol(format!("writing {}: {e}", dest.display()))
}
