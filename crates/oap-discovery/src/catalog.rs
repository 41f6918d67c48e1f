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

use oap_manifest::{Diagnostic, Manifest, MAX_MANIFEST_BYTES};
use oap_store::StoreError;
use serde::{Deserialize, Serialize};

/// Upper bound on files read from one directory; protects start-up time and
/// memory against a directory that is not what the operator thinks it is.
pub const MAX_FILES_PER_DIR: usize = 100_000;

/// How far a manifest is trusted (defined in the store, which records it in
/// every crawled envelope).
pub use oap_store::Trust;

/// Where one manifest came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// `bundled`, `dir`, `lan` or `crawl`.
    pub kind: String,
    /// File path, `bundled:<file>`, or URL.
    pub location: String,
}

/// A configured source of manifests, in precedence order.
#[derive(Debug, Clone)]
pub enum Source {
    /// Manifests compiled into the binary: `(file name, bytes)`.
    Bundled(Vec<(String, Vec<u8>)>),
    /// A directory of `*.json` manifests owned by the operator.
    Dir(PathBuf),
    /// The crawler's store: envelopes of manifests fetched from the internet
    /// or the LAN (see [`oap_store::envelope`]). A missing directory is empty.
    Remote(PathBuf),
    /// The tools of the MCP servers the operator configured, asked afresh
    /// at every load (the daemon rebuilds when a server's tool list changes).
    Mcp(Arc<dyn McpTools>),
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

/// How a stored capability that came from an MCP server is called; absent
/// for OAP manifests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpBinding {
    /// The server's key in the operator's `mcpServers` map.
    pub server: String,
    /// The tool's name on that server.
    pub tool: String,
    /// The tool's `inputSchema`, verbatim.
    pub input_schema: serde_json::Value,
    /// The tool's `annotations`, verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<serde_json::Value>,
}

/// The catalog id of an MCP server's tool: `mcp/<server>/<tool>`.
pub fn mcp_id(server: &str, tool: &str) -> String {
    format!("mcp/{server}/{tool}")
}

/// One valid manifest ready to index.
///
/// The manifest is held as its compact JSON, not as the parsed struct: a
/// rebuild loads the whole catalog, and at 10,000 manifests the parsed
/// form was its largest allocation (64 MB, a third of the crawl's memory
/// peak), against about a quarter of that as compact JSON. The build reads
/// each manifest back one at a time ([`CatalogEntry::manifest`]).
#[derive(Debug, Clone)]
pub struct CatalogEntry {
    /// Stable id: `local/<slug of name>` for local manifests.
    pub id: String,
    /// The validated manifest (warnings aside), serialised compactly.
    manifest_json: Box<str>,
    /// sha256 of the raw document; drives incremental re-indexing.
    pub content_hash: String,
    /// Where it was loaded from; part of the index fingerprint.
    pub origin: Origin,
    /// Local for bundled and directory sources; from the envelope for remote ones.
    pub trust: Trust,
    /// Validation warnings (not errors), shown by `GET /v1/manifests/{id}`.
    pub warnings: Vec<Diagnostic>,
    /// Why the manifest's `health` URL says it is down (remote manifests,
    /// from the crawler's probe); such a manifest is left out of discovery.
    pub unhealthy: Option<String>,
    /// Set for a tool of an MCP server: the manifest is then a description
    /// made for search and listings, and the call goes to the server.
    /// Boxed: few entries have one, and every entry would carry its size.
    pub mcp: Option<Box<McpBinding>>,
    /// Request rows from outside the manifest ([`crate::requests`]),
    /// already checked and capped; part of the index fingerprint.
    pub requests: Vec<String>,
}

impl CatalogEntry {
    fn new(
        id: String,
        manifest: &Manifest,
        content_hash: String,
        origin: Origin,
        trust: Trust,
    ) -> Result<CatalogEntry, String> {
        let manifest_json = serde_json::to_string(manifest)
            .map_err(|err| format!("manifest cannot be serialised: {err}"))?;
        Ok(CatalogEntry {
            id,
            manifest_json: manifest_json.into_boxed_str(),
            content_hash,
            origin,
            trust,
            warnings: Vec::new(),
            unhealthy: None,
            mcp: None,
            requests: Vec::new(),
        })
    }

    /// The manifest, decoded from the entry's compact JSON.
    pub fn manifest(&self) -> Result<Manifest, serde_json::Error> {
        serde_json::from_str(&self.manifest_json)
    }

    /// The manifest as a JSON value (what the index's record stores).
    pub fn manifest_value(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::from_str(&self.manifest_json)
    }
}

/// A file that could not be loaded, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoadProblem {
    /// What failed: a file or directory path, `bundled:<file>`, or a crawled URL.
    pub location: String,
    /// Why, in words for the operator's log.
    pub message: String,
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
                Source::Dir(dir) => catalog.load_dir(dir),
                Source::Remote(dir) => crate::remote::load_into(&mut catalog, dir),
                Source::Mcp(tools) => {
                    for tool in tools.mcp_tools() {
                        catalog.add_mcp_tool(tool);
                    }
                }
            }
        }
        catalog
    }

    fn load_dir(&mut self, dir: &Path) {
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
            Ok(entry) => {
                self.by_id.insert(id, self.entries.len());
                self.entries.push(CatalogEntry {
                    warnings: parsed.warnings.diagnostics,
                    ..entry
                });
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
            Ok(entry) => {
                self.by_id.insert(id, self.entries.len());
                self.entries.push(CatalogEntry {
                    mcp: Some(Box::new(McpBinding {
                        server: tool.server,
                        tool: tool.name,
                        input_schema: tool.input_schema,
                        annotations: tool.annotations,
                    })),
                    ..entry
                });
            }
            Err(message) => self.problem(origin.location, message),
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

/// Why a file could not be read, for a [`LoadProblem`] (which names the
/// file already).
pub(crate) fn read_problem(err: StoreError, cap: usize) -> String {
    match err {
        StoreError::Io { op, source, .. } => match op {
            "opening" => format!("cannot open: {source}"),
            "reading" => format!("cannot read: {source}"),
            _ => format!("cannot stat: {source}"),
        },
        StoreError::NotAFile { .. } => "not a regular file".into(),
        StoreError::TooLarge { size, .. } => {
            format!("file is {size} bytes, larger than the {cap} byte manifest limit")
        }
        StoreError::GrewPastLimit { .. } => {
            format!("file grew past the {cap} byte manifest limit while reading")
        }
        other => other.to_string(),
    }
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
