//! CPU time per text of realistic queries embedded several at a time.
//!
//! ```text
//! oap-bench embed-batches [MODEL_DIR] [--tasks FILE.jsonl] [--sizes 1,2,4,8,16]
//!     [--rounds 3] [--paths packed,padded] [--model-batch N]
//! ```
//! The texts are the `query` fields of `--tasks` (default
//! `bench/discovery-tasks.jsonl`, the queries `discover-load` sends, in the
//! order it sends them), so a call of `size` texts holds what `size`
//! concurrent requests would carry. Every (path, size) runs once per round,
//! interleaved, so a shared machine's load falls on all of them alike. CPU
//! time is the sum over the process's threads of `/proc/self/task/*/schedstat`
//! (nanoseconds on a CPU), which contention from other processes inflates far
//! less than wall time.

use std::path::{Path, PathBuf};
use std::time::Instant;

use oap_bench::report::{EmbedBatchRow, EmbedBatchesReport};
use oap_embed::Embedder;
use oap_embed_candle::{BertEmbedder, EmbedOptions};

/// Per-text cost of batched embedding for several batch sizes.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The model directory (default `$OAPD_MODEL_DIR` or
    /// `<repo>/models/all-MiniLM-L6-v2`).
    model_dir: Option<PathBuf>,
    /// JSONL file whose `query` fields are the texts.
    #[arg(long)]
    tasks: Option<PathBuf>,
    /// Texts per `embed` call, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
    sizes: Vec<usize>,
    /// Rounds over every (path, size).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Texts per forward pass inside one call (the model's `batch_size`;
    /// default: the largest size, so a call is one pass). With a size larger
    /// than this, a call is what an index build makes: the embedder groups
    /// its texts into passes itself.
    #[arg(long)]
    model_batch: Option<usize>,
    /// Batch passes to compare: `packed` (the embedder's) and/or `padded`
    /// (the former pass, every text padded to the longest of its call).
    #[arg(long, value_delimiter = ',', default_value = "packed")]
    paths: Vec<String>,
}

/// Runs the measurement.
pub fn run(args: Args) -> anyhow::Result<EmbedBatchesReport> {
    let dir = args.model_dir.unwrap_or_else(|| {
        std::env::var_os("OAPD_MODEL_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2")
            })
    });
    let tasks = args.tasks.unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/discovery-tasks.jsonl")
    });
    let texts: Vec<String> = std::fs::read_to_string(&tasks)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", tasks.display()))?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l)?;
            v.get("query")
                .and_then(|q| q.as_str())
                .map(str::to_owned)
                .ok_or_else(|| anyhow::anyhow!("{}: a line without \"query\"", tasks.display()))
        })
        .collect::<anyhow::Result<_>>()?;
    anyhow::ensure!(!texts.is_empty(), "{}: no queries", tasks.display());
    for path in &args.paths {
        anyhow::ensure!(
            path == "packed" || path == "padded",
            "unknown path {path:?} (packed or padded)"
        );
    }
    anyhow::ensure!(
        args.sizes.iter().all(|&s| s >= 1),
        "every size must be >= 1"
    );
    let largest = args.sizes.iter().copied().max().unwrap_or(1);
    // One pass per call: the model's own batch size must not split a call.
    let model = BertEmbedder::load(
        &dir,
        EmbedOptions {
            batch_size: args.model_batch.unwrap_or(largest).max(1),
            ..EmbedOptions::default()
        },
    )?;
    let mut tokenizer = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json"))
        .map_err(|e| anyhow::anyhow!("tokenizer: {e}"))?;
    // The file's own fixed padding would count pad tokens as real ones.
    tokenizer.with_padding(None);
    let lens: Vec<usize> = texts
        .iter()
        .map(|t| {
            tokenizer
                .encode(t.as_str(), true)
                .map(|e| e.len().min(256))
                .map_err(|e| anyhow::anyhow!("tokenizer: {e}"))
        })
        .collect::<anyhow::Result<_>>()?;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let call = |path: &str, chunk: &[&str]| -> anyhow::Result<Vec<Vec<f32>>> {
        Ok(match path {
            "padded" => model.embed_padded(chunk)?,
            _ => model.embed(chunk)?,
        })
    };
    // Warm-up: every path and size once over a few texts.
    for path in &args.paths {
        for &size in &args.sizes {
            call(path, &refs[..size.min(refs.len())])?;
        }
    }
    let loadavg_start = loadavg();
    let mut rows = Vec::new();
    for round in 0..args.rounds {
        for &size in &args.sizes {
            for path in &args.paths {
                let cpu0 = process_cpu_ns();
                let t = Instant::now();
                for chunk in refs.chunks(size) {
                    let out = call(path, chunk)?;
                    anyhow::ensure!(out.len() == chunk.len(), "wrong number of vectors");
                }
                let wall = t.elapsed().as_secs_f64() * 1e3;
                let cpu = (process_cpu_ns().saturating_sub(cpu0)) as f64 / 1e6;
                let tokens: usize = lens.iter().sum();
                let padded_tokens: usize = lens
                    .chunks(size)
                    .map(|c| c.len() * c.iter().copied().max().unwrap_or(0))
                    .sum();
                let n = texts.len() as f64;
                eprintln!(
                    "round {round} {path:>6} B={size:>2}: CPU {:.2} ms/text, wall {:.2} ms/text, token rows {padded_tokens} (real {tokens})",
                    cpu / n,
                    wall / n
                );
                rows.push(EmbedBatchRow {
                    path: path.clone(),
                    size,
                    round,
                    cpu_ms_per_text: cpu / n,
                    wall_ms_per_text: wall / n,
                    tokens,
                    padded_tokens,
                });
            }
        }
    }
    Ok(EmbedBatchesReport {
        model_dir: dir.display().to_string(),
        rayon_num_threads: std::env::var("RAYON_NUM_THREADS").ok(),
        texts: texts.len(),
        rounds: args.rounds,
        loadavg: [loadavg_start, loadavg()],
        rows,
    })
}

/// Nanoseconds on a CPU of every live thread of this process.
fn process_cpu_ns() -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| std::fs::read_to_string(e.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// The 1-minute load average.
fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
