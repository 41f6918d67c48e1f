//! The discovery engine: builds the on-disk index from a catalog and answers
//! "which capability fits this task?".
//!
//! Readers never block: the mapped index sits behind an `ArcSwap`, a rebuild
//! writes a new file (atomically renamed into place), maps it and swaps the
//! pointer. Queries in flight keep the old mapping alive until they finish.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use oap_embed::Embedder;
use oap_index::{DocInput, Index, IndexError, RowInput, Stemmer, StreamWriter, VectorDtype};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::activity::{QueryActivity, MAX_PAUSE};
use crate::adapter::QueryAdapter;
use crate::catalog::{Catalog, CatalogEntry, Collision, LoadProblem, Origin, Source, Trust};
use crate::document::{self, RowWeights, RECIPE_VERSION};
use crate::intents;
use crate::query;
use crate::query_cache::QueryCache;
use crate::requests::RequestRows;
use crate::scoring::{Mode, ScoreParts, Scoring};

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

/// Texts a serving daemon embeds before it is ready, by default
/// (`index.start_embed_limit`). Past it the index is first written without
/// the missing vectors and they are embedded in the background. 128 texts
/// are 2-3 s of embedding on a 2-core x86 (47-60 texts/s) and, at the
/// 2.5-3x slower per-text cost estimated for a Raspberry Pi 4, 6-8 s there;
/// the bundled set (13 manifests) is far below it and starts hybrid.
pub const DEFAULT_START_EMBED_LIMIT: usize = 128;

/// How often a background rebuild that embeds many texts writes what it
/// has so far (the index, still lexical, with the vectors embedded until
/// then), so a crash or SIGKILL half way loses at most this much embedding.
const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// One index write at a time in the process: two engines of the same data
/// directory (the old and the new generation around a reload) would
/// otherwise share the writer's temporary files.
static WRITE_LOCK: Mutex<()> = Mutex::new(());

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
    /// How words become lexical terms, in the index and in queries alike;
    /// part of the fingerprint, so a change rebuilds. Snowball by default;
    /// [`Stemmer::Light`] is the recipe of earlier releases, kept for
    /// comparison.
    pub stemmer: Stemmer,
    /// Threads for a dense scan of a large index (default: all cores).
    pub search_threads: Option<usize>,
    /// Query embeddings kept for repeated query texts (see
    /// [`crate::query_cache`]); 0 disables the cache.
    pub query_cache: usize,
    /// Applied to every query embedding of the model it was trained for
    /// (see [`crate::adapter`]); `None`: query vectors as the model made
    /// them. Not part of the fingerprint: documents do not depend on it.
    pub query_adapter: Option<Arc<QueryAdapter>>,
    /// Most texts [`Engine::open`] embeds before it returns (`None`: no
    /// limit, every vector is embedded first, as the command line and the
    /// benchmarks want). Past it the index is written and served lexically
    /// with the vectors it already has, and [`Engine::pending_texts`] says
    /// what a background rebuild must still embed.
    pub start_embed_limit: Option<usize>,
    /// Request rows attached to catalog entries at every load
    /// ([`crate::requests`]); `None`: only the manifests' own texts.
    pub request_rows: Option<Arc<dyn RequestRows>>,
    /// Index files whose vectors a build takes for identical texts instead
    /// of embedding them: a signed snapshot's index, or the shard indexes a
    /// distributed build assembles. Row keys hash the model id with the
    /// text, so only a vector of the same model for the same text is ever
    /// taken. Opened afresh by every build; one that cannot be opened, has
    /// another dimension, or is int8 where this index is f32 is skipped
    /// with a warning. Not part of the fingerprint: a donor changes how a
    /// vector is obtained, never what it is.
    pub vector_donors: Vec<PathBuf>,
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
            stemmer: Stemmer::default(),
            search_threads: None,
            query_cache: DEFAULT_QUERY_CACHE,
            query_adapter: None,
            start_embed_limit: None,
            request_rows: None,
            vector_donors: Vec::new(),
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
    /// The engine was retired (a reload replaced it) while it rebuilt; the
    /// engine that replaced it does the work.
    #[error("rebuild stopped: the engine was replaced")]
    Retired,
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
    /// Texts of the catalog whose vectors the file does not hold yet: it
    /// was written to serve lexically while they are embedded. Absent (0)
    /// in a complete index, so complete files are what they always were.
    #[serde(default, skip_serializing_if = "is_zero")]
    pending_texts: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
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
    /// Rows whose vectors were carried over from the previous index or a
    /// vector donor ([`EngineConfig::vector_donors`]).
    pub reused_rows: usize,
    /// The existing index matched the catalog and was mapped as it was.
    pub reused_index: bool,
    /// Why an existing index file could not be used, if it could not.
    pub previous_index_problem: Option<String>,
    /// Texts whose vectors the index does not hold yet: more than
    /// [`EngineConfig::start_embed_limit`] were missing, so the index serves
    /// lexically until a background rebuild has embedded them.
    pub pending_texts: usize,
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
    /// The value the "does it fit" decision is made on: in hybrid mode the
    /// cosine plus a capped share of word evidence, in dense mode the
    /// cosine, in lexical mode the word evidence. The candidate fits when
    /// `score >= meta.threshold`, and the answer's `match` is the first
    /// candidate when it fits. Candidates are ranked by `scores.fused`,
    /// which weighs words differently (they order plausible tools well
    /// but say little about whether any fits), so a lower-ranked candidate
    /// may show a higher `score`.
    pub score: f32,
    /// Whether `score` reaches `meta.threshold`: only fitting candidates
    /// are offered to a model as tools.
    pub fits: bool,
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
    /// The threshold each candidate's `score` is compared with: the one of
    /// `mode`, or the lexical one when this query's dense scores failed.
    pub threshold: f32,
    /// Manifests in the index that answered.
    pub index_docs: usize,
    /// Id of the model the index vectors came from (`None`: lexical only).
    pub model: Option<String>,
    /// The instruction part of the task that retrieval used.
    pub query: String,
    /// The asks of a request with several, each also ranked on its own
    /// (empty for one ask).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub asks: Vec<String>,
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
    /// Why its `input.schema` / `output.schema` could not be used (its tool
    /// then has the fallback parameters); absent when there is no reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schema_errors: Vec<String>,
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
    /// Texts still to embed before dense scores are used ([`Engine::pending_texts`]).
    pub pending_texts: usize,
}

struct Snapshot {
    index: Index,
    model_id: Option<String>,
    /// Texts of the catalog without a vector in `index` (see
    /// [`IndexMeta::pending_texts`]); while non-zero, queries are lexical.
    pending_texts: usize,
}

impl Snapshot {
    fn new(index: Index, model_id: Option<String>) -> Snapshot {
        let pending_texts = read_meta(&index).map_or(0, |meta| meta.pending_texts);
        Snapshot {
            index,
            model_id,
            pending_texts,
        }
    }
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
    /// Set by [`Engine::retire`]: a rebuild in progress stops.
    retired: std::sync::atomic::AtomicBool,
    /// Why a background rebuild that is still embedding what the served
    /// index lacks should step aside at its next batch: what a newer
    /// catalog brings (a new manifest, a removed one) is then served
    /// lexically at once instead of after the whole embedding.
    newer_work: NewerWork,
}

/// The two signs that a rebuild with a newer catalog is coming, read
/// together by a background embedding ([`NewerWork::is_coming`]).
#[derive(Default)]
struct NewerWork {
    /// Rebuilds waiting for `build_lock`.
    waiting_rebuilds: AtomicUsize,
    /// A newer catalog was announced ([`Engine::note_newer_catalog`]) and
    /// no rebuild has started since.
    announced: std::sync::atomic::AtomicBool,
}

impl NewerWork {
    fn is_coming(&self) -> bool {
        self.waiting_rebuilds.load(Ordering::SeqCst) > 0 || self.announced.load(Ordering::SeqCst)
    }

    fn announce(&self) {
        self.announced.store(true, Ordering::SeqCst);
    }

    /// A rebuild starts: it reads the catalog after this point, so an
    /// announcement made before it is served by it.
    fn clear_announcement(&self) {
        self.announced.store(false, Ordering::SeqCst);
    }
}

/// Who waits on an index build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// Start-up and the command line: nothing else runs, use every core.
    Foreground,
    /// A rebuild while serving: embedding on idle-class threads, so queries
    /// go first; the catalog parse and the index write at normal priority,
    /// pausing for running queries, so a changed catalog still gets out on
    /// a busy machine.
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
        let catalog = load_catalog(&sources, &config);
        let model_id = embedder.as_ref().map(|e| e.model_id().to_string());
        let fingerprint = fingerprint(
            &catalog,
            model_id.as_deref(),
            config.dtype,
            &config.row_weights,
            config.stemmer,
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
        let current = previous.as_ref().and_then(read_meta).filter(|m| {
            // A file written to serve lexically (vectors pending) is still
            // the right file to serve when there is a model to finish it.
            m.fingerprint == fingerprint && (m.pending_texts == 0 || embedder.is_some())
        });
        let (index, mut built) = match (previous, current) {
            (Some(index), Some(meta)) => {
                let report = BuildReport {
                    pending_texts: meta.pending_texts,
                    ..BuildReport::reused(&index)
                };
                (index, report)
            }
            (previous, _) => build_index(
                &config,
                &catalog,
                embedder.as_ref(),
                previous.as_ref(),
                &fingerprint,
                Embedding::AtStart(config.start_embed_limit),
            )?,
        };
        if built.pending_texts > 0 {
            tracing::warn!(
                pending_texts = built.pending_texts,
                "serving lexically until the missing vectors are embedded in the background"
            );
        }
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
        index.prefault_vectors();
        let snapshot = Snapshot::new(index, model_id);
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
            retired: std::sync::atomic::AtomicBool::new(false),
            newer_work: NewerWork::default(),
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
            // A thread of its own at normal priority: the embedding runs on
            // the embedder's idle-class threads, while the catalog parse and
            // the index write (about a second at 2,000 manifests, and the
            // changed catalog is not served until they are done) must
            // progress while something else keeps the CPU busy; the write
            // pauses for running queries (`QueryActivity`). At nice 10 a
            // removal took over 60 s to show under the soak's load beside
            // a build using both cores.
            Priority::Background => std::thread::scope(|scope| {
                let worker = std::thread::Builder::new()
                    .name("oap-rebuild".into())
                    .spawn_scoped(scope, || self.rebuild_inner(force, priority))
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

    /// Says that the sources changed and a rebuild will follow (the
    /// directory watch saw a change while a rebuild was running): a
    /// background embedding in progress, while the served index is
    /// lexical, steps aside at once as for a rebuild waiting on the build
    /// lock, so the following rebuild serves the change without waiting
    /// for vectors. The caller must start that rebuild; the next rebuild to
    /// start clears the announcement.
    pub fn note_newer_catalog(&self) {
        self.newer_work.announce();
    }

    /// Texts of the catalog whose vectors the served index does not hold
    /// yet; while non-zero, discovery is lexical (with the lexical
    /// threshold) and a rebuild ([`Engine::rebuild`]) embeds them.
    pub fn pending_texts(&self) -> usize {
        self.snapshot.load().pending_texts
    }

    /// Stops this engine's rebuilds: one in progress ends at its next step
    /// with [`EngineError::Retired`] (after writing what it embedded, if it
    /// was embedding), later ones do not start. For an engine a reload
    /// replaced, whose successor rebuilds the same index.
    pub fn retire(&self) {
        self.retired
            .store(true, std::sync::atomic::Ordering::Relaxed);
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
        let waiting = &self.newer_work.waiting_rebuilds;
        waiting.fetch_add(1, Ordering::SeqCst);
        let guard = self.build_lock.lock();
        waiting.fetch_sub(1, Ordering::SeqCst);
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
        if self.retired.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(EngineError::Retired);
        }
        let started = Instant::now();
        // Whatever was announced before this point is in the catalog read
        // now; an announcement after it makes this rebuild step aside.
        self.newer_work.clear_announcement();
        let catalog = load_catalog(&self.sources, &self.config);
        let model_id = self.embedder.as_ref().map(|e| e.model_id().to_string());
        let fingerprint = fingerprint(
            &catalog,
            model_id.as_deref(),
            self.config.dtype,
            &self.config.row_weights,
            self.config.stemmer,
        );
        let published_first = priority == Priority::Background
            && !force
            && self.serve_changed_catalog_first(&catalog, &fingerprint, model_id.as_deref())?;
        let current = self.snapshot.load_full();
        // Nothing changed (e.g. the directory watch saw the crawler's own
        // write after the crawler already rebuilt): keep the mapped index
        // instead of writing an identical file.
        if !force
            && current.pending_texts == 0
            && read_meta(&current.index).is_some_and(|m| m.fingerprint == fingerprint)
        {
            return Ok(BuildReport {
                problems: catalog.problems,
                collisions: catalog.collisions,
                elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
                ..BuildReport::reused(&current.index)
            });
        }
        // While vectors are pending, the file on disk may hold more than the
        // mapped snapshot: a checkpoint of an earlier background rebuild that
        // failed or was stopped, or the work of the generation a reload
        // replaced. Whichever holds more vectors is the one to reuse.
        // Just published from the best file there was: no other to look at.
        let on_disk = (!published_first)
            .then(|| self.checkpoint_on_disk(&current))
            .flatten();
        let reuse = match (force, &on_disk) {
            (true, _) => None,
            (false, Some(disk)) => Some(disk),
            (false, None) => Some(&current.index),
        };
        // The queries a background rebuild steps aside for.
        let background = (priority == Priority::Background).then_some(&self.activity);
        let embedding = match background {
            Some(activity) => Embedding::Background {
                activity,
                retired: &self.retired,
                // A hybrid index stays hybrid: stepping aside would
                // publish one with vectors missing.
                step_aside_for: (current.pending_texts > 0).then_some(&self.newer_work),
            },
            None => Embedding::AtStart(None),
        };
        let (index, mut report) = build_index(
            &self.config,
            &catalog,
            self.embedder.as_ref(),
            reuse,
            &fingerprint,
            embedding,
        )?;
        report.problems = catalog.problems;
        report.collisions = catalog.collisions;
        report.elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
        // Our own handle on the old snapshot goes first, or `retire` would
        // wait for itself.
        drop(current);
        self.publish(Snapshot::new(index, model_id), background);
        Ok(report)
    }

    /// While vectors are pending, the file on disk may hold more than the
    /// mapped snapshot: a checkpoint of an earlier background rebuild that
    /// failed or was stopped, or the work of the generation a reload
    /// replaced. That file, when it holds more vectors than `current`.
    fn checkpoint_on_disk(&self, current: &Snapshot) -> Option<Index> {
        (current.pending_texts > 0)
            .then(|| open_index(&self.config, &self.config.index_path()).ok())
            .flatten()
            .filter(|disk| disk.rows() > current.index.rows())
    }

    /// Still serving lexically, and the catalog changed: serves the new
    /// catalog lexically first (one index write with the vectors already
    /// made, no embedding), so that a manifest added or removed now shows
    /// at once rather than after vectors that may take an hour of idle CPU
    /// on a small board. The rebuild then embeds from that index. Returns
    /// whether it published one.
    fn serve_changed_catalog_first(
        &self,
        catalog: &Catalog,
        fingerprint: &str,
        model_id: Option<&str>,
    ) -> Result<bool, EngineError> {
        let current = self.snapshot.load_full();
        if self.embedder.is_none()
            || current.pending_texts == 0
            || read_meta(&current.index).is_some_and(|m| m.fingerprint == fingerprint)
        {
            return Ok(false);
        }
        let on_disk = self.checkpoint_on_disk(&current);
        let (lexical, report) = build_index(
            &self.config,
            catalog,
            self.embedder.as_ref(),
            Some(on_disk.as_ref().unwrap_or(&current.index)),
            fingerprint,
            Embedding::AtStart(Some(0)),
        )?;
        tracing::info!(
            docs = report.docs,
            pending_texts = report.pending_texts,
            "the changed catalog is served lexically while its vectors are embedded"
        );
        drop(on_disk);
        drop(current);
        self.publish(
            Snapshot::new(lexical, model_id.map(str::to_string)),
            Some(&self.activity),
        );
        Ok(true)
    }

    /// Serves `snapshot` from now on: swaps it in, retires the one it
    /// replaces, then faults in the new vectors, in that order so the two
    /// index files are never resident together.
    fn publish(&self, snapshot: Snapshot, activity: Option<&QueryActivity>) {
        let previous = self.snapshot.swap(Arc::new(snapshot));
        retire(previous, activity);
        self.snapshot.load().index.prefault_vectors();
    }

    /// The configured retrieval mode, or [`Mode::Lexical`] when no embedding
    /// model is loaded or the served index still lacks vectors
    /// ([`Engine::pending_texts`]).
    pub fn mode(&self) -> Mode {
        if self.embedder.is_some() && self.snapshot.load().pending_texts == 0 {
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
        Ok(self.adapt_and_remember(text, embedder.embed_query(text)?))
    }

    /// A fresh encoder vector for `text`, through the query adapter if
    /// there is one, kept in the query cache.
    fn adapt_and_remember(&self, text: &str, vector: Vec<f32>) -> Vec<f32> {
        let vector = match &self.config.query_adapter {
            Some(adapter) => adapter.apply(&vector),
            None => vector,
        };
        if let Some(cache) = &self.query_cache {
            cache.insert(text, &vector);
        }
        vector
    }

    /// [`Engine::embed_query`] for several texts, the ones not cached
    /// embedded in one encoder batch (one text goes through `embed_query`,
    /// which an embedder may serve differently, e.g. coalesced).
    fn embed_queries(
        &self,
        embedder: &dyn Embedder,
        texts: &[&str],
    ) -> Result<Vec<Vec<f32>>, oap_embed::EmbedError> {
        if let [one] = texts {
            return Ok(vec![self.embed_query(embedder, one)?]);
        }
        let mut vectors: Vec<Option<Vec<f32>>> = texts
            .iter()
            .map(|text| self.query_cache.as_ref().and_then(|c| c.get(text)))
            .collect();
        let missing: Vec<&str> = texts
            .iter()
            .zip(&vectors)
            .filter(|(_, cached)| cached.is_none())
            .map(|(text, _)| *text)
            .collect();
        if !missing.is_empty() {
            let mut fresh = embedder.embed_queries(&missing)?.into_iter();
            for (text, slot) in texts.iter().zip(vectors.iter_mut()) {
                if slot.is_some() {
                    continue;
                }
                let Some(vector) = fresh.next() else {
                    return Err(oap_embed::EmbedError::Inference(
                        "the encoder returned fewer vectors than texts".into(),
                    ));
                };
                *slot = Some(self.adapt_and_remember(text, vector));
            }
        }
        Ok(vectors.into_iter().flatten().collect())
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
        // An index still waiting for vectors would rank the manifests it
        // has vectors for above the others: lexical until it is complete.
        let dense_usable = mode != Mode::Lexical
            && self.embedder.is_some()
            && snapshot.model_id.is_some()
            && snapshot.pending_texts == 0
            && snapshot.index.rows() > 0;
        let mode = if dense_usable || mode == Mode::Lexical {
            mode
        } else {
            Mode::Lexical
        };

        // A request with several asks is also ranked ask by ask
        // (`crate::intents`); each ask is a query of its own.
        let ask_views: Vec<query::QueryViews> = if self.config.scoring.query.split_asks {
            intents::ask_views(&views.dense, &self.config.scoring.query)
        } else {
            Vec::new()
        };

        let embed_started = Instant::now();
        let (query_vector, ask_vectors) = match (&self.embedder, mode) {
            (Some(embedder), Mode::Dense | Mode::Hybrid) => {
                let precomputed = precomputed.filter(|v| v.len() == embedder.dim());
                let mut texts: Vec<&str> = Vec::with_capacity(ask_views.len() + 1);
                if precomputed.is_none() {
                    texts.push(&views.dense);
                }
                texts.extend(ask_views.iter().map(|v| v.dense.as_str()));
                let mut vectors = self.embed_queries(embedder.as_ref(), &texts)?.into_iter();
                let whole = match precomputed {
                    Some(vector) => Some(vector),
                    None => vectors.next(),
                };
                (whole, vectors.map(Some).collect())
            }
            _ => (None, vec![None; ask_views.len()]),
        };
        let embed_ms = embed_started.elapsed().as_secs_f64() * 1e3;

        let search_started = Instant::now();
        let stemmer = self.config.stemmer;
        let terms = oap_index::tokenize_with(&views.lexical, stemmer);
        let asks: Vec<intents::Ask> = ask_vectors
            .into_iter()
            .zip(&ask_views)
            .map(|(vector, views)| intents::Ask {
                vector,
                terms: oap_index::tokenize_with(&views.lexical, stemmer),
            })
            .collect();
        let rank = |want: usize| {
            intents::rank(
                &snapshot.index,
                &self.config.scoring,
                mode,
                query_vector.as_deref(),
                &terms,
                &asks,
                want,
            )
        };
        // Unhealthy manifests are dropped after ranking; ask for more until
        // `top_k` healthy ones are found or the index has no more (they are
        // rare, so this is one pass nearly always).
        let mut want = top_k;
        let candidates: Vec<Candidate> = loop {
            let scored = rank(want);
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
        let scoring = &self.config.scoring;
        let mut candidates = candidates;
        for candidate in &mut candidates {
            candidate.score = scoring.decision_score(mode, &candidate.scores);
            candidate.fits = scoring.accepts(mode, &candidate.scores);
        }
        let threshold = match candidates.first() {
            Some(first) => scoring.decision_threshold(mode, &first.scores),
            None => scoring.threshold(mode),
        };
        let search_ms = search_started.elapsed().as_secs_f64() * 1e3;
        // The answer is the best-ranked candidate when it fits: the
        // decision looks at its own score parts, calibrated on tuning data,
        // never at the rest of the catalog.
        let best = candidates.first().filter(|c| c.fits).cloned();
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
                asks: ask_views.into_iter().map(|v| v.dense).collect(),
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
            mode: if snapshot.pending_texts == 0 {
                self.mode()
            } else {
                Mode::Lexical
            },
            pending_texts: snapshot.pending_texts,
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
        schema_errors: serde_json::from_value::<oap_manifest::Manifest>(record.manifest.clone())
            .map(|m| oap_manifest::tool::schema_errors(&m))
            .unwrap_or_default(),
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
        // Set from the scoring rule by the caller, which knows the mode.
        score: scores.fused,
        fits: false,
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

/// Loads the catalog and attaches its request rows.
fn load_catalog(sources: &[Source], config: &EngineConfig) -> Catalog {
    let mut catalog = Catalog::load(sources);
    if let Some(rows) = &config.request_rows {
        catalog.attach_requests(rows.as_ref());
    }
    catalog
}

/// Identity of what an index was built from. Equal fingerprints mean the
/// existing file can be mapped as it is.
fn fingerprint(
    catalog: &Catalog,
    model_id: Option<&str>,
    dtype: VectorDtype,
    rows: &RowWeights,
    stemmer: Stemmer,
) -> String {
    let mut hasher = Sha256::new();
    hasher.update(RECIPE_VERSION.to_le_bytes());
    hasher.update(model_id.unwrap_or("-").as_bytes());
    hasher.update([0, matches!(dtype, VectorDtype::I8) as u8]);
    // The row recipe decides which vectors exist: a change must rebuild.
    hasher.update(format!("{rows:?}").as_bytes());
    // The stemmer decides which terms exist: queries of one stemmer do not
    // meet the terms of the other.
    hasher.update(stemmer.name().as_bytes());
    hasher.update([0]);
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
        // Request rows are rows: a new or changed one must be embedded.
        for request in &entry.requests {
            hasher.update(request.as_bytes());
            hasher.update([0]);
        }
        hasher.update([1]);
    }
    hex::encode(hasher.finalize())
}

/// Drops a replaced snapshot on the rebuilding thread once no query holds
/// it any more (see [`Engine::publish`] for why the new index's vectors
/// are faulted in only after this). Dropping the last reference unmaps the
/// old index and, since its file was replaced, frees its page cache: tens of milliseconds at
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

/// How a build gets the vectors it lacks.
#[derive(Clone, Copy)]
enum Embedding<'a> {
    /// Start-up or the command line, on every core: every missing vector,
    /// unless more texts than the limit lack one; then none, and the index
    /// is written to serve lexically (its meta counts the texts pending).
    AtStart(Option<usize>),
    /// A rebuild while serving: idle-class threads, stepping aside for the
    /// queries in `activity`, writing what it has every
    /// [`CHECKPOINT_EVERY`], stopping once `retired` is set. With
    /// `step_aside_for` (the served index is lexical already, so nothing is
    /// lost), it writes what it has and returns, texts still pending, when
    /// another rebuild is coming: that one brings a newer catalog and
    /// carries on from the file this one wrote.
    Background {
        activity: &'a QueryActivity,
        retired: &'a std::sync::atomic::AtomicBool,
        step_aside_for: Option<&'a NewerWork>,
    },
}

/// Builds and writes a new index, reusing vectors of unchanged texts from
/// `previous` when it was built by the same model.
fn build_index(
    config: &EngineConfig,
    catalog: &Catalog,
    embedder: Option<&Arc<dyn Embedder>>,
    previous: Option<&Index>,
    fingerprint: &str,
    embedding: Embedding<'_>,
) -> Result<(Index, BuildReport), EngineError> {
    let (background, retired, newer_work) = match embedding {
        Embedding::Background {
            activity,
            retired,
            step_aside_for,
        } => (Some(activity), Some(retired), step_aside_for),
        Embedding::AtStart(_) => (None, None, None),
    };
    let another_rebuild_waits = || newer_work.is_some_and(NewerWork::is_coming);
    let is_retired = || retired.is_some_and(|r| r.load(std::sync::atomic::Ordering::Relaxed));
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

    // Rows of the previous index and the donors, keyed by (model, text)
    // hash. Keys include the model id, so a model change can never reuse a
    // vector. Only the row's place is kept: the vector is read from the
    // mapping when the new index is written, so a rebuild at 10k manifests
    // does not hold another copy of every vector in memory. The previous
    // index is looked at first, then each donor in order.
    let previous = previous.filter(|p| model_id.is_some() && p.dim() == dim);
    let donors: Vec<Index> = match model_id {
        Some(_) => open_donors(config, dim),
        None => Vec::new(),
    };
    let mut donor_indexes: Vec<&Index> = Vec::with_capacity(donors.len() + 1);
    donor_indexes.extend(previous);
    donor_indexes.extend(donors.iter());
    let mut reusable: HashMap<[u8; 16], (usize, usize)> = HashMap::new();
    for (source, index) in donor_indexes.iter().enumerate() {
        for (row, key) in index.row_keys().enumerate() {
            reusable.entry(key).or_insert((source, row));
        }
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
            // Unreadable entries are reported and left out by `write_index`.
            let Ok(manifest) = entry.manifest() else {
                continue;
            };
            for row in document::rows(&manifest, &entry.requests, config.row_weights) {
                let key = document::row_key(model_id, &row.text);
                if !reusable.contains_key(&key) && queued.insert(key) {
                    to_embed.push(row.text);
                }
            }
        }
    }
    // Too much to embed before the daemon is ready: write what can serve
    // now (every record and term, the vectors still valid) and leave the
    // rest to a background rebuild, which reuses what this file holds.
    let deferred = match embedding {
        Embedding::AtStart(Some(limit)) => to_embed.len() > limit,
        _ => false,
    };

    let mut embedded_rows = 0;
    // Texts left unembedded when this build stepped aside for another.
    let mut stepped_aside = 0;
    let sources = VectorSources {
        model_id: model_id.as_deref(),
        reusable: &reusable,
        indexes: &donor_indexes,
    };
    // Every vector at hand, with `pending` texts still to embed (a
    // checkpoint, or the last write).
    let write = |fresh: &HashMap<[u8; 16], Vec<f32>>, pending: usize| {
        let meta = index_meta(model_id.clone(), fingerprint, pending);
        write_index(
            config,
            catalog,
            dim,
            meta,
            fresh,
            &sources,
            &yield_to_queries,
        )
    };
    if let (Some(embedder), Some(model_id), false) = (embedder, &model_id, deferred) {
        let chunk = if background.is_some() {
            BACKGROUND_EMBED_CHUNK
        } else {
            EMBED_BATCH
        };
        let mut checkpoint_at = Instant::now() + CHECKPOINT_EVERY;
        let mut worker = (background.is_some() && !to_embed.is_empty())
            .then(|| BackgroundBatches::new(embedder));
        for batch in to_embed.chunks(chunk) {
            if is_retired() {
                return Err(EngineError::Retired);
            }
            let vectors = match worker.as_mut() {
                None => {
                    let texts: Vec<&str> = batch.iter().map(String::as_str).collect();
                    Some(embedder.embed(&texts)?)
                }
                Some(worker) => {
                    yield_to_queries();
                    // When a newer rebuild waits, the batch in flight is
                    // dropped, not waited for: at idle class on a busy
                    // machine it may take minutes, and the newer rebuild
                    // embeds these texts again.
                    let step_aside = || is_retired() || another_rebuild_waits();
                    worker.embed(batch, &step_aside)?
                }
            };
            let dropped = vectors.is_none();
            match vectors {
                Some(vectors) => {
                    for (text, vector) in batch.iter().zip(vectors) {
                        fresh.insert(document::row_key(model_id, text), vector);
                    }
                    embedded_rows += batch.len();
                }
                None if is_retired() => return Err(EngineError::Retired),
                None => {}
            }
            let left = to_embed.len() - embedded_rows;
            if left > 0 && (dropped || another_rebuild_waits()) {
                tracing::info!(
                    embedded_rows,
                    pending_texts = left,
                    "background rebuild steps aside for a newer one, which carries on"
                );
                stepped_aside = left;
                break;
            }
            if background.is_some() && left > 0 && Instant::now() >= checkpoint_at {
                // A file that still serves lexically but keeps every vector
                // embedded so far: a crash from here on resumes from it.
                if is_retired() {
                    return Err(EngineError::Retired);
                }
                let written = write(&fresh, left)?;
                tracing::info!(
                    embedded_rows,
                    pending_texts = left,
                    docs = written.docs,
                    "background rebuild: vectors so far written"
                );
                checkpoint_at = Instant::now() + CHECKPOINT_EVERY;
            }
        }
    }
    let pending_texts = if deferred {
        to_embed.len()
    } else {
        stepped_aside
    };
    drop(to_embed);
    if is_retired() {
        return Err(EngineError::Retired);
    }

    let written = write(&fresh, pending_texts)?;
    drop(fresh);
    yield_to_queries();
    let path = config.index_path();
    let index = open_index(config, &path)?;
    tracing::info!(
        docs = written.docs,
        rows = written.rows,
        embedded_rows,
        reused_rows = written.reused_rows,
        pending_texts,
        yielded_ms = yielded.get().as_millis() as u64,
        path = %path.display(),
        "index written"
    );
    Ok((
        index,
        BuildReport {
            docs: written.docs,
            rows: written.rows,
            embedded_rows,
            reused_rows: written.reused_rows,
            pending_texts,
            ..BuildReport::default()
        },
    ))
}

/// How often a background rebuild waiting for its batch looks whether it
/// should stop or step aside.
const STEP_ASIDE_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// A background rebuild's batches, embedded on a thread of their own so the
/// rebuild can step aside for a newer one (or stop when retired) without
/// waiting for the batch in flight: that batch runs at idle class, and on a
/// machine busy with something else (Ollama generating, a build) it may get
/// no CPU for minutes. An abandoned batch finishes on its thread and its
/// vectors are dropped.
struct BackgroundBatches {
    requests: Option<std::sync::mpsc::Sender<Vec<String>>>,
    results: std::sync::mpsc::Receiver<Result<Vec<Vec<f32>>, oap_embed::EmbedError>>,
}

impl BackgroundBatches {
    fn new(embedder: &Arc<dyn Embedder>) -> BackgroundBatches {
        let (requests, batches) = std::sync::mpsc::channel::<Vec<String>>();
        let (done, results) = std::sync::mpsc::channel();
        let embedder = Arc::clone(embedder);
        let spawned = std::thread::Builder::new()
            .name("oap-embed-batch".into())
            .spawn(move || {
                for batch in batches {
                    let texts: Vec<&str> = batch.iter().map(String::as_str).collect();
                    if done.send(embedder.embed_background(&texts)).is_err() {
                        break;
                    }
                }
            });
        if let Err(err) = spawned {
            // Without the thread every batch fails (below) naming this.
            tracing::error!(error = %err, "cannot start the background embedding thread");
        }
        BackgroundBatches {
            requests: Some(requests),
            results,
        }
    }

    /// The batch's vectors, or `None` when `step_aside` said so before they
    /// came.
    fn embed(
        &mut self,
        batch: &[String],
        step_aside: &dyn Fn() -> bool,
    ) -> Result<Option<Vec<Vec<f32>>>, EngineError> {
        let gone = || {
            EngineError::Embed(oap_embed::EmbedError::Inference(
                "the background embedding thread ended".into(),
            ))
        };
        let sent = self
            .requests
            .as_ref()
            .is_some_and(|requests| requests.send(batch.to_vec()).is_ok());
        if !sent {
            return Err(gone());
        }
        loop {
            match self.results.recv_timeout(STEP_ASIDE_POLL) {
                Ok(vectors) => return Ok(Some(vectors?)),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) if step_aside() => {
                    // Closing the queue ends the thread after this batch.
                    self.requests = None;
                    return Ok(None);
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return Err(gone()),
            }
        }
    }
}

/// Where the vectors of a build come from besides its own embeddings.
struct VectorSources<'a> {
    model_id: Option<&'a str>,
    /// Row key → (which of `indexes`, row number in it).
    reusable: &'a HashMap<[u8; 16], (usize, usize)>,
    /// The previous index (when reused) first, then the donors.
    indexes: &'a [&'a Index],
}

/// What [`write_index`] wrote.
struct Written {
    docs: usize,
    rows: usize,
    reused_rows: usize,
}

fn index_meta(model_id: Option<String>, fingerprint: &str, pending_texts: usize) -> Vec<u8> {
    let meta = IndexMeta {
        format: "oapd-index".into(),
        recipe: RECIPE_VERSION,
        model_id,
        fingerprint: fingerprint.to_string(),
        built_at_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        pending_texts,
    };
    serde_json::to_vec(&meta).unwrap_or_default()
}

/// Writes the index file for `catalog`: every record and term, and for
/// each row the vector embedded now (`fresh`) or carried over from the
/// previous index; a row with neither is left out (its text is pending).
fn write_index(
    config: &EngineConfig,
    catalog: &Catalog,
    dim: usize,
    meta: Vec<u8>,
    fresh: &HashMap<[u8; 16], Vec<f32>>,
    sources: &VectorSources<'_>,
    yield_to_queries: &dyn Fn(),
) -> Result<Written, EngineError> {
    // The lock guards no data, so a panic elsewhere cannot leave it
    // inconsistent: a poisoned one is taken all the same.
    let _writing = WRITE_LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let path = config.index_path();
    // Records, vectors and postings go to temporary files next to the index
    // as they come; the writer removes them whatever happens.
    let mut writer = StreamWriter::create(&path, dim, config.dtype, meta)?;
    let mut rows_total = 0;
    let mut reused_rows = 0;
    let mut docs = 0;
    for entry in &catalog.entries {
        // Each manifest is decoded here and dropped after its record and
        // terms are written, so the build never holds the parsed catalog.
        // One parse of the text; the struct is read from the value.
        let decoded = entry.manifest_value().and_then(|value| {
            Ok((
                <oap_manifest::Manifest as serde::Deserialize>::deserialize(&value)?,
                value,
            ))
        });
        let (manifest, manifest_value) = match decoded {
            Ok(decoded) => decoded,
            Err(err) => {
                tracing::error!(id = %entry.id, error = %err, "cannot decode manifest, skipping");
                continue;
            }
        };
        let record = StoredRecord {
            id: entry.id.clone(),
            trust: entry.trust,
            origin: entry.origin.clone(),
            content_hash: entry.content_hash.clone(),
            manifest: manifest_value,
            warnings: entry.warnings.iter().map(|w| w.to_string()).collect(),
            unhealthy: entry.unhealthy.clone(),
            mcp: entry.mcp.as_deref().cloned(),
        };
        let record = match serde_json::to_vec(&record) {
            Ok(bytes) => bytes,
            Err(err) => {
                tracing::error!(id = %entry.id, error = %err, "cannot serialise record, skipping");
                continue;
            }
        };
        let mut rows = Vec::new();
        if let Some(model_id) = sources.model_id {
            for row in document::rows(&manifest, &entry.requests, config.row_weights) {
                let key = document::row_key(model_id, &row.text);
                let vector = match fresh.get(&key) {
                    Some(vector) => vector.clone(),
                    None => {
                        let old = sources.reusable.get(&key).and_then(|&(source, row)| {
                            sources
                                .indexes
                                .get(source)
                                .and_then(|index| index.row_at(row))
                        });
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
            lexical: document::lexical_terms_with(
                &manifest,
                &entry.requests,
                config.row_weights,
                config.stemmer,
            ),
        })?;
        docs += 1;
    }
    // Writing and then mapping (and populating) a file of tens of MB:
    // each is one step that should not start under a running query.
    yield_to_queries();
    writer.finish()?;
    Ok(Written {
        docs,
        rows: rows_total,
        reused_rows,
    })
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
/// The configured donors a build of dimension `dim` can take vectors from
/// (see [`EngineConfig::vector_donors`]).
fn open_donors(config: &EngineConfig, dim: usize) -> Vec<Index> {
    let mut donors = Vec::with_capacity(config.vector_donors.len());
    for path in &config.vector_donors {
        // A donor that does not exist yet is expected (a board subscribed
        // to a snapshot before its first install): nothing to warn about.
        // Only one that exists and cannot be read is.
        if let Err(err) = std::fs::symlink_metadata(path) {
            if err.kind() == std::io::ErrorKind::NotFound {
                tracing::debug!(donor = %path.display(), "vector donor absent (yet): skipped");
                continue;
            }
        }
        match Index::open(path) {
            Ok(index) if index.dim() != dim => tracing::warn!(
                donor = %path.display(),
                donor_dim = index.dim(),
                dim,
                "vector donor skipped: another dimension"
            ),
            Ok(index) if index.dtype() == VectorDtype::I8 && config.dtype == VectorDtype::F32 => {
                tracing::warn!(
                    donor = %path.display(),
                    "vector donor skipped: its int8 vectors would lower this f32 index's precision"
                )
            }
            Ok(index) => donors.push(index),
            Err(err) => tracing::warn!(
                donor = %path.display(),
                error = %err,
                "vector donor skipped: cannot open it"
            ),
        }
    }
    donors
}

fn open_index(config: &EngineConfig, path: &Path) -> Result<Index, IndexError> {
    let mut index = Index::open(path)?;
    if let Some(threads) = config.search_threads {
        let mut search = index.search_config();
        search.threads = threads.max(1);
        index.set_search_config(search);
    }
    Ok(index)
}
