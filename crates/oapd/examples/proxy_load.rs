//! HTTP load generator for `POST /api/chat` on anything that speaks
//! Ollama's chat API: the fake Ollama itself, `oapd` in front of it, or a
//! peer proxy. Used by `cargo xtask bench-proxy` to measure the latency a
//! proxy adds.
//!
//! ```text
//! cargo run --release -p oapd --example proxy_load -- --addr 127.0.0.1:PORT \
//!     [--mode chat|stream] [--concurrency 1] [--requests 500] [--duration SECS] \
//!     [--warmup 20] [--model NAME] [--no-discover] [--label NAME] [--header]
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
//! Prints one markdown table row (`--header` adds the header lines first):
//! latency p50/p99/max of the whole answer, first line p50/p99, requests/s
//! and the error count. Loopback addresses only.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::string_slice,
    clippy::disallowed_methods,
    reason = "a benchmark or demo program run by developers, not the daemon: it stops on the first surprise"
)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

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

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Chat,
    Stream,
}

struct Args {
    addr: SocketAddr,
    mode: Mode,
    concurrency: usize,
    requests: Option<usize>,
    duration: Option<Duration>,
    warmup: usize,
    model: String,
    no_discover: bool,
    label: String,
    header: bool,
}

fn usage() -> ! {
    eprintln!(
        "usage: proxy_load --addr 127.0.0.1:PORT [--mode chat|stream] [--concurrency N] \
         [--requests N] [--duration SECS] [--warmup N] [--model NAME] [--no-discover] \
         [--label NAME] [--header]"
    );
    std::process::exit(2);
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        addr: "127.0.0.1:8300".parse().expect("literal address"),
        mode: Mode::Chat,
        concurrency: 1,
        requests: None,
        duration: None,
        warmup: 20,
        model: "bench:latest".into(),
        no_discover: false,
        label: "chat".into(),
        header: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--header" => {
                args.header = true;
                continue;
            }
            "--no-discover" => {
                args.no_discover = true;
                continue;
            }
            "-h" | "--help" => usage(),
            _ => {}
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value:?}: {e}");
        match flag.as_str() {
            "--addr" => args.addr = value.parse().map_err(|e| bad(&e))?,
            "--mode" => {
                args.mode = match value.as_str() {
                    "chat" => Mode::Chat,
                    "stream" => Mode::Stream,
                    _ => return Err(format!("{flag}: chat or stream")),
                }
            }
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
            "--model" => args.model = value,
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

/// What one request measured: the first NDJSON line and the whole answer.
struct Sample {
    first_line: Duration,
    total: Duration,
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
    sender
        .ready()
        .await
        .map_err(|e| format!("connection: {e}"))?;
    let request = Request::builder()
        .method(Method::POST)
        .uri("/api/chat")
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .body(Full::new(body))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("request: {e}"))?;
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
        let body = request_body(&args, PROMPTS[i % PROMPTS.len()]);
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

fn pct(sorted: &[f64], p: f64) -> f64 {
    oap_testkit::stats::rounded_index(sorted, p).unwrap_or(f64::NAN)
}

fn sorted_ms(values: impl Iterator<Item = Duration>) -> Vec<f64> {
    oap_testkit::stats::sorted(values.map(|d| d.as_secs_f64() * 1e3).collect())
}

fn fail(message: String) -> ! {
    eprintln!("proxy_load: {message}");
    std::process::exit(1);
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = match parse_args() {
        Ok(args) => Arc::new(args),
        Err(err) => {
            eprintln!("proxy_load: {err}");
            usage();
        }
    };

    // Warm-up: one connection, sequential, not counted; also proves the
    // server answers before the timed run starts.
    if args.warmup > 0 {
        let mut sender = connect(args.addr).await.unwrap_or_else(|e| fail(e));
        for i in 0..args.warmup {
            let body = request_body(&args, PROMPTS[i % PROMPTS.len()]);
            let call = chat(&mut sender, args.addr, body, Instant::now());
            match tokio::time::timeout(REQUEST_TIMEOUT, call).await {
                Ok(Ok(_)) => {}
                Ok(Err(err)) => fail(format!("warm-up request failed: {err}")),
                Err(_) => fail("warm-up request timed out".into()),
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
    if args.header {
        println!(
            "| run | mode | concurrency | requests | errors | p50 ms | p99 ms | max ms | \
             first line p50 ms | first line p99 ms | req/s |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|");
    }
    println!(
        "| {} | {} | {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.1} |",
        args.label,
        match args.mode {
            Mode::Chat => "chat",
            Mode::Stream => "stream",
        },
        args.concurrency,
        samples.len() + errors.len(),
        errors.len(),
        pct(&total, 0.50),
        pct(&total, 0.99),
        total.last().copied().unwrap_or(f64::NAN),
        pct(&first, 0.50),
        pct(&first, 0.99),
        samples.len() as f64 / wall,
    );
    if !errors.is_empty() {
        let mut shown: Vec<&String> = errors.iter().collect();
        shown.dedup();
        for err in shown.iter().take(5) {
            eprintln!("proxy_load: error: {err}");
        }
        std::process::exit(1);
    }
}
