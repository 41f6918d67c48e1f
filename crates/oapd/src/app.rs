//! Start-up: from a loaded [`Config`] to a running engine and server.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use oap_discovery::{BuildReport, Engine, EngineConfig, Mode, Scoring, Source};
use oap_embed::Embedder;
use oap_embed_candle::{BertEmbedder, EmbedOptions};
use tokio::task::JoinHandle;

use crate::api::ModelState;
use crate::bridge::{BridgeSettings, Capabilities, ChatContext};
use crate::chat::ChatService;
use crate::config::{Config, DiscoveryMode, VectorDtypeConfig};
use crate::upstream::Upstream;

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
    };
    match BertEmbedder::load(&config.embedding.model_dir, options) {
        Ok(embedder) => {
            let id = embedder.model_id().to_string();
            tracing::info!(model = %id, dir = %config.embedding.model_dir.display(), "embedding model loaded");
            (
                Some(Arc::new(embedder)),
                ModelState {
                    loaded: true,
                    id: Some(id),
                    error: None,
                },
            )
        }
        Err(err) => {
            tracing::error!(
                dir = %config.embedding.model_dir.display(),
                error = %err,
                "EMBEDDING MODEL NOT LOADED: discovery falls back to lexical-only retrieval (BM25). \
                 Run `cargo xtask fetch-model` or set embedding.model_dir"
            );
            (
                None,
                ModelState {
                    loaded: false,
                    id: None,
                    error: Some(err.to_string()),
                },
            )
        }
    }
}

/// The manifest sources in precedence order: operator directories first,
/// so an operator's manifest overrides a bundled one of the same name.
pub fn sources(config: &Config) -> Vec<Source> {
    let mut sources: Vec<Source> = config
        .manifests
        .dirs
        .iter()
        .map(|dir| Source::Dir(dir.clone()))
        .collect();
    if config.manifests.bundled {
        sources.push(crate::bundled::source());
    }
    // Crawled manifests (internet or LAN trust), ids `<host>/<slug>`, so
    // they never collide with local ones.
    sources.push(Source::Remote(crate::crawl::remote_dir(config)));
    sources
}

pub fn engine_config(config: &Config) -> EngineConfig {
    let mut engine = EngineConfig::new(&config.index.data_dir);
    engine.dtype = match config.index.vector_dtype {
        VectorDtypeConfig::F32 => oap_index::VectorDtype::F32,
        VectorDtypeConfig::I8 => oap_index::VectorDtype::I8,
    };
    let mut scoring = Scoring {
        mode: match config.discovery.mode {
            DiscoveryMode::Hybrid => Mode::Hybrid,
            DiscoveryMode::Dense => Mode::Dense,
            DiscoveryMode::Lexical => Mode::Lexical,
        },
        ..Scoring::default()
    };
    // The configured threshold is a cosine (hybrid and dense modes); the
    // lexical fallback keeps its own scale and threshold.
    if let Some(min_score) = config.discovery.min_score {
        scoring.min_score_hybrid = min_score;
        scoring.min_score_dense = min_score;
    }
    engine.scoring = scoring;
    engine.search_threads = config.index.search_threads;
    engine
}

/// Opens (or builds) the index for `config`, logging what loading found.
pub fn open_engine(
    config: &Config,
    embedder: Option<Arc<dyn Embedder>>,
) -> anyhow::Result<(Engine, BuildReport)> {
    let (engine, report) = Engine::open(engine_config(config), sources(config), embedder)
        .with_context(|| {
            format!(
                "cannot open the index in {}",
                config.index.data_dir.display()
            )
        })?;
    log_report(&report);
    Ok((engine, report))
}

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
        reused_index = report.reused_index,
        elapsed_ms = report.elapsed_ms,
        "index ready"
    );
}

/// Runs the daemon until SIGINT or SIGTERM (no SIGHUP reload: there is no
/// config file to re-read). See [`crate::lifecycle::serve`].
pub async fn serve(config: Config) -> anyhow::Result<()> {
    crate::lifecycle::serve(config, None).await
}

/// Background tasks of one engine generation (crawler, directory watch).
pub type CrawlTasks = Vec<JoinHandle<()>>;

/// Starts the directory watch and, when `crawler.enabled`, the crawler's
/// schedule loop, for `engine`. The caller owns the returned tasks: a
/// reload aborts them and starts new ones for the new engine (the
/// crawler's schedule and store are files, so nothing is lost).
pub fn start_crawler(
    config: &Config,
    rebuilder: &Arc<crate::rebuild::Rebuilder>,
    watch_baseline: crate::watch::DirSignature,
) -> anyhow::Result<(Option<Arc<oap_crawl::Crawler>>, CrawlTasks)> {
    let engine = rebuilder.engine();
    let mut tasks = Vec::new();
    let mut dropped_seeds = 0;
    // LAN discovery (crawler.mdns) needs the crawler for its LAN targets
    // even when internet crawling (crawler.enabled) is off; the crawler then
    // fetches LAN targets only and refuses registrations.
    let crawler = if config.crawler.enabled || config.crawler.mdns {
        let crawler = Arc::new(
            crate::crawl::build_for(config, config.crawler.enabled).context("crawler setup")?,
        );
        let mut seeds_added = 0;
        if config.crawler.enabled {
            let seeds = crate::crawl::seeds(config)?;
            let added = crate::crawl::add_seeds(&crawler, &seeds, oap_crawl::AddedBy::Seed);
            seeds_added = added.len();
            dropped_seeds = crawler.retain_seeds(&added).len();
        }
        tracing::info!(
            seeds = seeds_added,
            dropped = dropped_seeds,
            internet = config.crawler.enabled,
            mdns = config.crawler.mdns,
            "crawler started"
        );
        Some(crawler)
    } else {
        None
    };
    let mut lan_removed = 0;
    if !config.crawler.mdns {
        // LAN discovery off: no LAN tools, also none left from a run with it on.
        let removed = match &crawler {
            Some(crawler) => crawler.purge_lan_targets(),
            None => crate::mdns::purge_stored(config),
        };
        if removed > 0 {
            tracing::info!(removed, "LAN manifests removed (crawler.mdns is off)");
            lan_removed = removed;
        }
    }
    // Manifests that left the store at start (dropped seeds, LAN manifests
    // with mDNS off): one rebuild covers them all.
    if dropped_seeds > 0 || lan_removed > 0 {
        let rebuilder = rebuilder.clone();
        tasks.push(tokio::spawn(async move {
            rebuilder.rebuild("manifests left the store at start").await;
        }));
    }
    // Runs with the watching off too (watch_interval 0): it also retries
    // failed rebuilds.
    tasks.push(tokio::spawn(crate::watch::watch_dirs(
        rebuilder.clone(),
        crate::watch::watched_dirs(config),
        watch_baseline,
        Duration::from_secs(config.crawler.watch_interval),
        std::future::pending(),
    )));
    if let Some(crawler) = &crawler {
        tasks.push(tokio::spawn(crawler.clone().run(
            crate::catalog_sink::sink(engine),
            Duration::from_secs(1),
            std::future::pending(),
        )));
        if config.crawler.mdns {
            tasks.push(tokio::spawn(crate::mdns::browse(
                crawler.clone(),
                rebuilder.clone(),
            )));
        }
    }
    Ok((crawler, tasks))
}

/// The chat bridge and pass-through wiring for `config`.
pub fn chat_service(config: &Config, engine: Arc<Engine>) -> anyhow::Result<ChatService> {
    let upstream = Upstream::new(
        &config.ollama.base_url,
        Duration::from_secs(config.ollama.timeout),
    )
    .context("ollama.base_url")?;
    let runner = crate::tools::ExecRunner::new(config).context("tool execution setup")?;
    let sandbox = runner.sandbox.clone();
    sandbox.log();
    let ctx = ChatContext {
        upstream,
        runner: Arc::new(runner),
        capabilities: Arc::new(Capabilities::default()),
        deadline: Duration::from_secs(config.ollama.chat_deadline),
        max_parallel_tools: config.tools.max_parallel,
    };
    Ok(ChatService {
        engine: engine.clone(),
        ctx: Arc::new(ctx),
        settings: BridgeSettings {
            enabled: config.tool_bridge.enabled,
            default_top_k: config.tool_bridge.default_top_k,
            max_rounds: config.tool_bridge.max_rounds,
        },
        max_request_bytes: config.ollama.max_request_bytes,
        strips_authorization: config.server.auth_token.is_some(),
        exposure: crate::exposure::ExposureSettings::from_config(&config.tool_bridge),
        validation: Arc::new(crate::validation::ValidationGate::new(config)),
        experience: crate::experience::Experience::open(config, engine.clone()),
        sandbox,
        keepalive: Duration::from_secs(config.tool_bridge.stream_keepalive),
    })
}

/// Lints manifest files, printing `FILE: severity: path: message` lines
/// (or `FILE: ok`); returns whether any file had errors.
pub fn lint(paths: &[impl AsRef<Path>], out: &mut impl std::io::Write) -> std::io::Result<bool> {
    let mut any_error = false;
    for path in paths {
        let path = path.as_ref();
        // One line per finding even for a file name with a line break or an
        // escape sequence in it.
        let shown = crate::logging::Escaped(path.display()).to_string();
        let max = oap_manifest::MAX_MANIFEST_BYTES;
        // A FIFO or device named on the command line is refused, not waited on.
        let report = match crate::files::read_regular(path, max as u64) {
            Ok(bytes) => match oap_manifest::parse(&bytes) {
                Ok(parsed) => parsed.warnings,
                Err(err) => err.report(),
            },
            Err(crate::files::ReadError::TooLarge {
                size: Some(size), ..
            }) => oap_manifest::ManifestError::TooLarge {
                size: usize::try_from(size).unwrap_or(usize::MAX),
                max,
            }
            .report(),
            Err(err) => {
                writeln!(out, "{shown}: error: cannot read: {err}")?;
                any_error = true;
                continue;
            }
        };
        any_error |= report.has_errors();
        if report.is_empty() {
            writeln!(out, "{shown}: ok")?;
        } else {
            write!(out, "{}", oap_manifest::lint_text(&shown, &report))?;
        }
    }
    Ok(any_error)
}

/// `oapd validate-model`: runs the checks, prints the report, records the
/// verdict. Exit code 0 on pass, 1 on a failed check, 2 when no verdict
/// could be reached (Ollama down, model not installed); nothing is recorded then.
pub fn validate_model(
    config: &Config,
    model: &str,
    full_suite: bool,
    timeout_secs: u64,
) -> anyhow::Result<std::process::ExitCode> {
    let check_timeout = Duration::from_secs(timeout_secs);
    let upstream = Upstream::new(
        &config.ollama.base_url,
        check_timeout.min(Duration::from_secs(config.ollama.timeout)),
    )
    .context("ollama.base_url")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let outcome = runtime.block_on(crate::validation::validate(
        &upstream,
        model,
        full_suite,
        check_timeout,
    ));
    let record = match outcome {
        Ok(record) => record,
        Err(err) => {
            eprintln!("oapd: validate-model: no verdict: {err}");
            return Ok(std::process::ExitCode::from(2));
        }
    };
    print!("{}", crate::validation::render(&record));
    let store = crate::validation::ValidationStore::in_dir(&config.index.data_dir);
    let passed = record.passed;
    store
        .put(record)
        .with_context(|| format!("cannot record the verdict in {}", store.path().display()))?;
    println!("recorded in {}", store.path().display());
    Ok(if passed {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}
