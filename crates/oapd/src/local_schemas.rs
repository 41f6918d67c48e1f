//! The schemas of the operator's own manifests (`manifests.dirs`): what a
//! crawled manifest gets when it is fetched (`oap_crawl::schema`), a local
//! one gets here, under local trust.
//!
//! Loading a catalog must not wait on the network, so the work is split in
//! two. [`Refresher::refresh`] runs before every rebuild of the daemon (and
//! in the background right after it starts): it reads each manifest file
//! that names an `input.schema` / `output.schema`, resolves the references
//! with `oap_crawl::schema::attach_local_schemas` (an `http(s)` URL through
//! the tool executor, whose address rules for a local manifest are the
//! operator's; a relative path as a file in that directory) and stores the
//! manifest with its records in `DATA_DIR/local-schemas/`, one file per
//! manifest file, keyed by the file's path and checked against its content
//! hash. [`LocalSchemas`] is what the catalog load asks ([`DirManifests`]):
//! a file whose stored copy was made from the same bytes is loaded as that
//! copy; any other file as it is (today's fallback parameters).
//!
//! The stored copy survives restarts, so neither a restart nor a rebuild
//! fetches again while it is fresh: a good record is revalidated after
//! [`REVALIDATE_AFTER`] with the validators it was served with (a 304
//! keeps it), a failed one is tried again after [`RETRY_FAILED_AFTER`], and
//! a changed manifest file is resolved at once (conditionally, from the
//! copy it replaces). Schema files beside the manifest are read again at
//! every refresh (a local read is cheap, and a change to one does not touch
//! the manifest). The one-shot commands (`oapd index`, `discover`) use the
//! stored copies and fetch nothing.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use oap_crawl::SchemaLimits;
use oap_discovery::DirManifests;
use oap_exec::Executor;
use oap_manifest::MAX_MANIFEST_BYTES;
use serde::{Deserialize, Serialize};

/// The directory under `index.data_dir` holding the resolved copies.
pub const CACHE_DIR: &str = "local-schemas";

/// Age after which a good record is revalidated (conditionally).
pub const REVALIDATE_AFTER: Duration = Duration::from_secs(3600);

/// Age after which a record with an error is tried again: a schema server
/// that was down when the daemon started is picked up without a restart.
pub const RETRY_FAILED_AFTER: Duration = Duration::from_secs(60);

/// Largest stored copy read back: the manifest (capped) plus its records
/// (the manifest cap holds for the result too, see `oap_crawl::schema`),
/// with room for the envelope's own fields and JSON escaping.
const MAX_CACHED_BYTES: u64 = 4 * MAX_MANIFEST_BYTES as u64;

/// One manifest file's resolved copy, as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Cached {
    /// The manifest file (for whoever reads the cache directory).
    path: String,
    /// SHA-256 of the file's bytes the copy was made from.
    source_sha256: String,
    /// When the references were last resolved.
    checked_unix: u64,
    /// The manifest with its `x-oapd-schema` records.
    body: String,
}

/// The catalog side: hands the stored copy of a manifest file to the load.
#[derive(Debug, Clone)]
pub struct LocalSchemas {
    cache_dir: PathBuf,
}

impl LocalSchemas {
    /// The copies stored under `data_dir`.
    pub fn new(data_dir: &Path) -> LocalSchemas {
        LocalSchemas {
            cache_dir: data_dir.join(CACHE_DIR),
        }
    }

    /// Where the copy of `manifest` is stored: named by its resolved path,
    /// so `dirs: [manifests]` and `dirs: [/etc/oapd/manifests]` (or `oapd
    /// lint` of the file) find the same copy.
    fn cache_file(&self, manifest: &Path) -> PathBuf {
        let resolved = manifest
            .canonicalize()
            .unwrap_or_else(|_| manifest.to_path_buf());
        let digest = oap_manifest::content_hash(resolved.as_os_str().as_encoded_bytes());
        self.cache_dir.join(format!("{digest}.json"))
    }

    fn read(&self, manifest: &Path) -> Option<Cached> {
        let bytes = oap_store::read_capped(&self.cache_file(manifest), MAX_CACHED_BYTES).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    fn write(&self, manifest: &Path, cached: &Cached) {
        let result = std::fs::create_dir_all(&self.cache_dir)
            .map_err(|err| err.to_string())
            .and_then(|()| serde_json::to_vec(cached).map_err(|err| err.to_string()))
            .and_then(|bytes| {
                oap_store::write_atomic(&self.cache_file(manifest), &bytes)
                    .map_err(|err| err.to_string())
            });
        if let Err(error) = result {
            // Only costs a fetch at the next refresh.
            tracing::warn!(manifest = %manifest.display(), error, "schema record not stored");
        }
    }
}

impl DirManifests for LocalSchemas {
    fn prepare(&self, path: &Path, bytes: Vec<u8>) -> Vec<u8> {
        if !names_a_schema(&bytes) {
            return bytes;
        }
        match self.read(path) {
            Some(cached) if cached.source_sha256 == sha256_hex(&bytes) => cached.body.into_bytes(),
            _ => bytes,
        }
    }
}

/// The daemon side: resolves the references of the manifests in `dirs`.
#[derive(Debug, Clone)]
pub struct Refresher {
    dirs: Vec<PathBuf>,
    store: LocalSchemas,
    executor: Arc<Executor>,
    limits: SchemaLimits,
    /// One refresh at a time: the one after start and a rebuild's would
    /// otherwise both fetch what neither has stored yet.
    running: Arc<tokio::sync::Mutex<()>>,
}

impl Refresher {
    /// Resolves the manifests of `dirs` with `executor` (the tool
    /// executor: its rules for a local manifest's calls are the rules of
    /// its schema fetches), storing under `data_dir`.
    pub fn new(dirs: Vec<PathBuf>, data_dir: &Path, executor: Arc<Executor>) -> Refresher {
        Refresher {
            dirs,
            store: LocalSchemas::new(data_dir),
            executor,
            limits: SchemaLimits::default(),
            running: Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    /// Resolves what is due (see the module docs); returns whether any
    /// stored copy changed, i.e. whether the index should be rebuilt.
    pub async fn refresh(&self) -> bool {
        let _one_at_a_time = self.running.lock().await;
        let this = self.clone();
        let due = match tokio::task::spawn_blocking(move || this.due(unix_now())).await {
            Ok(due) => due,
            Err(err) => {
                tracing::error!(error = %err, "local schema refresh failed");
                return false;
            }
        };
        let mut changed = false;
        for item in due {
            let Ok(text) = String::from_utf8(item.bytes) else {
                continue;
            };
            let dir = item.path.parent().unwrap_or(Path::new("."));
            let previous = item.previous.as_ref().map(|p| p.body.as_str());
            let body = oap_crawl::schema::attach_local_schemas(
                &self.executor,
                text,
                dir,
                previous,
                self.limits,
            )
            .await;
            let source_sha256 = item.sha256;
            changed |= item
                .previous
                .as_ref()
                .is_none_or(|p| p.body != body || p.source_sha256 != source_sha256);
            let cached = Cached {
                path: item.path.display().to_string(),
                source_sha256,
                checked_unix: unix_now(),
                body,
            };
            let store = self.store.clone();
            let path = item.path;
            let _ = tokio::task::spawn_blocking(move || store.write(&path, &cached)).await;
        }
        changed
    }

    /// The manifest files whose references are due, with their stored
    /// copies. Listed as the catalog lists a directory (`*.json`, the
    /// same cap), so no file is resolved that the load would not read.
    fn due(&self, now: u64) -> Vec<Due> {
        let mut out = Vec::new();
        for dir in &self.dirs {
            let Ok(listing) = std::fs::read_dir(dir) else {
                continue;
            };
            let mut files: Vec<PathBuf> = listing
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
                .collect();
            files.sort();
            files.truncate(oap_discovery::catalog::MAX_FILES_PER_DIR);
            for path in files {
                let Ok(bytes) = oap_store::read_capped(&path, MAX_MANIFEST_BYTES as u64) else {
                    continue;
                };
                if !names_a_schema(&bytes) {
                    continue;
                }
                let Ok(parsed) = oap_manifest::parse(&bytes) else {
                    continue;
                };
                let references = references(&parsed.manifest);
                if references.is_empty() {
                    continue;
                }
                let sha256 = sha256_hex(&bytes);
                let previous = self.store.read(&path);
                let fresh = previous.as_ref().is_some_and(|p| {
                    let age = Duration::from_secs(now.saturating_sub(p.checked_unix));
                    let failed = has_schema_errors(&p.body);
                    let reads_files = references.iter().any(|r| !is_url(r));
                    p.source_sha256 == sha256
                        && !reads_files
                        && age
                            < if failed {
                                RETRY_FAILED_AFTER
                            } else {
                                REVALIDATE_AFTER
                            }
                });
                if !fresh {
                    out.push(Due {
                        path,
                        bytes,
                        sha256,
                        previous,
                    });
                }
            }
        }
        out
    }
}

/// A manifest file to resolve.
struct Due {
    path: PathBuf,
    bytes: Vec<u8>,
    sha256: String,
    previous: Option<Cached>,
}

/// Whether a stored copy records a schema that could not be used (or no
/// longer parses, which is as good as a failure: resolve it again).
fn has_schema_errors(body: &str) -> bool {
    oap_manifest::parse(body.as_bytes()).map_or(true, |parsed| {
        !oap_manifest::tool::schema_errors(&parsed.manifest).is_empty()
    })
}

/// The `input.schema` / `output.schema` references that are not inline
/// schemas.
fn references(manifest: &oap_manifest::Manifest) -> Vec<String> {
    [manifest.input.as_ref(), manifest.output.as_ref()]
        .into_iter()
        .flatten()
        .filter_map(|io| io.schema.as_deref())
        .map(str::trim)
        .filter(|s| !s.is_empty() && !s.starts_with('{'))
        .map(str::to_string)
        .collect()
}

fn is_url(reference: &str) -> bool {
    reference
        .split_once(':')
        .is_some_and(|(scheme, _)| !scheme.contains('/'))
}

/// A cheap look before parsing: most manifests name no schema at all.
fn names_a_schema(bytes: &[u8]) -> bool {
    bytes.windows(8).any(|w| w == b"\"schema\"")
}

/// SHA-256 in hex (the catalog's content hash of the same bytes).
fn sha256_hex(bytes: &[u8]) -> String {
    oap_manifest::content_hash(bytes)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// What `oapd manifest lint` says of the schema references of the
/// manifest file `path` (its bytes `bytes`), resolved as the daemon would
/// resolve them for a manifest of that directory (local trust; the default
/// executor, without the configuration's `tools.ca_file`): the
/// `input.schema: <reason>` lines of the ones that cannot be used. Nothing
/// for a file with no reference, or a stored copy that records its own.
pub fn lint_references(path: &Path, bytes: &[u8]) -> Vec<String> {
    if !names_a_schema(bytes) {
        return Vec::new();
    }
    let Ok(parsed) = oap_manifest::parse(bytes) else {
        return Vec::new();
    };
    let recorded = [
        parsed.manifest.input.as_ref(),
        parsed.manifest.output.as_ref(),
    ]
    .into_iter()
    .flatten()
    .any(|io| {
        io.extra
            .contains_key(oap_manifest::tool::RESOLVED_SCHEMA_KEY)
    });
    if recorded || references(&parsed.manifest).is_empty() {
        return Vec::new();
    }
    let Ok(text) = String::from_utf8(bytes.to_vec()) else {
        return Vec::new();
    };
    let resolved = (|| {
        let executor = Executor::new(oap_exec::ExecPolicy::default()).map_err(|e| e.to_string())?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        Ok::<_, String>(runtime.block_on(oap_crawl::schema::attach_local_schemas(
            &executor,
            text,
            dir,
            None,
            SchemaLimits::default(),
        )))
    })();
    match resolved {
        Ok(body) => oap_manifest::parse(body.as_bytes())
            .map(|parsed| oap_manifest::tool::schema_errors(&parsed.manifest))
            .unwrap_or_default(),
        Err(error) => vec![format!("input.schema: not resolved: {error}")],
    }
}
