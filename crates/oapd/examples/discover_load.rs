//! HTTP load generator for `POST /v1/discover` on a running daemon.
//!
//! ```text
//! cargo run --release -p oapd --example discover_load -- --addr 127.0.0.1:8300 \
//!     [--concurrency 8] [--requests 500] [--duration SECS] [--warmup 20] \
//!     [--tasks FILE.jsonl] [--top-k 5] [--label NAME] [--header]
//! ```
//!
//! `--concurrency` workers each hold one keep-alive HTTP/1.1 connection and
//! send requests back to back; each request takes the next task of a
//! rotating list (the `query` field of every line of `--tasks`, by default
//! `bench/discovery-tasks.jsonl`). The run
//! stops after `--requests` timed requests or `--duration` seconds, whichever
//! comes first (with neither: 500 requests; always at most 600 s), so it ends
//! by itself. Warm-up requests (sent first, one at a time) are not counted.
//!
//! Prints one markdown table row (`--header` adds the header lines first):
//! client-side latency p50/p90/p99/max, requests/s, error count, and the
//! daemon's own `meta.total_ms` / `embed_ms` / `search_ms` medians (time
//! spent inside the engine, so the rest is HTTP, JSON and scheduling).
//! Loopback addresses only: this is a benchmark, not a load-testing tool.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::string_slice,
    clippy::disallowed_methods,
    reason = "a benchmark or demo program run by developers, not the daemon: it stops on the first surprise"
)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use oap_testkit::stats::sorted;
use tokio::net::TcpStream;

/// Hard upper bound on a run, whatever the arguments say.
const MAX_RUN: Duration = Duration::from_secs(600);
/// A request slower than this counts as an error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Used only when the task file is missing, so the tool still runs from a
/// lone checkout.
const FALLBACK_TASKS: &[&str] = &[
    "count the words in this paragraph",
    "find lines containing \"error\" in the log below",
    "replace every tab with a comma in this text",
    "what is 17 * 23 + 4",
    "pretty-print this JSON and extract the \"name\" field",
    "show today's date in ISO format",
    "get the current weather in Berlin",
    "convert a scanned invoice to searchable pdf",
    "translate this sentence into French",
    "book a table for two tomorrow at 8pm",
];

struct Args {
    addr: SocketAddr,
    concurrency: usize,
    requests: Option<usize>,
    duration: Option<Duration>,
    warmup: usize,
    tasks: Option<PathBuf>,
    top_k: usize,
    label: String,
    header: bool,
}

fn usage() -> ! {
    eprintln!(
        "usage: discover_load --addr 127.0.0.1:PORT [--concurrency N] [--requests N] \
         [--duration SECS] [--warmup N] [--tasks FILE.jsonl] [--top-k N] [--label NAME] [--header]"
    );
    std::process::exit(2);
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        addr: "127.0.0.1:8300".parse().expect("literal address"),
        concurrency: 1,
        requests: None,
        duration: None,
        warmup: 20,
        tasks: None,
        top_k: 5,
        label: "discover".into(),
        header: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--header" {
            args.header = true;
            continue;
        }
        if matches!(flag.as_str(), "-h" | "--help") {
            usage();
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value:?}: {e}");
        match flag.as_str() {
            "--addr" => args.addr = value.parse().map_err(|e| bad(&e))?,
            "--concurrency" | "-c" => args.concurrency = value.parse().map_err(|e| bad(&e))?,
            "--requests" | "-n" => args.requests = Some(value.parse().map_err(|e| bad(&e))?),
            "--duration" => {
                let secs: f64 = value.parse().map_err(|e| bad(&e))?;
                if !(secs > 0.0 && secs.is_finite()) {
                    return Err(format!("{flag}: must be a positive number of seconds"));
                }
                args.duration = Some(Duration::from_secs_f64(secs));
            }
            "--warmup" => args.warmup = value.parse().map_err(|e| bad(&e))?,
            "--tasks" => args.tasks = Some(PathBuf::from(value)),
            "--top-k" => args.top_k = value.parse().map_err(|e| bad(&e))?,
            "--label" => args.label = value,
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    if !args.addr.ip().is_loopback() {
        return Err(format!(
            "--addr {}: only loopback addresses are allowed",
            args.addr
        ));
    }
    if args.concurrency == 0 || args.concurrency > 1024 {
        return Err("--concurrency: 1 .. 1024".into());
    }
    if args.requests.is_none() && args.duration.is_none() {
        args.requests = Some(500);
    }
    Ok(args)
}

/// The `query` of every line of a discovery-tasks JSONL file.
fn load_tasks(path: Option<&PathBuf>) -> Result<Vec<String>, String> {
    let default =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/discovery-tasks.jsonl");
    let explicit = path.is_some();
    let path = path.cloned().unwrap_or(default);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) if !explicit => {
            eprintln!(
                "discover_load: {} not readable ({err}); using {} built-in tasks",
                path.display(),
                FALLBACK_TASKS.len()
            );
            return Ok(FALLBACK_TASKS.iter().map(|t| t.to_string()).collect());
        }
        Err(err) => return Err(format!("{}: {err}", path.display())),
    };
    let mut tasks = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("{}:{}: {e}", path.display(), n + 1))?;
        match value.get("query").and_then(|q| q.as_str()) {
            Some(q) if !q.trim().is_empty() => tasks.push(q.to_string()),
            _ => return Err(format!("{}:{}: no \"query\" string", path.display(), n + 1)),
        }
    }
    if tasks.is_empty() {
        return Err(format!("{}: no tasks", path.display()));
    }
    Ok(tasks)
}

/// What one request measured.
struct Sample {
    latency: Duration,
    /// `meta.total_ms`, `meta.embed_ms`, `meta.search_ms` from the answer.
    server: Option<[f64; 3]>,
}

type Sender = http1::SendRequest<Full<Bytes>>;

async fn connect(addr: SocketAddr) -> Result<Sender, String> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let _ = stream.set_nodelay(true);
    let (sender, connection) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

async fn discover(
    sender: &mut Sender,
    addr: SocketAddr,
    body: Bytes,
) -> Result<Option<[f64; 3]>, String> {
    sender
        .ready()
        .await
        .map_err(|e| format!("connection: {e}"))?;
    let request = Request::builder()
        .method(Method::POST)
        .uri("/v1/discover")
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .body(Full::new(body))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("request: {e}"))?;
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?
        .to_bytes();
    if status != StatusCode::OK {
        return Err(format!(
            "status {status}: {}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
        ));
    }
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| format!("answer is not JSON: {e}"))?;
    let meta = &value["meta"];
    let field = |k: &str| meta.get(k).and_then(|v| v.as_f64());
    Ok(
        match (field("total_ms"), field("embed_ms"), field("search_ms")) {
            (Some(t), Some(e), Some(s)) => Some([t, e, s]),
            _ => None,
        },
    )
}

fn request_body(task: &str, top_k: usize) -> Bytes {
    Bytes::from(serde_json::json!({"task": task, "top_k": top_k}).to_string())
}

/// One worker: a keep-alive connection, requests back to back until the
/// shared counter or the deadline says stop. A failed connection is
/// re-opened for the next request.
async fn worker(
    args: Arc<Args>,
    tasks: Arc<Vec<String>>,
    next: Arc<AtomicUsize>,
    deadline: Instant,
) -> (Vec<Sample>, Vec<String>) {
    let mut samples = Vec::new();
    let mut errors = Vec::new();
    let mut sender: Option<Sender> = None;
    let limit = args.requests.unwrap_or(usize::MAX);
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= limit || Instant::now() >= deadline {
            break;
        }
        let body = request_body(&tasks[i % tasks.len()], args.top_k);
        let started = Instant::now();
        let outcome = tokio::time::timeout(REQUEST_TIMEOUT, async {
            if sender.is_none() {
                sender = Some(connect(args.addr).await?);
            }
            let s = sender.as_mut().expect("connected above");
            discover(s, args.addr, body).await
        })
        .await;
        let latency = started.elapsed();
        match outcome {
            Ok(Ok(server)) => samples.push(Sample { latency, server }),
            Ok(Err(err)) => {
                sender = None;
                errors.push(err);
            }
            Err(_) => {
                sender = None;
                errors.push(format!("timeout after {REQUEST_TIMEOUT:?}"));
            }
        }
    }
    (samples, errors)
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    oap_testkit::stats::rounded_index(sorted, p).unwrap_or(f64::NAN)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = match parse_args() {
        Ok(args) => Arc::new(args),
        Err(err) => {
            eprintln!("discover_load: {err}");
            usage();
        }
    };
    let tasks = match load_tasks(args.tasks.as_ref()) {
        Ok(tasks) => Arc::new(tasks),
        Err(err) => {
            eprintln!("discover_load: {err}");
            std::process::exit(2);
        }
    };

    // Warm-up: one connection, sequential, not counted. Also proves the
    // daemon answers before the timed run starts.
    if args.warmup > 0 {
        let mut sender = match connect(args.addr).await {
            Ok(s) => s,
            Err(err) => {
                eprintln!("discover_load: {err}");
                std::process::exit(1);
            }
        };
        for i in 0..args.warmup {
            let body = request_body(&tasks[i % tasks.len()], args.top_k);
            match tokio::time::timeout(REQUEST_TIMEOUT, discover(&mut sender, args.addr, body))
                .await
            {
                Ok(Ok(_)) => {}
                Ok(Err(err)) => {
                    eprintln!("discover_load: warm-up request failed: {err}");
                    std::process::exit(1);
                }
                Err(_) => {
                    eprintln!("discover_load: warm-up request timed out");
                    std::process::exit(1);
                }
            }
        }
    }

    let run_limit = args.duration.unwrap_or(MAX_RUN).min(MAX_RUN);
    let started = Instant::now();
    let deadline = started + run_limit;
    let next = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..args.concurrency)
        .map(|_| tokio::spawn(worker(args.clone(), tasks.clone(), next.clone(), deadline)))
        .collect();
    let mut samples = Vec::new();
    let mut errors = Vec::new();
    for handle in handles {
        match handle.await {
            Ok((s, e)) => {
                samples.extend(s);
                errors.extend(e);
            }
            Err(err) => errors.push(format!("worker failed: {err}")),
        }
    }
    let wall = started.elapsed().as_secs_f64();

    let lat = sorted(
        samples
            .iter()
            .map(|s| s.latency.as_secs_f64() * 1e3)
            .collect(),
    );
    let server: Vec<[f64; 3]> = samples.iter().filter_map(|s| s.server).collect();
    let part = |k: usize| pct(&sorted(server.iter().map(|s| s[k]).collect()), 0.5);
    let done = samples.len() + errors.len();
    if args.header {
        println!(
            "| run | concurrency | requests | errors | p50 ms | p90 ms | p99 ms | max ms | req/s | \
             server total p50 ms | embed p50 ms | search p50 ms |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    }
    println!(
        "| {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} | {:.2} | {:.2} | {:.2} |",
        args.label,
        args.concurrency,
        done,
        errors.len(),
        pct(&lat, 0.50),
        pct(&lat, 0.90),
        pct(&lat, 0.99),
        lat.last().copied().unwrap_or(f64::NAN),
        samples.len() as f64 / wall,
        part(0),
        part(1),
        part(2),
    );
    if !errors.is_empty() {
        let mut shown: Vec<&String> = errors.iter().collect();
        shown.dedup();
        for err in shown.iter().take(5) {
            eprintln!("discover_load: error: {err}");
        }
        std::process::exit(1);
    }
}
