//! Section 4 of `oap-bench speed`: the daemon on a synthetic corpus of
//! `--corpus` manifests (`make-corpus`, linted), its index built once and
//! cached under `--cache` (`corpus-N/`), then restarted `--runs` times to
//! time spawn -> ready, with a start-up breakdown from its info logs, the
//! index's size, its memory and `/v1/discover` under load.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use oap_bench::speed_report::{SpeedReport, TARGET_READY_MS, TARGET_RSS_MB};
use oap_testkit::Daemon;
use serde_json::Value;

use super::daemon::{add_load, load, log_event, rss_of, start, Log};
use super::{median, ms, Args};
use crate::subprocess;

pub(super) fn corpus_bench(args: &Args, tmp: &Path, summary: &mut SpeedReport) -> Result<()> {
    let (oapd, model_dir) = (&args.oapd, &args.model_dir);
    let cache = args.cache.join(format!("corpus-{}", args.corpus));
    let manifests = cache.join("manifests");
    // Deterministic: regenerating gives the same bytes, so a cached index stays valid.
    subprocess::run(
        subprocess::command("make-corpus")?
            .arg("--out")
            .arg(&manifests)
            .args(["--count", &args.corpus.to_string()]),
    )?;
    lint_all(oapd, &manifests)?;

    let extra = format!("manifests:\n  bundled: false\n  dirs: [{manifests:?}]\n");
    let data_dir = cache.join("data");
    let index_config = tmp.join("corpus-index.yaml");
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
        .stdin(Stdio::null());
    eprintln!("$ oapd --config {} index", index_config.display());
    let output = command.output().context("cannot run oapd index")?;
    eprint!("{}", String::from_utf8_lossy(&output.stdout));
    let log = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        bail!("oapd index failed ({}):\n{log}", output.status);
    }
    eprintln!("(oapd index: {:.1} s)", t.elapsed().as_secs_f64());
    let ready = log_event(&log, "index ready", "reused_index")
        .context("oapd index logged no `index ready` event")?;
    if ready["reused_index"] == false {
        summary.notes.push(format!(
            "the {}-manifest index was (re)built in this run: {:.0} s ({} manifests, {} rows)",
            args.corpus,
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
    for run in 0..args.runs {
        let (daemon, elapsed) = start(oapd, model_dir, &data_dir, Log::Quiet, &extra, &[])?;
        let rss = rss_of(daemon.pid())?;
        eprintln!(
            "run {}: ready after {:.0} ms; VmRSS {rss}",
            run + 1,
            ms(elapsed)
        );
        ready.push(ms(elapsed));
        rss_after_ready.push(rss);
        if run + 1 == args.runs {
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
            args.corpus, args.runs
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
            args.corpus
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
        format!("daemon VmRSS right after ready, {} manifests", args.corpus),
        rss.to_string(),
        "<= 200 MB",
        Some(rss.rss <= TARGET_RSS_MB),
    );
    let label = format!("corpus-{}", args.corpus);
    let counts: &[(usize, usize)] = if args.quick {
        &[(1, 150), (8, 300)]
    } else {
        &[(1, 400), (8, 800)]
    };
    let mut peak: f64 = 0.0;
    for &(concurrency, requests) in counts {
        let (report, p) = load(&daemon, &label, concurrency, requests, false)?;
        peak = peak.max(p);
        add_load(
            summary,
            format!(
                "/v1/discover, {} manifests, concurrency {concurrency}: p50 / p99, req/s",
                args.corpus
            ),
            &report,
            concurrency == 1,
        );
        summary.load_runs.push(report);
    }
    let rss = rss_of(daemon.pid())?;
    summary.add(
        format!(
            "daemon VmRSS under load, {} manifests: peak sampled every 50 ms; after",
            args.corpus
        ),
        format!("{peak:.0} MB; {rss}"),
        "<= 200 MB",
        Some(peak <= TARGET_RSS_MB),
    );
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
    eprintln!(
        "$ oapd manifest lint {}/*.json: {} files, 0 errors, {warnings} warnings",
        dir.display(),
        files.len()
    );
    Ok(())
}
