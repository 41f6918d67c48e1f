//! HTTP load generator for `POST /v1/discover` on a running daemon.
//!
//! ```text
//! oap-bench discover-load --addr 127.0.0.1:8300 \
//!     [--concurrency 8] [--requests 500] [--duration SECS] [--warmup 20] \
//!     [--tasks FILE.jsonl] [--top-k 5] [--label NAME]
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
//! Writes a [`DiscoverLoadReport`] (and its markdown row to stderr):
//! client-side latency p50/p90/p99/max, requests/s, error count, and the
//! daemon's own `meta.total_ms` / `embed_ms` / `search_ms` medians (time
//! spent inside the engine, so the rest is HTTP, JSON and scheduling).
//! Loopback addresses only: this is a benchmark, not a load-testing tool.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::StatusCode;
use oap_bench::report::DiscoverLoadReport;
use oap_testkit::stats::sorted;

use crate::client::{connect, pct, post_json, Sender};

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

/// `POST /v1/discover` load on a running daemon.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The daemon (loopback only).
    #[arg(long, default_value = "127.0.0.1:8300", value_parser = crate::client::loopback)]
    addr: SocketAddr,
    /// Workers, each with one keep-alive connection (1..=1024).
    #[arg(long, short = 'c', default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    concurrency: u16,
    /// Timed requests (500 when neither this nor --duration is given).
    #[arg(long, short = 'n')]
    requests: Option<usize>,
    /// Seconds to run at most.
    #[arg(long, value_parser = crate::client::positive_seconds)]
    duration: Option<Duration>,
    /// Untimed requests first, one at a time.
    #[arg(long, default_value_t = 20)]
    warmup: usize,
    /// JSONL file whose `query` fields are the tasks (default
    /// bench/discovery-tasks.jsonl).
    #[arg(long)]
    tasks: Option<PathBuf>,
    /// `top_k` of every request.
    #[arg(long, default_value_t = 5)]
    top_k: usize,
    /// Name of the run in the report.
    #[arg(long, default_value = "discover")]
    label: String,
}

/// The `query` of every line of a discovery-tasks JSONL file.
fn load_tasks(path: Option<&PathBuf>) -> anyhow::Result<Vec<String>> {
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
        Err(err) => anyhow::bail!("{}: {err}", path.display()),
    };
    let mut tasks = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| anyhow::anyhow!("{}:{}: {e}", path.display(), n + 1))?;
        match value.get("query").and_then(|q| q.as_str()) {
            Some(q) if !q.trim().is_empty() => tasks.push(q.to_string()),
            _ => anyhow::bail!("{}:{}: no \"query\" string", path.display(), n + 1),
        }
    }
    if tasks.is_empty() {
        anyhow::bail!("{}: no tasks", path.display());
    }
    Ok(tasks)
}

/// What one request measured.
struct Sample {
    latency: Duration,
    /// `meta.total_ms`, `meta.embed_ms`, `meta.search_ms` from the answer.
    server: Option<[f64; 3]>,
}

async fn discover(
    sender: &mut Sender,
    addr: SocketAddr,
    body: Bytes,
) -> Result<Option<[f64; 3]>, String> {
    let response = post_json(sender, addr, "/v1/discover", body).await?;
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

/// Runs the load; the report says how many requests failed.
pub fn run(mut args: Args) -> anyhow::Result<DiscoverLoadReport> {
    if args.requests.is_none() && args.duration.is_none() {
        args.requests = Some(crate::client::DEFAULT_REQUESTS);
    }
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(load(Arc::new(args)))
}

async fn load(args: Arc<Args>) -> anyhow::Result<DiscoverLoadReport> {
    let tasks = Arc::new(load_tasks(args.tasks.as_ref())?);

    // Warm-up: one connection, sequential, not counted. Also proves the
    // daemon answers before the timed run starts.
    if args.warmup > 0 {
        let mut sender = connect(args.addr).await.map_err(anyhow::Error::msg)?;
        for i in 0..args.warmup {
            let body = request_body(&tasks[i % tasks.len()], args.top_k);
            match tokio::time::timeout(REQUEST_TIMEOUT, discover(&mut sender, args.addr, body))
                .await
            {
                Ok(Ok(_)) => {}
                Ok(Err(err)) => anyhow::bail!("warm-up request failed: {err}"),
                Err(_) => anyhow::bail!("warm-up request timed out"),
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
    Ok(DiscoverLoadReport {
        label: args.label.clone(),
        concurrency: usize::from(args.concurrency),
        requests: samples.len() + errors.len(),
        errors: errors.len(),
        p50_ms: pct(&lat, 0.50),
        p90_ms: pct(&lat, 0.90),
        p99_ms: pct(&lat, 0.99),
        max_ms: lat.last().copied().unwrap_or(f64::NAN),
        requests_per_s: samples.len() as f64 / wall,
        server_total_p50_ms: part(0),
        server_embed_p50_ms: part(1),
        server_search_p50_ms: part(2),
        error_samples: crate::client::error_samples(&errors),
    })
}
