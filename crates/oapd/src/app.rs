//! Start-up: from a loaded [`Config`] to an open discovery engine (the
//! embedding model, the manifest sources, the index). The server
//! (`crate::server`) and the commands (`crate::cli`) both start here.

use std::sync::Arc;

use anyhow::Context;
use oap_discovery::{BuildReport, Engine, EngineConfig, McpTools, Mode, Scoring, Source};
use oap_embed::{Calibration, Coalescing, Embedder};
use oap_embed_candle::{BertEmbedder, EmbedOptions, WeightPrecision};
use serde::Serialize;

use crate::config::{Config, DiscoveryMode, EmbeddingModel, EmbeddingWeights, VectorDtypeConfig};
use crate::request_gen::RequestGenerator;

/// State of the embedding model, as `/health` reports it.
#[derive(Debug, Clone, Serialize)]
pub struct ModelState {
    /// True once the model is ready; false means discovery is lexical only
    /// (BM25).
    pub loaded: bool,
    /// The model's identifier, when it loaded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Why the model did not load, shown so operators can fix it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Loads the embedding model, or explains loudly why retrieval will be
/// lexical only. A missing model never stops the daemon: it still serves,
/// and `/health` says it is degraded.
pub fn load_embedder(config: &Config) -> (Option<Arc<dyn Embedder>>, ModelState) {
    if !config.embedding.enabled {
        tracing::warn!("embedding disabled in config: discovery is lexical only (BM25)");
        return (
            None,
            ModelState {
                loaded: false,
                id: None,
                error: Some("disabled in config (embedding.enabled: false)".into()),
            },
        );
    }
    let options = EmbedOptions {
        max_tokens: config.embedding.max_tokens,
        batch_size: config.embedding.batch_size,
        threads: config.embedding.threads,
        weights: match config.embedding.weights {
            EmbeddingWeights::Bf16 => WeightPrecision::Bf16,
            EmbeddingWeights::F32 => WeightPrecision::F32,
        },
        tool_tuning: config.embedding.tool_tuning,
    };
    let model = config.embedding.model;
    let dir = config.embedding.model_path();
    let loaded = BertEmbedder::load(&dir, options).and_then(|embedder| {
        // A directory holding another model than the one asked for would
        // embed on the wrong scale for the thresholds chosen by name.
        let is_e5 = embedder.calibration() == Calibration::MultilingualE5;
        if is_e5 == (model == EmbeddingModel::MultilingualE5Small) {
            Ok(embedder)
        } else {
            Err(oap_embed::EmbedError::InvalidOptions(format!(
                "{} holds {}, not the {} that embedding.model asks for",
                dir.display(),
                embedder.model_id(),
                model.name()
            )))
        }
    });
    match loaded {
        Ok(embedder) => {
            let id = embedder.model_id().to_string();
            tracing::info!(model = %id, dir = %dir.display(), "embedding model loaded");
            // Concurrent queries share forward passes: one packed batch
            // streams the weights once for all of them.
            let embedder: Arc<dyn Embedder> = match config.discovery.coalesce_queries {
                0 | 1 => Arc::new(embedder),
                max_batch => Arc::new(Coalescing::new(embedder, max_batch)),
            };
            (
                Some(embedder),
                ModelState {
                    loaded: true,
                    id: Some(id),
                    error: None,
                },
            )
        }
        Err(err) => {
            let hint = format!(
                "embedding.model {}: run `{}` or set embedding.model_dir",
                model.name(),
                model.fetch_command()
            );
            tracing::error!(
                dir = %dir.display(),
                error = %err,
                "EMBEDDING MODEL NOT LOADED: discovery falls back to lexical-only retrieval (BM25). {hint}"
            );
            (
                None,
                ModelState {
                    loaded: false,
                    id: None,
                    error: Some(format!("{err} ({hint})")),
                },
            )
        }
    }
}

/// The manifest sources in precedence order: operator directories first,
/// so an operator's manifest overrides a bundled one of the same name.
pub fn sources(config: &Config, mcp: Option<Arc<dyn McpTools>>) -> Vec<Source> {
    // Each operator manifest with the schemas its references name, as
    // last resolved (`local_schemas`; the daemon refreshes them).
    let schemas: Arc<dyn oap_discovery::DirManifests> = Arc::new(
        crate::local_schemas::LocalSchemas::new(&config.index.data_dir),
    );
    let mut sources: Vec<Source> = config
        .manifests
        .dirs
        .iter()
        .map(|dir| Source::DirWith(dir.clone(), schemas.clone()))
        .collect();
    if config.manifests.bundled {
        sources.push(crate::bundled::source());
    }
    // Crawled manifests (internet or LAN trust), ids `<host>/<slug>`, so
    // they never collide with local ones.
    sources.push(Source::Remote(crate::crawl::remote_dir(config)));
    // The subscribed snapshot's tools (internet trust, like crawled ones,
    // counted as their own source).
    if let Some(dir) = crate::snapshots::tools_dir(config) {
        sources.push(Source::Snapshot(dir));
    }
    // MCP servers' tools, ids `mcp/<server>/<tool>`.
    if let Some(mcp) = mcp {
        sources.push(Source::Mcp(mcp));
    }
    sources
}

/// The discovery engine's settings from `index:` and `discovery:`
/// (data directory, vector type, ranking); shared by `serve`, `index`,
/// `discover` and reloads so they open the same index the same way.
/// `calibration` is the loaded encoder's: the default thresholds follow
/// the weights that loaded, not the tuning the configuration asked for.
pub fn engine_config(config: &Config, calibration: Calibration) -> EngineConfig {
    let mut engine = EngineConfig::new(&config.index.data_dir);
    engine.vector_donors = config.index.vector_donors.clone();
    // The subscribed snapshot's index: what its builder embedded is not
    // embedded again here.
    engine.vector_donors.extend(crate::snapshots::donor(config));
    engine.dtype = match config.index.vector_dtype {
        VectorDtypeConfig::F32 => oap_index::VectorDtype::F32,
        VectorDtypeConfig::I8 => oap_index::VectorDtype::I8,
    };
    let defaults = Scoring::calibrated(calibration);
    let mut scoring = Scoring {
        mode: match config.discovery.mode {
            DiscoveryMode::Hybrid => Mode::Hybrid,
            DiscoveryMode::Dense => Mode::Dense,
            DiscoveryMode::Lexical => Mode::Lexical,
        },
        ..defaults
    };
    // The configured threshold is a cosine (hybrid and dense modes); the
    // lexical fallback keeps its own scale and threshold.
    if let Some(min_score) = config.discovery.min_score {
        scoring.min_score_hybrid = min_score;
        scoring.min_score_dense = min_score;
    }
    engine.scoring = scoring;
    engine.search_threads = config.index.search_threads;
    engine.query_cache = config.discovery.query_cache;
    engine.request_rows = request_rows(None);
    engine
}

/// Request rows for the engine: the bundled tools' shipped requests, then
/// the subscribed snapshot's (`snapshot`: the daemon's, when it has a
/// subscription). The bundled ones are compiled in and checked by a test,
/// so a failure here is a broken build; discovery then goes on with the
/// manifests' own texts.
fn request_rows(
    snapshot: Option<Arc<dyn oap_discovery::RequestRows>>,
) -> Option<Arc<dyn oap_discovery::RequestRows>> {
    match crate::bundled::request_rows() {
        Ok(table) => {
            let chain = oap_discovery::RequestChain::new().then(Arc::new(table));
            Some(Arc::new(match snapshot {
                Some(rows) => chain.then(rows),
                None => chain,
            }))
        }
        Err(err) => {
            tracing::error!(error = %err, "bundled request rows unusable, left out");
            None
        }
    }
}

/// Opens (or builds) the index for `config`, logging what loading found.
pub fn open_engine(
    config: &Config,
    embedder: Option<Arc<dyn Embedder>>,
) -> anyhow::Result<(Engine, BuildReport)> {
    open_engine_with(config, embedder, None)
}

/// The daemon's engine: [`open_engine_with`], except that a start with
/// more than `index.start_embed_limit` texts to embed does not embed them
/// first; the index serves lexically until a background rebuild (started
/// by the server) has them. `generated` is the daemon's request generator,
/// whose cached rows this engine attaches and which learns from each of
/// its catalog loads what is left to generate; `snapshots` is the daemon's
/// snapshot state, whose installed rows it attaches when subscribed.
pub fn open_serving_engine(
    config: &Config,
    embedder: Option<Arc<dyn Embedder>>,
    mcp: Option<Arc<dyn McpTools>>,
    generated: &Arc<RequestGenerator>,
    snapshots: &crate::snapshots::Snapshots,
) -> anyhow::Result<(Engine, BuildReport)> {
    crate::snapshots::prepare(config, snapshots);
    let mut engine_config = engine_config(config, calibration_of(embedder.as_ref()));
    if config.snapshots.url.is_some() {
        engine_config.request_rows = request_rows(Some(snapshots.rows()));
    }
    engine_config.start_embed_limit = Some(config.index.start_embed_limit);
    with_generated_rows(&mut engine_config, generated);
    open_with(config, engine_config, embedder, mcp)
}

/// Attaches the generated request rows after whatever rows
/// `engine_config` already has (those shipped with the bundled tools):
/// a tool with rows given there gets none generated.
fn with_generated_rows(engine_config: &mut EngineConfig, generated: &Arc<RequestGenerator>) {
    let given = engine_config.request_rows.take();
    engine_config.request_rows = Some(generated.after(given));
}

/// [`open_engine`] with the MCP servers' tools as one more source (the
/// daemon, and the one-shot `index` and `discover` commands when servers
/// are configured).
pub fn open_engine_with(
    config: &Config,
    embedder: Option<Arc<dyn Embedder>>,
    mcp: Option<Arc<dyn McpTools>>,
) -> anyhow::Result<(Engine, BuildReport)> {
    let mut engine_config = engine_config(config, calibration_of(embedder.as_ref()));
    // The rows the daemon generated and cached, so this index has the rows
    // the daemon's has (nothing is generated here).
    with_generated_rows(&mut engine_config, &RequestGenerator::open_all(config));
    open_with(config, engine_config, embedder, mcp)
}

/// Without a model discovery is lexical, and the dense thresholds are moot.
fn calibration_of(embedder: Option<&Arc<dyn Embedder>>) -> Calibration {
    embedder.map_or(Calibration::General, |e| e.calibration())
}

fn open_with(
    config: &Config,
    engine_config: EngineConfig,
    embedder: Option<Arc<dyn Embedder>>,
    mcp: Option<Arc<dyn McpTools>>,
) -> anyhow::Result<(Engine, BuildReport)> {
    let (engine, report) = Engine::open(engine_config, sources(config, mcp), embedder)
        .with_context(|| {
            format!(
                "cannot open the index in {}",
                config.index.data_dir.display()
            )
        })?;
    log_report(&report);
    Ok((engine, report))
}

/// Logs a build's outcome: one warning per skipped manifest, then a
/// summary line.
pub fn log_report(report: &BuildReport) {
    for problem in &report.problems {
        tracing::warn!(location = %problem.location, problem = %problem.message, "manifest skipped");
    }
    for collision in &report.collisions {
        tracing::warn!(
            id = %collision.id,
            kept = %collision.kept,
            skipped = %collision.skipped,
            "manifest id collision: the first source wins"
        );
    }
    if let Some(problem) = &report.previous_index_problem {
        tracing::error!(problem = %problem, "the previous index file was unusable and has been rebuilt");
    }
    tracing::info!(
        manifests = report.docs,
        rows = report.rows,
        embedded = report.embedded_rows,
        pending_texts = report.pending_texts,
        reused_index = report.reused_index,
        elapsed_ms = report.elapsed_ms,
        "index ready"
    );
}
