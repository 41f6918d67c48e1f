//! `cargo xtask bench-memory`: what a burst of large chat bodies costs
//! oapd in resident memory, and whether it gives it back.
//!
//! Starts the fake Ollama (one tools-capable model; every chat answered
//! with a short reply after `--delay-ms`, as a model takes its time) and
//! `oapd serve` in front of it with the built-in defaults (bundled
//! manifests, the real embedding model). Measures oapd's VmRSS idle (after
//! one small chat), its peak (sampled every 10 ms) while `--clients`
//! clients each POST one `/api/chat` body of `--mb` MB (one user message
//! with a base64 image of that size) at once, and again `--settle` seconds
//! after the last answer. Counts the answers: 200, 503 with `Retry-After`
//! (over `server.max_inflight_body_bytes`), anything else, and broken
//! connections. `--oapd PATH` measures another build of the daemon;
//! `--against PATH` measures a second build (the figures before a change)
//! in the same run, first, with the same warm-up and burst, and prints both
//! columns side by side.
//!
//! Every process is killed when this task ends, also on error.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::bench_proxy::{
    cargo, loadavg, machine_description, now_utc, rss_of, run_shown, start_fake_with,
    start_oapd_with, TempDir,
};
use crate::repo_root;

const USAGE: &str = "usage: cargo xtask bench-memory [--clients N] [--mb M] [--delay-ms D] \
    [--settle S] [--oapd PATH] [--against PATH]\n  \
    --clients N  concurrent clients (default 16)\n  \
    --mb M       body size per client in MB (default 30)\n  \
    --delay-ms D the fake model's time to answer (default 2000)\n  \
    --settle S   seconds to wait after the burst before the last reading (default 30)\n  \
    --oapd PATH  the daemon binary to measure (default: target/release/oapd, built)\n  \
    --against PATH  another daemon binary (say, main's) measured first in the same run";

const TARGET_PEAK_MB: f64 = 400.0;
/// RSS after settling may be at most this much above idle.
const TARGET_SETTLED_RATIO: f64 = 1.2;
const MODEL: &str = "bench";

struct Options {
    clients: usize,
    mb: usize,
    delay_ms: u64,
    settle: u64,
    oapd: Option<PathBuf>,
    against: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut options = Options {
        clients: 16,
        mb: 30,
        delay_ms: 2000,
        settle: 30,
        oapd: None,
        against: None,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--clients" => options.clients = value("--clients")?.parse().context("--clients")?,
            "--mb" => options.mb = value("--mb")?.parse().context("--mb")?,
            "--delay-ms" => {
                options.delay_ms = value("--delay-ms")?.parse().context("--delay-ms")?
            }
            "--settle" => options.settle = value("--settle")?.parse().context("--settle")?,
            "--oapd" => options.oapd = Some(PathBuf::from(value("--oapd")?)),
            "--against" => options.against = Some(PathBuf::from(value("--against")?)),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    if options.clients == 0 || options.mb == 0 {
        bail!("--clients and --mb must be at least 1");
    }
    Ok(options)
}

/// A chat body of about `bytes` bytes: one user message carrying one
/// base64 image (deterministic pseudo-random content).
pub(crate) fn image_chat(model: &str, bytes: usize) -> Vec<u8> {
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
pub(crate) enum Outcome {
    Status { code: u16, retry_after: bool },
    Broken(String),
}

/// POSTs `body` to `path` on a fresh connection and reads the answer.
pub(crate) fn post(addr: SocketAddr, path: &str, body: &[u8]) -> Outcome {
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

/// What one daemon build did in one burst.
struct Figures {
    idle: f64,
    peak: f64,
    hwm: f64,
    after_burst: f64,
    settled: f64,
    ok: usize,
    busy: usize,
    other: usize,
    broken: usize,
    burst: Duration,
    alive: bool,
}

pub fn run(args: &[String]) -> Result<()> {
    let options = parse(args)?;
    let root = repo_root();
    println!("machine: {}", machine_description());
    println!("date: {}", now_utc());
    println!("load average at start (1/5/15 min): {}", loadavg());
    let oapd_bin = match &options.oapd {
        Some(path) => path.clone(),
        None => {
            run_shown(cargo().args(["build", "--release", "-p", "oapd", "--bin", "oapd"]))?;
            root.join("target/release/oapd")
        }
    };
    crate::bench_proxy::build_fake_ollama()?;
    let model_dir = root.join("models/all-MiniLM-L6-v2");
    if !model_dir.is_dir() {
        bail!(
            "{} missing: run `cargo xtask fetch-model` first",
            model_dir.display()
        );
    }
    let mut columns = Vec::new();
    if let Some(against) = &options.against {
        if !against.is_file() {
            bail!("--against {}: no such file", against.display());
        }
        columns.push((against.clone(), measure(&options, against, &model_dir)?));
    }
    columns.push((oapd_bin.clone(), measure(&options, &oapd_bin, &model_dir)?));
    report(&options, &columns);
    println!("\nload average at end: {}", loadavg());
    Ok(())
}

/// Starts the fake Ollama and `oapd_bin` in front of it, warms up, bursts,
/// waits `--settle` and reads the figures; both processes end with it.
fn measure(options: &Options, oapd_bin: &Path, model_dir: &Path) -> Result<Figures> {
    let root = repo_root();
    let tmp =
        TempDir(std::env::temp_dir().join(format!("oapd-bench-memory-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&tmp.0);
    std::fs::create_dir_all(&tmp.0)?;
    let fake = start_fake_with(
        &root.join("target/release/fake-ollama"),
        &tmp.0,
        &fake_script(options.delay_ms),
    )?;
    let oapd = start_oapd_with(oapd_bin, fake.addr, model_dir, "")?;
    let pid = oapd.child.id();
    println!("oapd {} on {} (pid {pid})", oapd_bin.display(), oapd.addr);

    // Idle: after one small chat, so the pools and caches exist.
    let small = image_chat(MODEL, 4096);
    match post(oapd.addr, "/api/chat", &small) {
        Outcome::Status { code: 200, .. } => {}
        other => bail!("the warm-up chat failed: {other:?}"),
    }
    std::thread::sleep(Duration::from_secs(2));
    let (idle, _) = rss_of(pid)?;

    let body = Arc::new(image_chat(MODEL, options.mb * 1_000_000));
    println!(
        "burst: {} clients x {} bytes to /api/chat, the model answers after {} ms",
        options.clients,
        body.len(),
        options.delay_ms
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
    let clients: Vec<_> = (0..options.clients)
        .map(|_| {
            let body = body.clone();
            let addr = oapd.addr;
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
    let _ = crate::net::http(
        fake.addr,
        "DELETE",
        "/_fake/requests",
        Duration::from_secs(5),
    );
    std::thread::sleep(Duration::from_secs(options.settle));
    let (settled, _) = rss_of(pid)?;
    let alive = oapd_alive(pid);

    let count = |f: &dyn Fn(&Outcome) -> bool| outcomes.iter().filter(|o| f(o)).count();
    let ok = count(&|o| matches!(o, Outcome::Status { code: 200, .. }));
    let busy = count(&|o| {
        matches!(
            o,
            Outcome::Status {
                code: 503,
                retry_after: true
            }
        )
    });
    let broken = count(&|o| matches!(o, Outcome::Broken(_)));
    let other = outcomes.len() - ok - busy - broken;
    for outcome in outcomes.iter().filter(|o| {
        !matches!(
            o,
            Outcome::Status { code: 200, .. }
                | Outcome::Status {
                    code: 503,
                    retry_after: true
                }
        )
    }) {
        println!("unexpected answer: {outcome:?}");
    }
    drop(oapd);
    drop(fake);
    Ok(Figures {
        idle,
        peak,
        hwm,
        after_burst,
        settled,
        ok,
        busy,
        other,
        broken,
        burst,
        alive,
    })
}

/// One table, a column per daemon build, the verdicts of the last (this
/// tree's) column.
fn report(options: &Options, columns: &[(PathBuf, Figures)]) {
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    let row = |name: &str, cell: &dyn Fn(&Figures) -> String, target: &str, verdict: &str| {
        let cells: Vec<String> = columns.iter().map(|(_, f)| cell(f)).collect();
        println!("| {name} | {} | {target} | {verdict} |", cells.join(" | "));
    };
    let Some((_, last)) = columns.last() else {
        return;
    };
    println!("\n== figures (MB = 10^6 bytes, VmRSS of oapd)");
    let names: Vec<String> = columns
        .iter()
        .map(|(bin, _)| format!("`{}`", bin.display()))
        .collect();
    println!("| figure | {} | target | verdict |", names.join(" | "));
    println!("|---|{}---|---|", "---|".repeat(columns.len()));
    row(
        "idle (after one small chat)",
        &|f| format!("{:.1} MB", f.idle),
        "-",
        "-",
    );
    row(
        "peak during the burst (sampled every 10 ms; VmHWM)",
        &|f| format!("{:.1} MB ({:.1})", f.peak, f.hwm),
        &format!("≤ {TARGET_PEAK_MB} MB"),
        verdict(last.peak <= TARGET_PEAK_MB),
    );
    row(
        "right after the last answer",
        &|f| format!("{:.1} MB", f.after_burst),
        "-",
        "-",
    );
    row(
        &format!("{} s later", options.settle),
        &|f| {
            format!(
                "{:.1} MB ({:+.0} % of idle)",
                f.settled,
                (f.settled / f.idle - 1.0) * 100.0
            )
        },
        "≤ idle + 20 %",
        verdict(last.settled <= last.idle * TARGET_SETTLED_RATIO),
    );
    row(
        "answers: 200 / 503 with Retry-After / other / broken connections",
        &|f| format!("{} / {} / {} / {}", f.ok, f.busy, f.other, f.broken),
        "no other, none broken",
        verdict(last.other == 0 && last.broken == 0),
    );
    row(
        "burst wall time",
        &|f| format!("{:.1} s", f.burst.as_secs_f64()),
        "-",
        "-",
    );
    row(
        "daemon alive afterwards",
        &|f| f.alive.to_string(),
        "yes",
        verdict(last.alive),
    );
}

fn oapd_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            // The state letter follows the parenthesised command name.
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_some_and(|state| state != "Z" && state != "X")
        })
        .unwrap_or(false)
}
