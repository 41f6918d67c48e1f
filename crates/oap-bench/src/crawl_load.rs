//! Crawler benchmark driver (`cargo xtask bench-crawl` runs it): serves a
//! corpus of manifests over loopback HTTPS under one generated domain per
//! manifest (`m00000.crawl.bench` …, a wildcard certificate from a test CA
//! made here), starts the real `oapd serve` with the crawler seeded with
//! every domain (`crawler.hosts` maps them all to 127.0.0.1, allowed by
//! `crawler.allow_private: [127.0.0.0/8]`), and measures:
//!
//! - manifests/s: corpus size / time from the daemon being ready until
//!   `/health` counts every crawled manifest in the index (fetch, parse,
//!   envelope write and embedding included);
//! - the daemon's VmRSS, sampled every 50 ms while crawling (peak, with
//!   its anonymous / file-backed split at that moment, and the peak of the
//!   anonymous part), and at the end, plus VmHWM and the index file size;
//! - `/v1/discover` latency (one client, back to back) before the crawl
//!   (a first daemon start with the crawler off, same config otherwise),
//!   during the crawl, and after it (same daemon, full index): p50/p99.
//!
//! ```text
//! oap-bench crawl-load --oapd BIN [--corpus DIR] [--model DIR] [--quick] [--count N] [--rate R]
//! ```
//!
//! The first N manifests of DIR that do not declare `stdio` are served.
//! Progress goes to stderr; the result is a [`CrawlLoadReport`]. No
//! traffic leaves loopback.

use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oap_bench::report::{CrawlLoadReport, Phase};
use oap_testkit::http::exchange;
use oap_testkit::pki::{Pki, ServerConfig};
use oap_testkit::rss::ProcStatus;
use oap_testkit::server::{serve_tls_raw, write_response};
use oap_testkit::stats::{nearest_rank, sorted};
use oap_testkit::{Daemon, DaemonBuilder};
use tokio::io::AsyncWriteExt;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

const ZONE: &str = "crawl.bench";

/// Discovery tasks the load clients cycle through (the crawl and the
/// snapshot-swap benchmarks).
pub(crate) const DISCOVERY_TASKS: &[&str] = &[
    "what is the weather forecast in Paris tomorrow",
    "convert 100 US dollars to euros",
    "translate this sentence into German",
    "find flights from Berlin to Lisbon next week",
    "count the words in a text",
    "look up the stock price of a company",
    "send an email to my colleague",
    "turn off the living room lights",
];

/// Crawl a generated corpus from loopback HTTPS with the real daemon.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The `oapd` binary.
    #[arg(long)]
    oapd: PathBuf,
    /// Directory of manifests (`oap-bench make-corpus`); without it twice
    /// the count is generated into target/bench/crawl-corpus (about 40 % of
    /// a generated corpus declares stdio, which the crawler refuses from
    /// the network).
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// The embedding model directory.
    #[arg(long, default_value = "models/all-MiniLM-L6-v2")]
    model: PathBuf,
    /// Manifests to serve (the first that do not declare `stdio`);
    /// 10,000, or 1,000 with `--quick`.
    #[arg(long)]
    count: Option<usize>,
    /// The short run: 1,000 manifests unless `--count` says otherwise.
    #[arg(long)]
    quick: bool,
    /// Discover requests per second during every phase; 0 sends them back
    /// to back (closed loop, saturating).
    #[arg(long, default_value_t = 0.0, value_parser = requests_per_second)]
    rate: f64,
}

impl Args {
    fn count(&self) -> usize {
        self.count
            .unwrap_or(if self.quick { 1_000 } else { 10_000 })
    }
}

/// `--rate`: a finite number of requests per second, 0 or more.
fn requests_per_second(text: &str) -> std::result::Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if rate >= 0.0 && rate.is_finite() => Ok(rate),
        _ => Err(format!("expected requests per second ≥ 0, got {text}")),
    }
}

fn domain(i: usize) -> String {
    format!("m{i:05}.{ZONE}")
}

/// Serves manifest `i` for `m<i>.crawl.bench`; 404 otherwise.
async fn serve(
    listener: tokio::net::TcpListener,
    config: Arc<ServerConfig>,
    bodies: Arc<Vec<Vec<u8>>>,
    served: Arc<AtomicUsize>,
) {
    serve_tls_raw(listener, config, move |mut tls, head| {
        let (bodies, served) = (bodies.clone(), served.clone());
        async move {
            let index = head
                .host
                .strip_suffix(&format!(".{ZONE}"))
                .and_then(|name| name.strip_prefix('m')?.parse::<usize>().ok())
                .filter(|i| *i < bodies.len());
            match index {
                Some(i) => {
                    served.fetch_add(1, Ordering::Relaxed);
                    let headers = [("content-type", "application/json".to_string())];
                    write_response(&mut tls, "200 OK", &headers, &bodies[i]).await;
                }
                None => write_response(&mut tls, "404 Not Found", &[], b"").await,
            }
            let _ = tls.shutdown().await;
        }
    })
    .await
}

/// Plain HTTP/1.1 over a fresh loopback connection: status and body.
fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> std::io::Result<(u16, String)> {
    exchange(addr, method, path, body, Duration::from_secs(60))
}

/// `oapd serve` with `yaml` (beyond the listen address, state directory
/// and model the kit writes) in `dir`, on a port picked here (the daemon
/// logs at warn, so it does not report one), ready within 300 s.
fn start(oapd: &Path, model: &Path, dir: tempfile::TempDir, yaml: &str) -> Result<Daemon> {
    let port = StdListener::bind("127.0.0.1:0")?.local_addr()?.port();
    Ok(DaemonBuilder::new(oapd)
        .model_dir(model)
        .in_dir(dir)
        .listen(&[&format!("127.0.0.1:{port}")])
        .yaml(yaml)
        .env("RUST_LOG", "warn")
        // As systemd/oapd.service sets it: without a cap every thread that
        // embeds keeps a glibc arena of its own, and RSS measures those.
        .env("MALLOC_ARENA_MAX", "2")
        // The latency phases rotate through a few hundred tasks; answered
        // from the query cache they would skip the encoder the crawl's
        // rebuilds compete with, so the cache is off.
        .env("OAP_DISCOVERY_QUERY_CACHE", "0")
        .ready_within(Duration::from_secs(300))
        .try_start()?)
}

fn indexed(addr: SocketAddr) -> Option<u64> {
    let (status, body) = http(addr, "GET", "/health", "").ok()?;
    if status != 200 {
        return None;
    }
    let health: serde_json::Value = serde_json::from_str(&body).ok()?;
    health["index"]["manifests"].as_u64()
}

/// The largest VmRSS seen, what it was made of then, and the largest
/// anonymous part seen at any time (kB).
#[derive(Debug, Default, Clone, Copy)]
struct RssPeak {
    rss: f64,
    anon_at_peak: f64,
    file_at_peak: f64,
    anon: f64,
}

/// A `kB` field of `/proc/<pid>/status`; 0 once the process is gone.
fn vm_kb(pid: u32, field: &str) -> f64 {
    ProcStatus::of(pid)
        .ok()
        .and_then(|status| status.kb(field))
        .unwrap_or(0.0)
}

/// Discover latencies (ms) until `stop` (or `limit` requests): back to
/// back when `rate` is 0, else at `rate` requests per second on a fixed
/// schedule, each latency counted from its scheduled start (a late send
/// counts its wait, so a slow server cannot hide behind a slow client).
fn discover_loop(addr: SocketAddr, stop: &AtomicBool, limit: usize, rate: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut i = 0;
    let begin = Instant::now();
    while !stop.load(Ordering::Relaxed) && out.len() < limit {
        let body =
            serde_json::json!({"task": DISCOVERY_TASKS[i % DISCOVERY_TASKS.len()], "top_k": 5})
                .to_string();
        let started = if rate > 0.0 {
            let due = begin + Duration::from_secs_f64(i as f64 / rate);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            due
        } else {
            Instant::now()
        };
        i += 1;
        match http(addr, "POST", "/v1/discover", &body) {
            Ok((200, _)) => out.push(started.elapsed().as_secs_f64() * 1000.0),
            Ok((status, body)) => eprintln!("discover answered {status}: {body}"),
            Err(err) => eprintln!("discover failed: {err}"),
        }
    }
    out
}

/// Nearest-rank percentile of unsorted samples; NaN for none.
fn percentile(samples: &[f64], p: f64) -> f64 {
    nearest_rank(&sorted(samples.to_vec()), p).unwrap_or(f64::NAN)
}

fn corpus_bodies(dir: &Path, count: usize) -> Result<Vec<Vec<u8>>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    // A network source may never declare a local command: the crawler
    // refuses those, so they are not part of a crawlable corpus.
    let mut bodies = Vec::with_capacity(count);
    for file in &files {
        if bodies.len() == count {
            break;
        }
        let body = std::fs::read(file)?;
        let manifest: serde_json::Value = serde_json::from_slice(&body)?;
        if manifest["invoke"]["method"] != "stdio" {
            bodies.push(body);
        }
    }
    if bodies.len() < count {
        return Err(format!(
            "{} holds {} network manifests, {count} wanted",
            dir.display(),
            bodies.len()
        )
        .into());
    }
    Ok(bodies)
}

/// Runs the three phases and reports them.
pub fn run(options: Args) -> anyhow::Result<CrawlLoadReport> {
    measure(options).map_err(|err| anyhow::anyhow!("{err}"))
}

fn measure(options: Args) -> Result<CrawlLoadReport> {
    let count = options.count();
    let rate = options.rate;
    let corpus = match &options.corpus {
        Some(corpus) => corpus.clone(),
        None => {
            let out = PathBuf::from("target/bench/crawl-corpus");
            crate::make_corpus::run(crate::make_corpus::Args::generated(out.clone(), count * 2))
                .map_err(|err| err.to_string())?;
            out
        }
    };
    let bodies = Arc::new(corpus_bodies(&corpus, count)?);
    let tmp = tempfile::tempdir()?;
    let pki = Pki::try_new(&[format!("*.{ZONE}")])?;
    let (ca_pem, server_config) = (pki.ca_pem, pki.server);
    let ca_file = tmp.path().join("ca.pem");
    std::fs::write(&ca_file, ca_pem)?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let served = Arc::new(AtomicUsize::new(0));
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let web_port = listener.local_addr()?.port();
    runtime.spawn(serve(
        listener,
        server_config,
        bodies.clone(),
        served.clone(),
    ));

    let seeds_file = tmp.path().join("seeds.txt");
    let seeds: String = (0..count)
        .map(|i| format!("{}:{web_port}\n", domain(i)))
        .collect();
    std::fs::write(&seeds_file, seeds)?;
    let hosts: Vec<String> = (0..count)
        .map(|i| format!("\"{}=127.0.0.1\"", domain(i)))
        .collect();
    let config = |enabled: bool| {
        format!(
            "log:\n  level: warn\n\
             crawler:\n  enabled: {enabled}\n  seeds_file: {seeds_file:?}\n  ca_file: {ca_file:?}\n  \
             allow_private: [\"127.0.0.0/8\"]\n  max_domains: {}\n  round_timeout: 3600\n  \
             watch_interval: 0\n  hosts: [{}]\n",
            count.max(1),
            hosts.join(", ")
        )
    };
    // The daemon's state directory, kept from the first start to the second.
    let state = tempfile::tempdir()?;

    // 1. Idle: crawler off, bundled manifests only.
    let (idle_before, bundled, state) = {
        let mut daemon = start(&options.oapd, &options.model, state, &config(false))?;
        let bundled = indexed(daemon.addr).ok_or("no /health index count")?;
        discover_loop(daemon.addr, &AtomicBool::new(false), 20, 0.0); // warm-up
        let samples = discover_loop(daemon.addr, &AtomicBool::new(false), 400, rate);
        let state = std::mem::replace(&mut daemon.dir, tempfile::tempdir()?);
        (samples, bundled, state)
    };
    eprintln!(
        "idle (crawler off, {bundled} manifests): p50 {:.1} ms, p99 {:.1} ms over {} requests",
        percentile(&idle_before, 50.0),
        percentile(&idle_before, 99.0),
        idle_before.len()
    );

    // 2. The crawl, with discovery traffic and RSS sampling alongside.
    let target = bundled + count as u64;
    let started = Instant::now();
    let daemon = start(&options.oapd, &options.model, state, &config(true))?;
    let ready_ms = started.elapsed().as_secs_f64() * 1000.0;
    let crawl_started = Instant::now();
    let pid = daemon.child.id();
    let stop = Arc::new(AtomicBool::new(false));
    // Peak VmRSS with its split at that moment (heap and other anonymous
    // memory vs. mapped files: the model and the index), and the peak of
    // the anonymous part on its own.
    let peak_rss = Arc::new(Mutex::new(RssPeak::default()));
    let sampler = {
        let (stop, peak) = (stop.clone(), peak_rss.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let rss = vm_kb(pid, "VmRSS");
                let anon = vm_kb(pid, "RssAnon");
                let file = vm_kb(pid, "RssFile");
                if let Ok(mut p) = peak.lock() {
                    if rss > p.rss {
                        *p = RssPeak {
                            rss,
                            anon_at_peak: anon,
                            file_at_peak: file,
                            anon: p.anon,
                        };
                    }
                    p.anon = p.anon.max(anon);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let loader = {
        let (stop, addr) = (stop.clone(), daemon.addr);
        std::thread::spawn(move || discover_loop(addr, &stop, usize::MAX, rate))
    };
    let mut fetched_at = None;
    let deadline = Instant::now() + Duration::from_secs(3600);
    let mut last_report = Instant::now();
    let done = loop {
        let now_indexed = indexed(daemon.addr).unwrap_or(0);
        if fetched_at.is_none() && served.load(Ordering::Relaxed) >= count {
            fetched_at = Some(crawl_started.elapsed().as_secs_f64());
        }
        if now_indexed >= target {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "  {:.0} s: served {} manifests, index holds {now_indexed}",
                crawl_started.elapsed().as_secs_f64(),
                served.load(Ordering::Relaxed)
            );
            last_report = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let crawl_s = crawl_started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let during = loader.join().map_err(|_| "load thread panicked")?;
    let _ = sampler.join();
    if !done {
        return Err(format!(
            "crawl not finished after an hour; log:\n{}",
            daemon.log_text()
        )
        .into());
    }
    let end_rss = vm_kb(pid, "VmRSS");
    let hwm = vm_kb(pid, "VmHWM");
    let peak = peak_rss.lock().map(|p| *p).unwrap_or_default();
    let index_bytes = http(daemon.addr, "GET", "/health", "")
        .ok()
        .and_then(|(_, body)| serde_json::from_str::<serde_json::Value>(&body).ok())
        .and_then(|health| health["index"]["bytes"].as_u64());

    // 3. Idle again, same daemon, full index.
    let idle_after = discover_loop(daemon.addr, &AtomicBool::new(false), 400, rate);
    drop(daemon);

    let mb = |kb: f64| kb * 1024.0 / 1e6;
    let phase = |samples: &[f64]| Phase {
        requests: samples.len(),
        p50_ms: percentile(samples, 50.0),
        p99_ms: percentile(samples, 99.0),
    };
    Ok(CrawlLoadReport {
        manifests: count,
        bundled,
        ready_ms,
        fetched_s: fetched_at,
        crawl_s,
        manifests_per_s: count as f64 / crawl_s,
        rss_peak_mb: mb(peak.rss.max(end_rss)),
        rss_peak_anon_part_mb: mb(peak.anon_at_peak),
        rss_peak_file_part_mb: mb(peak.file_at_peak),
        anon_peak_mb: mb(peak.anon),
        index_mb: index_bytes.map(|b| b as f64 / 1e6),
        rss_end_mb: mb(end_rss),
        hwm_mb: mb(hwm),
        discover_rate_per_s: rate,
        idle_before: phase(&idle_before),
        during: phase(&during),
        idle_after: phase(&idle_after),
    })
}
