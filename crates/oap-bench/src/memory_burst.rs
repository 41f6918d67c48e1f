//! What a burst of large chat bodies costs a daemon in resident memory, and
//! whether it gives it back: `memory-burst` against a daemon the caller
//! started, `memory` (what `cargo xtask bench-memory` runs) against daemon
//! builds it starts itself, one after another, each in front of a fresh
//! fake Ollama with the built-in defaults (bundled manifests, the real
//! embedding model); its [`MemoryReport`] renders them side by side.
//!
//! Scripts the fake (one tools- and vision-capable model; every chat
//! answered with a short reply after `--delay-ms`, as a model takes its
//! time), then reads the daemon's VmRSS idle (after one small chat), its
//! peak (sampled every 10 ms) while `--clients` clients each POST one
//! `/api/chat` body of `--mb` MB (one user message with a base64 image of
//! that size) at once, and again `--settle` seconds after the last answer.
//! Counts the answers: 200, 503 with `Retry-After` (over
//! `server.max_inflight_body_bytes`), anything else, and broken
//! connections.
//!
//! ```text
//! oap-bench memory-burst --addr ADDR --pid PID --fake ADDR \
//!     [--clients 16] [--mb 30] [--delay-ms 2000] [--settle 30]
//! oap-bench memory --oapd BIN [--against BIN] --fake-ollama BIN --model-dir DIR \
//!     [burst options]
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use oap_bench::report::{MemoryBurstReport, MemoryColumn, MemoryReport};

use crate::procs;

const MODEL: &str = "bench";

/// A burst of large chat bodies against a running daemon (see the module doc).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The daemon (`oapd serve`) to send the chats to.
    #[arg(long)]
    addr: SocketAddr,
    /// The daemon's process id, whose VmRSS is read.
    #[arg(long)]
    pid: u32,
    /// The fake Ollama the daemon is in front of (scripted here).
    #[arg(long)]
    fake: SocketAddr,
    #[command(flatten)]
    burst: Burst,
}

/// The same burst against daemon builds started here, a column each.
#[derive(clap::Args, Debug)]
pub struct BuildsArgs {
    /// The daemon binary to measure (the last column, whose verdicts count).
    #[arg(long)]
    oapd: PathBuf,
    /// Another daemon binary (say, the one before a change), measured
    /// first in the same run with the same warm-up and burst.
    #[arg(long)]
    against: Option<PathBuf>,
    /// The `fake-ollama` binary.
    #[arg(long)]
    fake_ollama: PathBuf,
    /// The embedding model directory the daemons load.
    #[arg(long)]
    model_dir: PathBuf,
    #[command(flatten)]
    burst: Burst,
}

/// The burst itself, the same for every daemon measured.
#[derive(clap::Args, Debug)]
pub struct Burst {
    /// Concurrent clients.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    clients: u32,
    /// Body size per client in MB (10^6 bytes).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..))]
    mb: u32,
    /// The fake model's time to answer, in ms.
    #[arg(long, default_value_t = 2000)]
    delay_ms: u64,
    /// Seconds to wait after the burst before the last reading.
    #[arg(long, default_value_t = 30)]
    settle: u64,
}

/// A chat body of about `bytes` bytes: one user message carrying one
/// base64 image (deterministic pseudo-random content).
fn image_chat(model: &str, bytes: usize) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let head = format!(
        "{{\"model\":\"{model}\",\"stream\":false,\"messages\":[{{\"role\":\"user\",\
         \"content\":\"what is in this picture?\",\"images\":[\""
    );
    let tail = "\"]}]}";
    let image_len = bytes.saturating_sub(head.len() + tail.len()) / 4 * 4;
    let mut body = Vec::with_capacity(head.len() + image_len + tail.len());
    body.extend_from_slice(head.as_bytes());
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    for _ in 0..image_len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        body.push(ALPHABET[(state % 64) as usize]);
    }
    body.extend_from_slice(tail.as_bytes());
    body
}

/// What one client saw.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Status { code: u16, retry_after: bool },
    Broken(String),
}

impl Outcome {
    fn ok(&self) -> bool {
        matches!(self, Outcome::Status { code: 200, .. })
    }

    /// Turned away as the memory cap says: 503 with `Retry-After`.
    fn busy(&self) -> bool {
        matches!(
            self,
            Outcome::Status {
                code: 503,
                retry_after: true
            }
        )
    }
}

/// POSTs `body` to `path` on a fresh connection and reads the answer.
fn post(addr: SocketAddr, path: &str, body: &[u8]) -> Outcome {
    match oap_testkit::http::post_json_within(addr, path, body, Duration::from_secs(120)) {
        Ok(answer) => Outcome::Status {
            code: answer.status,
            retry_after: answer.header("retry-after").is_some(),
        },
        Err(err) => Outcome::Broken(err.to_string()),
    }
}

fn fake_script(delay_ms: u64) -> String {
    format!(
        "{{\"models\": [{{\"name\": \"{MODEL}\", \"capabilities\": [\"completion\", \"tools\", \"vision\"]}}],\n \
         \"check_host\": false,\n \"default_turn\": {{\"chunks\": [{{\"content\": \"a picture\"}}], \
         \"response_delay_ms\": {delay_ms}}}}}\n"
    )
}

/// VmRSS and VmHWM of `pid`, in MB (10^6 bytes).
fn rss_of(pid: u32) -> Result<(f64, f64)> {
    oap_testkit::rss::rss_hwm_mb(pid).with_context(|| format!("read /proc/{pid}/status"))
}

/// Whether `pid` is still running (not a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            // The state letter follows the parenthesised command name.
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_some_and(|state| state != "Z" && state != "X")
        })
        .unwrap_or(false)
}

/// Per build (`--against` first), a fresh fake Ollama and `oapd serve` in
/// front of it, then the burst; both processes end with their column.
pub fn run_builds(args: BuildsArgs) -> Result<MemoryReport> {
    let mut builds = Vec::new();
    if let Some(against) = &args.against {
        if !against.is_file() {
            bail!("--against {}: no such file", against.display());
        }
        builds.push(against.clone());
    }
    builds.push(args.oapd.clone());
    let mut columns = Vec::new();
    for oapd in builds {
        let figures = measure_build(&args, &oapd)?;
        columns.push(MemoryColumn {
            oapd: oapd.display().to_string(),
            figures,
        });
    }
    Ok(MemoryReport { columns })
}

/// One build's column: the fake, the daemon with the built-in defaults in
/// front of it, the burst.
fn measure_build(args: &BuildsArgs, oapd_bin: &Path) -> Result<MemoryBurstReport> {
    let tmp = tempfile::tempdir()?;
    let fake = procs::start_fake(&args.fake_ollama, tmp.path(), &procs::fake_script(MODEL))?;
    let oapd = procs::start_oapd(oapd_bin, fake.addr, &args.model_dir, "")?;
    let pid = oapd.child.id();
    eprintln!("oapd {} on {} (pid {pid})", oapd_bin.display(), oapd.addr);
    // The unexpected answers are listed by the report's rendering.
    burst(oapd.addr, pid, fake.addr, &args.burst)
}

/// [`burst`] against the daemon and fake the caller names.
pub fn run(args: Args) -> Result<MemoryBurstReport> {
    burst(args.addr, args.pid, args.fake, &args.burst)
}

/// Warms up, bursts, waits `--settle` and reads the figures.
fn burst(addr: SocketAddr, pid: u32, fake: SocketAddr, args: &Burst) -> Result<MemoryBurstReport> {
    let script = fake_script(args.delay_ms);
    let (status, _) = oap_testkit::http::exchange(
        fake,
        "POST",
        "/_fake/script",
        &script,
        Duration::from_secs(10),
    )?;
    if status != 200 {
        bail!("fake /_fake/script: {status}");
    }

    // Idle: after one small chat, so the pools and caches exist.
    let small = image_chat(MODEL, 4096);
    match post(addr, "/api/chat", &small) {
        Outcome::Status { code: 200, .. } => {}
        other => bail!("the warm-up chat failed: {other:?}"),
    }
    std::thread::sleep(Duration::from_secs(2));
    let (idle, _) = rss_of(pid)?;

    let body = Arc::new(image_chat(MODEL, args.mb as usize * 1_000_000));
    eprintln!(
        "burst: {} clients x {} bytes to /api/chat, the model answers after {} ms",
        args.clients,
        body.len(),
        args.delay_ms
    );
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut peak = 0.0f64;
            while !done.load(Ordering::Relaxed) {
                if let Ok((rss, _)) = rss_of(pid) {
                    peak = peak.max(rss);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            peak
        })
    };
    let started = Instant::now();
    let clients: Vec<_> = (0..args.clients)
        .map(|_| {
            let body = body.clone();
            std::thread::spawn(move || post(addr, "/api/chat", &body))
        })
        .collect();
    let outcomes: Vec<Outcome> = clients
        .into_iter()
        .map(|c| {
            c.join()
                .unwrap_or(Outcome::Broken("client panicked".into()))
        })
        .collect();
    let burst = started.elapsed();
    done.store(true, Ordering::Relaxed);
    let peak = sampler.join().unwrap_or(0.0);
    let (after_burst, hwm) = rss_of(pid)?;
    let _ = oap_testkit::http::exchange(
        fake,
        "DELETE",
        "/_fake/requests",
        "",
        Duration::from_secs(5),
    );
    std::thread::sleep(Duration::from_secs(args.settle));
    let (settled, _) = rss_of(pid)?;

    let ok = outcomes.iter().filter(|o| o.ok()).count();
    let busy = outcomes.iter().filter(|o| o.busy()).count();
    let broken = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Broken(_)))
        .count();
    Ok(MemoryBurstReport {
        idle_mb: idle,
        peak_mb: peak,
        hwm_mb: hwm,
        after_burst_mb: after_burst,
        settled_mb: settled,
        settle_s: args.settle,
        ok,
        busy,
        other: outcomes.len() - ok - busy - broken,
        broken,
        unexpected: outcomes
            .iter()
            .filter(|o| !o.ok() && !o.busy())
            .map(|o| format!("{o:?}"))
            .collect(),
        burst_s: burst.as_secs_f64(),
        alive: alive(pid),
    })
}
