//! Does the "nothing fits" decision depend on how many other manifests the
//! catalog holds? The same queries are scored against (a) a small catalog
//! and (b) the same manifests plus a large corpus, and for each abstention
//! rule this reports the share of fitting and no-fit queries abstained in
//! both, and how many decisions flip between (a) and (b) among the queries
//! whose best candidate is the same manifest in both (a flip there is the
//! catalog's size speaking, not a different candidate).
//!
//! ```text
//! oap-bench catalog-size --tasks bench/discovery-tasks.jsonl --dir manifests/bundled \
//!     --corpus target/bench/corpus-bfcl-10000/manifests \
//!     --no-fit-from target/bench/ha-intents/tasks.jsonl \
//!     --embed-cache target/bench/catalog-size.embed
//! ```
//!
//! Rules compared: the default (`Scoring::accepts`: cosine plus weighted,
//! capped [`scoring::abstention_evidence`]) and the previous rule (cosine
//! plus 0.15 × the BM25 `lexical` part capped at 0.6, threshold 0.30), whose
//! unit's idf grows with the catalog. `--no-fit-from FILE` adds the no-fit
//! queries of a held-out corpus's tuning half (tasks with no expected tool
//! and `split` `tuning`) as further no-fit queries. The tables go to stderr;
//! the result is a [`CatalogSizeReport`].

use std::path::PathBuf;
use std::sync::Arc;

use oap_bench::report::{CatalogSizeReport, CatalogSizeRow};
use oap_discovery::query;
use oap_discovery::scoring::{self, ScoreParts, Scoring};
use oap_discovery::{Engine, EngineConfig, Mode, Source, StoredRecord};
use oap_embed::Embedder;
use oap_embed_candle::{BertEmbedder, EmbedOptions};
use oap_index::Index;

use crate::retrieval::{load_tasks, Cached, Task};

/// The abstention score before word evidence was made independent of the
/// catalog's size: BM25 units, weight 0.15, capped at 0.6 (threshold 0.30).
fn previous_score(parts: &ScoreParts) -> f32 {
    match parts.dense {
        Some(dense) => dense + 0.15 * parts.lexical.clamp(0.0, 0.6),
        None => parts.lexical,
    }
}

fn previous_rule(parts: &ScoreParts) -> bool {
    previous_score(parts) >= if parts.dense.is_some() { 0.30 } else { 0.20 }
}

/// The "nothing fits" decision with and without a large catalog around.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The labelled task set (JSONL: `id`, `query`, `expected`).
    #[arg(long)]
    tasks: PathBuf,
    /// Manifest directories of the small catalog (at least one).
    #[arg(long = "dir", required = true)]
    dirs: Vec<PathBuf>,
    /// The large corpus added to them for the second catalog.
    #[arg(long)]
    corpus: PathBuf,
    /// Task files whose tuning no-fit queries are added as no-fit queries.
    #[arg(long = "no-fit-from")]
    no_fit_from: Vec<PathBuf>,
    /// The embedding model directory.
    #[arg(long, default_value = "models/all-MiniLM-L6-v2")]
    model: PathBuf,
    /// Reuse embeddings across runs through this file (the corpus takes
    /// minutes to embed once).
    #[arg(long)]
    embed_cache: Option<PathBuf>,
    /// Keep the large catalog's index in this directory (default: a
    /// temporary one). An index already there lends its vectors to rows
    /// with the same text, so one made by `oapd index` over the same
    /// corpus saves embedding it again.
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

/// One catalog: its index and the name of each document.
struct Catalog {
    index: Index,
    names: Vec<String>,
}

fn open(
    config: &EngineConfig,
    sources: Vec<Source>,
    embedder: Arc<dyn Embedder>,
) -> anyhow::Result<Catalog> {
    let (engine, report) = Engine::open(config.clone(), sources, Some(embedder))
        .map_err(|e| anyhow::anyhow!("index: {e}"))?;
    eprintln!(
        "catalog: {} manifests ({} rows, {} embedded), {} load problems, {} collisions",
        report.docs,
        report.rows,
        report.embedded_rows,
        report.problems.len(),
        report.collisions.len(),
    );
    let index =
        Index::open(engine.config().index_path()).map_err(|e| anyhow::anyhow!("index: {e}"))?;
    let names = (0..index.len() as u32)
        .map(|doc| {
            index
                .record(doc)
                .and_then(|b| serde_json::from_slice::<StoredRecord>(b).ok())
                .and_then(|r| r.manifest.get("name")?.as_str().map(str::to_string))
                .unwrap_or_default()
        })
        .collect();
    Ok(Catalog { index, names })
}

/// A task's best candidate in one catalog and each rule's decision on it.
struct Outcome {
    best: Option<String>,
    /// Accepted by [default rule, previous rule].
    accepted: [bool; 2],
    /// The abstention score of each rule.
    score: [f32; 2],
    hit_at_3: bool,
}

fn outcome(
    catalog: &Catalog,
    scoring: &Scoring,
    vector: &[f32],
    terms: &[String],
    expected: &[String],
) -> Outcome {
    let scored = scoring::rank(
        &catalog.index,
        scoring,
        Mode::Hybrid,
        Some(vector),
        terms,
        3,
    );
    let name = |doc: u32| catalog.names.get(doc as usize).cloned().unwrap_or_default();
    let best = scored.first();
    Outcome {
        best: best.map(|(doc, _)| name(*doc)),
        accepted: [
            best.is_some_and(|(_, p)| scoring.accepts(Mode::Hybrid, p)),
            best.is_some_and(|(_, p)| previous_rule(p)),
        ],
        score: [
            best.map_or(f32::NAN, |(_, p)| scoring.decision_score(Mode::Hybrid, p)),
            best.map_or(f32::NAN, |(_, p)| previous_score(p)),
        ],
        hit_at_3: scored.iter().any(|(doc, _)| expected.contains(&name(*doc))),
    }
}

/// Scores every task against both catalogs.
pub fn run(args: Args) -> anyhow::Result<CatalogSizeReport> {
    let mut tasks: Vec<Task> = load_tasks(&args.tasks).map_err(anyhow::Error::msg)?;
    for file in &args.no_fit_from {
        let extra = load_tasks(file).map_err(anyhow::Error::msg)?;
        let before = tasks.len();
        tasks.extend(
            extra
                .into_iter()
                .filter(|t| t.expected.is_empty() && t.split.as_deref() == Some("tuning")),
        );
        eprintln!(
            "{}: {} tuning no-fit queries added",
            file.display(),
            tasks.len() - before
        );
    }
    let model: Arc<dyn Embedder> = Arc::new(
        BertEmbedder::load(&args.model, EmbedOptions::default())
            .map_err(|e| anyhow::anyhow!("model: {e}"))?,
    );
    let cached = Arc::new(Cached::load(model, args.embed_cache.as_ref()));
    let data = std::env::temp_dir().join(format!("oapd-catalog-size-{}", std::process::id()));
    let small_sources: Vec<Source> = args.dirs.iter().cloned().map(Source::Dir).collect();
    let mut large_sources = small_sources.clone();
    large_sources.push(Source::Dir(args.corpus.clone()));
    let small = open(
        &EngineConfig::new(data.join("small")),
        small_sources,
        cached.clone(),
    )?;
    let large = open(
        &EngineConfig::new(args.data_dir.clone().unwrap_or_else(|| data.join("large"))),
        large_sources,
        cached.clone(),
    );
    // The corpus's vectors are worth keeping even if a later step fails.
    if let Some(path) = &args.embed_cache {
        if let Err(e) = cached.save(path) {
            eprintln!("oap-bench catalog-size: embedding cache not saved: {e}");
        }
    }
    let large = large?;
    let scoring = Scoring::default();

    let mut outcomes: Vec<(bool, String, Outcome, Outcome)> = Vec::new();
    for task in &tasks {
        let views = query::views_with(&task.query, &scoring.query);
        let vector = cached
            .embed_one(&views.dense)
            .map_err(|e| anyhow::anyhow!("embed: {e}"))?;
        let terms = oap_index::tokenize(&views.lexical);
        let a = outcome(&small, &scoring, &vector, &terms, &task.expected);
        let b = outcome(&large, &scoring, &vector, &terms, &task.expected);
        outcomes.push((!task.expected.is_empty(), task.id.clone(), a, b));
    }
    if let Some(path) = &args.embed_cache {
        if let Err(e) = cached.save(path) {
            eprintln!("oap-bench catalog-size: embedding cache not saved: {e}");
        }
    }
    let _ = std::fs::remove_dir_all(&data);

    let fitting = outcomes.iter().filter(|o| o.0).count();
    let no_fit = outcomes.len() - fitting;
    let share = |count: usize, of: usize| count as f64 / of.max(1) as f64;
    let abstained = |rule: usize, fits: bool, large: bool| {
        let n = outcomes
            .iter()
            .filter(|o| o.0 == fits)
            .filter(|o| !(if large { &o.3 } else { &o.2 }).accepted[rule])
            .count();
        share(n, if fits { fitting } else { no_fit })
    };
    let same: Vec<&(bool, String, Outcome, Outcome)> = outcomes
        .iter()
        .filter(|o| o.2.best.is_some() && o.2.best == o.3.best)
        .collect();
    let rules = [
        "catalog-relative evidence (default)",
        "BM25 units (previous)",
    ]
    .iter()
    .enumerate()
    .map(|(rule, label)| {
        let flipped: Vec<String> = same
            .iter()
            .filter(|o| o.2.accepted[rule] != o.3.accepted[rule])
            .map(|o| {
                let verb = if o.3.accepted[rule] {
                    "accepted"
                } else {
                    "abstained"
                };
                format!(
                    "{} ({}, best {}): {verb} only with the corpus",
                    o.1,
                    if o.0 { "fitting" } else { "no-fit" },
                    o.2.best.as_deref().unwrap_or("-"),
                )
            })
            .collect();
        let shifts: Vec<f64> = same
            .iter()
            .map(|o| f64::from((o.3.score[rule] - o.2.score[rule]).abs()))
            .collect();
        CatalogSizeRow {
            rule: label.to_string(),
            mean_score_shift: shifts.iter().sum::<f64>() / shifts.len().max(1) as f64,
            max_score_shift: shifts.iter().copied().fold(0.0, f64::max),
            small_fitting_abstained: abstained(rule, true, false),
            small_no_fit_abstained: abstained(rule, false, false),
            large_fitting_abstained: abstained(rule, true, true),
            large_no_fit_abstained: abstained(rule, false, true),
            flips: flipped.len(),
            flipped,
        }
    })
    .collect();
    let hits = |large: bool| {
        outcomes
            .iter()
            .filter(|o| o.0 && (if large { &o.3 } else { &o.2 }).hit_at_3)
            .count()
    };
    Ok(CatalogSizeReport {
        small_manifests: small.index.len(),
        large_manifests: large.index.len(),
        fitting,
        no_fit,
        same_best: same.len(),
        small_recall_at_3: share(hits(false), fitting),
        large_recall_at_3: share(hits(true), fitting),
        rules,
    })
}
