//! The daemon as `oap-bench speed` runs it: started through the kit's
//! launcher with a clean environment and timed to ready, its memory, its
//! JSON log events, and `discover-load` runs against it with its memory
//! sampled meanwhile.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use oap_bench::report::DiscoverLoadReport;
use oap_bench::speed_report::{SpeedReport, TARGET_DISCOVER_P50_MS, TARGET_DISCOVER_P99_MS};
use oap_testkit::{Daemon, DaemonBuilder};
use serde_json::Value;

use crate::subprocess;

/// Variables that change how many threads candle and rayon use; removed from
/// every benchmark process except where a run sets one on purpose.
pub(super) const THREAD_VARS: &[&str] = &["RAYON_NUM_THREADS", "CANDLE_NUM_THREADS"];

/// `discovery.query_cache` from the environment.
pub(super) const QUERY_CACHE_VAR: &str = "OAP_DISCOVERY_QUERY_CACHE";

/// How a started daemon logs.
#[derive(Clone, Copy)]
pub(super) enum Log {
    /// Warnings only, as text.
    Quiet,
    /// Info and up as JSON lines, for the start-up breakdown.
    InfoJson,
}

/// `oapd serve` through the kit's launcher on a free loopback port, its
/// index in `data_dir` (kept across restarts), `extra` YAML appended. The
/// environment is clean (no `OAP_*`, `OAPD_CONFIG` or thread-count
/// variables) plus `env`. Returns the daemon and its spawn -> first `200`
/// from `/health`, polled every 2 ms. The daemon binds before it loads the
/// model and index, so a connection made early is simply answered once it
/// is ready.
pub(super) fn start(
    oapd: &Path,
    model: &Path,
    data_dir: &Path,
    log: Log,
    extra: &str,
    env: &[(&str, String)],
) -> Result<(Daemon, Duration)> {
    let port = oap_testkit::daemon::try_free_port()?;
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

/// The fields of the first JSON log line whose message is `message` and
/// that has `field`.
pub(super) fn log_event(log: &str, message: &str, field: &str) -> Option<Value> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|line| line["fields"].clone())
        .find(|fields| fields["message"] == message && fields.get(field).is_some())
}

/// Memory of a process from `/proc/<pid>/status`, in MB (10^6 bytes).
#[derive(Clone, Copy)]
pub(super) struct Rss {
    /// Resident now (`VmRSS` = `RssAnon` + `RssFile` + `RssShmem`).
    pub(super) rss: f64,
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

pub(super) fn rss_of(pid: u32) -> Result<Rss> {
    let status = oap_testkit::rss::ProcStatus::of(pid)
        .with_context(|| format!("read /proc/{pid}/status"))?;
    Ok(Rss {
        rss: status.mb_or_err("VmRSS")?,
        hwm: status.mb_or_err("VmHWM")?,
        anon: status.mb_or_err("RssAnon")?,
        file: status.mb_or_err("RssFile")?,
    })
}

/// Runs `discover-load` (a child process) against `daemon`, sampling the
/// daemon's VmRSS every 50 ms meanwhile; shows its table row (the header
/// first when `header`) and returns its report and the largest VmRSS seen
/// (MB).
pub(super) fn load(
    daemon: &Daemon,
    label: &str,
    concurrency: usize,
    requests: usize,
    header: bool,
) -> Result<(DiscoverLoadReport, f64)> {
    let mut command = subprocess::command("discover-load")?;
    command
        .arg("--addr")
        .arg(daemon.addr.to_string())
        .args(["--concurrency", &concurrency.to_string()])
        .args(["--requests", &requests.to_string()])
        .args(["--label", label]);
    let pid = daemon.pid();
    let mut peak: f64 = 0.0;
    let (report, ok): (DiscoverLoadReport, bool) =
        subprocess::report_and_status(&mut command, || {
            if let Ok(rss) = rss_of(pid) {
                peak = peak.max(rss.rss);
            }
        })?;
    if header {
        eprintln!("{}", DiscoverLoadReport::TABLE_HEADER);
    }
    eprintln!("{}", report.table_row());
    if !ok {
        eprintln!(
            "(warning: discover-load {label} reported {} errors)",
            report.errors
        );
    }
    Ok((report, peak))
}

/// A `/v1/discover` load run as a summary figure, judged against the
/// targets when `judged`.
pub(super) fn add_load(
    summary: &mut SpeedReport,
    name: String,
    report: &DiscoverLoadReport,
    judged: bool,
) {
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
