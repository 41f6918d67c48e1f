//! Rough latency / throughput figures for the embedder, to compare boards.
//!
//! ```text
//! cargo run --release -p oap-embed-candle --example embed_bench -- [MODEL_DIR] [--threads N] [--runs N] [--batch N]
//! ```
//! MODEL_DIR defaults to `$OAPD_MODEL_DIR` or `<repo>/models/all-MiniLM-L6-v2`.
//! Plain `Instant` timing instead of criterion: we want p50/p99 of a cold-ish
//! single query, as the daemon sees it, and a binary that is easy to copy to a
//! board.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::string_slice,
    clippy::disallowed_methods,
    reason = "a benchmark or demo program run by developers, not the daemon: it stops on the first surprise"
)]

use std::path::{Path, PathBuf};
use std::time::Instant;

use oap_embed::Embedder;
use oap_embed_candle::{BertEmbedder, EmbedOptions};
use sha2::{Digest, Sha256};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut dir = std::env::var_os("OAPD_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2")
        });
    let mut threads = None;
    let mut runs = 200usize;
    let mut batch_size = EmbedOptions::default().batch_size;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--threads" => threads = Some(args.next().ok_or("--threads N")?.parse()?),
            "--runs" => runs = args.next().ok_or("--runs N")?.parse()?,
            "--batch" => batch_size = args.next().ok_or("--batch N")?.parse()?,
            _ => dir = PathBuf::from(a),
        }
    }
    println!("model dir: {}", dir.display());
    println!(
        "threads: {:?} (RAYON_NUM_THREADS={:?})",
        threads,
        std::env::var("RAYON_NUM_THREADS").ok()
    );

    let opts = EmbedOptions {
        threads,
        batch_size,
        ..EmbedOptions::default()
    };
    // First load in a fresh process, so VmHWM is the real load peak.
    let t = Instant::now();
    let mut model = BertEmbedder::load(&dir, opts.clone())?;
    let mut load_ms = vec![ms(t)];
    println!("rss after first load: {}", rss());

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
    println!(
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
    println!(
        "load (read + parse + hash on a 2nd thread): {} ms  model_id={} dim={}",
        load_ms
            .iter()
            .map(|x| format!("{x:.0}"))
            .collect::<Vec<_>>()
            .join(" / "),
        model.model_id(),
        model.dim()
    );
    println!("rss after load: {}", rss());

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
    println!(
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
    println!(
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
    println!(
        "batch: 32 x 12 words (~16 tokens): best of 5 {best:.0} ms = {:.0} texts/s",
        32e3 / best
    );
    println!("rss at end: {}", rss());
    Ok(())
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    oap_testkit::stats::rounded_index(sorted, p).unwrap_or(f64::NAN)
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
