//! A board swapping in a large signed snapshot: what the pull costs in
//! time and memory, against what a crawl rebuild of the same size costs
//! (`crawl-load`, whose peak VmHWM is the product's budget for this).
//!
//! ```text
//! oap-bench snapshot-swap --oapd BIN [--snapshot DIR] [--count 10000] [--model DIR]
//! ```
//!
//! Without a snapshot in `--snapshot` (default
//! `target/bench/snapshot-<count>`), one is built first, with the daemon's
//! own CLI as a builder would: the generated corpus (`make-corpus`, as
//! `crawl-load` makes it), its first `count` network manifests (a snapshot
//! carries internet tools only), `oapd snapshot keygen`, then `oapd
//! snapshot build` (which indexes them: minutes). The directory is kept,
//! so later runs measure only.
//!
//! The measurement: the snapshot is served over loopback HTTPS (a test CA
//! made here; `Range` honoured) to the real `oapd serve` with the bundled
//! manifests, subscribed to it (`snapshots.allow_private: [127.0.0.0/8]`),
//! `MALLOC_ARENA_MAX=2` as in the systemd unit. The host answers 404 until
//! the "before" figures are taken (VmRSS, VmHWM, `/v1/discover` latency,
//! one client back to back); then it serves the snapshot, and the pull
//! time runs from the board's first request of the listing to `/health`
//! showing the version installed (download, verification, catalog
//! conversion, the rebuild with the snapshot's index as vector donor).
//! VmRSS is sampled every 50 ms meanwhile; VmHWM after it is the swap's
//! peak unless start-up's was higher (reported apart). No traffic leaves
//! loopback.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oap_testkit::http::exchange;
use oap_testkit::pki::{Pki, ServerConfig};
use oap_testkit::rss::ProcStatus;
use oap_testkit::server::{serve_tls_raw, write_response};
use oap_testkit::stats::{nearest_rank, sorted};
use oap_testkit::DaemonBuilder;
use serde::Serialize;
use tokio::io::AsyncWriteExt;

use crate::crawl_load::DISCOVERY_TASKS;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The version the built snapshot carries (any is newer than none).
const VERSION: u64 = 100;

/// Discover requests per latency phase.
const LATENCY_REQUESTS: usize = 200;

/// Swap a large signed snapshot into a running board.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The `oapd` binary (the board, and the builder when one is built).
    #[arg(long)]
    oapd: PathBuf,
    /// The published snapshot directory, with the key pair beside it in
    /// `DIR.keys/`; built there when it holds no snapshot yet.
    #[arg(long)]
    snapshot: Option<PathBuf>,
    /// Manifests in a snapshot built here.
    #[arg(long, default_value_t = 10_000)]
    count: usize,
    /// The embedding model directory.
    #[arg(long, default_value = "models/all-MiniLM-L6-v2")]
    model: PathBuf,
}

/// What the run measured (MB are 10^6 bytes).
#[derive(Debug, Serialize)]
pub struct SnapshotSwapReport {
    /// Tools the snapshot added to the board.
    pub snapshot_tools: u64,
    /// Every file of the snapshot, as listed.
    pub snapshot_mb: f64,
    /// Its files by name (MB).
    pub snapshot_files_mb: HashMap<String, f64>,
    /// Manifests in the board's index before and after.
    pub manifests_before: u64,
    pub manifests_after: u64,
    /// First request of the listing → `/health` shows it installed.
    pub pull_s: f64,
    /// The daemon's memory before the swap (settled after start).
    pub rss_before_mb: f64,
    pub hwm_before_mb: f64,
    /// VmRSS sampled every 50 ms during the swap: its peak, and its
    /// anonymous / file-backed parts then.
    pub rss_swap_peak_mb: f64,
    pub rss_swap_peak_anon_mb: f64,
    pub rss_swap_peak_file_mb: f64,
    /// After the swap.
    pub rss_after_mb: f64,
    pub hwm_after_mb: f64,
    /// `/v1/discover`, one client back to back, before and after (ms).
    pub discover_before_p50_ms: f64,
    pub discover_before_p99_ms: f64,
    pub discover_after_p50_ms: f64,
    pub discover_after_p99_ms: f64,
    /// The daemon's log lines of the download's end (files verified and
    /// converted, swapped in) and of the rebuild that took the snapshot in:
    /// their timestamps split the pull time.
    pub swapped_in_line: Option<String>,
    pub rebuild_line: Option<String>,
}

/// Runs it.
pub fn run(args: Args) -> anyhow::Result<SnapshotSwapReport> {
    measure(args).map_err(|err| anyhow::anyhow!("{err}"))
}

fn measure(args: Args) -> Result<SnapshotSwapReport> {
    let snapshot = args
        .snapshot
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("target/bench/snapshot-{}", args.count)));
    let keys = keys_dir(&snapshot);
    if !snapshot.join("snapshot.json").is_file() {
        build(&args, &snapshot, &keys)?;
    }
    let public_key = std::fs::read_to_string(keys.join("snapshot.pub"))?
        .lines()
        .last()
        .ok_or("empty public key file")?
        .to_owned();
    let files = read_snapshot(&snapshot)?;
    let listing: serde_json::Value = serde_json::from_slice(&files["snapshot.json"])?;
    let mut snapshot_files_mb = HashMap::new();
    let mut total = 0u64;
    for file in listing["files"].as_array().ok_or("listing without files")? {
        let bytes = file["bytes"].as_u64().unwrap_or(0);
        total += bytes;
        snapshot_files_mb.insert(
            file["path"].as_str().unwrap_or("?").to_owned(),
            bytes as f64 / 1e6,
        );
    }
    let version = listing["version"]
        .as_u64()
        .ok_or("listing without version")?;

    // The snapshot host, dark (404) until the "before" figures are in.
    let tmp = tempfile::tempdir()?;
    let pki = Pki::try_new(&["127.0.0.1"])?;
    let ca_file = tmp.path().join("ca.pem");
    std::fs::write(&ca_file, &pki.ca_pem)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let port = listener.local_addr()?.port();
    let host = Arc::new(Host {
        files,
        serving: AtomicBool::new(false),
        first_listing: Mutex::new(None),
    });
    runtime.spawn(serve(listener, pki.server.clone(), host.clone()));

    let yaml = format!(
        "snapshots:\n  url: \"https://127.0.0.1:{port}/snap/\"\n  public_keys: [{public_key:?}]\n  \
         interval: 1\n  fetch_timeout: 120\n  allow_private: [\"127.0.0.0/8\"]\n  ca_file: {ca_file:?}\n"
    );
    let daemon_port = StdListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let daemon = DaemonBuilder::new(&args.oapd)
        .model_dir(&args.model)
        .listen(&[&format!("127.0.0.1:{daemon_port}")])
        .yaml(&yaml)
        .env("RUST_LOG", "info")
        .env("MALLOC_ARENA_MAX", "2")
        // Latency of the encoder and the index, not of the query cache.
        .env("OAP_DISCOVERY_QUERY_CACHE", "0")
        .ready_within(Duration::from_secs(300))
        .try_start()?;
    let pid = daemon.child.id();
    let manifests_before = indexed(daemon.addr).ok_or("no /health index count")?;
    discover_loop(daemon.addr, 20); // warm-up
    let before = discover_loop(daemon.addr, LATENCY_REQUESTS);
    let rss_before = vm_kb(pid, "VmRSS");
    let hwm_before = vm_kb(pid, "VmHWM");
    eprintln!(
        "before: {manifests_before} manifests, VmRSS {:.0} MB, VmHWM {:.0} MB, discover p50 {:.1} ms",
        mb(rss_before),
        mb(hwm_before),
        percentile(&before, 50.0)
    );

    // The swap.
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(Mutex::new((0.0f64, 0.0f64, 0.0f64)));
    let sampler = {
        let (stop, peak) = (stop.clone(), peak.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let rss = vm_kb(pid, "VmRSS");
                if let Ok(mut p) = peak.lock() {
                    if rss > p.0 {
                        *p = (rss, vm_kb(pid, "RssAnon"), vm_kb(pid, "RssFile"));
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    host.serving.store(true, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(3600);
    let installed_at = loop {
        if installed_version(daemon.addr) == Some(version) {
            break Instant::now();
        }
        if Instant::now() > deadline {
            return Err(format!("not installed after an hour; log:\n{}", daemon.log_text()).into());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let first_listing = host
        .first_listing
        .lock()
        .map_err(|_| "poisoned")?
        .ok_or("the listing was never asked for")?;
    let pull_s = installed_at.duration_since(first_listing).as_secs_f64();
    let (rss_peak, anon_peak, file_peak) = *peak.lock().map_err(|_| "poisoned")?;
    let hwm_after = vm_kb(pid, "VmHWM");
    let health = health(daemon.addr).ok_or("no /health")?;
    let manifests_after = health["index"]["manifests"].as_u64().unwrap_or(0);
    let snapshot_tools = health["snapshot"]["tools"].as_u64().unwrap_or(0);
    let after = discover_loop(daemon.addr, LATENCY_REQUESTS);
    let rss_after = vm_kb(pid, "VmRSS");
    let log = daemon.log_text();
    let swapped_in_line = log
        .lines()
        .find(|l| l.contains("snapshot swapped in"))
        .map(str::to_owned);
    let rebuild_line = log
        .lines()
        .find(|l| l.contains("index rebuilt") && l.contains("snapshot installed"))
        .map(str::to_owned);
    drop(daemon);
    drop(runtime);

    let report = SnapshotSwapReport {
        snapshot_tools,
        snapshot_mb: total as f64 / 1e6,
        snapshot_files_mb,
        manifests_before,
        manifests_after,
        pull_s,
        rss_before_mb: mb(rss_before),
        hwm_before_mb: mb(hwm_before),
        rss_swap_peak_mb: mb(rss_peak),
        rss_swap_peak_anon_mb: mb(anon_peak),
        rss_swap_peak_file_mb: mb(file_peak),
        rss_after_mb: mb(rss_after),
        hwm_after_mb: mb(hwm_after),
        discover_before_p50_ms: percentile(&before, 50.0),
        discover_before_p99_ms: percentile(&before, 99.0),
        discover_after_p50_ms: percentile(&after, 50.0),
        discover_after_p99_ms: percentile(&after, 99.0),
        swapped_in_line,
        rebuild_line,
    };
    eprintln!(
        "snapshot {:.1} MB, {} tools: pulled and swapped in {:.1} s; VmHWM {:.0} → {:.0} MB \
         (swap peak VmRSS {:.0} MB: {:.0} anonymous / {:.0} files), VmRSS after {:.0} MB; \
         discover p50/p99 {:.1}/{:.1} → {:.1}/{:.1} ms",
        report.snapshot_mb,
        report.snapshot_tools,
        report.pull_s,
        report.hwm_before_mb,
        report.hwm_after_mb,
        report.rss_swap_peak_mb,
        report.rss_swap_peak_anon_mb,
        report.rss_swap_peak_file_mb,
        report.rss_after_mb,
        report.discover_before_p50_ms,
        report.discover_before_p99_ms,
        report.discover_after_p50_ms,
        report.discover_after_p99_ms,
    );
    Ok(report)
}

/// Where the key pair of the snapshot in `snapshot` lives.
fn keys_dir(snapshot: &Path) -> PathBuf {
    let mut name = snapshot.as_os_str().to_owned();
    name.push(".keys");
    PathBuf::from(name)
}

/// The builder's side: corpus, key pair, `oapd snapshot build`.
fn build(args: &Args, snapshot: &Path, keys: &Path) -> Result<()> {
    let work = {
        let mut name = snapshot.as_os_str().to_owned();
        name.push(".build");
        PathBuf::from(name)
    };
    let corpus = PathBuf::from("target/bench/crawl-corpus");
    // As crawl-load makes it: twice the count, about 40 % declare stdio.
    crate::make_corpus::run(crate::make_corpus::Args::generated(
        corpus.clone(),
        args.count * 2,
    ))
    .map_err(|err| err.to_string())?;
    let manifests = work.join("manifests");
    std::fs::create_dir_all(&manifests)?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(&corpus)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut taken = 0;
    for file in &files {
        if taken == args.count {
            break;
        }
        let body = std::fs::read(file)?;
        let manifest: serde_json::Value = serde_json::from_slice(&body)?;
        if manifest["invoke"]["method"] != "stdio" {
            std::fs::write(
                manifests.join(file.file_name().ok_or("no file name")?),
                body,
            )?;
            taken += 1;
        }
    }
    if taken < args.count {
        return Err(format!("{} holds {taken} network manifests", corpus.display()).into());
    }
    let config = work.join("builder.yaml");
    std::fs::write(
        &config,
        format!(
            "index:\n  data_dir: {:?}\nembedding:\n  model_dir: {:?}\nmanifests:\n  bundled: false\n  dirs: [{:?}]\n",
            work.join("data"),
            args.model,
            manifests
        ),
    )?;
    let oapd = |what: &[&std::ffi::OsStr]| -> Result<()> {
        eprintln!("oap-bench snapshot-swap: oapd snapshot {what:?}");
        let status = oap_testkit::daemon::command(&args.oapd)
            .arg("--config")
            .arg(&config)
            .arg("snapshot")
            .args(what)
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("oapd snapshot {what:?}: {status}").into())
        }
    };
    if !keys.join("snapshot.key").is_file() {
        oapd(&["keygen".as_ref(), "--out".as_ref(), keys.as_os_str()])?;
    }
    let version = VERSION.to_string();
    oapd(&[
        "build".as_ref(),
        "--key".as_ref(),
        keys.join("snapshot.key").as_os_str(),
        "--out".as_ref(),
        snapshot.as_os_str(),
        "--version".as_ref(),
        version.as_ref(),
    ])
}

/// Every file of the snapshot directory, by name.
fn read_snapshot(dir: &Path) -> Result<HashMap<String, Vec<u8>>> {
    let mut files = HashMap::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            files.insert(
                entry.file_name().to_string_lossy().into_owned(),
                std::fs::read(entry.path())?,
            );
        }
    }
    Ok(files)
}

/// The snapshot host's state.
struct Host {
    files: HashMap<String, Vec<u8>>,
    /// 404 for everything until set.
    serving: AtomicBool,
    /// When the board first asked for the listing while served.
    first_listing: Mutex<Option<Instant>>,
}

/// Serves `/snap/<file>` with `Range` (206) or whole (200).
async fn serve(listener: tokio::net::TcpListener, config: Arc<ServerConfig>, host: Arc<Host>) {
    serve_tls_raw(listener, config, move |mut tls, head| {
        let host = host.clone();
        async move {
            let name = head.path.strip_prefix("/snap/").unwrap_or_default();
            let file = host
                .serving
                .load(Ordering::SeqCst)
                .then(|| host.files.get(name))
                .flatten();
            let Some(bytes) = file else {
                write_response(&mut tls, "404 Not Found", &[], b"").await;
                let _ = tls.shutdown().await;
                return;
            };
            if name == "snapshot.json" {
                if let Ok(mut first) = host.first_listing.lock() {
                    first.get_or_insert_with(Instant::now);
                }
            }
            let range = head.header("range").and_then(|r| {
                let (a, b) = r.strip_prefix("bytes=")?.split_once('-')?;
                Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?))
            });
            match range {
                Some((start, end)) if start < bytes.len() => {
                    let end = end.min(bytes.len() - 1);
                    let content_range = format!("bytes {start}-{end}/{}", bytes.len());
                    write_response(
                        &mut tls,
                        "206 Partial Content",
                        &[("content-range", content_range)],
                        &bytes[start..=end],
                    )
                    .await;
                }
                Some(_) => write_response(&mut tls, "416 Range Not Satisfiable", &[], b"").await,
                None => write_response(&mut tls, "200 OK", &[], bytes).await,
            }
            let _ = tls.shutdown().await;
        }
    })
    .await
}

fn health(addr: SocketAddr) -> Option<serde_json::Value> {
    let (status, body) = exchange(addr, "GET", "/health", "", Duration::from_secs(60)).ok()?;
    (status == 200).then(|| serde_json::from_str(&body).ok())?
}

fn indexed(addr: SocketAddr) -> Option<u64> {
    health(addr)?["index"]["manifests"].as_u64()
}

fn installed_version(addr: SocketAddr) -> Option<u64> {
    health(addr)?["snapshot"]["version"].as_u64()
}

/// `count` discover latencies (ms), back to back.
fn discover_loop(addr: SocketAddr, count: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let body =
            serde_json::json!({"task": DISCOVERY_TASKS[i % DISCOVERY_TASKS.len()], "top_k": 5})
                .to_string();
        let started = Instant::now();
        match exchange(addr, "POST", "/v1/discover", &body, Duration::from_secs(60)) {
            Ok((200, _)) => out.push(started.elapsed().as_secs_f64() * 1000.0),
            Ok((status, body)) => eprintln!("discover answered {status}: {body}"),
            Err(err) => eprintln!("discover failed: {err}"),
        }
    }
    out
}

/// A `kB` field of `/proc/<pid>/status`; 0 once the process is gone.
fn vm_kb(pid: u32, field: &str) -> f64 {
    ProcStatus::of(pid)
        .ok()
        .and_then(|status| status.kb(field))
        .unwrap_or(0.0)
}

fn mb(kb: f64) -> f64 {
    kb * 1024.0 / 1e6
}

/// Nearest-rank percentile of unsorted samples; NaN for none.
fn percentile(samples: &[f64], p: f64) -> f64 {
    nearest_rank(&sorted(samples.to_vec()), p).unwrap_or(f64::NAN)
}
