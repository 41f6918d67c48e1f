//! "Nothing fits" in small catalogs: each task brings its own catalog (a
//! directory of manifests) and either fits one of its tools or none. Every
//! task is answered by `Engine::discover_with` over an engine opened on its
//! catalog alone, as the daemon would answer it with only those manifests
//! indexed; the report gives, per half of the corpus, the AUROC of the
//! abstention score of the best candidate (fitting against no-fit tasks),
//! the share of each kind abstained on at the daemon's threshold, and how
//! often a fitting task's best candidate is its tool.
//!
//! ```text
//! python3 bench/bfcl_relevance.py --out target/bench/bfcl-relevance
//! oap-bench relevance --tasks target/bench/bfcl-relevance/tasks.jsonl \
//!     --catalogs target/bench/bfcl-relevance/catalogs
//! ```
//!
//! Tasks are JSON lines with `id`, `query`, `catalog` (a directory name
//! under `--catalogs`), `expected` (the fitting tool's manifest name; empty
//! when nothing fits) and `split` (`tuning` or `evaluation`). The tables go
//! to stderr; the result is a [`RelevanceReport`].
//!
//! `--request-rows FILE` (repeatable), `--request-weight W` and
//! `--request-terms W` give the catalogs' tools request rows, as in
//! `oap-bench retrieval`.

use std::path::PathBuf;
use std::sync::Arc;

use oap_bench::report::{RelevanceHalf, RelevanceReport};
use oap_discovery::scoring::Scoring;
use oap_discovery::{Engine, EngineConfig, Mode, Source};
use oap_embed::Embedder;

use crate::retrieval::{auroc, load_encoder, with_request_rows, Cached, RequestArgs};

/// "Nothing fits" with each task's own small catalog.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The task set (JSONL: `id`, `query`, `catalog`, `expected`, `split`).
    #[arg(long)]
    tasks: PathBuf,
    /// The directory holding one manifest directory per catalog.
    #[arg(long)]
    catalogs: PathBuf,
    /// The embedding model directory.
    #[arg(long, default_value = "models/all-MiniLM-L6-v2")]
    model: PathBuf,
    /// Load the model without the compiled-in tool-retrieval tuning, with
    /// its thresholds (the daemon's `embedding.tool_tuning: false`).
    #[arg(long)]
    plain_model: bool,
    /// The hybrid "no fitting capability" threshold, as the daemon's
    /// `discovery.min_score` sets it (default: the encoder's).
    #[arg(long)]
    min_score: Option<f32>,
    /// Reuse embeddings across runs through this file.
    #[arg(long)]
    embed_cache: Option<PathBuf>,
    /// Per task, its best candidate and abstention score, as JSON lines.
    #[arg(long)]
    dump: Option<PathBuf>,
    #[command(flatten)]
    requests: RequestArgs,
}

/// One line of the task file.
#[derive(serde::Deserialize)]
struct Task {
    id: String,
    query: String,
    catalog: String,
    /// The fitting tool's manifest name; none when nothing fits.
    #[serde(default)]
    expected: Vec<String>,
    split: String,
}

fn load(path: &PathBuf) -> anyhow::Result<Vec<Task>> {
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut tasks = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let task: Task = serde_json::from_str(line)
            .map_err(|e| anyhow::anyhow!("{} line {}: {e}", path.display(), n + 1))?;
        if task.expected.len() > 1 {
            anyhow::bail!(
                "{} line {}: a task here fits one tool or none, not {}",
                path.display(),
                n + 1,
                task.expected.len()
            );
        }
        tasks.push(task);
    }
    Ok(tasks)
}

/// What the engine answered for one task.
struct Outcome {
    split: String,
    fits: bool,
    /// The abstention score of the best candidate (−∞ for an empty answer).
    score: f32,
    matched: bool,
    /// A fitting task whose best candidate is its tool.
    right: bool,
    catalog_size: usize,
}

fn half(label: &str, outcomes: &[&Outcome]) -> RelevanceHalf {
    let fitting: Vec<&&Outcome> = outcomes.iter().filter(|o| o.fits).collect();
    let no_fit: Vec<&&Outcome> = outcomes.iter().filter(|o| !o.fits).collect();
    let share = |n: usize, of: usize| n as f64 / of.max(1) as f64;
    let scores: Vec<(f32, bool)> = outcomes.iter().map(|o| (o.score, o.fits)).collect();
    let several: Vec<&&Outcome> = no_fit
        .iter()
        .copied()
        .filter(|o| o.catalog_size > 1)
        .collect();
    RelevanceHalf {
        half: label.to_string(),
        fitting: fitting.len(),
        no_fit: no_fit.len(),
        auroc: Some(auroc(&scores)).filter(|a| !a.is_nan()),
        no_fit_abstained: share(no_fit.iter().filter(|o| !o.matched).count(), no_fit.len()),
        fitting_abstained: share(fitting.iter().filter(|o| !o.matched).count(), fitting.len()),
        fitting_best_right: share(fitting.iter().filter(|o| o.right).count(), fitting.len()),
        no_fit_in_larger_catalogs: several.len(),
        no_fit_in_larger_catalogs_abstained: share(
            several.iter().filter(|o| !o.matched).count(),
            several.len(),
        ),
    }
}

/// An engine opened over one catalog alone.
struct OpenCatalog {
    name: String,
    engine: Engine,
    size: usize,
}

/// Answers every task against its own catalog.
pub fn run(args: Args) -> anyhow::Result<RelevanceReport> {
    let tasks = load(&args.tasks)?;
    if tasks.is_empty() {
        anyhow::bail!("{}: no task", args.tasks.display());
    }
    let bert = load_encoder(&args.model, args.plain_model)?;
    let mut scoring = Scoring::calibrated(bert.calibration());
    if let Some(min_score) = args.min_score {
        scoring.min_score_hybrid = min_score;
    }
    let model: Arc<dyn Embedder> = Arc::new(bert);
    let model_id = model.model_id().to_string();
    let cached = Arc::new(Cached::load(model, args.embed_cache.as_ref()));
    let data = std::env::temp_dir().join(format!("oapd-relevance-{}", std::process::id()));

    let mut dump = match &args.dump {
        Some(path) => Some(std::io::BufWriter::new(std::fs::File::create(path)?)),
        None => None,
    };
    let request_rows = args.requests.provider()?;
    // Manifests given request rows and their rows, over every catalog.
    let mut with_rows = (0usize, 0usize);
    let mut outcomes: Vec<Outcome> = Vec::new();
    let mut load_problems = 0;
    // The catalog the previous task used: consecutive tasks of one catalog
    // share its engine. Each engine keeps its index under `data` until the
    // end of the run (a few kilobytes per catalog).
    let mut current: Option<OpenCatalog> = None;
    for (n, task) in tasks.iter().enumerate() {
        if current.as_ref().is_none_or(|c| c.name != task.catalog) {
            // A missing directory would open as an empty catalog and count
            // as an abstention: refuse it instead.
            let catalog = args.catalogs.join(&task.catalog);
            if !catalog.is_dir() {
                anyhow::bail!(
                    "task {}: catalog {} is not a directory",
                    task.id,
                    catalog.display()
                );
            }
            let mut config = EngineConfig::new(data.join(n.to_string()));
            config.scoring = scoring.clone();
            let sources = vec![Source::Dir(catalog)];
            args.requests.configure(&mut config, request_rows.as_ref());
            if let Some(provider) = &request_rows {
                let (manifests, rows) = with_request_rows(provider.as_ref(), &sources);
                with_rows.0 += manifests;
                with_rows.1 += rows;
            }
            let (engine, report) = Engine::open(config, sources, Some(cached.clone()))
                .map_err(|e| anyhow::anyhow!("catalog {}: {e}", task.catalog))?;
            load_problems += report.problems.len();
            current = Some(OpenCatalog {
                name: task.catalog.clone(),
                engine,
                size: report.docs,
            });
        }
        let Some(OpenCatalog {
            engine,
            size: catalog_size,
            ..
        }) = current.as_ref()
        else {
            continue;
        };
        let catalog_size = *catalog_size;
        let found = engine
            .discover_with(&task.query, 5, Mode::Hybrid)
            .map_err(|e| anyhow::anyhow!("{}: {e}", task.id))?;
        let top = found.candidates.first();
        let score = top.map_or(f32::NEG_INFINITY, |c| {
            scoring.decision_score(Mode::Hybrid, &c.scores)
        });
        let expected = task.expected.first();
        let outcome = Outcome {
            split: task.split.clone(),
            fits: expected.is_some(),
            score,
            matched: found.best.is_some(),
            right: expected.is_some_and(|name| top.is_some_and(|c| c.name == *name)),
            catalog_size,
        };
        if let Some(out) = dump.as_mut() {
            use std::io::Write;
            let line = serde_json::json!({
                "id": task.id,
                "split": task.split,
                "fits": outcome.fits,
                "catalog_size": catalog_size,
                "best": top.map(|c| c.name.clone()),
                "dense": top.and_then(|c| c.scores.dense),
                "evidence": top.map(|c| c.scores.evidence),
                "score": top.map(|_| score),
                "matched": outcome.matched,
            });
            writeln!(out, "{line}")?;
        }
        outcomes.push(outcome);
        if (n + 1) % 200 == 0 {
            eprintln!("{} / {} tasks", n + 1, tasks.len());
        }
    }
    drop(current);
    let _ = std::fs::remove_dir_all(&data);
    if request_rows.is_some() {
        eprintln!(
            "request rows: {} rows for {} manifests over all catalogs",
            with_rows.1, with_rows.0
        );
    }
    if let Some(path) = &args.embed_cache {
        if let Err(e) = cached.save(path) {
            eprintln!("oap-bench relevance: embedding cache not saved: {e}");
        }
    }

    let mut halves = Vec::new();
    for label in ["tuning", "evaluation"] {
        let of_half: Vec<&Outcome> = outcomes.iter().filter(|o| o.split == label).collect();
        if !of_half.is_empty() {
            halves.push(half(label, &of_half));
        }
    }
    halves.push(half("all", &outcomes.iter().collect::<Vec<_>>()));
    Ok(RelevanceReport {
        model: model_id,
        threshold: scoring.min_score_hybrid,
        catalogs: tasks
            .iter()
            .map(|t| t.catalog.as_str())
            .collect::<std::collections::HashSet<_>>()
            .len(),
        load_problems,
        halves,
    })
}
