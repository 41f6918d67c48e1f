//! Soak driver (`cargo xtask soak` runs it): the whole appliance under
//! LAN load with faults, recorded every minute.
//!
//! Setup: the real `oapd serve` with the bundled manifests, a catalog of
//! `--catalog` generated manifests in a watched directory, two probe tools
//! in another (`soakhang`: `sleep 3599`, past any deadline; `soakflood`:
//! `yes`, far over the output cap), and the crawler on: `--crawl` corpus
//! manifests served over loopback HTTPS under one generated domain each
//! (`c00000.soak.bench` …, a wildcard certificate from a test CA made
//! here; `crawler.hosts` maps them to 127.0.0.1, `crawler.allow_private`
//! lets the crawler reach them), plus `drip.soak.bench`, which sends its
//! manifest one byte every 500 ms. The fake Ollama (`fake-ollama`, a
//! child process) answers every chat with a call to `oap_wc` and, after
//! the tool's result, a short answer.
//!
//! Load, each on a fixed schedule (a request per tick, on its own thread,
//! so a slow answer never delays the next): `POST /v1/discover`
//! (`--discover-rate`, 10/s), `POST /api/chat` with a tool round
//! (`--chat-rate`, 1/s), `POST /v1/chat/completions` with `stream: true`
//! (`--stream-rate`, 1/s).
//!
//! Faults, on a cycle of min(minutes, 10) minutes repeated to the end:
//! Ollama slow (turns held back 4 s), a tool that hangs, a tool that
//! floods, a manifest added / changed / removed in a watched directory,
//! SIGHUP, Ollama killed and restarted, the daemon killed with SIGKILL and
//! restarted, the index file corrupted on disk with the daemon killed and
//! restarted; the drip-feeding manifest server is fetched whenever the
//! crawler retries it (each fetch counts).
//!
//! Recorded: every 10 s a `sample` line (the daemon's pid, RSS, open
//! files, threads, child processes, index size, files in the data
//! directory, texts still to embed); every minute and at the end a
//! `minute` line (those plus p50/p99 per route, errors by kind, faults
//! injected) in `OUT/soak.jsonl`; the summary is a [`SoakReport`].
//!
//! Faults repeat every 10 minutes (the whole run when shorter); in a run of
//! 30 minutes or more the restarts (SIGKILL, damaged index) come only in
//! its first half, so that one process lives through the second half.
//!
//! Pass criteria (the report's `failures` names each one missed): no
//! daemon exit the soak did not cause; after every restart, every manifest
//! indexed before it is back; a daemon restarted on a damaged index is
//! ready within 30 s (it serves lexically while its vectors are rebuilt);
//! no tool process alive past its deadline plus 10 s; no leak: within each
//! daemon process that ran 210 s after it warmed up (one cycle of faults
//! after its start, so every rebuild and the reload seen once, and its
//! index complete), RSS, open files and threads grow at most 5 % (open
//! files and threads: or 2) from the minute after it warmed up to its last
//! minute, and
//! across processes at the same age (the minute after each settled) open
//! files, tool processes, files in the data directory and the index size
//! of a later process exceed the first's by at most as much (said in
//! `notes` when no process lived long enough); every request answered
//! (success, or an error with a JSON body; refused or cut while the soak
//! had the daemon down is expected and counted apart).
//!
//! ```text
//! oap-bench soak --oapd BIN --fake-ollama BIN --corpus DIR --model DIR --out DIR \
//!     [--minutes 3] [--catalog 2000] [--crawl 200]
//! ```
//!
//! No traffic leaves loopback.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oap_bench::report::{SoakDrift, SoakLevels, SoakProcess, SoakReport, SoakRestart, SoakRoute};
use oap_testkit::http::{exchange, parse_response, request_bytes};
use oap_testkit::pki::{Pki, ServerConfig};
use oap_testkit::rss::ProcStatus;
use oap_testkit::server::{serve_tls_raw, write_response};
use oap_testkit::stats::{nearest_rank, sorted};
use oap_testkit::{Daemon, DaemonBuilder};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

const ZONE: &str = "soak.bench";
const DRIP: &str = "drip.soak.bench";
/// `tool_bridge.stdio_timeout` in the soak's config (seconds).
const TOOL_DEADLINE_S: f64 = 5.0;
/// How long past its deadline a tool process may take to be reaped.
const CHILD_SLACK_S: f64 = 10.0;
/// A request not answered within this is a hung one.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Requests of one route in flight at most; past it a tick is a failure.
const MAX_IN_FLIGHT: usize = 256;
/// After a restart the soak caused, failures within this count with it.
const RESTART_GRACE: Duration = Duration::from_secs(10);
/// A process has settled this long after its first sample (its start-up
/// peak: Tokio's blocking pool grown by the connections queued while it was
/// down, the first queries' allocations), once its index is complete.
const SETTLE_S: f64 = 60.0;
/// A process is judged against itself when it ran this long after it
/// settled: its first and last minute then lie 90 s or more apart.
const SELF_SPAN_S: f64 = 210.0;
/// The windows medians are taken over.
const WINDOW_S: f64 = 60.0;
/// Allowed growth, per process and across processes at the same age.
const DRIFT_LIMIT_PCT: f64 = 5.0;
/// The longest a daemon may be unready after a restart with a damaged
/// index file. It serves lexically as soon as its catalog is loaded and the
/// lexical index written (seconds for 2,202 manifests; a plain SIGKILL
/// restart took 0.4-3.1 s under load 7-17), so 30 s is ten times that
/// and a sixth of the unit's `TimeoutStartSec=180s`: beyond it, a voice
/// assistant's chats are refused for longer than a user will wait.
const UNREADY_LIMIT_S: f64 = 30.0;
/// The hang probe's argument: `sleep 3599`, found in /proc by it.
const HANG_SECONDS: &str = "3599";
/// The flood probe's argument: `yes soakflood`.
const FLOOD_WORD: &str = "soakflood";

const TASKS: &[&str] = &[
    "what is the weather forecast in Paris tomorrow",
    "convert 100 US dollars to euros",
    "translate this sentence into German",
    "count the words in a text",
    "look up the stock price of a company",
    "send an email to my colleague",
    "turn off the living room lights",
    "show today's date in ISO format",
];

/// The whole appliance under load with faults (see the module doc).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The `oapd` binary.
    #[arg(long)]
    oapd: PathBuf,
    /// The `fake-ollama` binary.
    #[arg(long)]
    fake_ollama: PathBuf,
    /// Directory of manifests (`oap-bench make-corpus`): the catalog, then
    /// the crawled ones.
    #[arg(long)]
    corpus: PathBuf,
    /// The embedding model directory.
    #[arg(long)]
    model: PathBuf,
    /// Output directory: `soak.jsonl`, the daemon's and the fake's logs.
    #[arg(long)]
    out: PathBuf,
    /// Minutes of load.
    #[arg(long, default_value_t = 3.0)]
    minutes: f64,
    /// Generated manifests in the watched catalog directory.
    #[arg(long, default_value_t = 2000)]
    catalog: usize,
    /// Generated manifests served to the crawler (one domain each).
    #[arg(long, default_value_t = 200)]
    crawl: usize,
    /// `POST /v1/discover` per second.
    #[arg(long, default_value_t = 10.0)]
    discover_rate: f64,
    /// Bridged `POST /api/chat` (a tool round) per second.
    #[arg(long, default_value_t = 1.0)]
    chat_rate: f64,
    /// Streamed `POST /v1/chat/completions` per second.
    #[arg(long, default_value_t = 1.0)]
    stream_rate: f64,
}

/// How a request ended.
enum Outcome {
    Ok,
    /// Answered with a clear error (kind).
    Answered(String),
    /// Not answered (kind, detail).
    Failed(String, String),
}

#[derive(Default)]
struct Window {
    latencies: BTreeMap<String, Vec<f64>>,
    errors: BTreeMap<String, u64>,
    faults: Vec<(f64, String)>,
}

#[derive(Default)]
struct Stats {
    window: Window,
    routes: BTreeMap<String, SoakRoute>,
    latencies: BTreeMap<String, Vec<f64>>,
    errors: BTreeMap<String, u64>,
    faults: BTreeMap<String, u64>,
    failure_samples: Vec<String>,
    failures: Vec<String>,
    restarts: Vec<SoakRestart>,
    crashes: u64,
    lingering: u64,
    lingering_seen: Vec<u32>,
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    t: f64,
    pid: u32,
    rss_mb: f64,
    fds: f64,
    threads: f64,
    children: f64,
    data_files: f64,
    index_mb: f64,
    /// Texts the index has no vector for yet (`/health`; NaN: no answer).
    pending: f64,
}

struct Shared {
    addr: SocketAddr,
    start: Instant,
    stop: AtomicBool,
    /// Bumped when the soak kills the daemon and again once it is back.
    epoch: AtomicU64,
    /// When the daemon was last back from a restart the soak caused.
    back_at: Mutex<Option<Instant>>,
    down: AtomicBool,
    pid: AtomicU32,
    daemon: Mutex<Option<Daemon>>,
    stats: Mutex<Stats>,
    jsonl: Mutex<File>,
    samples: Mutex<Vec<Sample>>,
    index_file: PathBuf,
    drips: Arc<AtomicUsize>,
    drips_counted: AtomicUsize,
}

impl Shared {
    fn t(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn stats(&self) -> std::sync::MutexGuard<'_, Stats> {
        self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn line(&self, value: &Value) {
        let mut file = self.jsonl.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(file, "{value}");
        let _ = file.flush();
    }

    fn fault(&self, kind: &str) {
        let t = self.t();
        eprintln!("  {t:6.0} s  fault: {kind}");
        let mut stats = self.stats();
        stats.window.faults.push((t, kind.to_string()));
        *stats.faults.entry(kind.to_string()).or_default() += 1;
    }

    fn fail(&self, what: String) {
        eprintln!("  {:6.0} s  FAIL: {what}", self.t());
        self.stats().failures.push(what);
    }

    fn record(&self, route: &str, epoch: u64, was_down: bool, outcome: Outcome, ms: f64) {
        // The connections clients queued while the daemon was down reach
        // it at once when it is back; those turned away in the first
        // seconds count with the restart.
        let just_back = self
            .back_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|at| at.elapsed() < RESTART_GRACE);
        let restarted = was_down
            || just_back
            || self.down.load(Ordering::SeqCst)
            || self.epoch.load(Ordering::SeqCst) != epoch;
        let mut stats = self.stats();
        let stats = &mut *stats;
        let entry = stats.routes.entry(route.to_string()).or_default();
        entry.requests += 1;
        let (kind, answered) = match outcome {
            Outcome::Ok => {
                entry.ok += 1;
                (None, true)
            }
            Outcome::Answered(kind) => {
                entry.answered_error += 1;
                (Some(kind), true)
            }
            Outcome::Failed(kind, _) if restarted => {
                entry.during_restart += 1;
                (Some(format!("during_restart:{kind}")), false)
            }
            Outcome::Failed(kind, detail) => {
                entry.failed += 1;
                if stats.failure_samples.len() < 20 {
                    stats
                        .failure_samples
                        .push(format!("{:.0} s {route}: {kind}: {detail}", self.t()));
                }
                (Some(format!("unanswered:{kind}")), false)
            }
        };
        if let Some(kind) = kind {
            let kind = format!("{route}:{kind}");
            *stats.window.errors.entry(kind.clone()).or_default() += 1;
            *stats.errors.entry(kind).or_default() += 1;
        }
        if answered {
            stats
                .window
                .latencies
                .entry(route.to_string())
                .or_default()
                .push(ms);
            stats
                .latencies
                .entry(route.to_string())
                .or_default()
                .push(ms);
        }
    }
}

fn domain(i: usize) -> String {
    format!("c{i:05}.{ZONE}")
}

/// Serves crawled manifest `i` for `c<i>.soak.bench`, the drip domain one
/// byte every 500 ms, 404 otherwise.
async fn serve_manifests(
    listener: tokio::net::TcpListener,
    config: Arc<ServerConfig>,
    bodies: Arc<Vec<Vec<u8>>>,
    drips: Arc<AtomicUsize>,
) {
    serve_tls_raw(listener, config, move |mut tls, head| {
        let (bodies, drips) = (bodies.clone(), drips.clone());
        async move {
            if head.host == DRIP {
                drips.fetch_add(1, Ordering::SeqCst);
                let body = oap_testkit::manifest_web::manifest(
                    "dripfeed",
                    "A manifest served one byte at a time.",
                );
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                );
                let _ = tls.write_all(head.as_bytes()).await;
                for byte in body.as_bytes() {
                    if tls.write_all(&[*byte]).await.is_err() || tls.flush().await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                return;
            }
            let index = head
                .host
                .strip_suffix(&format!(".{ZONE}"))
                .and_then(|name| name.strip_prefix('c')?.parse::<usize>().ok())
                .filter(|i| *i < bodies.len());
            match index {
                Some(i) => {
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

/// One request on a fresh connection, the response read to its end.
fn send(addr: SocketAddr, path: &str, body: &str) -> std::io::Result<oap_testkit::http::Response> {
    use std::io::Read;
    let raw = request_bytes(
        "POST",
        path,
        &addr.to_string(),
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    );
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    stream.write_all(&raw)?;
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf)?;
    if buf.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "closed without a response",
        ));
    }
    parse_response(&buf)
}

fn io_kind(err: &std::io::Error) -> &'static str {
    use std::io::ErrorKind as K;
    match err.kind() {
        K::ConnectionRefused => "refused",
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe => "reset",
        K::UnexpectedEof => "closed",
        K::WouldBlock | K::TimedOut => "timeout",
        K::InvalidData => "malformed",
        _ => "io",
    }
}

fn has_json_error(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body).is_ok_and(|v| v.get("error").is_some())
}

/// Judges a response of `route`.
fn judge(route: &str, result: std::io::Result<oap_testkit::http::Response>) -> Outcome {
    let response = match result {
        Ok(response) => response,
        Err(err) => return Outcome::Failed(io_kind(&err).to_string(), err.to_string()),
    };
    let text = String::from_utf8_lossy(&response.body);
    if response.status >= 400 {
        return if has_json_error(&response.body) {
            Outcome::Answered(format!("http_{}", response.status))
        } else {
            Outcome::Failed(
                format!("http_{}_without_json", response.status),
                text.chars().take(200).collect(),
            )
        };
    }
    let complete = match route {
        "openai_stream" => {
            if text.lines().any(|l| {
                l.strip_prefix("data: ")
                    .is_some_and(|d| d.contains("\"error\""))
            }) {
                return Outcome::Answered("stream_error".into());
            }
            text.contains("data: [DONE]")
        }
        "chat" | "probe" => match serde_json::from_slice::<Value>(&response.body) {
            Ok(v) if v.get("error").is_some() => return Outcome::Answered("error_body".into()),
            Ok(v) => v.get("message").is_some() && v["done"] == true,
            Err(_) => false,
        },
        _ => serde_json::from_slice::<Value>(&response.body).is_ok(),
    };
    if complete {
        Outcome::Ok
    } else {
        Outcome::Failed(
            "incomplete".into(),
            text.chars()
                .rev()
                .take(200)
                .collect::<String>()
                .chars()
                .rev()
                .collect(),
        )
    }
}

/// Sends one request and records its outcome.
fn request(shared: &Shared, route: &str, path: &str, body: &str) {
    let epoch = shared.epoch.load(Ordering::SeqCst);
    let was_down = shared.down.load(Ordering::SeqCst);
    let started = Instant::now();
    let outcome = judge(route, send(shared.addr, path, body));
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    shared.record(route, epoch, was_down, outcome, ms);
}

/// A load generator: `body(i)` to `path` at `rate` per second until stop.
fn pacer(
    shared: Arc<Shared>,
    route: &'static str,
    path: &'static str,
    rate: f64,
    body: fn(u64) -> String,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        if rate <= 0.0 {
            return;
        }
        let in_flight = Arc::new(AtomicUsize::new(0));
        let begin = Instant::now();
        let mut i: u64 = 0;
        let mut workers = Vec::new();
        while !shared.stop.load(Ordering::SeqCst) {
            let due = begin + Duration::from_secs_f64(i as f64 / rate);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            if in_flight.load(Ordering::SeqCst) >= MAX_IN_FLIGHT {
                let epoch = shared.epoch.load(Ordering::SeqCst);
                shared.record(
                    route,
                    epoch,
                    false,
                    Outcome::Failed("backlog".into(), format!("{MAX_IN_FLIGHT} in flight")),
                    0.0,
                );
            } else {
                in_flight.fetch_add(1, Ordering::SeqCst);
                let (shared, in_flight) = (shared.clone(), in_flight.clone());
                let text = body(i);
                workers.push(std::thread::spawn(move || {
                    request(&shared, route, path, &text);
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                }));
            }
            workers.retain(|w| !w.is_finished());
            i += 1;
        }
        for worker in workers {
            let _ = worker.join();
        }
    })
}

fn discover_body(i: u64) -> String {
    json!({"task": TASKS[i as usize % TASKS.len()], "top_k": 5}).to_string()
}

fn chat_body(i: u64) -> String {
    json!({"model": "soak", "stream": false, "messages": [
        {"role": "user", "content": format!("count the words in this text: one two three {i}")}]})
    .to_string()
}

fn stream_body(i: u64) -> String {
    json!({"model": "soak", "stream": true, "messages": [
        {"role": "user", "content": format!("count the words in this paragraph: alpha beta {i}")}]})
    .to_string()
}

/// The fake Ollama as a child process on a fixed port.
struct Ollama {
    bin: PathBuf,
    script: PathBuf,
    port: u16,
    log: PathBuf,
    child: Option<Child>,
}

impl Ollama {
    fn start(&mut self) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut last = String::new();
        for _ in 0..50 {
            let mut child = Command::new(&self.bin)
                .arg("--script")
                .arg(&self.script)
                .args(["--port", &self.port.to_string(), "--no-host-check"])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(log.try_clone()?)
                .spawn()?;
            let stdout = child.stdout.take().ok_or("no stdout")?;
            let mut line = String::new();
            BufReader::new(stdout).read_line(&mut line)?;
            if line.trim().parse::<SocketAddr>().is_ok() {
                self.child = Some(child);
                return Ok(());
            }
            let _ = child.kill();
            let _ = child.wait();
            last = format!("fake-ollama did not start on port {}", self.port);
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(last.into())
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Restarts the fake if it died on its own (not a daemon fault).
    fn ensure_running(&mut self) {
        let dead = match self.child.as_mut() {
            Some(child) => !matches!(child.try_wait(), Ok(None)),
            None => true,
        };
        if dead {
            self.kill();
            if let Err(err) = self.start() {
                eprintln!("fake-ollama restart failed: {err}");
            }
        }
    }
}

fn health(addr: SocketAddr) -> Option<Value> {
    let (status, body) = exchange(addr, "GET", "/health", "", Duration::from_secs(10)).ok()?;
    if status != 200 {
        return None;
    }
    serde_json::from_str(&body).ok()
}

fn indexed(addr: SocketAddr) -> Option<u64> {
    health(addr)?["index"]["manifests"].as_u64()
}

/// Polls `/health` until the index holds at least `want` manifests:
/// seconds taken (None: not within `limit`) and the most seen.
fn wait_indexed(addr: SocketAddr, want: u64, limit: Duration) -> (Option<f64>, u64) {
    let started = Instant::now();
    let mut most = 0;
    loop {
        if let Some(n) = indexed(addr) {
            most = most.max(n);
            if n >= want {
                return (Some(started.elapsed().as_secs_f64()), most);
            }
        }
        if started.elapsed() > limit {
            return (None, most);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

struct Setup {
    oapd: PathBuf,
    model: PathBuf,
    port: u16,
    yaml: String,
    log: PathBuf,
}

impl Setup {
    fn start(&self, dir: tempfile::TempDir) -> Result<Daemon> {
        let mut last = String::new();
        let mut dir = Some(dir);
        for _ in 0..20 {
            let Some(state) = dir.take() else { break };
            let spawned = DaemonBuilder::new(&self.oapd)
                .model_dir(&self.model)
                .in_dir(state)
                .listen(&[&format!("127.0.0.1:{}", self.port)])
                .yaml(&self.yaml)
                // `OAP_SOAK_DAEMON_LOG` (a filter such as
                // `warn,oap_discovery=info`) to see what a run's daemon did.
                .env(
                    "RUST_LOG",
                    &std::env::var("OAP_SOAK_DAEMON_LOG").unwrap_or_else(|_| "warn".into()),
                )
                .env("MALLOC_ARENA_MAX", "2")
                .ready_within(Duration::from_secs(1800))
                .try_spawn();
            let mut daemon = spawned?;
            match daemon.try_wait_ready(None) {
                Ok(()) => return Ok(daemon),
                Err(err) => {
                    last = err;
                    self.keep_log(&daemon);
                    // The port may still be held by the killed daemon's
                    // sockets: take the directory back and try again.
                    let _ = daemon.child.kill();
                    let _ = daemon.child.wait();
                    dir = Some(std::mem::replace(&mut daemon.dir, tempfile::tempdir()?));
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
        }
        Err(format!("oapd did not start: {last}").into())
    }

    /// Appends the daemon's log (rewritten at each start) to the soak's.
    fn keep_log(&self, daemon: &Daemon) {
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
        {
            let _ = writeln!(file, "---- oapd pid {}", daemon.pid());
            let _ = file.write_all(daemon.log_text().as_bytes());
        }
    }
}

/// Kills the daemon with SIGKILL (damaging its index file when
/// `corrupt`), starts it again on the same state and checks that every
/// manifest indexed before is back.
fn restart(shared: &Shared, setup: &Setup, corrupt: bool) -> Result<()> {
    let kind = if corrupt {
        "index_corrupt_restart"
    } else {
        "daemon_sigkill"
    };
    let before = indexed(shared.addr).unwrap_or(0);
    let at = shared.t();
    shared.fault(kind);
    shared.down.store(true, Ordering::SeqCst);
    shared.epoch.fetch_add(1, Ordering::SeqCst);
    let killed = Instant::now();
    let mut daemon = shared
        .daemon
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .ok_or("no daemon to kill")?;
    let _ = daemon.child.kill();
    let _ = daemon.child.wait();
    setup.keep_log(&daemon);
    if corrupt {
        damage(&shared.index_file)?;
    }
    let dir = std::mem::replace(&mut daemon.dir, tempfile::tempdir()?);
    drop(daemon);
    let daemon = setup.start(dir)?;
    let ready_s = killed.elapsed().as_secs_f64();
    shared.pid.store(daemon.pid(), Ordering::SeqCst);
    *shared.daemon.lock().unwrap_or_else(|e| e.into_inner()) = Some(daemon);
    *shared.back_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    shared.epoch.fetch_add(1, Ordering::SeqCst);
    shared.down.store(false, Ordering::SeqCst);
    let limit = if corrupt { 1800 } else { 600 };
    let (back, most) = wait_indexed(shared.addr, before, Duration::from_secs(limit));
    let recovered_s = back.map_or(f64::NAN, |_| killed.elapsed().as_secs_f64());
    eprintln!(
        "  {:6.0} s  {kind}: {before} manifests before, {most} after; ready after {ready_s:.1} s, \
         all back after {recovered_s:.1} s",
        shared.t()
    );
    if back.is_none() {
        shared.fail(format!(
            "{kind} at {at:.0} s lost manifests: {before} indexed before, at most {most} within {limit} s after"
        ));
    }
    if corrupt && ready_s > UNREADY_LIMIT_S {
        shared.fail(format!(
            "{kind} at {at:.0} s: the daemon was unready for {ready_s:.1} s, more than \
             {UNREADY_LIMIT_S} s (it must serve lexically while the vectors are rebuilt)"
        ));
    }
    shared.stats().restarts.push(SoakRestart {
        kind: kind.to_string(),
        at_s: at,
        before,
        after: most,
        ready_s,
        recovered_s,
        // Filled in at the end from the new process's samples.
        hybrid_s: f64::NAN,
        pid: shared.pid.load(Ordering::SeqCst),
    });
    Ok(())
}

/// Flips 64 bytes in the middle of the index file, written beside it and
/// renamed over it (as a disk error would leave it; never in place, as
/// the running daemon maps it).
fn damage(path: &Path) -> Result<()> {
    let mut bytes = std::fs::read(path)?;
    let mid = bytes.len() / 2;
    for b in bytes.iter_mut().skip(mid).take(64) {
        *b ^= 0xff;
    }
    let tmp = path.with_extension("soak-damaged");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

fn signal(pid: u32, name: &str) -> Result<()> {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()?;
    if !status.success() {
        return Err(format!("kill -{name} {pid} failed").into());
    }
    Ok(())
}

/// A bridged chat whose model calls `tool` with `args`; the fake's turn for
/// the model `model` is queued first.
fn probe(shared: &Shared, ollama: SocketAddr, model: &str, tool: &str, args: &str, task: &str) {
    let turn = json!({"model": model, "chunks": [
        {"tool_calls": [{"name": tool, "arguments": {"args": args}}]}]});
    let _ = exchange(
        ollama,
        "POST",
        "/_fake/turns",
        &turn.to_string(),
        Duration::from_secs(10),
    );
    let body = json!({"model": model, "stream": false,
        "messages": [{"role": "user", "content": task}]})
    .to_string();
    request(shared, "probe", "/api/chat", &body);
}

fn churn_manifest(description: &str) -> String {
    oap_testkit::manifest_web::manifest("soakchurn", description)
}

/// Waits until the index holds `want` manifests; a failure past 60 s.
fn expect_count(shared: &Shared, what: &str, want: u64) {
    let started = Instant::now();
    loop {
        let now = indexed(shared.addr);
        if now == Some(want) {
            return;
        }
        if started.elapsed() > Duration::from_secs(60) {
            shared.fail(format!(
                "{what}: the index holds {now:?} manifests 60 s later, {want} expected"
            ));
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The processes of the machine: pid -> (ppid, age in seconds, cmdline).
fn processes() -> BTreeMap<u32, (u32, f64, String)> {
    let uptime: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the command name, which may hold spaces.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ppid = fields.get(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        // starttime is field 22 of stat, the 20th after the name; clock ticks of 100 Hz.
        let start: f64 = fields.get(19).and_then(|s| s.parse().ok()).unwrap_or(0.0);
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        out.insert(
            pid,
            (ppid, uptime - start / 100.0, cmdline.trim().to_string()),
        );
    }
    out
}

/// Descendants of `root` and the probe tools anywhere (an orphan too).
fn watched_children(root: u32) -> Vec<(u32, f64, String)> {
    let procs = processes();
    let mut out = Vec::new();
    for (&pid, (_, age, cmdline)) in &procs {
        let mut up = pid;
        let mut descendant = false;
        for _ in 0..64 {
            match procs.get(&up) {
                Some((ppid, _, _)) if *ppid == root => {
                    descendant = true;
                    break;
                }
                Some((ppid, _, _)) if *ppid > 1 => up = *ppid,
                _ => break,
            }
        }
        let probe =
            cmdline == &format!("sleep {HANG_SECONDS}") || cmdline == &format!("yes {FLOOD_WORD}");
        if descendant || probe {
            out.push((pid, *age, cmdline.clone()));
        }
    }
    out
}

fn count_fds(pid: u32) -> f64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count() as f64)
        .unwrap_or(f64::NAN)
}

fn percentile(samples: &[f64], p: f64) -> f64 {
    nearest_rank(&sorted(samples.to_vec()), p).unwrap_or(f64::NAN)
}

/// Every 10 s a sample line; every minute a minute line; checks children
/// and daemon exits every second.
fn recorder(shared: Arc<Shared>, setup: Arc<Setup>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut next_sample = 0.0;
        let mut next_minute = 60.0;
        let mut minute = 0u64;
        while !shared.stop.load(Ordering::SeqCst) {
            watch_daemon(&shared, &setup);
            check_children(&shared);
            let t = shared.t();
            if t >= next_sample {
                sample(&shared);
                next_sample += 10.0;
            }
            if t >= next_minute {
                minute += 1;
                minute_line(&shared, minute);
                next_minute += 60.0;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    })
}

/// A daemon exit the soak did not cause: a crash; it is started again.
fn watch_daemon(shared: &Shared, setup: &Setup) {
    if shared.down.load(Ordering::SeqCst) {
        return;
    }
    let mut guard = shared.daemon.lock().unwrap_or_else(|e| e.into_inner());
    let Some(daemon) = guard.as_mut() else { return };
    let Ok(Some(status)) = daemon.child.try_wait() else {
        return;
    };
    shared.down.store(true, Ordering::SeqCst);
    shared.epoch.fetch_add(1, Ordering::SeqCst);
    setup.keep_log(daemon);
    shared.stats().crashes += 1;
    let Some(mut daemon) = guard.take() else {
        return;
    };
    drop(guard);
    shared.fail(format!(
        "the daemon exited on its own ({status}) at {:.0} s; its log is in {}",
        shared.t(),
        setup.log.display()
    ));
    let started = tempfile::tempdir()
        .map_err(|e| e.to_string())
        .and_then(|spare| {
            setup
                .start(std::mem::replace(&mut daemon.dir, spare))
                .map_err(|e| e.to_string())
        });
    match started {
        Ok(daemon) => {
            shared.pid.store(daemon.pid(), Ordering::SeqCst);
            *shared.daemon.lock().unwrap_or_else(|e| e.into_inner()) = Some(daemon);
        }
        Err(err) => shared.fail(format!("the daemon did not start again: {err}")),
    }
    *shared.back_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    shared.epoch.fetch_add(1, Ordering::SeqCst);
    shared.down.store(false, Ordering::SeqCst);
}

fn check_children(shared: &Shared) {
    let pid = shared.pid.load(Ordering::SeqCst);
    for (child, age, cmdline) in watched_children(pid) {
        if age > TOOL_DEADLINE_S + CHILD_SLACK_S {
            let mut stats = shared.stats();
            if !stats.lingering_seen.contains(&child) {
                stats.lingering_seen.push(child);
                stats.lingering += 1;
                drop(stats);
                shared.fail(format!(
                    "process {child} (`{cmdline}`) alive {age:.0} s, past the tool deadline \
                     of {TOOL_DEADLINE_S} s + {CHILD_SLACK_S} s"
                ));
            }
        }
    }
}

/// Files in the daemon's data directory (the index, its temporaries,
/// the crawl state, the experience cache): a leak across restarts
/// (temporaries a killed writer left, say) grows it.
fn data_files(shared: &Shared) -> f64 {
    shared
        .index_file
        .parent()
        .and_then(|dir| std::fs::read_dir(dir).ok())
        .map_or(f64::NAN, |entries| entries.count() as f64)
}

fn resources(shared: &Shared) -> (f64, f64, f64, f64, u64) {
    let pid = shared.pid.load(Ordering::SeqCst);
    let status = ProcStatus::of(pid).ok();
    let rss = status
        .as_ref()
        .and_then(|s| s.mb("VmRSS"))
        .unwrap_or(f64::NAN);
    let threads = status
        .as_ref()
        .and_then(|s| s.raw("Threads")?.trim().parse::<f64>().ok())
        .unwrap_or(f64::NAN);
    let children = watched_children(pid).len() as f64;
    let index = std::fs::metadata(&shared.index_file)
        .map(|m| m.len())
        .unwrap_or(0);
    (rss, count_fds(pid), threads, children, index)
}

/// The daemon's resident memory split into anonymous (heap) and mapped
/// files (binary, index), MB: a step in RSS is read as a leak only if it
/// is in the heap.
fn rss_split(shared: &Shared) -> (f64, f64) {
    let status = ProcStatus::of(shared.pid.load(Ordering::SeqCst)).ok();
    let of = |key| status.as_ref().and_then(|s| s.mb(key)).unwrap_or(f64::NAN);
    (of("RssAnon"), of("RssFile"))
}

fn sample(shared: &Shared) {
    if shared.down.load(Ordering::SeqCst) {
        return;
    }
    let (rss_mb, fds, threads, children, index_bytes) = resources(shared);
    let files = data_files(shared);
    let pending = health(shared.addr)
        .and_then(|h| h["index"]["pending_texts"].as_u64())
        .map_or(f64::NAN, |n| n as f64);
    let t = shared.t();
    let (anon_mb, file_mb) = rss_split(shared);
    shared.line(
        &json!({"type": "sample", "t_s": round1(t), "pid": shared.pid.load(Ordering::SeqCst),
        "rss_mb": round1(rss_mb), "rss_anon_mb": round1(anon_mb), "rss_file_mb": round1(file_mb),
        "fds": fds, "threads": threads, "children": children,
        "index_bytes": index_bytes, "data_files": files, "pending_texts": pending}),
    );
    shared
        .samples
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Sample {
            t,
            pid: shared.pid.load(Ordering::SeqCst),
            rss_mb,
            fds,
            threads,
            children,
            data_files: files,
            index_mb: index_bytes as f64 / 1e6,
            pending,
        });
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn minute_line(shared: &Shared, minute: u64) {
    let drips = shared.drips.load(Ordering::SeqCst);
    let counted = shared.drips_counted.swap(drips, Ordering::SeqCst);
    for _ in counted..drips {
        shared.fault("manifest_server_drip");
    }
    let window = std::mem::take(&mut shared.stats().window);
    let (rss_mb, fds, threads, children, index_bytes) = resources(shared);
    let routes: serde_json::Map<String, Value> = window
        .latencies
        .iter()
        .map(|(route, l)| {
            (
                route.clone(),
                json!({"n": l.len(), "p50_ms": round1(percentile(l, 50.0)),
                       "p99_ms": round1(percentile(l, 99.0))}),
            )
        })
        .collect();
    let faults: Vec<Value> = window
        .faults
        .iter()
        .map(|(t, kind)| json!({"t_s": round1(*t), "kind": kind}))
        .collect();
    let (anon_mb, file_mb) = rss_split(shared);
    let line = json!({"type": "minute", "minute": minute, "t_s": round1(shared.t()),
        "daemon_pid": shared.pid.load(Ordering::SeqCst),
        "rss_mb": round1(rss_mb), "rss_anon_mb": round1(anon_mb), "rss_file_mb": round1(file_mb),
        "fds": fds, "threads": threads, "children": children,
        "index_bytes": index_bytes, "manifests": indexed(shared.addr),
        "routes": routes, "errors": window.errors, "faults": faults});
    eprintln!("  minute {minute}: {line}");
    shared.line(&line);
}

/// Median of `values`' finite entries.
fn median(values: impl Iterator<Item = f64>) -> f64 {
    let values: Vec<f64> = values.filter(|v| v.is_finite()).collect();
    percentile(&values, 50.0)
}

/// Medians of one process's samples with `t` in `[from, to]`.
fn levels(samples: &[&Sample], from: f64, to: f64) -> SoakLevels {
    let window: Vec<&&Sample> = samples
        .iter()
        .filter(|s| s.t >= from && s.t <= to)
        .collect();
    let of = |get: fn(&Sample) -> f64| median(window.iter().map(|s| get(s)));
    SoakLevels {
        rss_mb: round1(of(|s| s.rss_mb)),
        fds: of(|s| s.fds),
        threads: of(|s| s.threads),
        children: of(|s| s.children),
        data_files: of(|s| s.data_files),
        index_mb: (of(|s| s.index_mb) * 1000.0).round() / 1000.0,
    }
}

/// What may grow by chance and is no leak: counts of things a fault in
/// flight holds for seconds (a flood or a hang holds pipes, a socket and
/// a child; a chat holds a connection to Ollama), in absolute units, on
/// top of [`DRIFT_LIMIT_PCT`].
struct Metric {
    name: &'static str,
    get: fn(&SoakLevels) -> f64,
    slack: f64,
}

/// Judged per process, from its settle point to its end.
const SELF_METRICS: &[Metric] = &[
    Metric {
        name: "RSS (MB)",
        get: |l| l.rss_mb,
        slack: 0.0,
    },
    Metric {
        name: "open files",
        get: |l| l.fds,
        slack: 2.0,
    },
    Metric {
        name: "threads",
        get: |l| l.threads,
        slack: 2.0,
    },
];

/// Judged across processes at the same age (the minute after each
/// settled): what a restart could leave behind for the next process.
/// Threads and RSS are not: each process's Tokio blocking pool keeps the
/// peak its own start-up reached, which differs from start to start.
const ACROSS_METRICS: &[Metric] = &[
    Metric {
        name: "open files",
        get: |l| l.fds,
        slack: 2.0,
    },
    Metric {
        name: "tool processes",
        get: |l| l.children,
        slack: 1.0,
    },
    Metric {
        name: "files in the data directory",
        get: |l| l.data_files,
        slack: 1.0,
    },
    Metric {
        name: "index size (MB)",
        get: |l| l.index_mb,
        slack: 0.0,
    },
];

/// Whether `to` is more than the allowed growth over `from`.
fn grew(from: f64, to: f64, slack: f64) -> bool {
    from.is_finite()
        && to.is_finite()
        && to - from > (from.abs() * DRIFT_LIMIT_PCT / 100.0).max(slack)
}

/// Leaks, from the samples of every daemon process: each process against
/// itself (the minute after it settled vs its last minute, when it ran
/// [`SELF_SPAN_S`] after settling) and each later process against the first
/// at the same age (the minute after each settled). Returns the report
/// and the failures; `notes` says what could not be judged.
/// `warm_up_s`: how long after its start a process is first judged against
/// itself (one cycle of the soak's faults, so that the first rebuilds and
/// reload, which take the allocator to its working size, fall before it).
fn drift(samples: &[Sample], warm_up_s: f64, notes: &mut Vec<String>) -> (SoakDrift, Vec<String>) {
    let mut pids: Vec<u32> = Vec::new();
    for sample in samples {
        if !pids.contains(&sample.pid) {
            pids.push(sample.pid);
        }
    }
    let mut processes = Vec::new();
    let mut failures = Vec::new();
    for pid in pids {
        let own: Vec<&Sample> = samples.iter().filter(|s| s.pid == pid).collect();
        let (Some(first), Some(last)) = (own.first(), own.last()) else {
            continue;
        };
        let (born, end) = (first.t, last.t);
        // Settled: a minute in, and no vectors pending from then on.
        let last_pending = own.iter().rposition(|s| s.pending > 0.0);
        let settled = own
            .iter()
            .enumerate()
            .find(|(i, s)| s.t >= born + SETTLE_S && last_pending.is_none_or(|p| *i > p))
            .map_or(f64::NAN, |(_, s)| s.t);
        let warm = own
            .iter()
            .map(|s| s.t)
            .find(|t| *t >= settled && *t >= born + warm_up_s)
            .unwrap_or(f64::NAN);
        let judged_self = warm.is_finite() && end - warm >= SELF_SPAN_S;
        let window = |from: f64| {
            if from.is_finite() {
                levels(&own, from, from + WINDOW_S)
            } else {
                SoakLevels::default()
            }
        };
        let (at_settle, at_warm) = (window(settled), window(warm));
        let at_end = levels(&own, end - WINDOW_S, end);
        if judged_self {
            for m in SELF_METRICS {
                let (a, b) = ((m.get)(&at_warm), (m.get)(&at_end));
                if grew(a, b, m.slack) {
                    failures.push(format!(
                        "process {pid} leaks: {} {a} -> {b} from the minute after it warmed up \
                         ({warm:.0} s) to its last ({end:.0} s), more than {DRIFT_LIMIT_PCT} % \
                         (or {} absolute)",
                        m.name, m.slack
                    ));
                }
            }
        }
        processes.push(SoakProcess {
            pid,
            born_s: round1(born),
            settled_s: round1(settled),
            end_s: round1(end),
            warm_s: round1(warm),
            judged_self,
            settled: at_settle,
            warm: at_warm,
            last: at_end,
        });
    }
    // At the same age: the minute after settling, for those that had it.
    let comparable: Vec<&SoakProcess> = processes
        .iter()
        .filter(|p| p.settled_s.is_finite() && p.end_s - p.settled_s >= WINDOW_S)
        .collect();
    if let Some((base, later)) = comparable.split_first() {
        for p in later {
            for m in ACROSS_METRICS {
                let (a, b) = ((m.get)(&base.settled), (m.get)(&p.settled));
                if grew(a, b, m.slack) {
                    failures.push(format!(
                        "a leak across restarts: {} {a} in process {} and {b} in process {} \
                         (each in the minute after it settled), more than {DRIFT_LIMIT_PCT} % \
                         (or {} absolute)",
                        m.name, base.pid, p.pid, m.slack
                    ));
                }
            }
        }
    }
    let selves = processes.iter().filter(|p| p.judged_self).count();
    let across = comparable.len().saturating_sub(1);
    if selves == 0 {
        notes.push(format!(
            "no daemon process ran {SELF_SPAN_S:.0} s after it warmed up ({warm_up_s:.0} s after \
             its start): growth within a process was not judged"
        ));
    }
    if across == 0 {
        notes.push("fewer than two settled daemon processes: no comparison across restarts".into());
    }
    (
        SoakDrift {
            basis: format!(
                "{selves} of {} processes against themselves (the minute after warming up, \
                 {warm_up_s:.0} s after start, vs their last), {across} later processes against \
                 the first at the same age",
                processes.len()
            ),
            judged: selves + across > 0,
            processes,
        },
        failures,
    )
}

/// The network (non-stdio) manifests of `dir`, sorted by file name, and
/// every manifest file for the catalog.
fn corpus_files(dir: &Path) -> Result<Vec<(PathBuf, bool)>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut out = Vec::with_capacity(files.len());
    for file in files {
        let manifest: Value = serde_json::from_slice(&std::fs::read(&file)?)?;
        out.push((file, manifest["invoke"]["method"] != "stdio"));
    }
    Ok(out)
}

/// Runs the soak; `passed` says whether every criterion held.
pub fn run(options: Args) -> anyhow::Result<SoakReport> {
    soak(options).map_err(|err| anyhow::anyhow!("{err}"))
}

fn soak(o: Args) -> Result<SoakReport> {
    std::fs::create_dir_all(&o.out)?;
    let work = tempfile::Builder::new().prefix("run-").tempdir_in(&o.out)?;
    let root = work.path().to_path_buf();
    // The catalog: the first `catalog` corpus files; the crawl: the next
    // network manifests.
    let files = corpus_files(&o.corpus)?;
    if files.len() < o.catalog {
        return Err(format!(
            "{} holds {} manifests, {} wanted",
            o.corpus.display(),
            files.len(),
            o.catalog
        )
        .into());
    }
    let catalog = root.join("catalog");
    std::fs::create_dir_all(&catalog)?;
    for (file, _) in &files[..o.catalog] {
        std::fs::copy(file, catalog.join(file.file_name().ok_or("no file name")?))?;
    }
    let crawled: Vec<Vec<u8>> = files[o.catalog..]
        .iter()
        .filter(|(_, network)| *network)
        .take(o.crawl)
        .map(|(file, _)| std::fs::read(file))
        .collect::<std::io::Result<_>>()?;
    if crawled.len() < o.crawl {
        return Err(format!(
            "{} holds {} network manifests past the catalog, {} wanted",
            o.corpus.display(),
            crawled.len(),
            o.crawl
        )
        .into());
    }
    let probes = root.join("probes");
    let churn = root.join("churn");
    std::fs::create_dir_all(&probes)?;
    std::fs::create_dir_all(&churn)?;
    let stdio = |name: &str, command: &str, description: &str| {
        json!({"oap": "1.0", "name": name, "description": description,
               "invoke": {"method": "stdio", "url": command}})
        .to_string()
    };
    std::fs::write(
        probes.join("soakhang.json"),
        stdio(
            "soakhang",
            "sleep",
            "Soak probe: waits (sleeps) for the number of seconds given, a tool that hangs.",
        ),
    )?;
    std::fs::write(
        probes.join("soakflood.json"),
        stdio(
            "soakflood",
            "yes",
            "Soak probe: repeats a word forever, a tool that floods its output.",
        ),
    )?;

    // The crawler's web.
    let pki = Pki::try_new(&[format!("*.{ZONE}")])?;
    let ca_file = root.join("ca.pem");
    std::fs::write(&ca_file, &pki.ca_pem)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let web_port = listener.local_addr()?.port();
    let seeds_file = root.join("seeds.txt");
    let mut seeds: String = (0..o.crawl)
        .map(|i| format!("{}:{web_port}\n", domain(i)))
        .collect();
    seeds.push_str(&format!("{DRIP}:{web_port}\n"));
    std::fs::write(&seeds_file, seeds)?;
    let mut hosts: Vec<String> = (0..o.crawl)
        .map(|i| format!("\"{}=127.0.0.1\"", domain(i)))
        .collect();
    hosts.push(format!("\"{DRIP}=127.0.0.1\""));

    // The fake Ollama.
    let script = root.join("fake-script.json");
    std::fs::write(
        &script,
        json!({"check_host": false,
               "default_turn": {"chunks": [{"tool_calls": [{"name": "oap_wc",
                   "arguments": {"args": "-w", "stdin": "one two three"}}]}]},
               "after_tool_turn": {"reply": "The tool has answered."}})
        .to_string(),
    )?;
    let mut ollama = Ollama {
        bin: o.fake_ollama.clone(),
        script,
        port: oap_testkit::daemon::try_free_port()?,
        log: o.out.join("fake-ollama.log"),
        child: None,
    };
    ollama.start()?;

    let yaml = format!(
        "log:\n  level: warn\n\
         manifests:\n  dirs: [{catalog:?}, {probes:?}, {churn:?}]\n\
         tool_bridge:\n  stdio_timeout: {deadline}\n\
         ollama:\n  base_url: \"http://{ollama_addr}\"\n  timeout: 30\n  chat_deadline: 60\n\
         crawler:\n  enabled: true\n  seeds_file: {seeds_file:?}\n  ca_file: {ca_file:?}\n  \
         allow_private: [\"127.0.0.0/8\"]\n  max_domains: {domains}\n  interval: 120\n  \
         retry_base: 20\n  fetch_timeout: 5\n  round_timeout: 600\n  check_txt: false\n  \
         hosts: [{hosts}]\n",
        deadline = TOOL_DEADLINE_S as u64,
        ollama_addr = ollama.addr(),
        domains = o.crawl + 10,
        hosts = hosts.join(", "),
    );
    let state = tempfile::Builder::new()
        .prefix("state-")
        .tempdir_in(&root)?;
    let setup = Arc::new(Setup {
        oapd: o.oapd.clone(),
        model: o.model.clone(),
        port: oap_testkit::daemon::try_free_port()?,
        yaml,
        log: o.out.join("oapd.log"),
    });
    let _ = std::fs::remove_file(&setup.log);
    let jsonl_path = o.out.join("soak.jsonl");
    let index_file = state.path().join("data").join("index.oapx");

    let setup_started = Instant::now();
    eprintln!(
        "soak: starting oapd ({} catalog manifests to index)",
        o.catalog
    );
    let daemon = setup.start(state)?;
    let addr = daemon.addr;
    let drips = Arc::new(AtomicUsize::new(0));
    runtime.spawn(serve_manifests(
        listener,
        pki.server,
        Arc::new(crawled),
        drips.clone(),
    ));
    let local = indexed(addr).ok_or("no /health index count")?;
    let want = local + o.crawl as u64;
    eprintln!(
        "soak: {local} manifests indexed locally; waiting for the crawl of {}",
        o.crawl
    );
    let (done, most) = wait_indexed(addr, want, Duration::from_secs(1800));
    if done.is_none() {
        return Err(format!("the crawl did not finish: {most} of {want} indexed").into());
    }
    // A first start embeds the catalog in the background (lexical until
    // then): the load starts once the index is complete, as on an
    // appliance that has run before.
    let deadline = Instant::now() + Duration::from_secs(3600);
    while health(addr).and_then(|h| h["index"]["pending_texts"].as_u64()) != Some(0) {
        if Instant::now() > deadline {
            return Err("the catalog's vectors were not embedded within an hour".into());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let setup_s = setup_started.elapsed().as_secs_f64();
    eprintln!(
        "soak: {want} manifests indexed after {setup_s:.0} s; load and faults for {} min",
        o.minutes
    );

    // From here on the clock counts.
    let shared = Arc::new(Shared {
        addr,
        start: Instant::now(),
        stop: AtomicBool::new(false),
        epoch: AtomicU64::new(0),
        back_at: Mutex::new(None),
        down: AtomicBool::new(false),
        pid: AtomicU32::new(daemon.pid()),
        daemon: Mutex::new(Some(daemon)),
        stats: Mutex::new(Stats::default()),
        jsonl: Mutex::new(File::create(&jsonl_path)?),
        samples: Mutex::new(Vec::new()),
        index_file,
        drips,
        drips_counted: AtomicUsize::new(0),
    });
    let recorder = recorder(shared.clone(), setup.clone());
    let loads = vec![
        pacer(
            shared.clone(),
            "discover",
            "/v1/discover",
            o.discover_rate,
            discover_body,
        ),
        pacer(shared.clone(), "chat", "/api/chat", o.chat_rate, chat_body),
        pacer(
            shared.clone(),
            "openai_stream",
            "/v1/chat/completions",
            o.stream_rate,
            stream_body,
        ),
    ];

    let total_s = o.minutes * 60.0;
    let cycle = total_s.min(600.0);
    // (fraction of the cycle, fault)
    // A damaged index is rebuilt from scratch (every manifest embedded
    // again, minutes under load): in a long run every third cycle from
    // the second, in a short one once. Early in the cycle, so that the
    // directory changes after it come while its vectors are still pending
    // (the served index lexical): a change must show then too.
    let corrupt_at = 0.05;
    let plan: &[(f64, &str)] = &[
        (0.10, "ollama_slow"),
        (0.15, "tool_hang"),
        (0.20, "tool_flood"),
        (0.25, "watch_add"),
        (0.29, "watch_change"),
        (0.33, "watch_remove"),
        (0.40, "sighup"),
        (0.47, "ollama_kill"),
        (0.55, "daemon_sigkill"),
        (corrupt_at, "index_corrupt_restart"),
    ];
    // In a run of half an hour or more, the daemon is restarted (SIGKILL,
    // damaged index) only in the first half: the second half keeps one
    // process under every other fault, so growth within a process is
    // judged over more than twenty minutes, not over the few minutes
    // between two kills, which cannot tell warm-up from a leak.
    let restarts_until = if total_s >= 1800.0 {
        total_s / 2.0
    } else {
        total_s
    };
    let mut schedule: Vec<(f64, &str)> = Vec::new();
    let mut base = 0.0;
    let mut n = 0;
    while base < total_s {
        for (at, kind) in plan {
            let t = base + at * cycle;
            let corrupt_cycle = cycle < 600.0 || n % 3 == 1;
            let restarts = matches!(*kind, "daemon_sigkill" | "index_corrupt_restart");
            if t < total_s
                && (*kind != "index_corrupt_restart" || corrupt_cycle)
                && (!restarts || t < restarts_until)
            {
                schedule.push((t, *kind));
            }
        }
        base += cycle;
        n += 1;
    }
    schedule.sort_by(|a, b| a.0.total_cmp(&b.0));
    let shared_ollama = ollama.addr();
    for (due, kind) in schedule {
        if let Some(wait) = Duration::from_secs_f64(due).checked_sub(shared.start.elapsed()) {
            std::thread::sleep(wait);
        }
        ollama.ensure_running();
        let result: Result<()> = (|| {
            match kind {
                "ollama_slow" => {
                    shared.fault(kind);
                    for _ in 0..8 {
                        let turn = json!({"model": "soak", "response_delay_ms": 4000,
                            "chunks": [{"tool_calls": [{"name": "oap_wc",
                                "arguments": {"args": "-w", "stdin": "slow"}}]}]});
                        exchange(
                            shared_ollama,
                            "POST",
                            "/_fake/turns",
                            &turn.to_string(),
                            Duration::from_secs(10),
                        )?;
                    }
                }
                "tool_hang" => {
                    shared.fault(kind);
                    probe(
                        &shared,
                        shared_ollama,
                        "soak-hang",
                        "oap_soakhang",
                        HANG_SECONDS,
                        "soak probe: wait (sleep) for a number of seconds, a tool that hangs",
                    );
                }
                "tool_flood" => {
                    shared.fault(kind);
                    probe(
                        &shared,
                        shared_ollama,
                        "soak-flood",
                        "oap_soakflood",
                        FLOOD_WORD,
                        "soak probe: repeat a word forever, a tool that floods its output",
                    );
                }
                "watch_add" | "watch_change" | "watch_remove" => {
                    let file = churn.join("soakchurn.json");
                    let count = indexed(shared.addr).unwrap_or(0);
                    shared.fault(kind);
                    match kind {
                        "watch_add" => {
                            let _ = std::fs::remove_file(&file);
                            let count = indexed(shared.addr).unwrap_or(count);
                            std::fs::write(
                                &file,
                                churn_manifest(
                                    "Soak churn: a manifest added to a watched directory.",
                                ),
                            )?;
                            expect_count(
                                &shared,
                                "a manifest added to a watched directory",
                                count + 1,
                            );
                        }
                        "watch_change" => {
                            std::fs::write(
                                &file,
                                churn_manifest(
                                    "Soak churn: the same manifest, its description changed.",
                                ),
                            )?;
                            std::thread::sleep(Duration::from_secs(3));
                            expect_count(
                                &shared,
                                "a manifest changed in a watched directory",
                                count,
                            );
                        }
                        _ => {
                            std::fs::remove_file(&file)?;
                            expect_count(
                                &shared,
                                "a manifest removed from a watched directory",
                                count.saturating_sub(1),
                            );
                        }
                    }
                }
                "sighup" => {
                    let count = indexed(shared.addr).unwrap_or(0);
                    shared.fault(kind);
                    signal(shared.pid.load(Ordering::SeqCst), "HUP")?;
                    std::thread::sleep(Duration::from_secs(2));
                    expect_count(&shared, "after SIGHUP", count);
                }
                "ollama_kill" => {
                    shared.fault(kind);
                    ollama.kill();
                    std::thread::sleep(Duration::from_secs(5));
                    ollama.start()?;
                }
                "daemon_sigkill" => restart(&shared, &setup, false)?,
                "index_corrupt_restart" => restart(&shared, &setup, true)?,
                _ => {}
            }
            Ok(())
        })();
        if let Err(err) = result {
            shared.fail(format!("fault {kind} could not be carried out: {err}"));
        }
        // The fake records every request; forget them now and then.
        let _ = exchange(
            shared_ollama,
            "DELETE",
            "/_fake/requests",
            "",
            Duration::from_secs(10),
        );
    }
    if let Some(wait) = Duration::from_secs_f64(total_s).checked_sub(shared.start.elapsed()) {
        // Clear the fake's records every minute until the end.
        let end = Instant::now() + wait;
        while Instant::now() < end {
            std::thread::sleep(
                Duration::from_secs(1).min(end.saturating_duration_since(Instant::now())),
            );
            ollama.ensure_running();
        }
    }
    let ran_s = shared.t();
    shared.stop.store(true, Ordering::SeqCst);
    for load in loads {
        let _ = load.join();
    }
    let _ = recorder.join();
    sample(&shared);
    minute_line(&shared, (ran_s / 60.0).ceil() as u64);

    // The end: a clean stop, then the report.
    let mut notes = Vec::new();
    let samples = shared
        .samples
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let (drift, drift_failures) = drift(&samples, cycle, &mut notes);
    if let Some(mut daemon) = shared
        .daemon
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
    {
        let _ = signal(daemon.pid(), "TERM");
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            match daemon.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                _ if Instant::now() > deadline => break None,
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        setup.keep_log(&daemon);
        match status {
            Some(status) if status.success() => {}
            other => shared.fail(format!(
                "the daemon did not stop cleanly on SIGTERM: {other:?}"
            )),
        }
    }
    ollama.kill();
    let mut stats = std::mem::take(&mut *shared.stats());
    stats.failures.extend(drift_failures);
    // When each restarted daemon was hybrid again: its first sample with
    // no vectors pending.
    for restart in &mut stats.restarts {
        restart.hybrid_s = samples
            .iter()
            .find(|s| s.pid == restart.pid && s.pending == 0.0)
            .map_or(f64::NAN, |s| round1(s.t - restart.at_s));
    }
    let unanswered: u64 = stats.routes.values().map(|r| r.failed).sum();
    if unanswered > 0 {
        stats.failures.push(format!(
            "{unanswered} requests not answered (hung, reset or an error without a JSON body); \
             examples in failure_samples"
        ));
    }
    for (route, latencies) in &stats.latencies {
        if let Some(entry) = stats.routes.get_mut(route) {
            entry.p50_ms = round1(percentile(latencies, 50.0));
            entry.p99_ms = round1(percentile(latencies, 99.0));
        }
    }
    let report = SoakReport {
        minutes: o.minutes,
        ran_s: round1(ran_s),
        passed: stats.failures.is_empty(),
        failures: stats.failures,
        notes,
        faults: stats.faults,
        routes: stats.routes,
        errors: stats.errors,
        failure_samples: stats.failure_samples,
        restarts: stats.restarts,
        crashes: stats.crashes,
        lingering_children: stats.lingering,
        drift,
        jsonl: jsonl_path.display().to_string(),
        manifests_at_start: want,
        setup_s: round1(setup_s),
    };
    drop(work);
    let summary = o.out.join("summary.json");
    std::fs::write(&summary, serde_json::to_string_pretty(&report)? + "\n")?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Samples every 10 s of one process living `from..to` seconds, with
    /// `at(t)` giving (rss MB, open files, threads, data files).
    fn life(pid: u32, from: f64, to: f64, at: impl Fn(f64) -> (f64, f64, f64, f64)) -> Vec<Sample> {
        let mut out = Vec::new();
        let mut t = from;
        while t < to {
            let (rss_mb, fds, threads, data_files) = at(t - from);
            out.push(Sample {
                t,
                pid,
                rss_mb,
                fds,
                threads,
                children: 0.0,
                data_files,
                index_mb: 7.5,
                pending: 0.0,
            });
            t += 10.0;
        }
        out
    }

    #[test]
    fn flat_processes_at_different_levels_pass() {
        // The one-hour run's shape: each process flat after its start-up,
        // at its own thread count (9, then 24), restarts in between.
        let mut samples = life(100, 0.0, 330.0, |_| (140.0, 15.0, 9.0, 3.0));
        samples.extend(life(200, 335.0, 900.0, |age| {
            (if age < 30.0 { 190.0 } else { 145.0 }, 17.0, 24.0, 3.0)
        }));
        let mut notes = Vec::new();
        let (drift, failures) = drift(&samples, SETTLE_S, &mut notes);
        assert!(failures.is_empty(), "{failures:?}");
        assert!(drift.judged);
        assert_eq!(drift.processes.len(), 2);
        assert!(drift.processes.iter().all(|p| p.judged_self));
    }

    #[test]
    fn a_process_whose_threads_climb_fails() {
        let samples = life(100, 0.0, 600.0, |age| (140.0, 15.0, 9.0 + age / 30.0, 3.0));
        let (_, failures) = drift(&samples, SETTLE_S, &mut Vec::new());
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(failures[0].contains("threads"), "{failures:?}");
    }

    #[test]
    fn a_process_whose_memory_climbs_fails() {
        let samples = life(100, 0.0, 600.0, |age| (140.0 + age / 20.0, 15.0, 9.0, 3.0));
        let (_, failures) = drift(&samples, SETTLE_S, &mut Vec::new());
        assert!(failures.iter().any(|f| f.contains("RSS")), "{failures:?}");
    }

    #[test]
    fn files_left_behind_by_each_restart_fail_across_processes() {
        // Each process is flat, but each starts with more files in its data
        // directory and more open: what a leak across restarts looks like.
        let mut samples = Vec::new();
        for n in 0..3 {
            let from = n as f64 * 200.0;
            samples.extend(life(100 + n, from, from + 190.0, move |_| {
                (140.0, 15.0 + 3.0 * n as f64, 9.0, 3.0 + 3.0 * n as f64)
            }));
        }
        let mut notes = Vec::new();
        let (drift, failures) = drift(&samples, SETTLE_S, &mut notes);
        assert!(
            failures.iter().any(|f| f.contains("data directory")),
            "{failures:?}"
        );
        assert!(
            failures.iter().any(|f| f.contains("open files")),
            "{failures:?}"
        );
        // Too short-lived to judge themselves, said in the notes.
        assert!(drift.processes.iter().all(|p| !p.judged_self));
        assert!(notes.iter().any(|n| n.contains("not judged")), "{notes:?}");
    }

    #[test]
    fn a_step_in_the_first_cycle_is_warm_up_and_growth_after_it_a_leak() {
        // The one-hour run's first process stepped from 140 to 151 MB at
        // its first round of rebuilds and reload; its last process took the
        // same step (at minute 9 of its life) and stayed flat for 25
        // minutes after. Judged from one cycle (600 s) after its start: no
        // leak.
        let step = |age: f64| if age < 540.0 { 140.0 } else { 151.0 };
        let samples = life(100, 1540.0, 3600.0, |age| (step(age), 15.0, 9.0, 3.0));
        let (report, failures) = drift(&samples, 600.0, &mut Vec::new());
        assert!(failures.is_empty(), "{failures:?}");
        assert!(report.processes[0].judged_self);
        assert!(report.processes[0].warm_s >= 2140.0);
        // The same step judged from a minute after start is growth.
        let (_, failures) = drift(&samples, SETTLE_S, &mut Vec::new());
        assert!(failures.iter().any(|f| f.contains("RSS")), "{failures:?}");
        // And a process that keeps growing after its first cycle fails.
        let climbing = life(100, 1540.0, 3600.0, |age| {
            (141.0 + age / 120.0, 15.0, 9.0, 3.0)
        });
        let (_, failures) = drift(&climbing, 600.0, &mut Vec::new());
        assert!(failures.iter().any(|f| f.contains("RSS")), "{failures:?}");
    }

    #[test]
    fn a_process_is_judged_from_when_its_vectors_are_complete() {
        // Embedding in the background for 5 minutes (more memory, more
        // threads), then flat: no leak.
        let mut samples = life(100, 0.0, 900.0, |age| {
            if age < 300.0 {
                (300.0, 20.0, 30.0, 4.0)
            } else {
                (150.0, 15.0, 10.0, 3.0)
            }
        });
        for s in samples.iter_mut().filter(|s| s.t < 300.0) {
            s.pending = 1000.0 - s.t;
        }
        let (drift, failures) = drift(&samples, SETTLE_S, &mut Vec::new());
        assert!(failures.is_empty(), "{failures:?}");
        assert!(drift.processes[0].settled_s >= 300.0);
        assert!(drift.processes[0].judged_self);
    }
}
