//! Loading manifests from their sources into a de-duplicated catalog.
//!
//! A source is the set of manifests bundled into the binary or an operator
//! directory. Loading never fails as a whole: an unreadable or invalid file
//! becomes a [`LoadProblem`] and the other files are still loaded, so one bad
//! manifest can never take the daemon (or its valid neighbours) down.
//!
//! Name collisions are common in the wild (the reference corpus has three).
//! The policy is precedence, like `$PATH`: operator directories in the order
//! they are configured, then the bundled set; inside one directory, files in
//! byte order of their names. The first manifest with a given id wins, every
//! later one is reported as a [`Collision`] naming both locations. This lets
//! an operator override a bundled manifest by dropping a file with the same
//! name into their directory.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use oap_manifest::{Manifest, MAX_MANIFEST_BYTES};
use serde::Serialize;

/// How far a manifest is trusted (defined in the store, which records it in
/// every crawled envelope).
pub use oap_store::Trust;

use crate::entry::read_problem;
pub use crate::entry::{CatalogEntry, LoadProblem, McpBinding, Origin, MAX_FILES_PER_DIR};
use crate::remote::RemoteItem;

/// A configured source of manifests, in precedence order.
#[derive(Debug, Clone)]
pub enum Source {
    /// Manifests compiled into the binary: `(file name, bytes)`.
    Bundled(Vec<(String, Vec<u8>)>),
    /// A directory of `*.json` manifests owned by the operator.
    Dir(PathBuf),
    /// [`Source::Dir`], each file's bytes passed through the
    /// [`DirManifests`] before they are parsed (the daemon's recorded
    /// schemas of its operator's manifests).
    DirWith(PathBuf, Arc<dyn DirManifests>),
    /// The crawler's store: envelopes of manifests fetched from the internet
    /// or the LAN (see [`oap_store::envelope`]). A missing directory is empty.
    Remote(PathBuf),
    /// A signed snapshot's tools, as envelopes like the crawler's (the
    /// daemon's install writes them), counted as their own origin kind,
    /// `snapshot`: they came from the snapshot's builder, not this board's
    /// crawler. A missing directory is empty.
    Snapshot(PathBuf),
    /// The tools of the MCP servers the operator configured, asked afresh
    /// at every load (the daemon rebuilds when a server's tool list changes).
    Mcp(Arc<dyn McpTools>),
}

/// What the daemon adds to an operator directory's manifest file before
/// it is loaded: the documents its `input.schema` / `output.schema` name,
/// fetched beforehand and recorded in the manifest, so loading itself
/// reads nothing but the directory and a local cache.
pub trait DirManifests: Send + Sync + std::fmt::Debug {
    /// The manifest to load for the file at `path` whose bytes are `bytes`
    /// (`bytes` itself when there is nothing to add).
    fn prepare(&self, path: &Path, bytes: Vec<u8>) -> Vec<u8>;
}

/// Whatever holds the MCP servers' current tool lists (the daemon's MCP
/// hub); discovery knows nothing about MCP transports.
pub trait McpTools: Send + Sync + std::fmt::Debug {
    /// Every tool of every connected server, as listed last.
    fn mcp_tools(&self) -> Vec<McpToolDoc>;
}

/// One tool an MCP server listed (`tools/list`), ready to index.
#[derive(Debug, Clone, PartialEq)]
pub struct McpToolDoc {
    /// The server's key in the operator's `mcpServers` map.
    pub server: String,
    /// The tool's name on that server (what `tools/call` takes).
    pub name: String,
    /// The tool's human title, when it has one.
    pub title: Option<String>,
    /// The tool's description (the main search document).
    pub description: String,
    /// The tool's `inputSchema`, verbatim: offered to the model untouched.
    pub input_schema: serde_json::Value,
    /// The tool's `annotations` (read-only, destructive, ...), verbatim.
    pub annotations: Option<serde_json::Value>,
    /// SHA-256 of the tool as listed; an unchanged tool is not re-embedded.
    pub content_hash: String,
    /// How far the server is trusted (a remote server's URL decides it).
    pub trust: Trust,
    /// Where the server is: its command or URL, for listings and logs.
    pub location: String,
}

/// Longest MCP tool description indexed and offered, in characters.
pub const MAX_MCP_DESCRIPTION_CHARS: usize = 4_000;
/// Largest MCP `inputSchema` accepted, serialised, in bytes; a larger one
/// would crowd a small model's context out anyway.
pub const MAX_MCP_SCHEMA_BYTES: usize = 64 * 1024;

/// The catalog id of an MCP server's tool: `mcp/<server>/<tool>`.
pub fn mcp_id(server: &str, tool: &str) -> String {
    format!("mcp/{server}/{tool}")
}

/// A manifest skipped because an earlier source already provided its id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Collision {
    /// The id both manifests claim.
    pub id: String,
    /// Location of the manifest that won (the earlier source).
    pub kept: String,
    /// Location of the manifest that was left out.
    pub skipped: String,
}

/// Everything loading found: the entries, and what went wrong.
#[derive(Debug, Default)]
pub struct Catalog {
    /// The valid manifests, in load order, ids unique.
    pub entries: Vec<CatalogEntry>,
    /// Files that could not be loaded.
    pub problems: Vec<LoadProblem>,
    /// Manifests left out because their id was taken.
    pub collisions: Vec<Collision>,
    /// id → position in `entries`, so collision checks stay O(1) per file
    /// (a linear scan made loading 100k manifests quadratic).
    by_id: HashMap<String, usize>,
}

/// The id of a manifest installed on this machine.
pub fn local_id(manifest: &Manifest) -> String {
    format!("local/{}", oap_manifest::slug(&manifest.name))
}

impl Catalog {
    /// Attaches each entry's request rows from `rows`, checked and capped
    /// ([`crate::requests::accepted`]).
    pub fn attach_requests(&mut self, rows: &dyn crate::requests::RequestRows) {
        for entry in &mut self.entries {
            entry.requests = crate::requests::accepted(rows.requests(entry));
        }
    }

    /// Loads every source in precedence order (first wins on id collisions).
    pub fn load(sources: &[Source]) -> Catalog {
        let mut catalog = Catalog::default();
        for source in sources {
            match source {
                Source::Bundled(files) => {
                    for (name, bytes) in files {
                        let origin = Origin {
                            kind: "bundled".into(),
                            location: format!("bundled:{name}"),
                        };
                        catalog.add_document(bytes, origin, Trust::Local);
                    }
                }
                Source::Dir(dir) => catalog.load_dir(dir, None),
                Source::DirWith(dir, prepare) => catalog.load_dir(dir, Some(prepare.as_ref())),
                Source::Remote(dir) => {
                    crate::remote::read_each(dir, "crawl", |item| catalog.add_remote(item));
                }
                Source::Snapshot(dir) => {
                    crate::remote::read_each(dir, "snapshot", |item| catalog.add_remote(item));
                }
                Source::Mcp(tools) => {
                    for tool in tools.mcp_tools() {
                        catalog.add_mcp_tool(tool);
                    }
                }
            }
        }
        catalog
    }

    fn load_dir(&mut self, dir: &Path, prepare: Option<&dyn DirManifests>) {
        let listing = match fs::read_dir(dir) {
            Ok(listing) => listing,
            Err(err) => {
                self.problem(
                    dir.display().to_string(),
                    format!("cannot read directory: {err}"),
                );
                return;
            }
        };
        let mut files: Vec<PathBuf> = listing
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
            .collect();
        files.sort();
        if files.len() > MAX_FILES_PER_DIR {
            self.problem(
                dir.display().to_string(),
                format!(
                    "{} manifest files, only the first {MAX_FILES_PER_DIR} are read",
                    files.len()
                ),
            );
            files.truncate(MAX_FILES_PER_DIR);
        }
        for path in files {
            let location = path.display().to_string();
            match read_capped(&path) {
                Ok(bytes) => {
                    let bytes = match prepare {
                        Some(prepare) => prepare.prepare(&path, bytes),
                        None => bytes,
                    };
                    let origin = Origin {
                        kind: "dir".into(),
                        location,
                    };
                    self.add_document(&bytes, origin, Trust::Local);
                }
                Err(message) => self.problem(location, message),
            }
        }
    }

    /// Parses, validates and adds one document, recording why when it cannot.
    pub fn add_document(&mut self, bytes: &[u8], origin: Origin, trust: Trust) {
        self.add_document_with(bytes, origin, trust, None);
    }

    /// Like [`Catalog::add_document`]; `host` makes the id `<host>/<slug>`
    /// (remote manifests) instead of `local/<slug>`. A manifest that is not
    /// local may never declare a local command: it becomes a problem.
    pub fn add_document_with(
        &mut self,
        bytes: &[u8],
        origin: Origin,
        trust: Trust,
        host: Option<&str>,
    ) {
        let parsed = match oap_manifest::parse(bytes) {
            Ok(parsed) => parsed,
            Err(err) => {
                self.problem(origin.location, err.to_string());
                return;
            }
        };
        let manifest = parsed.manifest;
        if trust != Trust::Local && manifest.invoke_kind() == Some(oap_manifest::InvokeKind::Stdio)
        {
            self.problem(
                origin.location,
                format!(
                    "invoke.method stdio is refused: a manifest from the {} may not declare a \
                     local command (only local manifests may)",
                    match trust {
                        Trust::Lan => "LAN",
                        _ => "internet",
                    }
                ),
            );
            return;
        }
        let id = match host {
            Some(host) => format!("{host}/{}", oap_manifest::slug(&manifest.name)),
            None => local_id(&manifest),
        };
        if let Some(&existing) = self.by_id.get(&id) {
            self.collisions.push(Collision {
                kept: self.entries[existing].origin.location.clone(),
                id,
                skipped: origin.location,
            });
            return;
        }
        let entry = CatalogEntry::new(
            id.clone(),
            &manifest,
            oap_manifest::content_hash(bytes),
            origin.clone(),
            trust,
        );
        match entry {
            Ok(mut entry) => {
                entry.warnings = parsed.warnings.diagnostics;
                self.by_id.insert(id, self.entries.len());
                self.entries.push(entry);
            }
            Err(message) => self.problem(origin.location, message),
        }
    }

    /// Adds one MCP server's tool as `mcp/<server>/<tool>`. Its manifest is
    /// built here, not parsed: it names the tool, carries its description
    /// and its top-level parameters for search, and says `invoke.method:
    /// mcp`, which no parsed manifest may declare, so a document from
    /// anywhere cannot pass itself off as one of the operator's servers.
    pub fn add_mcp_tool(&mut self, tool: McpToolDoc) {
        let id = mcp_id(&tool.server, &tool.name);
        let location = format!("mcp:{}/{} ({})", tool.server, tool.name, tool.location);
        let schema_bytes = serde_json::to_vec(&tool.input_schema).map_or(usize::MAX, |b| b.len());
        if schema_bytes > MAX_MCP_SCHEMA_BYTES {
            self.problem(
                location,
                format!(
                    "inputSchema is {schema_bytes} bytes, over the {MAX_MCP_SCHEMA_BYTES}-byte cap"
                ),
            );
            return;
        }
        let manifest = match mcp_manifest(&tool) {
            Ok(manifest) => manifest,
            Err(message) => {
                self.problem(location, message);
                return;
            }
        };
        if let Some(&existing) = self.by_id.get(&id) {
            self.collisions.push(Collision {
                kept: self.entries[existing].origin.location.clone(),
                id,
                skipped: location,
            });
            return;
        }
        let origin = Origin {
            kind: "mcp".into(),
            location,
        };
        let entry = CatalogEntry::new(
            id.clone(),
            &manifest,
            tool.content_hash.clone(),
            origin.clone(),
            tool.trust,
        );
        match entry {
            Ok(mut entry) => {
                entry.mcp = Some(Box::new(McpBinding {
                    server: tool.server,
                    tool: tool.name,
                    input_schema: tool.input_schema,
                    annotations: tool.annotations,
                }));
                self.by_id.insert(id, self.entries.len());
                self.entries.push(entry);
            }
            Err(message) => self.problem(origin.location, message),
        }
    }

    /// Adds what the crawl store held: a stored manifest under its host's
    /// id, keeping the crawler's health verdict, or a problem.
    fn add_remote(&mut self, item: RemoteItem) {
        match item {
            RemoteItem::Problem(problem) => self.problems.push(problem),
            RemoteItem::Manifest(stored) => {
                let count = self.entries.len();
                self.add_document_with(
                    stored.body.as_bytes(),
                    stored.origin,
                    stored.trust,
                    Some(&stored.host),
                );
                if self.entries.len() > count {
                    if let Some(entry) = self.entries.last_mut() {
                        entry.unhealthy = stored.unhealthy;
                    }
                }
            }
        }
    }

    pub(crate) fn problem(&mut self, location: String, message: String) {
        self.problems.push(LoadProblem { location, message });
    }
}

/// Reads a regular file, refusing anything over the manifest size cap without
/// reading it all (a 10 GB file in the directory must not exhaust memory).
fn read_capped(path: &Path) -> Result<Vec<u8>, String> {
    oap_store::read_capped(path, MAX_MANIFEST_BYTES as u64)
        .map_err(|err| read_problem(err, MAX_MANIFEST_BYTES))
}

/// The manifest an MCP tool is searched and listed as.
fn mcp_manifest(tool: &McpToolDoc) -> Result<Manifest, String> {
    let mut description: String = tool
        .description
        .trim()
        .chars()
        .take(MAX_MCP_DESCRIPTION_CHARS)
        .collect();
    if description.is_empty() {
        description = tool.title.clone().unwrap_or_else(|| tool.name.clone());
    }
    // Top-level properties become the manifest's parameters: their names
    // and descriptions are search text, and listings show them.
    let mut parameters = serde_json::Map::new();
    if let Some(properties) = tool
        .input_schema
        .get("properties")
        .and_then(serde_json::Value::as_object)
    {
        let required: Vec<&str> = tool
            .input_schema
            .get("required")
            .and_then(serde_json::Value::as_array)
            .map(|names| names.iter().filter_map(serde_json::Value::as_str).collect())
            .unwrap_or_default();
        for (name, property) in properties.iter().take(64) {
            let mut parameter = serde_json::Map::new();
            if let Some(kind) = property.get("type").and_then(serde_json::Value::as_str) {
                parameter.insert("type".into(), kind.into());
            }
            if let Some(text) = property
                .get("description")
                .and_then(serde_json::Value::as_str)
            {
                let text: String = text.chars().take(500).collect();
                parameter.insert("description".into(), text.into());
            }
            parameter.insert("required".into(), required.contains(&name.as_str()).into());
            parameters.insert(name.clone(), parameter.into());
        }
    }
    let mut document = serde_json::json!({
        "oap": "1.0",
        "name": tool.name,
        "description": description,
        "invoke": {"method": "mcp", "url": format!("mcp://{}/{}", tool.server, tool.name)},
        "input": {"format": "application/json", "parameters": parameters},
    });
    if let Some(title) = tool.title.as_deref().filter(|t| !t.trim().is_empty()) {
        document["title"] = title.chars().take(200).collect::<String>().into();
    }
    serde_json::from_value(document)
        .map_err(|err| format!("tool does not describe as a manifest: {err}"))
}
