//! HTTP load generator for `POST /api/chat` on anything that speaks
//! Ollama's chat API: the fake Ollama itself, `oapd` in front of it, or a
//! peer proxy. Used by `cargo xtask bench-proxy` to measure the latency a
//! proxy adds.
//!
//! ```text
//! oap-bench proxy-load --addr 127.0.0.1:PORT \
//!     [--mode chat|stream] [--concurrency 1] [--requests 500] [--duration SECS] \
//!     [--warmup 20] [--model NAME] [--no-discover] [--label NAME] [--prompt TEXT]
//! ```
//!
//! `--concurrency` workers each hold one keep-alive HTTP/1.1 connection and
//! send requests back to back. `--mode chat` sends `"stream": false` and
//! times the whole answer; `--mode stream` sends `"stream": true` and times
//! both the first NDJSON line (time to first chunk) and the whole stream.
//! `--no-discover` adds `"oap_discover": false` to the body (oapd then
//! skips discovery: pure proxy). The run stops after `--requests` timed
//! requests or `--duration` seconds, whichever comes first (with neither:
//! 500 requests; always at most 600 s). Warm-up requests (one at a time)
//! are not counted.
//!
//! Writes a [`ProxyLoadReport`] (and its markdown row to stderr):
//! latency p50/p99/max of the whole answer, first line p50/p99, requests/s
//! and the error count. Loopback addresses only.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::StatusCode;

use crate::client::{connect, pct, post_json, Sender};
use oap_bench::report::ProxyLoadReport;

/// Hard upper bound on a run, whatever the arguments say.
const MAX_RUN: Duration = Duration::from_secs(600);
/// A request slower than this counts as an error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Rotating user messages (different texts, so discovery embeds each).
const PROMPTS: &[&str] = &[
    "count the words in this paragraph",
    "find lines containing \"error\" in the log below",
    "replace every tab with a comma in this text",
    "what is 17 * 23 + 4",
    "pretty-print this JSON and extract the \"name\" field",
    "show today's date in ISO format",
    "get the current weather in Berlin",
    "translate this sentence into French",
    "tell me a short joke about compilers",
    "summarise the plot of Hamlet in one line",
];

/// What a request asks for and what is timed.
#[derive(Clone, Copy, PartialEq, Debug, clap::ValueEnum)]
enum Mode {
    /// `"stream": false`, the whole answer timed.
    Chat,
    /// `"stream": true`, the first NDJSON line and the whole stream timed.
    Stream,
}

/// `POST /api/chat` load on anything that speaks Ollama's chat API.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The server (loopback only).
    #[arg(long, default_value = "127.0.0.1:8300", value_parser = crate::client::loopback)]
    addr: SocketAddr,
    /// Whole answers or streams.
    #[arg(long, value_enum, default_value_t = Mode::Chat)]
    mode: Mode,
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
    /// `model` of every request.
    #[arg(long, default_value = "bench:latest")]
    model: String,
    /// Add `"oap_discover": false` (oapd as a pure proxy).
    #[arg(long)]
    no_discover: bool,
    /// Name of the run in the report.
    #[arg(long, default_value = "chat")]
    label: String,
    /// The user message of every request (default: ten rotating tasks).
    #[arg(long)]
    prompt: Option<String>,
}

/// One run as another benchmark asks for it (`oap-bench proxy`): the
/// same options as on the command line, through the same checks.
pub struct Run {
    /// The server (loopback only).
    pub addr: SocketAddr,
    /// Streams (`--mode stream`) or whole answers.
    pub stream: bool,
    /// Workers.
    pub concurrency: usize,
    /// Timed requests at most.
    pub requests: usize,
    /// Time at most.
    pub duration: Duration,
    /// `model` of every request.
    pub model: String,
    /// `--no-discover`.
    pub no_discover: bool,
    /// `--label`.
    pub label: String,
}

/// The warm-up of a run another benchmark asks for.
const RUN_WARMUP: usize = 30;

impl Args {
    /// The arguments of `run`, checked as the command line's would be.
    pub fn for_run(run: Run) -> anyhow::Result<Args> {
        let addr = crate::client::loopback(&run.addr.to_string()).map_err(anyhow::Error::msg)?;
        let concurrency = u16::try_from(run.concurrency)
            .ok()
            .filter(|c| (1..=1024).contains(c))
            .ok_or_else(|| anyhow::anyhow!("concurrency {}: 1..=1024", run.concurrency))?;
        Ok(Args {
            addr,
            mode: if run.stream { Mode::Stream } else { Mode::Chat },
            concurrency,
            requests: Some(run.requests),
            duration: Some(run.duration),
            warmup: RUN_WARMUP,
            model: run.model,
            no_discover: run.no_discover,
            label: run.label,
            prompt: None,
        })
    }

    /// The user message of request `i`.
    fn prompt(&self, i: usize) -> &str {
        self.prompt.as_deref().unwrap_or(PROMPTS[i % PROMPTS.len()])
    }
}

/// What one request measured: the first NDJSON line and the whole answer.
struct Sample {
    first_line: Duration,
    total: Duration,
}

fn request_body(args: &Args, prompt: &str) -> Bytes {
    let mut body = serde_json::json!({
        "model": args.model,
        "messages": [{"role": "user", "content": prompt}],
        "stream": args.mode == Mode::Stream,
    });
    if args.no_discover {
        body["oap_discover"] = serde_json::Value::Bool(false);
    }
    Bytes::from(body.to_string())
}

/// One request; `started` is when the caller started timing (connecting,
/// if needed, is included).
async fn chat(
    sender: &mut Sender,
    addr: SocketAddr,
    body: Bytes,
    started: Instant,
) -> Result<Sample, String> {
    let response = post_json(sender, addr, "/api/chat", body).await?;
    let status = response.status();
    let mut body = response.into_body();
    let mut buf: Vec<u8> = Vec::new();
    let mut first_line = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("body: {e}"))?;
        if let Ok(data) = frame.into_data() {
            buf.extend_from_slice(&data);
            if first_line.is_none() && buf.contains(&b'\n') {
                first_line = Some(started.elapsed());
            }
        }
    }
    let total = started.elapsed();
    if status != StatusCode::OK {
        return Err(format!(
            "status {status}: {}",
            String::from_utf8_lossy(&buf[..buf.len().min(200)])
        ));
    }
    // The last non-empty line must be a JSON object with `done: true`
    // (the whole body, for `stream: false`) and no `error`.
    let text = String::from_utf8_lossy(&buf);
    let last = text
        .lines()
        .rfind(|l| !l.trim().is_empty())
        .ok_or("empty answer")?;
    let value: serde_json::Value =
        serde_json::from_str(last).map_err(|e| format!("answer is not JSON: {e}: {last:.200}"))?;
    if let Some(err) = value.get("error") {
        return Err(format!("error in answer: {err}"));
    }
    if value.get("done").and_then(|d| d.as_bool()) != Some(true) {
        return Err(format!("answer not done: {last:.200}"));
    }
    Ok(Sample {
        first_line: first_line.unwrap_or(total),
        total,
    })
}

async fn worker(
    args: Arc<Args>,
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
        let body = request_body(&args, args.prompt(i));
        let started = Instant::now();
        let outcome = tokio::time::timeout(REQUEST_TIMEOUT, async {
            if sender.is_none() {
                sender = Some(connect(args.addr).await?);
            }
            let s = sender.as_mut().expect("connected above");
            chat(s, args.addr, body, started).await
        })
        .await;
        match outcome {
            Ok(Ok(sample)) => samples.push(sample),
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

fn sorted_ms(values: impl Iterator<Item = Duration>) -> Vec<f64> {
    oap_testkit::stats::sorted(values.map(|d| d.as_secs_f64() * 1e3).collect())
}

/// Runs the load; the report says how many requests failed.
pub fn run(mut args: Args) -> anyhow::Result<ProxyLoadReport> {
    if args.requests.is_none() && args.duration.is_none() {
        args.requests = Some(crate::client::DEFAULT_REQUESTS);
    }
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(load(Arc::new(args)))
}

async fn load(args: Arc<Args>) -> anyhow::Result<ProxyLoadReport> {
    // Warm-up: one connection, sequential, not counted; also proves the
    // server answers before the timed run starts.
    if args.warmup > 0 {
        let mut sender = connect(args.addr).await.map_err(anyhow::Error::msg)?;
        for i in 0..args.warmup {
            let body = request_body(&args, args.prompt(i));
            let call = chat(&mut sender, args.addr, body, Instant::now());
            match tokio::time::timeout(REQUEST_TIMEOUT, call).await {
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
        .map(|_| tokio::spawn(worker(args.clone(), next.clone(), deadline)))
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

    let total = sorted_ms(samples.iter().map(|s| s.total));
    let first = sorted_ms(samples.iter().map(|s| s.first_line));
    Ok(ProxyLoadReport {
        label: args.label.clone(),
        mode: match args.mode {
            Mode::Chat => "chat",
            Mode::Stream => "stream",
        }
        .to_string(),
        concurrency: usize::from(args.concurrency),
        requests: samples.len() + errors.len(),
        errors: errors.len(),
        p50_ms: pct(&total, 0.50),
        p99_ms: pct(&total, 0.99),
        max_ms: total.last().copied().unwrap_or(f64::NAN),
        first_line_p50_ms: pct(&first, 0.50),
        first_line_p99_ms: pct(&first, 0.99),
        requests_per_s: samples.len() as f64 / wall,
        error_samples: crate::client::error_samples(&errors),
    })
}
