//! The example server's one tool, `index_tree`: walk a directory tree, ask
//! before hashing a large one, SHA-256 every file, and report counts and
//! bytes by extension, the largest files and a fingerprint of the whole tree.
//!
//! It shows the typed authoring API end to end: arguments decoded into
//! [`IndexArgs`] (whose schema is the tool's `inputSchema`), a status message
//! per step, a typed elicitation midway ([`Proceed`]), cancellation honoured
//! between files, `?` on `io::Error`, and a [`Report`] returned as
//! `structuredContent` with its `outputSchema`. Run as a task (the client
//! declares the Tasks extension) it survives worker crashes: the answer to
//! the question is recorded and replayed, never asked twice.

use std::{
    collections::BTreeMap,
    io::Read,
    path::{Path, PathBuf},
};

use presa::{
    Catalog, Elicited, IntoToolOutput, Json, TaskPolicy, Tool, ToolContext, ToolError, ToolOutput,
    server::catalog::CatalogError,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The catalog of the example server.
pub fn catalog() -> Result<Catalog, CatalogError> {
    Catalog::builder()
        .tool(
            Tool::typed(
                "index_tree",
                "Indexes a directory tree: file counts and bytes by extension, the largest files, and a SHA-256 \
                 fingerprint of every file's content. Asks before hashing a large tree.",
                index_tree,
            )
            // Declared, not derived: the handler returns a ToolOutput (a Report, or an isError result).
            .output::<Report>()
            .policy(TaskPolicy::Optional),
        )
        .build()
}

/// The arguments of `index_tree`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct IndexArgs {
    /// The directory to index.
    pub path: String,
    /// Include files and directories whose name starts with a dot.
    #[serde(default)]
    pub include_hidden: bool,
    /// Ask before hashing when the tree holds more files than this.
    #[serde(default = "default_confirm_over")]
    #[schemars(range(min = 0))]
    pub confirm_over: u64,
    /// How many of the largest files to list.
    #[serde(default = "default_top")]
    #[schemars(range(min = 0, max = 100))]
    pub top: usize,
}

fn default_confirm_over() -> u64 {
    1000
}

fn default_top() -> usize {
    5
}

/// The question asked before hashing a large tree.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Proceed {
    /// Hash every file now?
    pub proceed: bool,
}

/// What `index_tree` reports (`structuredContent`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Report {
    /// Regular files indexed.
    pub files: u64,
    /// Their total size in bytes.
    pub bytes: u64,
    /// Files and bytes by extension (`""` for none).
    pub by_extension: BTreeMap<String, Tally>,
    /// The largest files, biggest first.
    pub largest: Vec<Entry>,
    /// SHA-256 over every file's relative path and content digest, in path
    /// order: equal trees have equal fingerprints.
    pub fingerprint: String,
}

/// A count of files and bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Tally {
    /// Files.
    pub files: u64,
    /// Bytes.
    pub bytes: u64,
}

/// One file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Entry {
    /// Path relative to the indexed directory.
    pub path: String,
    /// Size in bytes.
    pub bytes: u64,
}

/// The tool: walk, maybe ask, hash, report.
pub async fn index_tree(ctx: ToolContext, args: IndexArgs) -> Result<ToolOutput, ToolError> {
    let root = PathBuf::from(&args.path);
    if !root.is_dir() {
        // A tool error (isError): the model can read it and try another path.
        return Ok(ToolOutput::error(format!("{} is not a directory", args.path)));
    }
    ctx.set_status(format!("Scanning {}", args.path)).await?;
    let files = walk(&ctx, &root, args.include_hidden).await?;
    let total: u64 = files.iter().map(|(_, size)| size).sum();
    if files.len() as u64 > args.confirm_over {
        ctx.set_status(format!("Waiting for confirmation to hash {} files", files.len())).await?;
        let question = format!("{} holds {} files ({} bytes). Hash them all?", args.path, files.len(), total);
        match ctx.elicit::<Proceed>("proceed-hashing", question).await? {
            Elicited::Accept(Proceed { proceed: true }) => {}
            _ => return Ok(ToolOutput::error("Indexing stopped: hashing was not approved")),
        }
    }
    let mut report =
        Report { files: 0, bytes: 0, by_extension: BTreeMap::new(), largest: Vec::new(), fingerprint: String::new() };
    let mut tree = Sha256::new();
    for (i, (path, size)) in files.iter().enumerate() {
        if i % 100 == 0 {
            ctx.set_status(format!("Hashing {}/{}", i + 1, files.len())).await?;
        }
        if ctx.cancellation().is_cancelled() {
            return Err(ToolError::Cancelled);
        }
        let relative = path.strip_prefix(&root).unwrap_or(path).to_string_lossy().into_owned();
        let digest = hash_file(path).await?;
        tree.update(relative.as_bytes());
        tree.update([0]);
        tree.update(digest);
        report.files += 1;
        report.bytes += size;
        let ext = path.extension().map(|e| e.to_string_lossy().to_lowercase()).unwrap_or_default();
        let tally = report.by_extension.entry(ext).or_default();
        tally.files += 1;
        tally.bytes += size;
        report.largest.push(Entry { path: relative, bytes: *size });
    }
    report.largest.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.path.cmp(&b.path)));
    report.largest.truncate(args.top);
    report.fingerprint = hex(&tree.finalize());
    ctx.set_status(format!("Indexed {} files", report.files)).await?;
    Json(report).into_tool_output()
}

/// Every regular file under `root` with its size, in path order; symbolic
/// links are not followed. Yields between directories so cancellation and
/// other work get a turn.
async fn walk(ctx: &ToolContext, root: &Path, include_hidden: bool) -> Result<Vec<(PathBuf, u64)>, ToolError> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        if ctx.cancellation().is_cancelled() {
            return Err(ToolError::Cancelled);
        }
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            if !include_hidden && entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let kind = entry.file_type()?;
            if kind.is_dir() {
                dirs.push(entry.path());
            } else if kind.is_file() {
                out.push((entry.path(), entry.metadata()?.len()));
            }
        }
        tokio::task::yield_now().await;
    }
    out.sort();
    Ok(out)
}

/// The SHA-256 of a file's content, read off the async runtime's threads.
async fn hash_file(path: &Path) -> Result<[u8; 32], ToolError> {
    let path = path.to_path_buf();
    let digest = tokio::task::spawn_blocking(move || -> std::io::Result<[u8; 32]> {
        let mut file = std::fs::File::open(path)?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                return Ok(hasher.finalize().into());
            }
            hasher.update(&buf[..n]);
        }
    })
    .await
    .map_err(ToolError::internal)??;
    Ok(digest)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
