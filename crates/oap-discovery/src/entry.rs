//! The shapes a catalog is made of: one loaded manifest
//! ([`CatalogEntry`]), where it came from ([`Origin`]) and a file that
//! could not be loaded ([`LoadProblem`]).
//!
//! They sit below [`crate::catalog`] (which fills them) so that the modules
//! feeding or reading the catalog, the crawl envelopes of
//! [`crate::remote`] and the request rows of [`crate::requests`], need the
//! shapes and not the loader: the loader calls them, never the reverse.

use oap_manifest::{Diagnostic, Manifest};
use oap_store::{StoreError, Trust};
use serde::{Deserialize, Serialize};

/// Upper bound on files read from one directory; protects start-up time and
/// memory against a directory that is not what the operator thinks it is.
pub const MAX_FILES_PER_DIR: usize = 100_000;

/// Where one manifest came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// `bundled`, `dir`, `lan` or `crawl`.
    pub kind: String,
    /// File path, `bundled:<file>`, or URL.
    pub location: String,
}

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
    pub(crate) fn new(
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
