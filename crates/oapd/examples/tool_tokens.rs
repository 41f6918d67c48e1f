//! Tool tokens per request: direct vs budget vs meta exposure over a task set,
//! computed in-process through the daemon's own code path
//! (`ChatService::discover_tools`, `exposure::fit_budget`, `meta::listing`,
//! `tokens::*`) — no Ollama needed. Run by `cargo xtask bench-tokens`.
//!
//! ```text
//! tool_tokens --tasks FILE --dir DIR [--dir DIR...] [--budget N...] [--top-k K]
//!             [--model-dir DIR] [--data-dir DIR]
//! ```

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::string_slice,
    clippy::disallowed_methods,
    reason = "a benchmark or demo program run by developers, not the daemon: it stops on the first surprise"
)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use oap_bridge::{exposure, meta, tokens};
use oapd::app;
use oapd::config::Config;
use serde_json::Value;

struct Task {
    expected: Vec<String>,
    query: String,
}

struct Options {
    tasks: PathBuf,
    dirs: Vec<PathBuf>,
    budgets: Vec<usize>,
    top_k: usize,
    model_dir: PathBuf,
    data_dir: PathBuf,
}

fn parse() -> Result<Options> {
    let mut options = Options {
        tasks: PathBuf::new(),
        dirs: Vec::new(),
        budgets: Vec::new(),
        top_k: 3,
        model_dir: PathBuf::from("models/all-MiniLM-L6-v2"),
        data_dir: PathBuf::from("target/bench/tool-tokens"),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--tasks" => options.tasks = value()?.into(),
            "--dir" => options.dirs.push(value()?.into()),
            "--budget" => options.budgets.push(value()?.parse()?),
            "--top-k" => options.top_k = value()?.parse()?,
            "--model-dir" => options.model_dir = value()?.into(),
            "--data-dir" => options.data_dir = value()?.into(),
            other => bail!("unknown argument {other}"),
        }
    }
    if options.tasks.as_os_str().is_empty() || options.dirs.is_empty() {
        bail!(
            "usage: tool_tokens --tasks FILE --dir DIR [--dir DIR...] [--budget N...] [--top-k K]"
        );
    }
    if options.budgets.is_empty() {
        options.budgets = vec![300, 150];
    }
    Ok(options)
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

    fn row(&self) -> String {
        let mut sorted = self.tokens.clone();
        sorted.sort_unstable();
        let n = sorted.len().max(1);
        let mean = sorted.iter().sum::<usize>() as f64 / n as f64;
        let pct = |p: f64| sorted[((n - 1) as f64 * p).round() as usize];
        let share = |k: usize, of: usize| 100.0 * k as f64 / of.max(1) as f64;
        format!(
            "| {} | {:.0} | {} | {} | {} | {:.1} % | {:.1} % | {:.1} % | {:.1} % | {:.1} % |",
            self.label,
            mean,
            pct(0.5),
            pct(0.95),
            sorted.last().copied().unwrap_or(0),
            share(self.offered, self.tokens.len()),
            share(self.any_hit, self.positives),
            share(self.all_hit, self.positives),
            share(self.params_dropped, self.tokens.len()),
            share(self.tools_dropped, self.tokens.len()),
        )
    }
}

fn main() -> Result<()> {
    let options = parse()?;
    let tasks = load_tasks(&options.tasks)?;
    let mut config = Config::default();
    config.manifests.bundled = false;
    config.manifests.dirs = options.dirs.clone();
    config.index.data_dir = options.data_dir.clone();
    config.embedding.model_dir = options.model_dir.clone();
    config.tool_bridge.default_top_k = options.top_k;
    let (embedder, model) = app::load_embedder(&config);
    if !model.loaded {
        bail!("embedding model not loaded: {:?}", model.error);
    }
    let (engine, report) = app::open_engine(&config, embedder)?;
    let service = oapd::server::start::chat_service(&config, Arc::new(engine), None)?;
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

    println!(
        "tasks: {} ({} with a labelled tool); manifests: {}; top_k {}",
        tasks.len(),
        direct.positives,
        report.docs,
        options.top_k
    );
    println!(
        "\n| exposure | tool tokens per round: mean | p50 | p95 | max | requests offering ≥1 tool | labelled tool offered (any) | all labelled offered | optional params dropped | tools dropped |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    println!("{}", direct.row());
    for column in &budgets {
        println!("{}", column.row());
    }
    println!("{}", meta_defs.row());
    println!("{}", meta_listing.row());
    println!(
        "\ncalibration over the direct tool text of all tasks ({} chars): estimator {} tokens; chars/4 {}; MiniLM WordPiece {} (estimator / WordPiece = {:.2})",
        chars_sum,
        estimate_sum,
        chars_sum / 4,
        wordpiece_sum,
        estimate_sum as f64 / wordpiece_sum.max(1) as f64
    );
    Ok(())
}
