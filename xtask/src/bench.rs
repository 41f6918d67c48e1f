//! `cargo xtask bench-speed`: speed and footprint of the discovery engine,
//! every figure in one run so that ratios between them are meaningful on a
//! noisy machine.
//!
//! In order, all `oap-bench` subcommands whose JSON reports this task reads:
//! `embed` (query latency, batch throughput), `search` (1k..1M rows, f32
//! and i8), the daemon on the bundled manifests under `discover-load` at
//! concurrency 1, 8 and 32 with its RSS, and a synthetic corpus of 10,000
//! manifests (`make-corpus`): the index is built once and cached under
//! `target/bench/corpus-10000/`, then the daemon is restarted on it several
//! times to time spawn -> first `200` from `GET /health`.
//!
//! Daemons start through the test kit's launcher (`DaemonBuilder`) on a
//! free 127.0.0.1 port, `RUST_LOG=warn` and no `OAP_*` environment; they
//! are killed when this task ends, also on error (their handles kill them
//! on drop). Log lines the task needs are read as JSON (`log.format: json`).

use oap_bench::machine::{loadavg, now_utc};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use oap_bench::report::{DiscoverLoadReport, EmbedReport, SearchReport};
use oap_testkit::{Daemon, DaemonBuilder};
use serde_json::Value;

use crate::bench_run::{self, TempDir};
use crate::net::free_port;
use crate::repo_root;

const USAGE: &str = "usage: cargo xtask bench-speed [--quick] [--runs N] [--corpus N]\n  \
    --quick     skip the 1M-row search and send fewer requests\n  \
    --runs N    restarts for the start-to-ready figure (default 7)\n  \
    --corpus N  manifests in the synthetic corpus (default 10000)";

/// Targets the project set itself, for the summary.
const TARGET_EMBED_P50_MS: f64 = 15.0;
const TARGET_SEARCH_100K_MS: f64 = 5.0;
/// `/v1/discover` at concurrency 1: almost all of it is the query embedding.
const TARGET_DISCOVER_P50_MS: f64 = 6.0;
const TARGET_DISCOVER_P99_MS: f64 = 12.0;
const TARGET_RSS_MB: f64 = 200.0;
const TARGET_READY_MS: f64 = 1000.0;

/// Variables that change how many threads candle and rayon use; removed from
/// every benchmark process except where a run sets one on purpose.
const THREAD_VARS: &[&str] = &["RAYON_NUM_THREADS", "CANDLE_NUM_THREADS"];

/// `discovery.query_cache` from the environment.
const QUERY_CACHE_VAR: &str = "OAP_DISCOVERY_QUERY_CACHE";

struct Options {
    quick: bool,
    runs: usize,
    corpus: usize,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut options = Options {
        quick: false,
        runs: 7,
        corpus: 10_000,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => options.quick = true,
            "--runs" => options.runs = it.next().context(USAGE)?.parse().context(USAGE)?,
            "--corpus" => options.corpus = it.next().context(USAGE)?.parse().context(USAGE)?,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    if options.runs == 0 || options.corpus == 0 {
        bail!("--runs and --corpus must be at least 1");
    }
    Ok(options)
}

/// One line of the final summary: figure, measured, target, verdict.
struct Figure {
    name: String,
    value: String,
    target: String,
    verdict: &'static str,
}

#[derive(Default)]
struct Summary {
    figures: Vec<Figure>,
    notes: Vec<String>,
}

impl Summary {
    /// Notes the load average as a section starts (was the machine quiet?).
    fn section(&mut self, name: &str) {
        self.notes.push(format!(
            "load average (1/5/15 min) at the start of {name}: {}",
            loadavg()
        ));
    }

    fn add(&mut self, name: impl Into<String>, value: String, target: &str, ok: Option<bool>) {
        self.figures.push(Figure {
            name: name.into(),
            value,
            target: target.to_string(),
            verdict: match ok {
                Some(true) => "met",
                Some(false) => "MISSED",
                None => "-",
            },
        });
    }
}

/// `oapd serve` through the kit's launcher on a free loopback port, its
/// index in `data_dir` (kept across restarts), `extra` YAML appended. The
/// environment is clean (no `OAP_*`, `OAPD_CONFIG` or thread-count
/// variables) plus `env`. Returns the daemon and its spawn -> first `200`
/// from `/health`, polled every 2 ms. The daemon binds before it loads the
/// model and index, so a connection made early is simply answered once it
/// is ready.
fn start(
    oapd: &Path,
    model: &Path,
    data_dir: &Path,
    log: Log,
    extra: &str,
    env: &[(&str, String)],
) -> Result<(Daemon, Duration)> {
    let port = free_port()?;
    let (rust_log, format) = match log {
        Log::Quiet => ("warn", "text"),
        Log::InfoJson => ("info", "json"),
    };
    let mut builder = DaemonBuilder::new(oapd)
        .model_dir(model)
        .data_dir(data_dir)
        .listen(&[&format!("127.0.0.1:{port}")])
        .default_header_read_timeout()
        .yaml(&format!("log:\n  level: warn\n  format: {format}\n{extra}"))
        .env("RUST_LOG", rust_log)
        .ready_poll(Duration::from_millis(2))
        .ready_within(Duration::from_secs(600));
    for key in THREAD_VARS {
        builder = builder.env_remove(key);
    }
    // The load runs rotate through 200 tasks, which the query cache would
    // answer after the first round: every figure but the one that says so
    // measures a query that is embedded (`env` may turn the cache back on).
    builder = builder.env(QUERY_CACHE_VAR, "0");
    for (key, value) in env {
        builder = builder.env(key, value);
    }
    builder
        .try_start_timed()
        .map_err(|err| anyhow::anyhow!("oapd: {err}"))
}

/// How a started daemon logs.
#[derive(Clone, Copy)]
enum Log {
    /// Warnings only, as text.
    Quiet,
    /// Info and up as JSON lines, for the start-up breakdown.
    InfoJson,
}

/// The fields of the first JSON log line whose message is `message` and
/// that has `field`.
fn log_event(log: &str, message: &str, field: &str) -> Option<Value> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|line| line["fields"].clone())
        .find(|fields| fields["message"] == message && fields.get(field).is_some())
}

/// Memory of a process from `/proc/<pid>/status`, in MB (10^6 bytes).
#[derive(Clone, Copy)]
struct Rss {
    /// Resident now (`VmRSS` = `RssAnon` + `RssFile` + `RssShmem`).
    rss: f64,
    /// Peak resident since start (`VmHWM`).
    hwm: f64,
    /// Heap and other private memory (`RssAnon`).
    anon: f64,
    /// Resident file pages, i.e. the mapped index and binary (`RssFile`).
    file: f64,
}

impl std::fmt::Display for Rss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.0} MB (anon {:.0} + file {:.0}; VmHWM {:.0})",
            self.rss, self.anon, self.file, self.hwm
        )
    }
}

fn rss_of(pid: u32) -> Result<Rss> {
    let status = oap_testkit::rss::ProcStatus::of(pid)
        .with_context(|| format!("read /proc/{pid}/status"))?;
    Ok(Rss {
        rss: status.mb_or_err("VmRSS")?,
        hwm: status.mb_or_err("VmHWM")?,
        anon: status.mb_or_err("RssAnon")?,
        file: status.mb_or_err("RssFile")?,
    })
}

use crate::tasks::run_in_root as run_shown;

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

/// `git describe`-like: short commit, and whether tracked files differ from it.
fn source_revision() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(repo_root())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "--short", "HEAD"]) {
        Some(commit) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{commit} + uncommitted changes")
            } else {
                commit
            }
        }
        None => "unknown (no git)".into(),
    }
}

/// Runs `oap-bench discover-load` against `daemon`, sampling the daemon's
/// VmRSS every 50 ms meanwhile; prints its table row (the header first
/// when `header`) and returns its report and the largest VmRSS seen (MB).
fn load(
    bench: &Path,
    daemon: &Daemon,
    label: &str,
    concurrency: usize,
    requests: usize,
    header: bool,
) -> Result<(DiscoverLoadReport, f64)> {
    let mut command = bench_run::command(bench, "discover-load");
    command
        .arg("--quiet")
        .arg("--addr")
        .arg(daemon.addr.to_string())
        .args(["--concurrency", &concurrency.to_string()])
        .args(["--requests", &requests.to_string()])
        .args(["--label", label]);
    let pid = daemon.pid();
    let mut peak: f64 = 0.0;
    let (report, ok): (DiscoverLoadReport, bool) =
        bench_run::report_and_status(&mut command, || {
            if let Ok(rss) = rss_of(pid) {
                peak = peak.max(rss.rss);
            }
        })?;
    if header {
        println!("{}", DiscoverLoadReport::TABLE_HEADER);
    }
    println!("{}", report.table_row());
    if !ok {
        println!(
            "(warning: discover-load {label} reported {} errors)",
            report.errors
        );
    }
    Ok((report, peak))
}

/// A `/v1/discover` load run as a summary figure.
fn add_load(summary: &mut Summary, name: String, report: &DiscoverLoadReport, judged: bool) {
    let (p50, p99, rps, errors) = (
        report.p50_ms,
        report.p99_ms,
        report.requests_per_s,
        report.errors,
    );
    summary.add(
        name,
        format!("{p50:.1} / {p99:.1} ms, {rps:.0} req/s, {errors} errors"),
        if judged {
            "p50 <= 6 ms, p99 <= 12 ms"
        } else {
            "-"
        },
        judged.then_some(
            p50 <= TARGET_DISCOVER_P50_MS && p99 <= TARGET_DISCOVER_P99_MS && errors == 0,
        ),
    );
}

pub fn run(args: &[String]) -> Result<()> {
    let options = parse(args)?;
    crate::model::run(&[])?;
    let root = repo_root();
    let model_dir = root.join("models/all-MiniLM-L6-v2");

    println!("== build (release)");
    let bench = bench_run::build(&[("oapd", "oapd")])?;
    let oapd = root.join("target/release/oapd");

    let machine = machine_description();
    let date = now_utc();
    let load_before = loadavg();
    let revision = source_revision();
    println!(
        "== machine: {machine}\n== date: {date}\n== source: {revision}\n\
         == load average (1/5/15 min) before: {load_before}"
    );
    let mut summary = Summary::default();
    let tmp = TempDir::new("speed")?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());

    // 1. Query embedding. Three rounds, each the default and then the same
    // benchmark with RAYON_NUM_THREADS set: candle re-reads the CPU count
    // (/proc/cpuinfo) on every matmul unless it is set, and alternating the
    // two keeps the comparison fair on a machine whose load drifts.
    println!("\n== 1/4 embedding (oap-bench embed, 3 rounds: default, RAYON_NUM_THREADS={cores})");
    summary.section("1/4 embedding");
    let embed_bench = || {
        let mut command = bench_run::command(&bench, "embed");
        command.arg(&model_dir);
        for key in THREAD_VARS {
            command.env_remove(key);
        }
        command
    };
    let mut default_runs = Vec::new();
    let mut rayon_runs = Vec::new();
    for _ in 0..3 {
        default_runs.push(EmbedRun::from(bench_run::report::<EmbedReport>(
            &mut embed_bench(),
        )?));
        rayon_runs.push(EmbedRun::from(bench_run::report::<EmbedReport>(
            embed_bench().env("RAYON_NUM_THREADS", cores.to_string()),
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

    // 2. Vector and BM25 search.
    println!("\n== 2/4 search (oap-bench search)");
    summary.section("2/4 search");
    let sizes = if options.quick {
        "1000,10000,100000"
    } else {
        "1000,10000,100000,1000000"
    };
    let search: SearchReport =
        bench_run::report(bench_run::command(&bench, "search").args(["--sizes", sizes]))?;
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

    // 3. The daemon on the bundled manifests.
    println!("\n== 3/4 daemon on the bundled manifests, oap-bench discover-load");
    summary.section("3/4 bundled daemon");
    let bundled_data = tmp.0.join("bundled-data");
    let (daemon, first) = start(&oapd, &model_dir, &bundled_data, Log::Quiet, "", &[])?;
    // The first start embeds the 13 bundled manifests (no index yet); the
    // figures come from a restart on that index, as a daemon usually starts.
    drop(daemon);
    let (daemon, again) = start(&oapd, &model_dir, &bundled_data, Log::Quiet, "", &[])?;
    println!(
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
    let counts: &[(usize, usize)] = if options.quick {
        &[(1, 150), (8, 300), (32, 600)]
    } else {
        &[(1, 400), (8, 800), (32, 1600)]
    };
    let mut peak: f64 = 0.0;
    let mut load_rows = Vec::new();
    for (i, &(concurrency, requests)) in counts.iter().enumerate() {
        let (report, p) = load(&bench, &daemon, "bundled", concurrency, requests, i == 0)?;
        peak = peak.max(p);
        add_load(
            &mut summary,
            format!("/v1/discover, bundled (13), concurrency {concurrency}: p50 / p99, req/s"),
            &report,
            concurrency == 1,
        );
        load_rows.push(report);
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
    let (daemon, _) = start(&oapd, &model_dir, &bundled_data, Log::Quiet, "", &env)?;
    load(
        &bench,
        &daemon,
        "bundled, filling the query cache",
        1,
        200,
        false,
    )?;
    let (report, _) = load(
        &bench,
        &daemon,
        "bundled, query cache hits",
        1,
        counts[0].1,
        false,
    )?;
    add_load(
        &mut summary,
        "/v1/discover, bundled, every query repeated (query cache hits, not the headline), \
         concurrency 1: p50 / p99, req/s"
            .to_string(),
        &report,
        false,
    );
    load_rows.push(report);
    drop(daemon);

    // The same daemon and index with RAYON_NUM_THREADS set (see above).
    let env = [("RAYON_NUM_THREADS", cores.to_string())];
    let (daemon, _) = start(&oapd, &model_dir, &bundled_data, Log::Quiet, "", &env)?;
    let label = format!("bundled, RAYON_NUM_THREADS={cores}");
    for &(concurrency, requests) in &counts[..2] {
        let (report, _) = load(&bench, &daemon, &label, concurrency, requests, false)?;
        add_load(
            &mut summary,
            format!(
                "/v1/discover, bundled, RAYON_NUM_THREADS={cores} (not the default), \
                 concurrency {concurrency}: p50 / p99, req/s"
            ),
            &report,
            false,
        );
        load_rows.push(report);
    }
    drop(daemon);

    // 4. Start-to-ready with an existing index of `corpus` manifests.
    println!(
        "\n== 4/4 start-to-ready with an existing index of {} manifests",
        options.corpus
    );
    summary.section("4/4 corpus");
    corpus_bench(
        &options,
        &oapd,
        &bench,
        &model_dir,
        &tmp,
        &mut summary,
        &mut load_rows,
    )?;

    let load_after = loadavg();
    println!("\n== summary ({date}; {machine}; source {revision})");
    println!("load average (1/5/15 min): before {load_before}, after {load_after}");
    println!("\n| figure | measured | target | verdict |\n|---|---|---|---|");
    for f in &summary.figures {
        println!(
            "| {} | {} | {} | {} |",
            f.name, f.value, f.target, f.verdict
        );
    }
    println!("\n{}", DiscoverLoadReport::TABLE_HEADER);
    for row in &load_rows {
        println!("{}", row.table_row());
    }
    for note in &summary.notes {
        println!("- {note}");
    }
    Ok(())
}

/// What the summary takes from one `oap-bench embed` run.
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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn corpus_bench(
    options: &Options,
    oapd: &Path,
    bench: &Path,
    model_dir: &Path,
    tmp: &TempDir,
    summary: &mut Summary,
    load_rows: &mut Vec<DiscoverLoadReport>,
) -> Result<()> {
    let root = repo_root();
    let bfcl = root.join("target/bench/bfcl");
    if !bfcl.join("tasks.jsonl").is_file() {
        run_shown(
            Command::new("python3")
                .arg("bench/bfcl_corpus.py")
                .arg("--out")
                .arg(&bfcl),
        )?;
    }
    let cache = root.join(format!("target/bench/corpus-{}", options.corpus));
    let manifests = cache.join("manifests");
    // Deterministic: regenerating gives the same bytes, so a cached index stays valid.
    run_shown(
        bench_run::command(bench, "make-corpus")
            .arg("--out")
            .arg(&manifests)
            .args(["--count", &options.corpus.to_string()]),
    )?;
    lint_all(oapd, &manifests)?;

    let extra = format!("manifests:\n  bundled: false\n  dirs: [{manifests:?}]\n");
    let data_dir = cache.join("data");
    let index_config = tmp.0.join("corpus-index.yaml");
    std::fs::write(
        &index_config,
        format!(
            "index:\n  data_dir: {data_dir:?}\nembedding:\n  model_dir: {model_dir:?}\n\
             log:\n  level: info\n  format: json\n{extra}"
        ),
    )
    .with_context(|| format!("write {}", index_config.display()))?;
    // Builds the index the first time (embeds every manifest: minutes);
    // afterwards it finds it unchanged and returns at once. Its `index
    // ready` log event says which.
    let t = Instant::now();
    let mut command = Command::new(oapd);
    command
        .env("RUST_LOG", "info")
        .arg("--config")
        .arg(&index_config)
        .arg("index")
        .current_dir(repo_root())
        .stdin(Stdio::null());
    println!("$ oapd --config {} index", index_config.display());
    let output = command.output().context("cannot run oapd index")?;
    print!("{}", String::from_utf8_lossy(&output.stdout));
    let log = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        bail!("oapd index failed ({}):\n{log}", output.status);
    }
    println!("(oapd index: {:.1} s)", t.elapsed().as_secs_f64());
    let ready = log_event(&log, "index ready", "reused_index")
        .context("oapd index logged no `index ready` event")?;
    if ready["reused_index"] == false {
        summary.notes.push(format!(
            "the {}-manifest index was (re)built in this run: {:.0} s ({} manifests, {} rows)",
            options.corpus,
            t.elapsed().as_secs_f64(),
            ready["manifests"],
            ready["rows"],
        ));
    }

    // Warm-up start, not timed: the page cache may have dropped the model
    // or the index since they were last read (this VM reclaims idle page
    // cache), and the timed runs are meant to be warm restarts.
    let warm_up = startup_breakdown(oapd, &data_dir, model_dir, &extra)?;
    summary.add(
        "warm-up start (untimed, info logs): spawn to ready / model load (read, sha256 on a 2nd thread) / catalog load + index open",
        warm_up,
        "-",
        None,
    );

    let mut ready = Vec::new();
    let mut rss_after_ready = Vec::new();
    let mut kept: Option<Daemon> = None;
    for run in 0..options.runs {
        let (daemon, elapsed) = start(oapd, model_dir, &data_dir, Log::Quiet, &extra, &[])?;
        let rss = rss_of(daemon.pid())?;
        println!(
            "run {}: ready after {:.0} ms; VmRSS {rss}",
            run + 1,
            ms(elapsed)
        );
        ready.push(ms(elapsed));
        rss_after_ready.push(rss);
        if run + 1 == options.runs {
            kept = Some(daemon);
        }
    }
    let daemon = kept.context("no run")?;
    let breakdown = startup_breakdown(oapd, &data_dir, model_dir, &extra)?;
    summary.add(
        "start-up breakdown (one more warm start, info logs): spawn to ready / model load (read, sha256 on a 2nd thread) / catalog load + index open",
        breakdown,
        "-",
        None,
    );
    let p50 = median(&ready);
    let min = ready.iter().copied().fold(f64::INFINITY, f64::min);
    let max = ready.iter().copied().fold(0.0, f64::max);
    summary.add(
        format!(
            "start to ready (spawn -> first 200 /health), {} manifests, existing index, p50 of {} (min-max)",
            options.corpus, options.runs
        ),
        format!(
            "{p50:.0} ms ({min:.0}-{max:.0}; runs: {})",
            ready
                .iter()
                .map(|r| format!("{r:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        "<= 1 s",
        Some(p50 <= TARGET_READY_MS),
    );

    let health = daemon
        .try_request("GET", "/health", &[], b"")
        .context("GET /health")?;
    if health.status != 200 {
        bail!("GET /health: {}", health.status);
    }
    let health: Value = serde_json::from_slice(&health.body).context("/health is not JSON")?;
    let index = &health["index"];
    let number = |key: &str| index[key].as_f64().unwrap_or(0.0);
    let (docs, rows, bytes) = (number("manifests"), number("rows"), number("bytes"));
    summary.add(
        format!(
            "index, {} manifests: docs, rows, file size, bytes per manifest",
            options.corpus
        ),
        format!(
            "{docs:.0} docs, {rows:.0} rows, {:.1} MB, {:.0} B/manifest",
            bytes / 1e6,
            bytes / docs.max(1.0)
        ),
        "-",
        None,
    );
    let rss = *rss_after_ready.last().context("no run")?;
    summary.add(
        format!(
            "daemon VmRSS right after ready, {} manifests",
            options.corpus
        ),
        rss.to_string(),
        "<= 200 MB",
        Some(rss.rss <= TARGET_RSS_MB),
    );
    let label = format!("corpus-{}", options.corpus);
    let counts: &[(usize, usize)] = if options.quick {
        &[(1, 150), (8, 300)]
    } else {
        &[(1, 400), (8, 800)]
    };
    let mut peak: f64 = 0.0;
    for &(concurrency, requests) in counts {
        let (report, p) = load(bench, &daemon, &label, concurrency, requests, false)?;
        peak = peak.max(p);
        add_load(
            summary,
            format!(
                "/v1/discover, {} manifests, concurrency {concurrency}: p50 / p99, req/s",
                options.corpus
            ),
            &report,
            concurrency == 1,
        );
        load_rows.push(report);
    }
    let rss = rss_of(daemon.pid())?;
    summary.add(
        format!(
            "daemon VmRSS under load, {} manifests: peak sampled every 50 ms; after",
            options.corpus
        ),
        format!("{peak:.0} MB; {rss}"),
        "<= 200 MB",
        Some(peak <= TARGET_RSS_MB),
    );
    drop(daemon);

    Ok(())
}

/// Starts the daemon once with info logs (JSON lines) and returns
/// "spawn-to-ready / model load (read, hash) / catalog load + index open"
/// from its `embedding model loaded` and `index ready` events.
fn startup_breakdown(
    oapd: &Path,
    data_dir: &Path,
    model_dir: &Path,
    extra: &str,
) -> Result<String> {
    let (daemon, elapsed) = start(oapd, model_dir, data_dir, Log::InfoJson, extra, &[])?;
    let log = daemon.log_text();
    drop(daemon);
    let model = log_event(&log, "embedding model loaded", "load_ms");
    let index = log_event(&log, "index ready", "elapsed_ms");
    let part = |event: &Option<Value>, key: &str| {
        event
            .as_ref()
            .and_then(|fields| fields[key].as_f64())
            .map_or("?".to_string(), |v| format!("{v:.0} ms"))
    };
    Ok(format!(
        "{:.0} ms / {} ({}, {}) / {}",
        ms(elapsed),
        part(&model, "load_ms"),
        part(&model, "read_ms"),
        part(&model, "hash_ms"),
        part(&index, "elapsed_ms"),
    ))
}

/// `oapd manifest lint` over every generated file (in chunks, to keep
/// command lines short); fails on any error, counts warnings.
fn lint_all(oapd: &Path, dir: &Path) -> Result<()> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("json"))
        .collect();
    files.sort();
    let mut warnings = 0;
    for chunk in files.chunks(1000) {
        let output = Command::new(oapd)
            .args(["manifest", "lint"])
            .args(chunk)
            .output()
            .context("cannot run oapd manifest lint")?;
        let text = String::from_utf8_lossy(&output.stdout);
        warnings += text.lines().filter(|l| l.contains(": warning: ")).count();
        if !output.status.success() {
            let errors: Vec<&str> = text
                .lines()
                .filter(|l| l.contains(": error: "))
                .take(10)
                .collect();
            bail!(
                "generated manifests fail `oapd manifest lint`:\n{}",
                errors.join("\n")
            );
        }
    }
    println!(
        "$ oapd manifest lint {}/*.json: {} files, 0 errors, {warnings} warnings",
        dir.display(),
        files.len()
    );
    Ok(())
}
