//! `oap-bench speed`: speed and footprint of the discovery engine, every
//! figure in one run so that ratios between them are meaningful on a
//! noisy machine (what `cargo xtask bench-speed` runs).
//!
//! In order, each in a child process of its own (`subprocess.rs`) whose
//! JSON report is read here: `embed` (query latency, batch throughput;
//! three rounds, each also with `RAYON_NUM_THREADS` set), `search` (1k..1M
//! rows, f32 and i8), the daemon on the bundled manifests under
//! `discover-load` at concurrency 1, 8 and 32 with its RSS (again with the
//! query cache on, and with `RAYON_NUM_THREADS` set), and a synthetic
//! corpus of `--corpus` manifests (`corpus.rs`): its index is built once
//! and cached under `--cache`, then the daemon is restarted on it several
//! times to time spawn -> first `200` from `GET /health`.
//!
//! Daemons start through the test kit's launcher (`daemon.rs`) on a free
//! 127.0.0.1 port, `RUST_LOG=warn` and no `OAP_*` environment; they are
//! killed when the run ends, also on error (their handles kill them on
//! drop). Log lines it needs are read as JSON (`log.format: json`).
//! Progress goes to stderr; the JSON is a [`SpeedReport`], whose `render`
//! is the summary with a verdict per target.

mod corpus;
mod daemon;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use oap_bench::machine::{loadavg, now_utc};
use oap_bench::report::{EmbedReport, SearchReport};
use oap_bench::speed_report::{
    SpeedReport, TARGET_EMBED_P50_MS, TARGET_RSS_MB, TARGET_SEARCH_100K_MS,
};

use crate::subprocess;
use daemon::{add_load, load, rss_of, start, Log, QUERY_CACHE_VAR, THREAD_VARS};

/// Speed and footprint of the discovery engine (see the module doc).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The `oapd` binary.
    #[arg(long)]
    oapd: PathBuf,
    /// The embedding model directory.
    #[arg(long)]
    model_dir: PathBuf,
    /// Where the synthetic corpus and its index are cached (`corpus-N/`).
    #[arg(long)]
    cache: PathBuf,
    /// The source measured, as the report names it (a commit, say).
    #[arg(long, default_value = "unknown")]
    source: String,
    /// Skip the 1M-row search and send fewer requests.
    #[arg(long)]
    quick: bool,
    /// Restarts for the start-to-ready figure.
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
    /// Manifests in the synthetic corpus.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    corpus: u32,
}

pub(super) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The middle value (the upper one of an even count); NaN for none.
pub(super) fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The shared description (CPU, cores, RAM) plus the kernel, which the
/// speed figures depend on.
fn machine_description() -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{}, Linux {}",
        oap_bench::machine::machine_description(),
        kernel.trim()
    )
}

/// Notes the load average as a section starts (was the machine quiet?).
fn section(summary: &mut SpeedReport, name: &str) {
    summary.notes.push(format!(
        "load average (1/5/15 min) at the start of {name}: {}",
        loadavg()
    ));
}

/// What the summary takes from one `embed` run.
struct EmbedRun {
    p50: f64,
    p99: f64,
    /// texts/s of the long and the short batch, in that order.
    batch: Vec<f64>,
}

impl From<EmbedReport> for EmbedRun {
    fn from(report: EmbedReport) -> EmbedRun {
        EmbedRun {
            p50: report.single_query.p50_ms,
            p99: report.single_query.p99_ms,
            batch: vec![report.batch.texts_per_s, report.short_batch.texts_per_s],
        }
    }
}

pub fn run(args: Args) -> Result<SpeedReport> {
    let mut summary = SpeedReport {
        machine: machine_description(),
        date: now_utc(),
        source: args.source.clone(),
        load_before: loadavg(),
        load_after: String::new(),
        figures: Vec::new(),
        load_runs: Vec::new(),
        notes: Vec::new(),
    };
    eprintln!(
        "== machine: {}\n== date: {}\n== source: {}\n\
         == load average (1/5/15 min) before: {}",
        summary.machine, summary.date, summary.source, summary.load_before
    );
    let tmp = tempfile::tempdir()?;
    embedding(&args, &mut summary)?;
    search(&args, &mut summary)?;
    bundled(&args, tmp.path(), &mut summary)?;
    eprintln!(
        "\n== 4/4 start-to-ready with an existing index of {} manifests",
        args.corpus
    );
    section(&mut summary, "4/4 corpus");
    corpus::corpus_bench(&args, tmp.path(), &mut summary)?;
    summary.load_after = loadavg();
    Ok(summary)
}

/// Section 1, query embedding. Three rounds, each the default and then the same
/// benchmark with RAYON_NUM_THREADS set: candle re-reads the CPU count
/// (/proc/cpuinfo) on every matmul unless it is set, and alternating the
/// two keeps the comparison fair on a machine whose load drifts.
fn embedding(args: &Args, summary: &mut SpeedReport) -> Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    eprintln!("\n== 1/4 embedding (oap-bench embed, 3 rounds: default, RAYON_NUM_THREADS={cores})");
    section(summary, "1/4 embedding");
    let embed_bench = || -> Result<std::process::Command> {
        let mut command = subprocess::command("embed")?;
        command.arg(&args.model_dir);
        for key in THREAD_VARS {
            command.env_remove(key);
        }
        Ok(command)
    };
    let mut default_runs = Vec::new();
    let mut rayon_runs = Vec::new();
    for _ in 0..3 {
        default_runs.push(EmbedRun::from(subprocess::report::<EmbedReport>(
            &mut embed_bench()?,
        )?));
        rayon_runs.push(EmbedRun::from(subprocess::report::<EmbedReport>(
            embed_bench()?.env("RAYON_NUM_THREADS", cores.to_string()),
        )?));
    }
    let list = |runs: &[EmbedRun]| {
        runs.iter()
            .map(|r| format!("{:.1}", r.p50))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let p50 = median(&default_runs.iter().map(|r| r.p50).collect::<Vec<_>>());
    let p99 = median(&default_runs.iter().map(|r| r.p99).collect::<Vec<_>>());
    summary.add(
        "query embedding, single query (~10 tokens), p50 / p99, median of 3 oap-bench embed runs",
        format!("{p50:.2} / {p99:.2} ms (p50s: {})", list(&default_runs)),
        "p50 <= 15 ms",
        Some(p50 <= TARGET_EMBED_P50_MS),
    );
    let rp50 = median(&rayon_runs.iter().map(|r| r.p50).collect::<Vec<_>>());
    let rp99 = median(&rayon_runs.iter().map(|r| r.p99).collect::<Vec<_>>());
    summary.add(
        format!("same with RAYON_NUM_THREADS={cores} (not the default), interleaved"),
        format!("{rp50:.2} / {rp99:.2} ms (p50s: {})", list(&rayon_runs)),
        "-",
        None,
    );
    for (k, what) in [
        "256 texts of 8-80 words, batch_size 16",
        "32 texts of ~16 tokens, best of 5",
    ]
    .iter()
    .enumerate()
    {
        let rates: Vec<f64> = default_runs
            .iter()
            .filter_map(|r| r.batch.get(k).copied())
            .collect();
        if !rates.is_empty() {
            summary.add(
                format!("batch embedding throughput, {what}, median of 3"),
                format!("{:.0} texts/s", median(&rates)),
                "-",
                None,
            );
        }
    }
    Ok(())
}

/// Section 2, vector and BM25 search.
fn search(args: &Args, summary: &mut SpeedReport) -> Result<()> {
    eprintln!("\n== 2/4 search (oap-bench search)");
    section(summary, "2/4 search");
    let sizes = if args.quick {
        "1000,10000,100000"
    } else {
        "1000,10000,100000,1000000"
    };
    let search: SearchReport =
        subprocess::report(subprocess::command("search")?.args(["--sizes", sizes]))?;
    for row in &search.rows {
        let (rows, dtype) = (row.rows, &row.dtype);
        let (d50, d99, s50, l50) = (
            row.dense_p50_ms,
            row.dense_p99_ms,
            row.dense_one_thread_p50_ms,
            row.lexical_p50_ms,
        );
        let ok = (rows == 100_000).then_some(d50 <= TARGET_SEARCH_100K_MS);
        summary.add(
            format!("dense search k=10, {rows} rows {dtype}: p50 / p99 (1 thread p50; BM25 p50)"),
            format!("{d50:.3} / {d99:.3} ms ({s50:.3}; {l50:.3} ms)"),
            if rows == 100_000 { "<= 5 ms" } else { "-" },
            ok,
        );
    }
    Ok(())
}

/// Section 3, the daemon on the bundled manifests: start-up, memory, discovery
/// under load; then with the query cache on, then with RAYON_NUM_THREADS.
fn bundled(args: &Args, tmp: &std::path::Path, summary: &mut SpeedReport) -> Result<()> {
    let (oapd, model_dir) = (&args.oapd, &args.model_dir);
    eprintln!("\n== 3/4 daemon on the bundled manifests, oap-bench discover-load");
    section(summary, "3/4 bundled daemon");
    let bundled_data = tmp.join("bundled-data");
    let (daemon, first) = start(oapd, model_dir, &bundled_data, Log::Quiet, "", &[])?;
    // The first start embeds the 13 bundled manifests (no index yet); the
    // figures come from a restart on that index, as a daemon usually starts.
    drop(daemon);
    let (daemon, again) = start(oapd, model_dir, &bundled_data, Log::Quiet, "", &[])?;
    eprintln!(
        "bundled: ready after {:.0} ms (first start, index built), {:.0} ms (restart)",
        ms(first),
        ms(again)
    );
    summary.add(
        "start to ready, bundled manifests: first start (builds the index) / restart",
        format!("{:.0} ms / {:.0} ms", ms(first), ms(again)),
        "-",
        None,
    );
    let rss = rss_of(daemon.pid())?;
    summary.add(
        "daemon VmRSS after start, bundled manifests",
        rss.to_string(),
        "<= 200 MB",
        Some(rss.rss <= TARGET_RSS_MB),
    );
    let counts: &[(usize, usize)] = if args.quick {
        &[(1, 150), (8, 300), (32, 600)]
    } else {
        &[(1, 400), (8, 800), (32, 1600)]
    };
    let mut peak: f64 = 0.0;
    for (i, &(concurrency, requests)) in counts.iter().enumerate() {
        let (report, p) = load(&daemon, "bundled", concurrency, requests, i == 0)?;
        peak = peak.max(p);
        add_load(
            summary,
            format!("/v1/discover, bundled (13), concurrency {concurrency}: p50 / p99, req/s"),
            &report,
            concurrency == 1,
        );
        summary.load_runs.push(report);
    }
    let rss = rss_of(daemon.pid())?;
    summary.add(
        "daemon VmRSS under load, bundled: peak sampled every 50 ms; after",
        format!("{peak:.0} MB; {rss}"),
        "<= 200 MB",
        Some(peak <= TARGET_RSS_MB),
    );
    drop(daemon);

    // Repeated queries, answered from the query cache: one round through
    // the tasks fills it, the measured run repeats them.
    let env = [(QUERY_CACHE_VAR, "256".to_string())];
    let (daemon, _) = start(oapd, model_dir, &bundled_data, Log::Quiet, "", &env)?;
    load(&daemon, "bundled, filling the query cache", 1, 200, false)?;
    let (report, _) = load(&daemon, "bundled, query cache hits", 1, counts[0].1, false)?;
    add_load(
        summary,
        "/v1/discover, bundled, every query repeated (query cache hits, not the headline), \
         concurrency 1: p50 / p99, req/s"
            .to_string(),
        &report,
        false,
    );
    summary.load_runs.push(report);
    drop(daemon);

    // The same daemon and index with RAYON_NUM_THREADS set (see above).
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let env = [("RAYON_NUM_THREADS", cores.to_string())];
    let (daemon, _) = start(oapd, model_dir, &bundled_data, Log::Quiet, "", &env)?;
    let label = format!("bundled, RAYON_NUM_THREADS={cores}");
    for &(concurrency, requests) in &counts[..2] {
        let (report, _) = load(&daemon, &label, concurrency, requests, false)?;
        add_load(
            summary,
            format!(
                "/v1/discover, bundled, RAYON_NUM_THREADS={cores} (not the default), \
                 concurrency {concurrency}: p50 / p99, req/s"
            ),
            &report,
            false,
        );
        summary.load_runs.push(report);
    }
    Ok(())
}
