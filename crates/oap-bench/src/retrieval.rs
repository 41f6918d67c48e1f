//! Retrieval quality benchmark: Recall@1/3/5, MRR and nDCG@10 of the
//! lexical, dense and hybrid modes over a labelled task set (hybrid three
//! times: abstaining on the cosine alone, as before lexical evidence
//! counted; ranking every request as one text, as before the asks of a
//! request with several were ranked apart; and the default), plus how
//! well the "no fitting capability" score separates no-fit queries from
//! fitting ones (AUROC, share abstained of each).
//!
//! ```text
//! oap-bench retrieval \
//!     --tasks bench/discovery-tasks.jsonl \
//!     --dir tests/fixtures/reference-manifests/oap-dev --dir tests/fixtures/reference-manifests/manifest-repo
//! ```
//!
//! Options:
//! - `--model DIR|NAME` (default models/all-MiniLM-L6-v2; a name such as
//!   `multilingual-e5-small` is `models/NAME`), `--dtype i8`;
//! - `--base-names`: score `name#k` manifests by their base name (BFCL corpus);
//! - `--rows desc|desc+examples|all`: which rows are embedded (default: the
//!   engine's, the description with its inputs and the examples'
//!   descriptions; `desc+examples` and `all` add the example inputs);
//!   `--no-inputs-row` leaves the input parameters out of the description row;
//! - `--lexical-weight W[,W...]`: hybrid weight(s); with several, one hybrid
//!   row per weight (the query is embedded once);
//! - `--duplicate-similarity C`, `--variant-similarity C`: demotion of near
//!   duplicates (a cosine above 1 turns it off);
//! - `--no-hint`, `--no-lexical-hint`: leave the data-shape words out of
//!   the embedded text, or out of the lexical text;
//! - `--soft-negatives ID,...`: negatives known to conflict with the corpus,
//!   reported apart in the threshold curve;
//! - `--curve`: positives and negatives rejected per hybrid threshold;
//! - `--misses`: list the tasks hybrid misses at 3 (and, for requests with
//!   several asks, the ones hybrid as one query misses);
//! - `--embed-cache FILE`: reuse embeddings across runs (speeds up the BFCL
//!   corpus; latency is still measured with the uncached model);
//! - `--dump FILE`: per task, the top 32 hybrid candidates with their score
//!   parts, as JSON lines, for offline analysis (`bench/fit_abstention.py`);
//! - `--split tuning|evaluation`: only that half of a held-out corpus
//!   (`bench/public_corpus.py`);
//! - `--strip-filler`: drop leading filler from queries
//!   (`QueryOptions::strip_filler`);
//! - `--no-split-asks`: rank every request as one text in the default row
//!   too (`QueryOptions::split_asks`);
//! - `--adapter FILE`: also report dense and hybrid with the query
//!   adapter (`oap_discovery::adapter`) in the same run, and measure the
//!   engine's latency with it;
//! - `--dump-vectors FILE`: every document's row vectors and every task's
//!   query vector (unadapted), as JSON lines, for `bench/train_adapter.py`;
//! - `--request-rows FILE` (repeatable, earlier files first): request rows
//!   (`oap_discovery::requests`, JSON: manifest name → requests) attached
//!   by name to a manifest of any origin; `--request-weight W` and
//!   `--request-terms W` set their row weight and BM25 term weight
//!   (default: the engine's).
//!
//! R@k counts a task as hit if any expected name is in the top k (the
//! source harness's reading); `all@3` is recall over the expected names.
//! A match is the best candidate when `Scoring::accepts` it (in hybrid
//! mode: its cosine reaches the threshold); the AUROC column and `--curve`
//! use the same number.
//! Retrieval runs the engine's pipeline (query views, embedding, rank) on the
//! engine's index so that query-side options can be compared in one run; the
//! latency column and a consistency check use `Engine::discover_with`.
//! The tables go to stderr; the result is a [`RetrievalReport`].

use std::io::Write;

use std::sync::Arc;
use std::time::Instant;

use oap_bench::report::{EngineLatency, RetrievalReport};

use oap_discovery::intents;
use oap_discovery::query::{self, QueryOptions};
use oap_discovery::scoring::{self, Scoring};
use oap_discovery::{Engine, EngineConfig, Mode, QueryAdapter, Source, StoredRecord};
use oap_embed::Embedder;

use oap_index::Index;

mod args;
mod encoder;
mod metrics;
mod tasks;

pub use args::Args;
pub(crate) use args::{with_request_rows, RequestArgs};
pub(crate) use encoder::{load_encoder, Cached};
pub(crate) use metrics::auroc;
use metrics::{curves, ndcg_at_10, Tally, TopScore};
use tasks::base_name;
pub(crate) use tasks::{load_tasks, Task};

/// The asks of a request whose retrieval text is `dense`, as queries:
/// each ask's dense view through `embed`, its lexical view tokenised
/// (none for a request with one ask).
fn asks_of(
    dense: &str,
    options: &QueryOptions,
    stemmer: oap_index::Stemmer,
    embed: impl Fn(&str) -> anyhow::Result<Vec<f32>>,
) -> anyhow::Result<Vec<intents::Ask>> {
    intents::ask_views(dense, options)
        .into_iter()
        .map(|views| {
            Ok(intents::Ask {
                vector: Some(embed(&views.dense)?),
                terms: oap_index::tokenize_with(&views.lexical, stemmer),
            })
        })
        .collect()
}

/// Evaluates the task set.
pub fn run(args: Args) -> anyhow::Result<RetrievalReport> {
    let mut tasks = load_tasks(&args.tasks).map_err(anyhow::Error::msg)?;
    if let Some(split) = &args.split {
        tasks.retain(|t| t.split.as_deref() == Some(split.as_str()));
        if tasks.is_empty() {
            anyhow::bail!(
                "--split {split}: no task of {} has it",
                args.tasks.display()
            );
        }
    }
    let bert = load_encoder(&args.model, args.plain_model)?;
    // The daemon's thresholds for this encoder (`oapd::app::engine_config`).
    let engine_defaults = Scoring::calibrated(bert.calibration());
    let model: Arc<dyn Embedder> = Arc::new(bert);
    let cached = Arc::new(Cached::load(model.clone(), args.embed_cache.as_ref()));

    let data = std::env::temp_dir().join(format!("oapd-eval-{}", std::process::id()));
    let mut config = EngineConfig::new(&data);
    config.scoring = engine_defaults.clone();
    if let Some(&w) = args.lexical_weights.first() {
        config.scoring.lexical_weight = w;
    }
    config.scoring.query.dense_hint = !args.no_hint;
    config.scoring.query.lexical_hint = !args.no_lexical_hint;
    config.scoring.query.strip_filler = args.strip_filler;
    config.scoring.query.split_asks = !args.no_split_asks;
    if let Some(prefix) = &args.dense_prefix {
        // Leaked once per run: the options are `Copy` and live for the whole process.
        config.scoring.query.dense_prefix =
            (!prefix.is_empty()).then(|| &*Box::leak(prefix.clone().into_boxed_str()));
    }
    if let Some(min_score) = args.min_score {
        config.scoring.min_score_hybrid = min_score;
        config.scoring.min_score_dense = min_score;
    }
    if let Some(similarity) = args.duplicate_similarity {
        config.scoring.duplicate_similarity = similarity;
    }
    if let Some(similarity) = args.variant_similarity {
        config.scoring.variant_similarity = similarity;
    }
    match args.rows.as_deref() {
        None => {}
        Some("desc") => {
            config.row_weights.name_usage = 0.0;
            config.row_weights.example = 0.0;
        }
        Some("desc+examples") => {
            config.row_weights.name_usage = 0.0;
            config.row_weights.example = 0.9;
            config.row_weights.example_inputs = true;
        }
        Some("all") => {
            config.row_weights.name_usage = 0.9;
            config.row_weights.example = 0.9;
            config.row_weights.example_inputs = true;
        }
        Some(other) => anyhow::bail!("--rows {other}: expected desc, desc+examples or all"),
    }
    if args.no_inputs {
        config.row_weights.inputs_in_description = false;
    }
    if args.dtype == "i8" {
        config.dtype = oap_index::VectorDtype::I8;
    }
    config.stemmer = args.stemmer;
    let adapter = match &args.adapter {
        None => None,
        Some(path) => Some(QueryAdapter::load(path)?),
    };
    if let Some(adapter) = &adapter {
        if !adapter.fits(model.model_id(), model.dim()) {
            anyhow::bail!(
                "--adapter: trained for model {} (dim {}), this is {}",
                adapter.model(),
                adapter.dim(),
                model.model_id()
            );
        }
        eprintln!(
            "query adapter: rank {}, sha256 {}",
            adapter.rank(),
            adapter.sha256()
        );
    }
    let sources: Vec<Source> = args.dirs.iter().cloned().map(Source::Dir).collect();
    let request_rows = args.requests.provider()?;
    args.requests.configure(&mut config, request_rows.as_ref());
    if let Some(provider) = &request_rows {
        let (manifests, rows) = with_request_rows(provider.as_ref(), &sources);
        eprintln!("request rows: {rows} rows for {manifests} manifests");
    }
    let started = Instant::now();
    let (engine, report) = Engine::open(config.clone(), sources.clone(), Some(cached.clone()))
        .map_err(|e| anyhow::anyhow!("index: {e}"))?;
    let index_s = started.elapsed().as_secs_f64();
    eprintln!(
        "corpus: {} manifests ({} rows), {} load problems, {} collisions; indexed in {index_s:.1} s",
        report.docs,
        report.rows,
        report.problems.len(),
        report.collisions.len(),
    );
    eprintln!("tasks: {} ({})", tasks.len(), args.tasks.display());
    eprintln!(
        "rows {:?}, query {:?}, stemmer {}",
        config.row_weights, config.scoring.query, config.stemmer
    );
    let index =
        Index::open(engine.config().index_path()).map_err(|e| anyhow::anyhow!("index: {e}"))?;
    let names: Vec<String> = (0..index.len() as u32)
        .map(|doc| {
            index
                .record(doc)
                .and_then(|b| serde_json::from_slice::<StoredRecord>(b).ok())
                .and_then(|r| r.manifest.get("name")?.as_str().map(str::to_string))
                .unwrap_or_default()
        })
        .collect();
    let display = |name: &str| -> String {
        if args.base_names {
            base_name(name).to_string()
        } else {
            name.to_string()
        }
    };

    // One configuration per reported row: the three modes at the first
    // weight, then hybrid at each further weight.
    let weights = if args.lexical_weights.is_empty() {
        vec![config.scoring.lexical_weight]
    } else {
        args.lexical_weights.clone()
    };
    let mut runs: Vec<(String, Mode, Scoring)> = Vec::new();
    // Runs whose label starts with ADAPTED rank with the adapted vector.
    const ADAPTED: &str = "+adapter ";
    // A run ranks the asks of a request with several apart too when its
    // scoring says so (`oap_discovery::intents`): the default does, the
    // baselines and the history rows rank the request as one text.
    // The history rows embed the request without a query prefix and
    // abstain at the engine's own thresholds (`before`).
    let defaults = engine_defaults;
    let before = Scoring {
        min_score_hybrid: defaults.min_score_hybrid,
        min_score_dense: defaults.min_score_dense,
        query: QueryOptions {
            dense_prefix: None,
            ..config.scoring.query
        },
        ..config.scoring.clone()
    };
    let one_query = Scoring {
        query: QueryOptions {
            split_asks: false,
            ..before.query
        },
        ..before.clone()
    };
    for mode in [Mode::Lexical, Mode::Dense] {
        runs.push((format!("{mode:?}"), mode, one_query.clone()));
    }
    // Hybrid as it was before abstention counted lexical evidence, before
    // asks were ranked apart, before the query prefix, then the default
    // configuration.
    let cosine_abstention = Scoring {
        abstention_lexical_weight: 0.0,
        ..one_query.clone()
    };
    runs.push((
        "Hybrid (cosine abstention)".into(),
        Mode::Hybrid,
        cosine_abstention,
    ));
    if config.scoring.query.split_asks {
        runs.push(("Hybrid (one query)".into(), Mode::Hybrid, one_query.clone()));
    }
    if config.scoring.query.dense_prefix.is_some() {
        runs.push(("Hybrid (no prefix)".into(), Mode::Hybrid, before.clone()));
        runs.push(("Dense (prefix)".into(), Mode::Dense, config.scoring.clone()));
    }
    runs.push(("Hybrid".into(), Mode::Hybrid, config.scoring.clone()));
    for &w in weights.iter().skip(1) {
        let scoring = Scoring {
            lexical_weight: w,
            ..config.scoring.clone()
        };
        runs.push((format!("Hybrid w={w}"), Mode::Hybrid, scoring));
    }
    if adapter.is_some() {
        // The adapter maps the default view's vector, so these rows use its options.
        let adapted_one_query = Scoring {
            query: QueryOptions {
                split_asks: false,
                ..config.scoring.query
            },
            ..config.scoring.clone()
        };
        runs.push((
            format!("{ADAPTED}Dense"),
            Mode::Dense,
            adapted_one_query.clone(),
        ));
        runs.push((format!("{ADAPTED}Hybrid"), Mode::Hybrid, adapted_one_query));
    }
    let mut tallies: Vec<Tally> = runs.iter().map(|_| Tally::default()).collect();
    let mut misses = Vec::new();
    let mut dump = match &args.dump {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path).map_err(|e| anyhow::anyhow!("dump: {e}"))?,
        )),
        None => None,
    };

    let mut vectors_out = match &args.dump_vectors {
        Some(path) => {
            let mut out = std::io::BufWriter::new(
                std::fs::File::create(path).map_err(|e| anyhow::anyhow!("dump-vectors: {e}"))?,
            );
            for (doc, name) in names.iter().enumerate() {
                let rows: Vec<_> = index
                    .rows_of(doc as u32)
                    .map(|r| serde_json::json!([r.weight, r.vector]))
                    .collect();
                let line = serde_json::json!({"doc": name, "rows": rows});
                writeln!(out, "{line}").map_err(|e| anyhow::anyhow!("dump-vectors: {e}"))?;
            }
            Some(out)
        }
        None => None,
    };
    for task in &tasks {
        let views = query::views_with(&task.query, &config.scoring.query);
        let vector = cached
            .embed_query(&views.dense)
            .map_err(|e| anyhow::anyhow!("embed: {e}"))?;
        let adapted = adapter.as_ref().map(|a| a.apply(&vector));
        if let Some(out) = vectors_out.as_mut() {
            let line = serde_json::json!({
                "task": task.id, "expected": task.expected, "query": vector,
            });
            writeln!(out, "{line}").map_err(|e| anyhow::anyhow!("dump-vectors: {e}"))?;
        }
        let terms = oap_index::tokenize_with(&views.lexical, config.stemmer);
        // The asks are embedded whenever the request has several, for the
        // runs that rank them apart.
        let asks = asks_of(
            &views.dense,
            &config.scoring.query,
            config.stemmer,
            |text| {
                cached
                    .embed_query(text)
                    .map_err(|e| anyhow::anyhow!("embed: {e}"))
            },
        )?;
        let expected: Vec<String> = task.expected.iter().map(|e| display(e)).collect();
        let soft = args.soft_negatives.contains(&task.id);
        for ((label, mode, scoring), tally) in runs.iter().zip(tallies.iter_mut()) {
            // A run whose query options differ from the default's embeds
            // its own view of the request (from the embedding cache when
            // the text was seen before).
            let own = (scoring.query != config.scoring.query)
                .then(|| -> anyhow::Result<_> {
                    let views = query::views_with(&task.query, &scoring.query);
                    let vector = cached
                        .embed_query(&views.dense)
                        .map_err(|e| anyhow::anyhow!("embed: {e}"))?;
                    let terms = oap_index::tokenize_with(&views.lexical, config.stemmer);
                    let asks = asks_of(&views.dense, &scoring.query, config.stemmer, |text| {
                        cached
                            .embed_query(text)
                            .map_err(|e| anyhow::anyhow!("embed: {e}"))
                    })?;
                    Ok((vector, terms, asks))
                })
                .transpose()?;
            let (vector, terms, asks) = match &own {
                Some((vector, terms, asks)) => (vector, terms, asks),
                None => (&vector, &terms, &asks),
            };
            let vector = match &adapted {
                Some(adapted) if label.starts_with(ADAPTED) => adapted,
                _ => vector,
            };
            let run_asks = if scoring.query.split_asks {
                &asks[..]
            } else {
                &[]
            };
            let scored = intents::rank(&index, scoring, *mode, Some(vector), terms, run_asks, 10);
            let found: Vec<String> = scored
                .iter()
                .map(|(doc, _)| display(names.get(*doc as usize).map_or("", |n| n.as_str())))
                .collect();
            let top = scored
                .first()
                .map_or(f32::MIN, |s| scoring.decision_score(*mode, &s.1));
            let accepted = scored.first().is_some_and(|s| scoring.accepts(*mode, &s.1));
            if expected.is_empty() {
                tally.negatives += 1;
                tally.negatives_rejected += !accepted as usize;
                tally.top_scores.push(TopScore {
                    score: top,
                    positive: false,
                    right: false,
                    soft,
                });
                continue;
            }
            tally.positives += 1;
            let rank = found.iter().position(|n| expected.contains(n));
            tally.top_scores.push(TopScore {
                score: top,
                positive: true,
                right: rank == Some(0),
                soft: false,
            });
            for (slot, k) in [1, 3, 5].iter().enumerate() {
                if rank.is_some_and(|r| r < *k) {
                    tally.hits[slot] += 1;
                }
            }
            let in_top3 = expected
                .iter()
                .filter(|e| found.iter().take(3).any(|n| n == *e))
                .count();
            tally.all_at_3 += in_top3 as f64 / expected.len() as f64;
            if let Some(r) = rank {
                tally.mrr += 1.0 / (r + 1) as f64;
            }
            tally.ndcg_at_10 += ndcg_at_10(&found, &expected);
            match (accepted, rank) {
                (false, _) => tally.positives_rejected += 1,
                (true, Some(0)) => tally.positives_matched_right += 1,
                _ => {}
            }
            let listed = label == "Hybrid" || (label == "Hybrid (one query)" && !asks.is_empty());
            if listed && args.misses && rank.is_none_or(|r| r >= 3) {
                misses.push(format!(
                    "  {label}: {} {:?} expected {:?} got {:?}",
                    task.id,
                    views.dense,
                    expected,
                    &found[..found.len().min(3)]
                ));
            }
        }
        if let Some(out) = dump.as_mut() {
            let raw_order = Scoring {
                duplicate_similarity: 2.0,
                variant_similarity: 2.0,
                ..config.scoring.clone()
            };
            let pool = scoring::rank(&index, &raw_order, Mode::Hybrid, Some(&vector), &terms, 32);
            let line = serde_json::json!({
                "id": task.id,
                "expected": expected,
                "soft": soft,
                "dense_text": views.dense,
                "lexical_text": views.lexical,
                // [scored name, exact name, dense, lexical, abstention
                // evidence], in fused order before near duplicates are
                // demoted.
                "pool": pool.iter().map(|(doc, parts)| {
                    let name = names.get(*doc as usize).map_or("", |n| n.as_str());
                    serde_json::json!([display(name), name, parts.dense, parts.lexical, parts.evidence])
                }).collect::<Vec<_>>(),
            });
            if writeln!(out, "{line}").is_err() {
                anyhow::bail!("dump: write failed");
            }
        }
    }
    if let Some(mut out) = vectors_out {
        out.flush()
            .map_err(|e| anyhow::anyhow!("dump-vectors: {e}"))?;
    }
    if let Some(path) = &args.embed_cache {
        if let Err(e) = cached.save(path) {
            eprintln!("oap-bench retrieval: embedding cache not saved: {e}");
        }
    }

    // Latency and consistency: the engine itself, with the uncached model
    // (same model id, so the index just built is reused, not rebuilt),
    // and the adapter if one was given.
    let mut latency_config = config.clone();
    latency_config.query_adapter = adapter.clone().map(Arc::new);
    let (raw_engine, raw_report) = Engine::open(latency_config, sources, Some(model))
        .map_err(|e| anyhow::anyhow!("index: {e}"))?;
    if !raw_report.reused_index {
        eprintln!("oap-bench retrieval: warning: the latency engine rebuilt the index");
    }
    let mut latency = Vec::new();
    let mut search_latency = Vec::new();
    let mut disagreements = 0;
    let check = config.scoring.query == QueryOptions::default();
    for task in &tasks {
        let Ok(found) = raw_engine.discover_with(&task.query, 5, Mode::Hybrid) else {
            continue;
        };
        latency.push(found.meta.total_ms);
        search_latency.push(found.meta.search_ms);
        if check {
            let views = query::views(&task.query);
            let vector = cached.embed_query(&views.dense).unwrap_or_default();
            let vector = match &adapter {
                Some(adapter) => adapter.apply(&vector),
                None => vector,
            };
            let terms = oap_index::tokenize_with(&views.lexical, config.stemmer);
            // The engine ranks each ask of a request with several too.
            let asks = asks_of(
                &views.dense,
                &config.scoring.query,
                config.stemmer,
                |text| {
                    let vector = cached.embed_query(text).unwrap_or_default();
                    Ok(match &adapter {
                        Some(adapter) => adapter.apply(&vector),
                        None => vector,
                    })
                },
            )?;
            let ours = intents::rank(
                &index,
                &config.scoring,
                Mode::Hybrid,
                Some(&vector),
                &terms,
                &asks,
                5,
            );
            let same = ours.len() == found.candidates.len()
                && ours
                    .iter()
                    .zip(&found.candidates)
                    .all(|((doc, _), c)| names.get(*doc as usize) == Some(&c.name));
            disagreements += !same as usize;
        }
    }
    latency.sort_by(f64::total_cmp);
    search_latency.sort_by(f64::total_cmp);
    let search_p50 = search_latency
        .get(search_latency.len() / 2)
        .copied()
        .unwrap_or(f64::NAN);
    let percentile = |q: f64| {
        latency
            .get(((latency.len() as f64 * q) as usize).min(latency.len().saturating_sub(1)))
            .copied()
    };

    let modes = runs
        .iter()
        .zip(&tallies)
        .map(|((label, mode, _), tally)| {
            // The latency engine runs with the adapter when one was given.
            let timed = if adapter.is_some() {
                "+adapter Hybrid"
            } else {
                "Hybrid"
            };
            let p50 = (*mode == Mode::Hybrid && label == timed)
                .then(|| percentile(0.5))
                .flatten();
            tally.summary(label, p50)
        })
        .collect();
    let curves = if args.curve {
        curves(&runs, &tallies)
    } else {
        Vec::new()
    };
    let _ = std::fs::remove_dir_all(&data);
    let report = RetrievalReport {
        manifests: report.docs,
        rows: report.rows,
        load_problems: report.problems.len(),
        collisions: report.collisions.len(),
        index_s,
        tasks: tasks.len(),
        modes,
        engine_latency: EngineLatency {
            tasks: latency.len(),
            p50_ms: percentile(0.5).unwrap_or(f64::NAN),
            p90_ms: percentile(0.9).unwrap_or(f64::NAN),
            search_p50_ms: search_p50,
            rankings_differ: check.then_some(disagreements),
        },
        misses,
        curves,
    };
    Ok(report)
}
