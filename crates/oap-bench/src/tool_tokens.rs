//! Tool tokens per request: direct vs budget vs meta exposure over a task set,
//! computed in-process through the daemon's own code path
//! (`ChatService::discover_tools`, `exposure::fit_budget`, `meta::listing`,
//! `tokens::*`) — no Ollama needed. Run by `cargo xtask bench-tokens`.
//!
//! ```text
//! oap-bench tool-tokens --tasks FILE --dir DIR [--dir DIR...] [--budget N...] [--top-k K]
//!                       [--model-dir DIR] [--data-dir DIR]
//! ```
//! The table goes to stderr; the result is a [`TokensReport`].

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use oap_bench::report::{ExposureColumn, TokenCalibration, TokensReport};
use oap_bridge::{exposure, guide, meta, tokens};
use oapd::harness::Config;
use serde_json::Value;

struct Task {
    expected: Vec<String>,
    query: String,
}

/// Tool tokens per request: direct vs budget vs meta exposure.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The labelled task set (JSONL: `query`, `expected`); by default the
    /// shared one of docs/BENCHMARKS.md.
    #[arg(long, default_value = "bench/discovery-tasks.jsonl")]
    tasks: PathBuf,
    /// Manifest directories; by default the reference manifests the shared
    /// task set is labelled against.
    #[arg(
        long = "dir",
        default_values = [
            "tests/fixtures/reference-manifests/oap-dev",
            "tests/fixtures/reference-manifests/manifest-repo",
        ]
    )]
    dirs: Vec<PathBuf>,
    /// Token budgets to compare (default 300 and 150).
    #[arg(long = "budget")]
    budgets: Vec<usize>,
    /// Tools discovered per request.
    #[arg(long, default_value_t = 3)]
    top_k: usize,
    /// The embedding model directory.
    #[arg(long, default_value = "models/all-MiniLM-L6-v2")]
    model_dir: PathBuf,
    /// Where the index is built.
    #[arg(long, default_value = "target/bench/tool-tokens")]
    data_dir: PathBuf,
}

fn load_tasks(path: &PathBuf) -> Result<Vec<Task>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let value: Value = serde_json::from_str(line)?;
            Ok(Task {
                query: value["query"].as_str().unwrap_or_default().to_string(),
                expected: value["expected"]
                    .as_array()
                    .map(|e| {
                        e.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default(),
            })
        })
        .collect()
}

#[derive(Default)]
struct Column {
    label: String,
    tokens: Vec<usize>,
    offered: usize,
    any_hit: usize,
    all_hit: usize,
    positives: usize,
    /// Requests where budget fitting dropped optional parameters / tools.
    params_dropped: usize,
    tools_dropped: usize,
}

impl Column {
    fn new(label: impl Into<String>) -> Self {
        Column {
            label: label.into(),
            ..Column::default()
        }
    }

    fn record(&mut self, tokens: usize, names: &BTreeSet<String>, expected: &[String]) {
        self.tokens.push(tokens);
        if !names.is_empty() {
            self.offered += 1;
        }
        if !expected.is_empty() {
            self.positives += 1;
            if expected.iter().any(|e| names.contains(e)) {
                self.any_hit += 1;
            }
            if expected.iter().all(|e| names.contains(e)) {
                self.all_hit += 1;
            }
        }
    }

    fn summary(&self) -> ExposureColumn {
        let mut sorted = self.tokens.clone();
        sorted.sort_unstable();
        let n = sorted.len().max(1);
        let mean = sorted.iter().sum::<usize>() as f64 / n as f64;
        let pct = |p: f64| {
            sorted
                .get(((n - 1) as f64 * p).round() as usize)
                .copied()
                .unwrap_or(0)
        };
        let share = |k: usize, of: usize| 100.0 * k as f64 / of.max(1) as f64;
        ExposureColumn {
            label: self.label.clone(),
            tokens_mean: mean,
            tokens_p50: pct(0.5),
            tokens_p95: pct(0.95),
            tokens_max: sorted.last().copied().unwrap_or(0),
            offering_pct: share(self.offered, self.tokens.len()),
            labelled_any_offered_pct: share(self.any_hit, self.positives),
            labelled_all_offered_pct: share(self.all_hit, self.positives),
            params_dropped_pct: share(self.params_dropped, self.tokens.len()),
            tools_dropped_pct: share(self.tools_dropped, self.tokens.len()),
        }
    }
}

/// Counts the tool tokens of every task under every exposure.
pub fn run(mut options: Args) -> Result<TokensReport> {
    if options.budgets.is_empty() {
        options.budgets = vec![300, 150];
    }
    let tasks = load_tasks(&options.tasks)?;
    let mut config = Config::default();
    config.manifests.bundled = false;
    config.manifests.dirs = options.dirs.clone();
    config.index.data_dir = options.data_dir.clone();
    config.embedding.model_dir = options.model_dir.clone();
    config.tool_bridge.default_top_k = options.top_k;
    let (embedder, model) = oapd::harness::load_embedder(&config);
    if !model.loaded {
        bail!("embedding model not loaded: {:?}", model.error);
    }
    let (engine, report) = oapd::harness::open_engine(&config, embedder)?;
    let runner = oapd::harness::ExecRunner::new(&config)?;
    let service = oapd::harness::chat_service(&config, Arc::new(engine), runner)?;
    let wordpiece = tokenizers::Tokenizer::from_file(options.model_dir.join("tokenizer.json"))
        .map_err(|e| anyhow::anyhow!("tokenizer: {e}"))?;
    let mut wordpiece = wordpiece;
    wordpiece
        .with_truncation(None)
        .map_err(|e| anyhow::anyhow!("tokenizer: {e}"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;

    let mut direct = Column::new(format!("direct (top_k {})", options.top_k));
    let mut budgets: Vec<Column> = options
        .budgets
        .iter()
        .map(|b| Column::new(format!("budget {b}")))
        .collect();
    // What the tool-listing instruction adds where it is on (small models,
    // or models that failed validate-model's tool checks): the same tools
    // plus the system message listing them.
    let mut direct_instructed = Column::new(format!(
        "direct (top_k {}) + tool instruction",
        options.top_k
    ));
    let meta_tokens = tokens::tools_tokens(meta::definitions().iter());
    let mut meta_defs = Column::new("meta: the two meta-tools");
    let mut meta_listing = Column::new("meta: oap_discover result (read once)");
    let (mut estimate_sum, mut chars_sum, mut wordpiece_sum) = (0usize, 0usize, 0usize);
    let discover = |query: &str| {
        runtime.block_on(service.discover_tools(query.to_string(), options.top_k, Vec::new()))
    };
    let names_of = |tools: &[oap_bridge::tool_loop::InjectedTool]| -> BTreeSet<String> {
        tools.iter().map(|t| t.manifest.name.clone()).collect()
    };
    for task in &tasks {
        let tools = discover(&task.query);
        let definitions: Vec<&Value> = tools.iter().map(|t| &t.definition).collect();
        let rendered: String = definitions.iter().map(|d| tokens::render_tool(d)).collect();
        let estimate = tokens::estimate(&rendered);
        estimate_sum += estimate;
        chars_sum += rendered.chars().count();
        wordpiece_sum += wordpiece
            .encode(rendered.as_str(), false)
            .map_err(|e| anyhow::anyhow!("tokenizer: {e}"))?
            .len();
        let names = names_of(&tools);
        direct.record(estimate, &names, &task.expected);
        direct_instructed.record(
            estimate + guide::tokens(&guide::instruction(&tools)),
            &names,
            &task.expected,
        );
        meta_defs.record(meta_tokens, &names, &task.expected);
        meta_listing.record(
            tokens::estimate(&meta::listing(&tools)),
            &names,
            &task.expected,
        );
        for (budget, column) in options.budgets.iter().zip(&mut budgets) {
            let (fitted, fitting) = exposure::fit_budget(discover(&task.query), *budget);
            column.record(fitting.tokens_after, &names_of(&fitted), &task.expected);
            column.params_dropped += usize::from(fitting.optional_parameters_dropped > 0);
            column.tools_dropped += usize::from(fitting.tools_dropped > 0);
        }
    }

    let mut columns = vec![direct.summary(), direct_instructed.summary()];
    columns.extend(budgets.iter().map(Column::summary));
    columns.push(meta_defs.summary());
    columns.push(meta_listing.summary());
    let report = TokensReport {
        tasks: tasks.len(),
        labelled_tasks: direct.positives,
        manifests: report.docs,
        top_k: options.top_k,
        columns,
        calibration: TokenCalibration {
            chars: chars_sum,
            estimator_tokens: estimate_sum,
            wordpiece_tokens: wordpiece_sum,
        },
    };
    Ok(report)
}
