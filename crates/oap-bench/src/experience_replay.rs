//! Replays a task log through the experience cache and through plain
//! discovery, in process, with the real embedding model and index, and
//! reports hit rates, wrong hits, tool accuracy and the discovery-step
//! latency with and without the cache ([`ExperienceReport`]; the table goes
//! to stderr). Run by `cargo xtask bench-experience`.
//!
//! The log: the 200 labelled tasks of `bench/discovery-tasks.jsonl`
//! in a fixed shuffled order, then each task once more (shuffled again) as
//! an exact repeat, a "Please …" or a "Can you …?" variant (a third each).
//! Outcomes come from the labels: a tool "succeeds" when its manifest name
//! is among the task's expected names, and "fails" otherwise (negative tasks
//! fail with any tool) — an oracle standing in for the model and the tool.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context};
use oap_bench::report::{ExperienceBaseline, ExperienceReport, ThresholdRow};
use oap_testkit::stats::mean;
use oapd::harness::Config;
use oapd::harness::{Experience, Hit};
use serde_json::{Map, Value};

struct Task {
    query: String,
    expected: Vec<String>,
}

/// The experience cache replayed over a task log.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The labelled task set (JSONL: `query`, `expected`).
    #[arg(long, default_value = "bench/discovery-tasks.jsonl")]
    tasks: PathBuf,
    /// The manifest directory.
    #[arg(long, default_value = "tests/fixtures/reference-manifests/oap-dev")]
    manifests: PathBuf,
    /// The embedding model directory.
    #[arg(long, default_value = "models/all-MiniLM-L6-v2")]
    model: PathBuf,
    /// Where the index and the cache are kept (created).
    #[arg(long, default_value = "target/bench/experience")]
    work: PathBuf,
    /// `experience.min_similarity` values to compare.
    #[arg(long, value_delimiter = ',', default_value = "0.80,0.85,0.90,0.95")]
    thresholds: Vec<f32>,
}

/// A small deterministic shuffle (xorshift), so every run replays the same log.
fn shuffle<T>(items: &mut [T], mut seed: u64) {
    for i in (1..items.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        items.swap(i, (seed % (i as u64 + 1)) as usize);
    }
}

/// Percentile `p` (0..1) of sorted samples, nearest rank; zero for none.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    oap_testkit::stats::nearest_rank(sorted, p * 100.0).unwrap_or(0.0)
}

fn name_of(engine: &oap_discovery::Engine, id: &str) -> Option<String> {
    engine
        .get(id)?
        .manifest
        .get("name")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// Replays the log: the baseline once, then the cache at every threshold.
pub fn run(args: Args) -> anyhow::Result<ExperienceReport> {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        let n = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        std::env::set_var("RAYON_NUM_THREADS", n.to_string());
    }
    let Args {
        tasks: tasks_path,
        manifests,
        model,
        work,
        thresholds,
    } = args;
    for (what, path) in [
        ("task set", &tasks_path),
        ("manifests", &manifests),
        ("model", &model),
    ] {
        if !path.exists() {
            anyhow::bail!("{what} missing: {}", path.display());
        }
    }
    std::fs::create_dir_all(&work)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", work.display()))?;
    let mut tasks = Vec::new();
    for line in std::fs::read_to_string(&tasks_path)?.lines() {
        let value: Value = serde_json::from_str(line)?;
        tasks.push(Task {
            query: value["query"].as_str().unwrap_or_default().to_string(),
            expected: value["expected"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
        });
    }
    let mut first: Vec<usize> = (0..tasks.len()).collect();
    shuffle(&mut first, 42);
    let mut second: Vec<usize> = (0..tasks.len()).collect();
    shuffle(&mut second, 4242);
    let mut log: Vec<(usize, String, &'static str)> = first
        .iter()
        .map(|&i| (i, tasks[i].query.clone(), "first"))
        .collect();
    for (n, &i) in second.iter().enumerate() {
        let query = &tasks[i].query;
        log.push(match n % 3 {
            0 => (i, query.clone(), "repeat"),
            1 => (i, format!("Please {query}"), "please"),
            _ => (i, format!("Can you {query}?"), "can-you"),
        });
    }

    let mut config = Config::default();
    config.index.data_dir = work.clone();
    config.manifests.bundled = false;
    config.manifests.dirs = vec![manifests.clone()];
    config.embedding.model_dir = model.clone();
    config.experience.enabled = true;
    let (embedder, state) = oapd::harness::load_embedder(&config);
    if !state.loaded {
        bail!("embedding model not loaded: {:?}", state.error);
    }
    let (engine, report) = oapd::harness::open_engine(&config, embedder)?;
    let engine = Arc::new(engine);
    let top_k = config.tool_bridge.default_top_k;
    eprintln!(
        "corpus: {} manifests from {}; log: {} requests ({} first, {} second pass)",
        report.docs,
        manifests.display(),
        log.len(),
        tasks.len(),
        tasks.len()
    );

    // Warm-up (first embeddings are slower).
    for (_, query, _) in log.iter().take(20) {
        engine.discover(query, top_k)?;
    }

    // Baseline: what the bridge does today for every request.
    let mut baseline_ms = Vec::with_capacity(log.len());
    let mut baseline_correct = 0usize;
    let mut baseline_tools = 0usize;
    let scoring = engine.config().scoring.clone();
    for (i, query, _) in &log {
        let started = Instant::now();
        let discovery = engine.discover(query, top_k)?;
        baseline_ms.push(started.elapsed().as_secs_f64() * 1e3);
        baseline_tools += discovery
            .candidates
            .iter()
            .filter(|c| scoring.accepts(discovery.meta.mode, &c.scores))
            .count();
        let chosen = discovery.best.as_ref().map(|c| c.name.clone());
        baseline_correct += correct(&tasks[*i], chosen.as_deref()) as usize;
    }
    let mut sorted = baseline_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let baseline = ExperienceBaseline {
        correct_tool_pct: 100.0 * baseline_correct as f64 / log.len() as f64,
        tools_injected_per_request: baseline_tools as f64 / log.len() as f64,
        step_mean_ms: mean(&baseline_ms),
        step_p50_ms: percentile(&sorted, 0.5),
        step_p95_ms: percentile(&sorted, 0.95),
    };
    let mut rows = Vec::new();
    for threshold in thresholds {
        let _ = std::fs::remove_file(config.index.data_dir.join(oapd::harness::STORE_FILE));
        let mut with = config.clone();
        with.experience.min_similarity = threshold;
        let experience = Experience::open(&with.experience, &with.index.data_dir, engine.clone())
            .context("experience cache")?;
        let (mut exact, mut similar, mut wrong, mut correct_n, mut second_hits) = (0, 0, 0, 0, 0);
        let mut step_ms = Vec::with_capacity(log.len());
        let (mut exact_ms, mut similar_ms, mut miss_ms) = (Vec::new(), Vec::new(), Vec::new());
        let mut hit_baseline_ms = Vec::new();
        let mut tools_injected = 0usize;
        for (n, (i, query, pass)) in log.iter().enumerate() {
            let started = Instant::now();
            let lookup = experience.lookup(query);
            let chosen_id = match &lookup.hit {
                Some(hit) => {
                    tools_injected += 1;
                    Some(hit.entry().manifest_id.clone())
                }
                None => {
                    let vector = lookup.observed.vector.as_deref().cloned();
                    let discovery = engine.discover_with_vector(query, top_k, vector)?;
                    tools_injected += discovery
                        .candidates
                        .iter()
                        .filter(|c| scoring.accepts(discovery.meta.mode, &c.scores))
                        .count();
                    discovery.best.map(|c| c.id)
                }
            };
            let elapsed = started.elapsed().as_secs_f64() * 1e3;
            step_ms.push(elapsed);
            let name = chosen_id.as_deref().and_then(|id| name_of(&engine, id));
            let ok = correct(&tasks[*i], name.as_deref());
            correct_n += ok as usize;
            if let Some(hit) = &lookup.hit {
                match hit {
                    Hit::Exact(_) => {
                        exact += 1;
                        exact_ms.push(elapsed);
                    }
                    Hit::Similar(..) => {
                        similar += 1;
                        similar_ms.push(elapsed);
                    }
                }
                wrong += (!ok) as usize;
                hit_baseline_ms.push(baseline_ms[n]);
                if *pass != "first" {
                    second_hits += 1;
                }
            } else {
                miss_ms.push(elapsed);
            }
            // The oracle's verdict teaches the cache, through the same hook
            // the bridge installs on every injected tool.
            if let Some(record) = chosen_id.as_deref().and_then(|id| engine.get(id)) {
                let hook = experience.hook(&lookup.observed, &record);
                hook(&Map::new(), ok);
            }
        }
        let hits = exact + similar;
        rows.push(ThresholdRow {
            min_similarity: threshold,
            hits,
            exact_hits: exact,
            similar_hits: similar,
            hit_rate_pct: 100.0 * hits as f64 / log.len() as f64,
            wrong_hits: wrong,
            wrong_hits_pct_of_hits: if hits == 0 {
                0.0
            } else {
                100.0 * wrong as f64 / hits as f64
            },
            second_pass_hit_rate_pct: 100.0 * second_hits as f64 / tasks.len() as f64,
            correct_tool_pct: 100.0 * correct_n as f64 / log.len() as f64,
            tools_injected_per_request: tools_injected as f64 / log.len() as f64,
            step_mean_ms: mean(&step_ms),
            exact_hit_step_mean_ms: mean(&exact_ms),
            similar_hit_step_mean_ms: mean(&similar_ms),
            miss_step_mean_ms: mean(&miss_ms),
            hits_discovery_mean_ms: mean(&hit_baseline_ms),
            saved_per_request_ms: mean(&baseline_ms) - mean(&step_ms),
        });
    }
    let report = ExperienceReport {
        manifests: report.docs,
        log_requests: log.len(),
        tasks: tasks.len(),
        baseline,
        thresholds: rows,
    };
    Ok(report)
}

/// Whether choosing `chosen` is right for `task` (no tool for negatives).
fn correct(task: &Task, chosen: Option<&str>) -> bool {
    match chosen {
        Some(name) => task.expected.iter().any(|e| e == name),
        None => task.expected.is_empty(),
    }
}
