//! Rough latency / throughput figures for the embedder, to compare boards.
//!
//! ```text
//! oap-bench embed [MODEL_DIR] [--threads N] [--runs N] [--batch N]
//! ```
//! MODEL_DIR defaults to `$OAPD_MODEL_DIR` or `<repo>/models/all-MiniLM-L6-v2`.
//! Progress goes to stderr; the result is an [`EmbedReport`].
//! Plain `Instant` timing instead of criterion: we want p50/p99 of a cold-ish
//! single query, as the daemon sees it, and a binary that is easy to copy to a
//! board.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::client::pct;
use oap_bench::report::{BatchRate, EmbedReport, Latency};
use oap_embed::Embedder;
use oap_embed_candle::{BertEmbedder, EmbedOptions, WeightPrecision};
use sha2::{Digest, Sha256};

/// Load time, query latency and batch throughput of the embedding model.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The model directory (default `$OAPD_MODEL_DIR` or
    /// `<repo>/models/all-MiniLM-L6-v2`).
    model_dir: Option<PathBuf>,
    /// Inference threads (default: the library's choice).
    #[arg(long)]
    threads: Option<usize>,
    /// Timed single queries.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
    /// Batch size (default: the embedder's).
    #[arg(long)]
    batch: Option<usize>,
    /// Precision of the linear layers' weights (default: the embedder's).
    #[arg(long, value_enum)]
    weights: Option<Weights>,
}

/// `--weights`: how the model keeps its linear layers' weights.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Weights {
    /// bfloat16, two per 32-bit lane.
    Bf16,
    /// The checkpoint's f32.
    F32,
}

/// Measures the model.
pub fn run(args: Args) -> anyhow::Result<EmbedReport> {
    let dir = args.model_dir.unwrap_or_else(|| {
        std::env::var_os("OAPD_MODEL_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2")
            })
    });
    let threads = args.threads;
    let runs = args.runs as usize;
    let batch_size = args.batch.unwrap_or(EmbedOptions::default().batch_size);
    let rayon_num_threads = std::env::var("RAYON_NUM_THREADS").ok();
    eprintln!("model dir: {}", dir.display());
    eprintln!("threads: {threads:?} (RAYON_NUM_THREADS={rayon_num_threads:?})");

    let opts = EmbedOptions {
        threads,
        batch_size,
        weights: match args.weights {
            Some(Weights::Bf16) => WeightPrecision::Bf16,
            Some(Weights::F32) => WeightPrecision::F32,
            None => EmbedOptions::default().weights,
        },
        ..EmbedOptions::default()
    };
    eprintln!("weights: {:?}", opts.weights);
    // First load in a fresh process, so VmHWM is the real load peak.
    let t = Instant::now();
    let mut model = BertEmbedder::load(&dir, opts.clone())?;
    let mut load_ms = vec![ms(t)];
    let rss_after_first_load_mb = mb_of("VmRSS");
    eprintln!("rss after first load: {}", rss());

    // Model id cost, measured apart from load: read + sha256 of the three files.
    let t = Instant::now();
    let files: Vec<Vec<u8>> = ["config.json", "tokenizer.json", "model.safetensors"]
        .iter()
        .map(|f| std::fs::read(dir.join(f)))
        .collect::<Result<_, _>>()?;
    let read_ms = ms(t);
    let t = Instant::now();
    let mut h = Sha256::new();
    for f in &files {
        h.update(f);
    }
    let digest = hex::encode(h.finalize());
    let hash_ms = ms(t);
    let bytes: usize = files.iter().map(Vec::len).sum();
    eprintln!(
        "read {:.1} MB: {read_ms:.1} ms (page cache warm); sha256: {hash_ms:.1} ms ({:.0} MB/s) -> {}",
        bytes as f64 / 1e6,
        bytes as f64 / 1e6 / (hash_ms / 1e3),
        &digest[..16]
    );
    drop(files);

    for _ in 0..2 {
        drop(model);
        let t = Instant::now();
        model = BertEmbedder::load(&dir, opts.clone())?;
        load_ms.push(ms(t));
    }
    eprintln!(
        "load (read + parse + hash on a 2nd thread): {} ms  model_id={} dim={}",
        load_ms
            .iter()
            .map(|x| format!("{x:.0}"))
            .collect::<Vec<_>>()
            .join(" / "),
        model.model_id(),
        model.dim()
    );
    eprintln!("rss after load: {}", rss());

    let query = "convert a scanned invoice to searchable pdf";
    for _ in 0..10 {
        model.embed_one(query)?;
    }
    let mut lat: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            model.embed_one(query).map(|_| ms(t))
        })
        .collect::<Result<_, _>>()?;
    lat.sort_by(f64::total_cmp);
    eprintln!(
        "single query ({} runs, ~10 tokens): p50 {:.2} ms  p99 {:.2} ms  min {:.2} ms  max {:.2} ms",
        runs,
        pct(&lat, 0.50),
        pct(&lat, 0.99),
        lat[0],
        lat[lat.len() - 1]
    );

    // Manifest-like texts of 8..80 words (roughly 12..110 tokens).
    let vocab = [
        "tool",
        "that",
        "reads",
        "sensor",
        "data",
        "from",
        "the",
        "board",
        "and",
        "publishes",
        "metrics",
        "over",
        "mqtt",
        "converts",
        "images",
        "pdf",
        "weather",
        "forecast",
        "api",
        "calendar",
        "booking",
        "agent",
        "manifest",
        "discovery",
        "translates",
        "text",
    ];
    let texts: Vec<String> = (0..256)
        .map(|i| {
            let n = 8 + (i * 29) % 73;
            (0..n)
                .map(|j| vocab[(i * 13 + j * 7) % vocab.len()])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    model.embed(&refs[..32])?;
    let t = Instant::now();
    let out = model.embed(&refs)?;
    let secs = ms(t) / 1e3;
    eprintln!(
        "batch: {} texts (8-80 words) in {:.2} s = {:.1} texts/s (batch_size {})",
        out.len(),
        secs,
        out.len() as f64 / secs,
        model.options().batch_size
    );
    // Same shape as the rust-stack notes' figure (32 x ~16 tokens), for comparison.
    let short: Vec<String> = (0..32)
        .map(|i| texts[i].split(' ').take(12).collect::<Vec<_>>().join(" "))
        .collect();
    let short: Vec<&str> = short.iter().map(String::as_str).collect();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        model.embed(&short)?;
        best = best.min(ms(t));
    }
    eprintln!(
        "batch: 32 x 12 words (~16 tokens): best of 5 {best:.0} ms = {:.0} texts/s",
        32e3 / best
    );
    eprintln!("rss at end: {}", rss());
    Ok(EmbedReport {
        model_dir: dir.display().to_string(),
        threads,
        rayon_num_threads,
        model_id: model.model_id().to_string(),
        dim: model.dim(),
        load_ms,
        model_files_mb: bytes as f64 / 1e6,
        read_ms,
        hash_ms,
        single_query: Latency {
            runs,
            p50_ms: pct(&lat, 0.50),
            p99_ms: pct(&lat, 0.99),
            min_ms: lat.first().copied().unwrap_or(f64::NAN),
            max_ms: lat.last().copied().unwrap_or(f64::NAN),
        },
        batch: BatchRate {
            texts: out.len(),
            batch_size: model.options().batch_size,
            elapsed_ms: secs * 1e3,
            texts_per_s: out.len() as f64 / secs,
        },
        short_batch: BatchRate {
            texts: short.len(),
            batch_size: model.options().batch_size,
            elapsed_ms: best,
            texts_per_s: short.len() as f64 * 1e3 / best,
        },
        rss_after_first_load_mb,
        rss_end_mb: mb_of("VmRSS"),
        rss_peak_mb: mb_of("VmHWM"),
    })
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// A field of this process's `/proc/self/status` in MB.
fn mb_of(field: &str) -> Option<f64> {
    oap_testkit::rss::ProcStatus::own().ok()?.mb(field)
}

/// Current and peak resident set size from /proc (Linux only).
fn rss() -> String {
    let status = oap_testkit::rss::ProcStatus::own().ok();
    let field = |k: &str| {
        status
            .as_ref()
            .and_then(|s| s.raw(k))
            .unwrap_or("?")
            .to_owned()
    };
    format!("VmRSS {} (peak VmHWM {})", field("VmRSS"), field("VmHWM"))
}
