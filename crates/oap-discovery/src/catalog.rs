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
}

/// One valid manifest ready to index.
#[derive(Debug, Clone)]
pub struct CatalogEntry {
    /// Stable id: `local/<slug of name>` for local manifests.
    pub id: String,
    /// The parsed manifest; it passed validation (warnings aside).
    pub manifest: Manifest,
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
        self.by_id.insert(id.clone(), self.entries.len());
        self.entries.push(CatalogEntry {
            id,
            content_hash: oap_manifest::content_hash(bytes),
            manifest,
            origin,
            trust,
            warnings: parsed.warnings.diagnostics,
            unhealthy: None,
        });
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
