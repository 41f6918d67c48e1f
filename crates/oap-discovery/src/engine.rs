//! The discovery engine: builds the on-disk index from a catalog and answers
//! "which capability fits this task?".
//!
//! Readers never block: the mapped index sits behind an `ArcSwap`, a rebuild
//! writes a new file (atomically renamed into place), maps it and swaps the
//! pointer. Queries in flight keep the old mapping alive until they finish.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use oap_embed::Embedder;
use oap_index::{DocInput, Index, IndexError, RowInput, StreamWriter, VectorDtype};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::activity::{QueryActivity, MAX_PAUSE};
use crate::adapter::QueryAdapter;
use crate::catalog::{Catalog, CatalogEntry, Collision, LoadProblem, Origin, Source, Trust};
use crate::document::{self, RowWeights, RECIPE_VERSION};
use crate::query;
use crate::query_cache::QueryCache;
use crate::scoring::{self, Mode, ScoreParts, Scoring};

/// File name of the index inside the data directory.
pub const INDEX_FILE: &str = "index.oapx";

/// Texts handed to the embedder at once while indexing.
const EMBED_BATCH: usize = 32;

/// Texts embedded between two looks at the running queries in a background
/// rebuild: one of the embedder's background forward passes, so a query
/// arriving mid-rebuild overlaps at most one of them.
const BACKGROUND_EMBED_CHUNK: usize = 4;

/// Query embeddings cached by default (`discovery.query_cache`).
pub const DEFAULT_QUERY_CACHE: usize = 256;

/// Settings of the engine (the daemon maps its config onto this).
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Directory holding the index file ([`INDEX_FILE`]); created by [`Engine::open`] if missing.
    pub data_dir: PathBuf,
    /// How embedding rows are stored: `F32`, or `I8` with a per-row scale (a quarter of the vector bytes).
    pub dtype: VectorDtype,
    /// Fusion weights, thresholds and the default retrieval mode.
    pub scoring: Scoring,
    /// Which texts of a manifest are embedded; part of the fingerprint, so a change rebuilds.
    pub row_weights: RowWeights,
    /// Threads for a dense scan of a large index (default: all cores).
    pub search_threads: Option<usize>,
    /// Query embeddings kept for repeated query texts (see
    /// [`crate::query_cache`]); 0 disables the cache.
    pub query_cache: usize,
    /// Applied to every query embedding of the model it was trained for
    /// (see [`crate::adapter`]); `None`: query vectors as the model made
    /// them. Not part of the fingerprint: documents do not depend on it.
    pub query_adapter: Option<Arc<QueryAdapter>>,
}

impl EngineConfig {
    /// Defaults for everything but the data directory: f32 rows, the benchmarked scoring
    /// and row weights, every core for a dense scan.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        EngineConfig {
            data_dir: data_dir.into(),
            dtype: VectorDtype::F32,
            scoring: Scoring::default(),
            row_weights: RowWeights::default(),
            search_threads: None,
            query_cache: DEFAULT_QUERY_CACHE,
            query_adapter: None,
        }
    }

    /// Where the index file lives: `<data_dir>/index.oapx`.
    pub fn index_path(&self) -> PathBuf {
        self.data_dir.join(INDEX_FILE)
    }
}

/// Why [`Engine::open`] or a rebuild failed. After a failed rebuild the previous
/// index keeps serving (see [`Engine::rebuild_failure`]).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The data directory could not be created (permissions, read-only filesystem).
    #[error("cannot create data directory {path}: {source}")]
    DataDir {
        /// The directory from [`EngineConfig::data_dir`].
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The embedding model failed on a manifest text while building.
    #[error("embedding failed: {0}")]
    Embed(#[from] oap_embed::EmbedError),
    /// The index file could not be written, mapped or read back (full disk, I/O error).
    #[error("index: {0}")]
    Index(#[from] IndexError),
    /// A rebuild panicked while holding the build lock; no further rebuild runs in this process.
    #[error("index build lock poisoned by an earlier panic")]
    Poisoned,
    /// The background rebuild thread could not be spawned (thread or memory limit).
    #[error("cannot start the rebuild thread: {0}")]
    Thread(std::io::Error),
}

/// Why a discovery query got no answer at all (an empty result is not an error).
#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    /// The task was empty or only whitespace.
    #[error("task is empty")]
    EmptyTask,
    /// The embedding model failed on the task.
    #[error("embedding the task failed: {0}")]
    Embed(#[from] oap_embed::EmbedError),
}

/// What the index stores per manifest (opaque to the index crate).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredRecord {
    /// Catalog id: `local/<slug>` or `<host>/<slug>` for remote manifests.
    pub id: String,
    /// Decides where the manifest's tool may connect and whether stdio may run.
    pub trust: Trust,
    /// Where the manifest was loaded from.
    pub origin: Origin,
    /// SHA-256 of the raw document, lowercase hex; part of the index fingerprint.
    pub content_hash: String,
    /// The manifest as parsed, unknown fields included (what the API returns).
    pub manifest: serde_json::Value,
    /// Validation warnings, rendered, so `GET /v1/manifests/{id}` can show them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Why the manifest's health probe fails; unhealthy manifests are left
    /// out of discovery results but stay listed with this reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy: Option<String>,
    /// Set when the capability is an MCP server's tool: how to call it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<crate::catalog::McpBinding>,
}

/// Index-level metadata, stored as the index's meta blob.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct IndexMeta {
    format: String,
    recipe: u32,
    model_id: Option<String>,
    fingerprint: String,
    built_at_unix: u64,
}

/// What a build or an open did; the daemon logs it and `/health` shows it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BuildReport {
    /// Manifests in the index.
    pub docs: usize,
    /// Embedded rows in the index (none without a model).
    pub rows: usize,
    /// Rows embedded by this build (0 when an unchanged index was reused).
    pub embedded_rows: usize,
    /// Rows whose vectors were carried over from the previous index.
    pub reused_rows: usize,
    /// The existing index matched the catalog and was mapped as it was.
    pub reused_index: bool,
    /// Why an existing index file could not be used, if it could not.
    pub previous_index_problem: Option<String>,
    /// Files that could not be loaded; the rest of the catalog was indexed.
    pub problems: Vec<LoadProblem>,
    /// Manifests skipped because an earlier source had the same id.
    pub collisions: Vec<Collision>,
    /// Wall time of the whole load and build, in milliseconds.
    pub elapsed_ms: f64,
}

impl BuildReport {
    /// An existing index mapped as it is.
    fn reused(index: &Index) -> BuildReport {
        BuildReport {
            docs: index.len(),
            rows: index.rows(),
            reused_index: true,
            ..BuildReport::default()
        }
    }
}

/// A candidate capability in a discovery answer.
#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    /// Catalog id, as for `GET /v1/manifests/{id}`.
    pub id: String,
    /// The publishing domain for crawled manifests, the id for local ones
    /// (the reference service's `domain` field).
    pub domain: String,
    /// The manifest's `name`.
    pub name: String,
    /// The manifest's `description`.
    pub description: String,
    /// The manifest's `invoke` object as published (`null` if absent).
    pub invoke: serde_json::Value,
    /// The fused score results are ranked by (same as `scores.fused`).
    pub score: f32,
    /// How far the manifest is trusted; decides where its tool may connect.
    pub trust: Trust,
    /// The parts of `score`, so an operator can see why it ranked where it did.
    pub scores: ScoreParts,
}

/// Timings and settings of one discovery, reported next to its results.
#[derive(Debug, Clone, Serialize)]
pub struct DiscoverMeta {
    /// Whole query, in milliseconds.
    pub total_ms: f64,
    /// Embedding the task, in milliseconds (about 0 in lexical mode or with a precomputed vector).
    pub embed_ms: f64,
    /// Ranking against the index, in milliseconds.
    pub search_ms: f64,
    /// The mode actually used: lexical when the engine or the index has no model.
    pub mode: Mode,
    /// The "no fitting capability" threshold for `mode`.
    pub threshold: f32,
    /// Manifests in the index that answered.
    pub index_docs: usize,
    /// Id of the model the index vectors came from (`None`: lexical only).
    pub model: Option<String>,
    /// The instruction part of the task that retrieval used.
    pub query: String,
}

/// The answer to a discovery request, in the reference service's shape.
#[derive(Debug, Clone, Serialize)]
pub struct Discovery {
    /// The task as the client sent it.
    pub task: String,
    /// The best candidate if it passes the threshold; `None` means "no fitting capability".
    #[serde(rename = "match")]
    pub best: Option<Candidate>,
    /// Up to `top_k` healthy candidates, best first, whether or not they pass the threshold.
    pub candidates: Vec<Candidate>,
    /// How the answer was computed.
    pub meta: DiscoverMeta,
}

/// Summary row for listings.
#[derive(Debug, Clone, Serialize)]
pub struct ManifestSummary {
    /// Catalog id.
    pub id: String,
    /// The publishing domain for crawled manifests, the id for local ones.
    pub domain: String,
    /// The manifest's `name`.
    pub name: String,
    /// The manifest's `description`.
    pub description: String,
    /// How far the manifest is trusted.
    pub trust: Trust,
    /// Where it came from: `bundled`, `dir`, `crawl`, `lan` or `mcp`.
    pub source: String,
}

/// The last rebuild failed: the index serves what it had before, behind
/// its sources until a rebuild succeeds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RebuildFailure {
    /// Why the last rebuild failed.
    pub error: String,
    /// Rebuilds that failed in a row since the last one that succeeded.
    pub consecutive: u32,
    /// When the first of them failed (seconds since the Unix epoch).
    pub since_unix: u64,
}

/// How the last index build ended (the one at start-up, or the last
/// rebuild), for the status page: when, whether it worked, what it served.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LastBuild {
    /// When it finished (milliseconds since the Unix epoch).
    pub finished_unix_ms: u64,
    /// Whether it succeeded; a failed rebuild leaves the old index serving.
    pub ok: bool,
    /// Manifests served once it ended (the old index's after a failure).
    pub manifests: usize,
    /// Wall time of the load and build, in milliseconds.
    pub elapsed_ms: f64,
    /// Nothing had changed: the existing index was kept as it was.
    pub reused_index: bool,
    /// Why it failed.
    pub error: Option<String>,
}

/// Size and state, for `/health`.
#[derive(Debug, Clone, Serialize)]
pub struct EngineStats {
    /// Manifests in the index.
    pub docs: usize,
    /// Embedded rows in the index.
    pub rows: usize,
    /// Size of the index file in bytes.
    pub index_bytes: u64,
    /// `"f32"` or `"i8"`.
    pub dtype: &'static str,
    /// Id of the model the index vectors came from.
    pub model: Option<String>,
    /// The mode queries run in ([`Engine::mode`]).
    pub mode: Mode,
}

struct Snapshot {
    index: Index,
    model_id: Option<String>,
}

/// The catalog's sources, the embedder and the current index snapshot; shared by
/// every request of the daemon (`Arc<Engine>`). All methods take `&self`: queries run
/// concurrently with each other and with one rebuild at a time.
pub struct Engine {
    config: EngineConfig,
    sources: Vec<Source>,
    embedder: Option<Arc<dyn Embedder>>,
    snapshot: ArcSwap<Snapshot>,
    build_lock: Mutex<()>,
    /// Set while the last rebuild failed (see [`Engine::rebuild_failure`]).
    failure: Mutex<Option<RebuildFailure>>,
    /// How the last build ended (see [`Engine::last_build`]).
    last_build: Mutex<LastBuild>,
    /// Queries in flight; a background rebuild waits for them between units
    /// of work (see `activity`).
    activity: QueryActivity,
    /// Recent query embeddings (`None`: disabled). The embedder is fixed for
    /// the engine's life, so the text alone is the key.
    query_cache: Option<QueryCache>,
}

/// Who waits on an index build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// Start-up and the command line: nothing else runs, use every core.
    Foreground,
    /// A rebuild while serving: idle-class threads, so queries go first.
    Background,
}

impl Engine {
    /// Loads the catalog and opens the index, rebuilding it only when the
    /// catalog, the model or the recipe changed (or the file is damaged).
    pub fn open(
        mut config: EngineConfig,
        sources: Vec<Source>,
        embedder: Option<Arc<dyn Embedder>>,
    ) -> Result<(Engine, BuildReport), EngineError> {
        // An adapter trained for other weights would scramble the query
        // vector; serve without it rather than badly (see `adapter`).
        if let (Some(adapter), Some(embedder)) = (&config.query_adapter, &embedder) {
            if !adapter.fits(embedder.model_id(), embedder.dim()) {
                tracing::warn!(
                    adapter_model = adapter.model(),
                    adapter_dim = adapter.dim(),
                    model = embedder.model_id(),
                    dim = embedder.dim(),
                    "query adapter was trained for another model: query vectors are used unadapted"
                );
                config.query_adapter = None;
            }
        }
        std::fs::create_dir_all(&config.data_dir).map_err(|source| EngineError::DataDir {
            path: config.data_dir.clone(),
            source,
        })?;
        let started = Instant::now();
        let catalog = Catalog::load(&sources);
        let model_id = embedder.as_ref().map(|e| e.model_id().to_string());
        let fingerprint = fingerprint(
            &catalog,
            model_id.as_deref(),
            config.dtype,
            &config.row_weights,
        );
        let path = config.index_path();

        let mut report = BuildReport::default();
        let previous = match open_index(&config, &path) {
            Ok(index) => Some(index),
            Err(IndexError::NotFound { .. }) => None,
            Err(err) => {
                tracing::error!(path = %path.display(), error = %err, "index file unusable, rebuilding it");
                report.previous_index_problem = Some(err.to_string());
                None
            }
        };
        let (index, mut built) = match previous {
            Some(index) if read_meta(&index).is_some_and(|m| m.fingerprint == fingerprint) => {
                let report = BuildReport::reused(&index);
                (index, report)
            }
            previous => build_index(
                &config,
                &catalog,
                embedder.as_deref(),
                previous.as_ref(),
                &fingerprint,
                None,
            )?,
        };
        if !built.reused_index {
            // The build's temporaries (batch activations, vector maps) are
            // freed; hand the pages back so a daemon that had to re-embed at
            // start (a new model, a damaged index) does not keep the
            // build's peak for its whole life.
            oap_embed::return_freed_memory();
        }
        built.previous_index_problem = report.previous_index_problem.take();
        built.problems = catalog.problems;
        built.collisions = catalog.collisions;
        built.elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
        let last_build = LastBuild {
            finished_unix_ms: unix_now_ms(),
            ok: true,
            manifests: index.len(),
            elapsed_ms: built.elapsed_ms,
            reused_index: built.reused_index,
            error: None,
        };
        let snapshot = Snapshot { index, model_id };
        let query_cache = QueryCache::new(config.query_cache);
        let engine = Engine {
            query_cache,
            config,
            sources,
            embedder,
            snapshot: ArcSwap::from_pointee(snapshot),
            build_lock: Mutex::new(()),
            failure: Mutex::new(None),
            last_build: Mutex::new(last_build),
            activity: QueryActivity::default(),
        };
        Ok((engine, built))
    }

    /// Re-reads the sources and rebuilds the index; `force` re-embeds
    /// everything instead of reusing unchanged vectors. Queries keep being
    /// served from the old snapshot until the new one is swapped in; on
    /// failure the old snapshot stays.
    ///
    /// Runs at background priority (see [`Priority`]): a rebuild while
    /// serving must not slow the queries down.
    pub fn rebuild(&self, force: bool) -> Result<BuildReport, EngineError> {
        self.rebuild_at(force, Priority::Background)
    }

    /// [`Engine::rebuild`] at an explicit priority (`Foreground` for a
    /// command-line rebuild nobody competes with).
    pub fn rebuild_at(&self, force: bool, priority: Priority) -> Result<BuildReport, EngineError> {
        match priority {
            Priority::Foreground => {
                let result = self.rebuild_inner(force, priority);
                oap_embed::return_freed_memory();
                result
            }
            // A thread of its own, lowered for its lifetime: the catalog
            // parse and the index write yield to queries too, and the
            // caller's (pooled) thread keeps its priority.
            Priority::Background => std::thread::scope(|scope| {
                let worker = std::thread::Builder::new()
                    .name("oap-rebuild".into())
                    .spawn_scoped(scope, || {
                        oap_embed::lower_current_thread_priority();
                        self.rebuild_inner(force, priority)
                    })
                    .map_err(EngineError::Thread)?;
                let result = match worker.join() {
                    Ok(result) => result,
                    Err(panic) => std::panic::resume_unwind(panic),
                };
                // The rebuild's temporaries (vector maps, batch activations)
                // are freed now; give the pages back rather than keep the
                // daemon at the rebuild's peak.
                oap_embed::return_freed_memory();
                result
            }),
        }
    }

    /// Why the last rebuild failed, while no later one has succeeded: the
    /// index still serves, but what it serves is behind its sources.
    pub fn rebuild_failure(&self) -> Option<RebuildFailure> {
        self.failure.lock().ok().and_then(|f| f.clone())
    }

    /// How the last build ended: the one at start-up until a rebuild
    /// finishes, then the last rebuild, failed or not.
    pub fn last_build(&self) -> Option<LastBuild> {
        self.last_build.lock().ok().map(|last| last.clone())
    }

    fn rebuild_inner(&self, force: bool, priority: Priority) -> Result<BuildReport, EngineError> {
        let guard = self.build_lock.lock();
        let started = Instant::now();
        let result = match &guard {
            Ok(_) => self.rebuild_locked(force, priority),
            Err(_) => Err(EngineError::Poisoned),
        };
        // Noted under the build lock, so two rebuilds cannot note their
        // outcomes out of order.
        if let Ok(mut failure) = self.failure.lock() {
            *failure = match (&result, failure.take()) {
                (Ok(_), _) => None,
                (Err(err), previous) => Some(RebuildFailure {
                    error: err.to_string(),
                    consecutive: previous.as_ref().map_or(0, |p| p.consecutive) + 1,
                    since_unix: previous.map_or_else(unix_now, |p| p.since_unix),
                }),
            };
        }
        if let Ok(mut last) = self.last_build.lock() {
            *last = LastBuild {
                finished_unix_ms: unix_now_ms(),
                ok: result.is_ok(),
                manifests: self.snapshot.load().index.len(),
                elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
                reused_index: result.as_ref().is_ok_and(|report| report.reused_index),
                error: result.as_ref().err().map(ToString::to_string),
            };
        }
        drop(guard);
        result
    }

    fn rebuild_locked(&self, force: bool, priority: Priority) -> Result<BuildReport, EngineError> {
        let started = Instant::now();
        let catalog = Catalog::load(&self.sources);
        let model_id = self.embedder.as_ref().map(|e| e.model_id().to_string());
        let fingerprint = fingerprint(
            &catalog,
            model_id.as_deref(),
            self.config.dtype,
            &self.config.row_weights,
        );
        let current = self.snapshot.load_full();
        // Nothing changed (e.g. the directory watch saw the crawler's own
        // write after the crawler already rebuilt): keep the mapped index
        // instead of writing an identical file.
        if !force && read_meta(&current.index).is_some_and(|m| m.fingerprint == fingerprint) {
            return Ok(BuildReport {
                docs: current.index.len(),
                rows: current.index.rows(),
                reused_index: true,
                problems: catalog.problems,
                collisions: catalog.collisions,
                elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
                ..BuildReport::default()
            });
        }
        let reuse = if force { None } else { Some(&current.index) };
        // The queries a background rebuild steps aside for.
        let background = (priority == Priority::Background).then_some(&self.activity);
        let (index, mut report) = build_index(
            &self.config,
            &catalog,
            self.embedder.as_deref(),
            reuse,
            &fingerprint,
            background,
        )?;
        report.problems = catalog.problems;
        report.collisions = catalog.collisions;
        report.elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
        // Our own handle on the old snapshot goes first, or `retire` would
        // wait for itself.
        drop(current);
        let previous = self.snapshot.swap(Arc::new(Snapshot { index, model_id }));
        retire(previous, background);
        Ok(report)
    }

    /// The configured retrieval mode, or [`Mode::Lexical`] when no embedding model is loaded.
    pub fn mode(&self) -> Mode {
        if self.embedder.is_some() {
            self.config.scoring.mode
        } else {
            Mode::Lexical
        }
    }

    /// The query adapter in use (`None` if none was configured or it did
    /// not fit the model).
    pub fn query_adapter(&self) -> Option<&QueryAdapter> {
        self.config.query_adapter.as_deref()
    }

    /// Id of the loaded embedding model (a hash of its files), if any.
    pub fn model_id(&self) -> Option<&str> {
        self.embedder.as_ref().map(|e| e.model_id())
    }

    /// Finds the manifests that fit `task`, best first.
    pub fn discover(&self, task: &str, top_k: usize) -> Result<Discovery, DiscoverError> {
        self.discover_with(task, top_k, self.mode())
    }

    /// Like [`Engine::discover`] with an explicit retrieval mode (benchmarks
    /// compare the modes on one index).
    pub fn discover_with(
        &self,
        task: &str,
        top_k: usize,
        mode: Mode,
    ) -> Result<Discovery, DiscoverError> {
        self.discover_inner(task, top_k, mode, None)
    }

    /// The vector [`Engine::discover`] would embed `task` to (`None`
    /// without an embedding model): callers that look the task up elsewhere
    /// first (the experience cache) embed once and pass it to
    /// [`Engine::discover_with_vector`].
    pub fn query_vector(&self, task: &str) -> Result<Option<Vec<f32>>, DiscoverError> {
        if task.trim().is_empty() {
            return Err(DiscoverError::EmptyTask);
        }
        let Some(embedder) = &self.embedder else {
            return Ok(None);
        };
        let _running = self.activity.enter();
        let views = query::views_with(task, &self.config.scoring.query);
        Ok(Some(self.embed_query(embedder.as_ref(), &views.dense)?))
    }

    /// The embedding of a query's dense view: from the cache when the same
    /// text was embedded recently, else from the encoder, through the query
    /// adapter if there is one (and then cached: the adapter, like the
    /// embedder, is fixed for the engine's life).
    fn embed_query(
        &self,
        embedder: &dyn Embedder,
        text: &str,
    ) -> Result<Vec<f32>, oap_embed::EmbedError> {
        if let Some(vector) = self.query_cache.as_ref().and_then(|c| c.get(text)) {
            return Ok(vector);
        }
        let vector = embedder.embed_one(text)?;
        let vector = match &self.config.query_adapter {
            Some(adapter) => adapter.apply(&vector),
            None => vector,
        };
        if let Some(cache) = &self.query_cache {
            cache.insert(text, &vector);
        }
        Ok(vector)
    }

    /// [`Engine::discover`] with the query vector already computed by
    /// [`Engine::query_vector`] for the same task.
    pub fn discover_with_vector(
        &self,
        task: &str,
        top_k: usize,
        vector: Option<Vec<f32>>,
    ) -> Result<Discovery, DiscoverError> {
        self.discover_inner(task, top_k, self.mode(), vector)
    }

    fn discover_inner(
        &self,
        task: &str,
        top_k: usize,
        mode: Mode,
        precomputed: Option<Vec<f32>>,
    ) -> Result<Discovery, DiscoverError> {
        let started = Instant::now();
        if task.trim().is_empty() {
            return Err(DiscoverError::EmptyTask);
        }
        let _running = self.activity.enter();
        let top_k = top_k.max(1);
        let snapshot = self.snapshot.load_full();
        let views = query::views_with(task, &self.config.scoring.query);

        // The vectors in the index must come from the model that embeds the
        // query; otherwise dense scores are meaningless.
        let dense_usable = mode != Mode::Lexical
            && self.embedder.is_some()
            && snapshot.model_id.is_some()
            && snapshot.index.rows() > 0;
        let mode = if dense_usable || mode == Mode::Lexical {
            mode
        } else {
            Mode::Lexical
        };

        let embed_started = Instant::now();
        let query_vector = match (&self.embedder, mode, precomputed) {
            (Some(embedder), Mode::Dense | Mode::Hybrid, Some(vector))
                if vector.len() == embedder.dim() =>
            {
                Some(vector)
            }
            (Some(embedder), Mode::Dense | Mode::Hybrid, _) => {
                Some(self.embed_query(embedder.as_ref(), &views.dense)?)
            }
            _ => None,
        };
        let embed_ms = embed_started.elapsed().as_secs_f64() * 1e3;

        let search_started = Instant::now();
        let terms = oap_index::tokenize(&views.lexical);
        // Unhealthy manifests are dropped after ranking; ask for more until
        // `top_k` healthy ones are found or the index has no more (they are
        // rare, so this is one pass nearly always).
        let mut want = top_k;
        let candidates: Vec<Candidate> = loop {
            let scored = scoring::rank(
                &snapshot.index,
                &self.config.scoring,
                mode,
                query_vector.as_deref(),
                &terms,
                want,
            );
            let exhausted = scored.len() < want;
            let mut healthy: Vec<Candidate> = scored
                .into_iter()
                .filter_map(|(doc, parts)| candidate(&snapshot.index, doc, parts))
                .collect();
            if healthy.len() >= top_k || exhausted || want >= snapshot.index.len() {
                healthy.truncate(top_k);
                break healthy;
            }
            want = want.saturating_mul(2).min(snapshot.index.len());
        };
        let threshold = self.config.scoring.threshold(mode);
        let search_ms = search_started.elapsed().as_secs_f64() * 1e3;
        // Abstention looks at the best candidate's score parts (its cosine in
        // hybrid mode), calibrated on the retrieval benchmark.
        let best = candidates
            .first()
            .filter(|c| self.config.scoring.accepts(mode, &c.scores))
            .cloned();
        Ok(Discovery {
            task: task.to_string(),
            best,
            candidates,
            meta: DiscoverMeta {
                total_ms: started.elapsed().as_secs_f64() * 1e3,
                embed_ms,
                search_ms,
                mode,
                threshold,
                index_docs: snapshot.index.len(),
                model: snapshot.model_id.clone(),
                query: views.dense,
            },
        })
    }

    /// All indexed manifests, in id order.
    pub fn list(&self) -> Vec<ManifestSummary> {
        let snapshot = self.snapshot.load_full();
        let mut out: Vec<ManifestSummary> = (0..snapshot.index.len() as u32)
            .filter_map(|doc| stored_record(&snapshot.index, doc))
            .map(|record| summary(&record))
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }

    /// The stored record of one manifest.
    pub fn get(&self, id: &str) -> Option<StoredRecord> {
        let snapshot = self.snapshot.load_full();
        let doc = snapshot.index.find(id)?;
        stored_record(&snapshot.index, doc)
    }

    /// Size and mode of the current index, for `/health`.
    pub fn stats(&self) -> EngineStats {
        let snapshot = self.snapshot.load_full();
        EngineStats {
            docs: snapshot.index.len(),
            rows: snapshot.index.rows(),
            index_bytes: snapshot.index.file_len(),
            dtype: match snapshot.index.dtype() {
                VectorDtype::F32 => "f32",
                VectorDtype::I8 => "i8",
            },
            model: snapshot.model_id.clone(),
            mode: self.mode(),
        }
    }

    /// The settings the engine was opened with.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }
}

fn summary(record: &StoredRecord) -> ManifestSummary {
    ManifestSummary {
        id: record.id.clone(),
        domain: domain_of(record),
        name: string_field(&record.manifest, "name"),
        description: string_field(&record.manifest, "description"),
        trust: record.trust,
        source: record.origin.kind.clone(),
    }
}

fn candidate(index: &Index, doc: u32, scores: ScoreParts) -> Option<Candidate> {
    let record = stored_record(index, doc)?;
    if record.unhealthy.is_some() {
        return None;
    }
    Some(Candidate {
        domain: domain_of(&record),
        name: string_field(&record.manifest, "name"),
        description: string_field(&record.manifest, "description"),
        invoke: record
            .manifest
            .get("invoke")
            .cloned()
            .unwrap_or(serde_json::Value::Null),
        id: record.id,
        score: scores.fused,
        trust: record.trust,
        scores,
    })
}

/// Local manifests have no domain; the reference used the id in its place.
/// Remote ids are `<host>/<slug>`: the host is the publishing domain.
fn domain_of(record: &StoredRecord) -> String {
    if let Some(binding) = &record.mcp {
        return format!("mcp/{}", binding.server);
    }
    match record.trust {
        Trust::Local => record.id.clone(),
        Trust::Lan | Trust::Internet => record
            .id
            .split_once('/')
            .map_or_else(|| record.id.clone(), |(host, _)| host.to_string()),
    }
}

fn string_field(manifest: &serde_json::Value, key: &str) -> String {
    manifest
        .get(key)
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_string()
}

fn stored_record(index: &Index, doc: u32) -> Option<StoredRecord> {
    let bytes = index.record(doc)?;
    match serde_json::from_slice(bytes) {
        Ok(record) => Some(record),
        Err(err) => {
            // The file's checksums passed, so this is a writer bug, not
            // disk damage; skip the record rather than fail the query.
            tracing::error!(doc, error = %err, "undecodable record in index");
            None
        }
    }
}

fn read_meta(index: &Index) -> Option<IndexMeta> {
    serde_json::from_slice(index.meta()).ok()
}

/// Identity of what an index was built from. Equal fingerprints mean the
/// existing file can be mapped as it is.
fn fingerprint(
    catalog: &Catalog,
    model_id: Option<&str>,
    dtype: VectorDtype,
    rows: &RowWeights,
) -> String {
    let mut hasher = Sha256::new();
    hasher.update(RECIPE_VERSION.to_le_bytes());
    hasher.update(model_id.unwrap_or("-").as_bytes());
    hasher.update([0, matches!(dtype, VectorDtype::I8) as u8]);
    // The row recipe decides which vectors exist: a change must rebuild.
    hasher.update(format!("{rows:?}").as_bytes());
    let mut entries: Vec<&CatalogEntry> = catalog.entries.iter().collect();
    entries.sort_by(|a, b| a.id.cmp(&b.id));
    for entry in entries {
        for part in [
            entry.id.as_str(),
            entry.content_hash.as_str(),
            entry.origin.location.as_str(),
        ] {
            hasher.update(part.as_bytes());
            hasher.update([0]);
        }
        hasher.update([entry.trust as u8]);
        hasher.update(entry.unhealthy.as_deref().unwrap_or("").as_bytes());
        hasher.update([0]);
    }
    hex::encode(hasher.finalize())
}

/// Drops a replaced snapshot on the rebuilding thread once no query holds
/// it any more. Dropping the last reference unmaps the old index and, since
/// its file was replaced, frees its page cache: tens of milliseconds at
/// 10,000 manifests. Left to chance it would land on whichever query
/// finished last and show in the discovery tail. (After `swap`, arc-swap
/// has turned outstanding guards into counted references, so the count is
/// exact.)
fn retire(previous: Arc<Snapshot>, activity: Option<&QueryActivity>) {
    let deadline = Instant::now() + RETIRE_WAIT;
    while Arc::strong_count(&previous) > 1 && Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // Unmapping takes the address-space lock a query's page faults need.
    if let Some(activity) = activity {
        activity.yield_to_queries(MAX_PAUSE);
    }
    drop(previous);
}

/// How long a rebuild waits for queries still using the old snapshot; a
/// query takes milliseconds, so this only bounds a stuck one.
const RETIRE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Builds and writes a new index, reusing vectors of unchanged texts from
/// `previous` when it was built by the same model.
fn build_index(
    config: &EngineConfig,
    catalog: &Catalog,
    embedder: Option<&dyn Embedder>,
    previous: Option<&Index>,
    fingerprint: &str,
    // Set for a background rebuild: the queries to step aside for.
    background: Option<&QueryActivity>,
) -> Result<(Index, BuildReport), EngineError> {
    let yielded = std::cell::Cell::new(std::time::Duration::ZERO);
    let yield_to_queries = || {
        if let Some(activity) = background {
            yielded.set(yielded.get() + activity.yield_to_queries(MAX_PAUSE));
        }
    };
    let model_id = embedder.map(|e| e.model_id().to_string());
    // A lexical-only index (no model) still needs a valid dimension; it
    // simply has no rows.
    let dim = embedder.map_or(1, |e| e.dim());

    // Rows of the previous index, keyed by (model, text) hash. Keys include
    // the model id, so a model change can never reuse a vector. Only the
    // row's position is kept: the vector is read from the old mapping when
    // the new index is written, so a rebuild at 10k manifests does not hold
    // another copy of every vector in memory.
    let mut reusable: HashMap<[u8; 16], usize> = HashMap::new();
    let previous = previous.filter(|p| model_id.is_some() && p.dim() == dim);
    if let Some(previous) = previous {
        reusable.extend(previous.row_keys().enumerate().map(|(r, key)| (key, r)));
    }
    // Vectors embedded by this build.
    let mut fresh: HashMap<[u8; 16], Vec<f32>> = HashMap::new();

    // First pass: only the texts that need embedding are kept. Records and
    // terms are made in the second pass, one manifest at a time, and go
    // straight to the writer, so the whole index is never assembled in
    // memory (at 10,000 manifests that was most of a rebuild's peak).
    let mut to_embed: Vec<String> = Vec::new();
    if let Some(model_id) = &model_id {
        let mut queued: HashSet<[u8; 16]> = HashSet::new();
        for entry in &catalog.entries {
            for row in document::rows(&entry.manifest, config.row_weights) {
                let key = document::row_key(model_id, &row.text);
                if !reusable.contains_key(&key) && queued.insert(key) {
                    to_embed.push(row.text);
                }
            }
        }
    }

    let mut embedded_rows = 0;
    let mut reused_rows = 0;
    if let (Some(embedder), Some(model_id)) = (embedder, &model_id) {
        let chunk = if background.is_some() {
            BACKGROUND_EMBED_CHUNK
        } else {
            EMBED_BATCH
        };
        for batch in to_embed.chunks(chunk) {
            let texts: Vec<&str> = batch.iter().map(String::as_str).collect();
            let vectors = match background {
                None => embedder.embed(&texts)?,
                Some(_) => {
                    yield_to_queries();
                    embedder.embed_background(&texts)?
                }
            };
            for (text, vector) in batch.iter().zip(vectors) {
                fresh.insert(document::row_key(model_id, text), vector);
            }
            embedded_rows += batch.len();
        }
    }
    drop(to_embed);

    let meta = IndexMeta {
        format: "oapd-index".into(),
        recipe: RECIPE_VERSION,
        model_id: model_id.clone(),
        fingerprint: fingerprint.to_string(),
        built_at_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    };
    let meta = serde_json::to_vec(&meta).unwrap_or_default();
    let path = config.index_path();
    // Records, vectors and postings go to temporary files next to the index
    // as they come; the writer removes them whatever happens.
    let mut writer = StreamWriter::create(&path, dim, config.dtype, meta)?;
    let mut rows_total = 0;
    let mut docs = 0;
    for entry in &catalog.entries {
        let record = StoredRecord {
            id: entry.id.clone(),
            trust: entry.trust,
            origin: entry.origin.clone(),
            content_hash: entry.content_hash.clone(),
            manifest: serde_json::to_value(&entry.manifest).unwrap_or(serde_json::Value::Null),
            warnings: entry.warnings.iter().map(|w| w.to_string()).collect(),
            unhealthy: entry.unhealthy.clone(),
            mcp: entry.mcp.clone(),
        };
        let record = match serde_json::to_vec(&record) {
            Ok(bytes) => bytes,
            Err(err) => {
                tracing::error!(id = %entry.id, error = %err, "cannot serialise record, skipping");
                continue;
            }
        };
        let mut rows = Vec::new();
        if let Some(model_id) = &model_id {
            for row in document::rows(&entry.manifest, config.row_weights) {
                let key = document::row_key(model_id, &row.text);
                let vector = match fresh.get(&key) {
                    Some(vector) => vector.clone(),
                    None => {
                        let old = reusable
                            .get(&key)
                            .zip(previous)
                            .and_then(|(&r, previous)| previous.row_at(r));
                        match old {
                            Some(old) => {
                                reused_rows += 1;
                                old.vector
                            }
                            None => continue,
                        }
                    }
                };
                rows.push(RowInput {
                    key,
                    weight: row.weight,
                    vector,
                });
            }
        }
        rows_total += rows.len();
        writer.add(DocInput {
            id: entry.id.clone(),
            record,
            rows,
            lexical: document::lexical_terms(&entry.manifest),
        })?;
        docs += 1;
    }
    drop(fresh);
    // Writing and then mapping (and populating) a file of tens of MB:
    // each is one step that should not start under a running query.
    yield_to_queries();
    writer.finish()?;
    yield_to_queries();
    let index = open_index(config, &path)?;
    tracing::info!(
        docs,
        rows = rows_total,
        embedded_rows,
        reused_rows,
        yielded_ms = yielded.get().as_millis() as u64,
        path = %path.display(),
        "index written"
    );
    Ok((
        index,
        BuildReport {
            docs,
            rows: rows_total,
            embedded_rows,
            reused_rows,
            ..BuildReport::default()
        },
    ))
}

fn unix_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Maps the index file and applies the configured search threads.
fn open_index(config: &EngineConfig, path: &Path) -> Result<Index, IndexError> {
    let mut index = Index::open(path)?;
    if let Some(threads) = config.search_threads {
        let mut search = index.search_config();
        search.threads = threads.max(1);
        index.set_search_config(search);
    }
    Ok(index)
}
