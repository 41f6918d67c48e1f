//! Replays a task log through the experience cache and through plain
//! discovery, in process, with the real embedding model and index, and
//! prints hit rates, wrong hits, tool accuracy and the discovery-step
//! latency with and without the cache. Run by `cargo xtask bench-experience`.
//!
//! The log: the 200 labelled tasks of `bench/discovery-tasks.jsonl`
//! in a fixed shuffled order, then each task once more (shuffled again) as
//! an exact repeat, a "Please …" or a "Can you …?" variant (a third each).
//! Outcomes come from the labels: a tool "succeeds" when its manifest name
//! is among the task's expected names, and "fails" otherwise (negative tasks
//! fail with any tool) — an oracle standing in for the model and the tool.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::string_slice,
    clippy::disallowed_methods,
    reason = "a benchmark or demo program run by developers, not the daemon: it stops on the first surprise"
)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context};
use oap_testkit::stats::mean;
use oapd::config::Config;
use oapd::server::experience::{Experience, Hit};
use serde_json::{Map, Value};

struct Task {
    query: String,
    expected: Vec<String>,
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
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

fn percentile(sorted: &[f64], p: f64) -> f64 {
    oap_testkit::stats::rounded_index(sorted, p).unwrap_or(0.0)
}

fn name_of(engine: &oap_discovery::Engine, id: &str) -> Option<String> {
    engine
        .get(id)?
        .manifest
        .get("name")
        .and_then(Value::as_str)
        .map(str::to_string)
}

fn main() -> anyhow::Result<()> {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        let n = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        std::env::set_var("RAYON_NUM_THREADS", n.to_string());
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(tasks_path), Some(manifests), Some(model), Some(work)) = (
        arg(&args, "--tasks"),
        arg(&args, "--manifests"),
        arg(&args, "--model"),
        arg(&args, "--work"),
    ) else {
        bail!("usage: experience_replay --tasks FILE --manifests DIR --model DIR --work DIR [--thresholds 0.8,0.9]");
    };
    let thresholds: Vec<f32> = arg(&args, "--thresholds")
        .unwrap_or_else(|| "0.80,0.85,0.90,0.95".into())
        .split(',')
        .map(|t| t.trim().parse().context("--thresholds"))
        .collect::<anyhow::Result<_>>()?;

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
    config.index.data_dir = PathBuf::from(&work);
    config.manifests.bundled = false;
    config.manifests.dirs = vec![PathBuf::from(&manifests)];
    config.embedding.model_dir = PathBuf::from(&model);
    config.experience.enabled = true;
    let (embedder, state) = oapd::app::load_embedder(&config);
    if !state.loaded {
        bail!("embedding model not loaded: {:?}", state.error);
    }
    let (engine, report) = oapd::app::open_engine(&config, embedder)?;
    let engine = Arc::new(engine);
    let top_k = config.tool_bridge.default_top_k;
    println!(
        "corpus: {} manifests from {manifests}; log: {} requests ({} first, {} second pass)",
        report.docs,
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
    println!(
        "\nbaseline (discovery every request): correct tool {:.1} %, tools injected {:.2}/request, discovery step mean {:.2} ms, p50 {:.2} ms, p95 {:.2} ms",
        100.0 * baseline_correct as f64 / log.len() as f64,
        baseline_tools as f64 / log.len() as f64,
        mean(&baseline_ms),
        percentile(&sorted, 0.5),
        percentile(&sorted, 0.95)
    );

    println!(
        "\n| min_similarity | hits (exact + similar) | hit rate | wrong hits | hit rate, 2nd pass | correct tool | tools injected/request | step mean ms | exact-hit step mean ms | similar-hit step mean ms | misses step mean ms | same requests as hits, discovery mean ms | saved per request ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for threshold in thresholds {
        let _ = std::fs::remove_file(
            config
                .index
                .data_dir
                .join(oapd::server::experience::STORE_FILE),
        );
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
        println!(
            "| {threshold:.2} | {hits} ({exact} + {similar}) | {:.1} % | {wrong} ({:.1} % of hits) | {:.1} % | {:.1} % | {:.2} | {:.2} | {:.3} | {:.2} | {:.2} | {:.2} | {:.2} |",
            100.0 * hits as f64 / log.len() as f64,
            if hits == 0 { 0.0 } else { 100.0 * wrong as f64 / hits as f64 },
            100.0 * second_hits as f64 / tasks.len() as f64,
            100.0 * correct_n as f64 / log.len() as f64,
            tools_injected as f64 / log.len() as f64,
            mean(&step_ms),
            mean(&exact_ms),
            mean(&similar_ms),
            mean(&miss_ms),
            mean(&hit_baseline_ms),
            mean(&baseline_ms) - mean(&step_ms),
        );
    }
    Ok(())
}

/// Whether choosing `chosen` is right for `task` (no tool for negatives).
fn correct(task: &Task, chosen: Option<&str>) -> bool {
    match chosen {
        Some(name) => task.expected.iter().any(|e| e == name),
        None => task.expected.is_empty(),
    }
}
