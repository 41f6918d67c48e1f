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
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oap_bench::report::{SoakReport, SoakRestart, SoakRoute};
use oap_testkit::http::exchange;
use oap_testkit::pki::Pki;

use oap_testkit::Daemon;
use serde_json::{json, Value};

mod faults;
mod load;
mod procs;
mod report;
mod sampling;
mod serve;

use faults::{churn_manifest, expect_count, probe, restart, signal};
use load::{chat_body, discover_body, pacer, stream_body};
use procs::{health, indexed, wait_indexed, Ollama, Setup};
use report::{drift, percentile, round1};
use sampling::{minute_line, recorder, sample};
use serve::{domain, serve_manifests};

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
    /// the crawled ones. Without it, `catalog + 3 × crawl` are generated
    /// into target/soak-corpus (about 40 % of a generated corpus declares
    /// stdio, which is not crawlable: three times the crawl leaves enough).
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// The embedding model directory.
    #[arg(long, default_value = "models/all-MiniLM-L6-v2")]
    model: PathBuf,
    /// Output directory: `soak.jsonl`, the daemon's and the fake's logs.
    #[arg(long, default_value = "target/soak")]
    out: PathBuf,
    /// Minutes of load (a positive number; fractions allowed).
    #[arg(long, default_value_t = 3.0, value_parser = positive_minutes)]
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

/// `--minutes`: a positive, finite number.
fn positive_minutes(text: &str) -> std::result::Result<f64, String> {
    match text.parse::<f64>() {
        Ok(minutes) if minutes > 0.0 && minutes.is_finite() => Ok(minutes),
        _ => Err(format!("expected a positive number, got {text}")),
    }
}

fn soak(o: Args) -> Result<SoakReport> {
    let corpus = match &o.corpus {
        Some(corpus) => corpus.clone(),
        None => {
            let out = PathBuf::from("target/soak-corpus");
            let count = o.catalog + 3 * o.crawl;
            crate::make_corpus::run(crate::make_corpus::Args::generated(out.clone(), count))
                .map_err(|err| err.to_string())?;
            out
        }
    };
    std::fs::create_dir_all(&o.out)?;
    let work = tempfile::Builder::new().prefix("run-").tempdir_in(&o.out)?;
    let root = work.path().to_path_buf();
    // The catalog: the first `catalog` corpus files; the crawl: the next
    // network manifests.
    let files = corpus_files(&corpus)?;
    if files.len() < o.catalog {
        return Err(format!(
            "{} holds {} manifests, {} wanted",
            corpus.display(),
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
            corpus.display(),
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
