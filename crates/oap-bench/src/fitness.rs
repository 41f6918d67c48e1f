//! What the small-model features cost a request, each side by side with
//! its baseline in the same run (`cargo xtask bench-fitness` runs it and
//! prints the [`FitnessReport`]'s rendering).
//!
//! Starts the scripted fake Ollama and three `oapd serve` instances in
//! front of it (the shared launchers of `procs.rs`), differing only in
//! `tool_bridge.url_policy` (off, flag, remove; the `off` one also has one
//! `tool_bridge.force` rule, `^status report\b` → `local/date`), and sends
//! one request at a time on a fresh loopback connection, the variants of each figure interleaved
//! round-robin so a load spike hits all alike:
//!
//! - (a) URL sanitisation: `/api/chat` `stream:true` answers of 20 chunks
//!   2 ms apart with 5 URLs no tool returned (each split over two chunks),
//!   through each policy: time to the first body byte and to the end.
//! - (b) endpoints: the same answer via `/api/chat`, `/v1/chat/completions`
//!   and `/v1/responses` (policy off), `stream:false` and `stream:true`,
//!   plus the fake directly for reference.
//! - (c) forced tools: a model that calls the forced tool (2 rounds), one
//!   that ignores the instruction (the bridge asks for the arguments and
//!   calls the tool itself: 3 rounds), and an unforced request (1 round);
//!   the fake's script is re-armed before each request and its recorded
//!   `/api/chat` requests counted after.
//! - (d) `oapd validate-model` (process wall time) basic and
//!   `--full-suite` against a fake model scripted to pass every check.
//!
//! ```text
//! oap-bench fitness --oapd BIN --fake-ollama BIN --model-dir DIR [--quick]
//! ```
//!
//! Every process started here is killed when the run ends, also on error.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use oap_bench::report::{FitnessGroup, FitnessReport, FitnessVariant};
use serde_json::{json, Value};

use crate::procs;

/// The model the fake serves and every request names.
const MODEL: &str = "bench";
/// Per-chunk delay of the answer in (a), so first chunk and total differ.
const CHUNK_DELAY_MS: u64 = 2;
const FORCED_TASK: &str = "Status report for the kitchen, please";
const PLAIN_TASK: &str = "summarise the links about the kitchen renovation";

/// Small-model fitness overheads (see the module doc).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// `--oapd` (the three daemons, and `oapd validate-model` in (d)),
    /// `--fake-ollama`, `--model-dir`.
    #[command(flatten)]
    bins: procs::Binaries,
    /// Fewer requests per variant (about a minute in all).
    #[arg(long)]
    quick: bool,
}

/// Timings of one request, in ms.
#[derive(Clone, Copy)]
struct Sample {
    first: f64,
    total: f64,
}

/// A POST over a fresh connection (`Connection: close`): status, the time
/// to the first body byte and to the end, and the body (raw, possibly
/// chunked transfer encoding — only searched, never parsed).
fn post(addr: SocketAddr, path: &str, body: &str) -> Result<(u16, Sample, String)> {
    let started = Instant::now();
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    stream.set_nodelay(true)?;
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 16384];
    let mut first = None;
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
        if first.is_none() {
            if let Some(head) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                if raw.len() > head + 4 {
                    first = Some(started.elapsed());
                }
            }
        }
    }
    let total = started.elapsed();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("no HTTP status line")?;
    Ok((
        status,
        Sample {
            first: ms(first.unwrap_or(total)),
            total: ms(total),
        },
        text,
    ))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn post_ok(addr: SocketAddr, path: &str, body: &str) -> Result<Sample> {
    let (status, sample, text) = post(addr, path, body)?;
    if status != 200 {
        bail!("POST {path} on {addr}: {status}: {text}");
    }
    Ok(sample)
}

/// p50 and p95 of one of a sample's two times.
fn p50_p95(samples: &[Sample], of: fn(&Sample) -> f64) -> (f64, f64) {
    let mut values: Vec<f64> = samples.iter().map(of).collect();
    values.sort_by(f64::total_cmp);
    let at = |p| oap_testkit::stats::nearest_rank(&values, p).unwrap_or(f64::NAN);
    (at(50.0), at(95.0))
}

/// One measured variant while it is being measured: a label, a note
/// (rounds, …) and its samples.
struct Variant {
    label: String,
    note: String,
    samples: Vec<Sample>,
}

impl Variant {
    fn new(label: impl Into<String>) -> Variant {
        Variant {
            label: label.into(),
            note: String::new(),
            samples: Vec::new(),
        }
    }

    fn figures(&self) -> FitnessVariant {
        let (first_p50_ms, first_p95_ms) = p50_p95(&self.samples, |s| s.first);
        let (total_p50_ms, total_p95_ms) = p50_p95(&self.samples, |s| s.total);
        FitnessVariant {
            label: self.label.clone(),
            note: self.note.clone(),
            n: self.samples.len(),
            first_p50_ms,
            first_p95_ms,
            total_p50_ms,
            total_p95_ms,
        }
    }
}

/// A finished group, the load average read as it ends (as the table
/// printed then showed it).
fn group(title: &str, variants: &[Variant], with_first: bool) -> FitnessGroup {
    FitnessGroup {
        title: title.into(),
        with_first,
        load_average: loadavg(),
        variants: variants.iter().map(Variant::figures).collect(),
    }
}

/// The 1, 5 and 15 minute load averages, as `/proc/loadavg` says them.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// 20 content chunks as a model streams them, token-like: 5 URLs that no
/// tool returned, each split over two chunks (`https://` and the rest) and
/// ended by the next chunk's leading space, so the sanitiser must hold a
/// URL back across chunks.
fn answer_chunks() -> Vec<Value> {
    (0..20)
        .map(|i| match i % 4 {
            1 => json!({"content": "https://"}),
            2 => json!({"content": format!("example.com/kitchen/{i}")}),
            _ => json!({"content": format!(" word{i}")}),
        })
        .collect()
}

/// The fake's script: `turns` first, then the 20-chunk answer, each chunk
/// after `delay_ms` (a model's token pace; 0 = as fast as possible).
fn base_script(turns: Vec<Value>, delay_ms: u64) -> Value {
    json!({
        "models": [{"name": MODEL, "capabilities": ["completion", "tools"]}],
        "check_host": false,
        "turns": turns,
        "default_turn": {"chunks": answer_chunks(), "delay_ms": delay_ms},
    })
}

fn control(fake: SocketAddr, path: &str, body: &str) -> Result<()> {
    let (status, _, text) = post(fake, path, body)?;
    if status != 200 {
        bail!("fake {path}: {status}: {text}");
    }
    Ok(())
}

/// `/api/chat` requests the fake recorded since the last reset.
fn chat_rounds(fake: SocketAddr) -> Result<usize> {
    let (status, body) = oap_testkit::http::exchange(
        fake,
        "GET",
        "/_fake/requests?path=/api/chat",
        "",
        Duration::from_secs(10),
    )?;
    if status != 200 {
        bail!("fake /_fake/requests: {status}");
    }
    let value: Value = serde_json::from_str(&body).context("fake /_fake/requests")?;
    Ok(value.as_array().map_or(0, Vec::len))
}

fn chat_body(task: &str, stream: bool) -> String {
    json!({"model": MODEL, "stream": stream,
           "messages": [{"role": "user", "content": task}]})
    .to_string()
}

/// The forced-tool rule of the `url_policy: off` daemon.
const FORCE_YAML: &str =
    "  force:\n    - pattern: \"^status report\\\\b\"\n      tool: local/date\n";

/// Starts the fake and the three daemons, then runs the four figures.
pub fn run(args: Args) -> Result<FitnessReport> {
    let tmp = tempfile::tempdir()?;
    let fake = procs::start_fake(
        &args.bins.fake_ollama,
        tmp.path(),
        &procs::fake_script(MODEL),
    )?;
    eprintln!("fake Ollama on {}", fake.addr);
    let mut daemons = Vec::new();
    for policy in ["off", "flag", "remove"] {
        let mut yaml = format!("tool_bridge:\n  url_policy: \"{policy}\"\n");
        if policy == "off" {
            yaml.push_str(FORCE_YAML);
        }
        let oapd = procs::start_oapd(&args.bins.oapd, fake.addr, &args.bins.model_dir, &yaml)
            .with_context(|| format!("oapd with url_policy {policy}"))?;
        eprintln!("oapd (url_policy {policy}) on {}", oapd.addr);
        daemons.push(oapd);
    }
    let [off, flag, remove] = [0, 1, 2].map(|i| daemons[i].addr);
    measure(&args, fake.addr, [off, flag, remove])
}

/// The four figures against the fake and the daemons with `url_policy`
/// off, flag and remove.
fn measure(
    args: &Args,
    fake: SocketAddr,
    [off, flag, remove]: [SocketAddr; 3],
) -> Result<FitnessReport> {
    let (n_stream, n_force, n_validate) = if args.quick {
        (40, 15, 4)
    } else {
        (300, 60, 15)
    };
    let oapds = [("off", off), ("flag", flag), ("remove", remove)];
    // The answer of (a): chunks 2 ms apart, whatever the fake started with.
    control(
        fake,
        "/_fake/script",
        &base_script(Vec::new(), CHUNK_DELAY_MS).to_string(),
    )?;

    // Warm-up: every instance embeds a few prompts once.
    for (_, addr) in oapds {
        for _ in 0..5 {
            post_ok(addr, "/api/chat", &chat_body(PLAIN_TASK, true))?;
        }
    }

    // (a) URL sanitisation.
    let mut url: Vec<Variant> = oapds
        .iter()
        .map(|(policy, _)| Variant::new(format!("/api/chat stream, url_policy {policy}")))
        .collect();
    let mut flagged = 0;
    for _ in 0..n_stream {
        for (i, (policy, addr)) in oapds.iter().enumerate() {
            let (status, sample, text) = post(*addr, "/api/chat", &chat_body(PLAIN_TASK, true))?;
            if status != 200 {
                bail!("url_policy {policy}: {status}: {text}");
            }
            if text.contains("unverified link") || text.contains("[link removed]") {
                flagged += 1;
            }
            url[i].samples.push(sample);
        }
    }
    url[1].note = "URLs marked \"(unverified link)\"".into();
    url[2].note = "URLs replaced by \"[link removed]\"".into();
    let url = group(
        "(a) URL sanitisation, 20 chunks 2 ms apart, 5 URLs no tool returned",
        &url,
        true,
    );

    // (b) endpoints: the answer as fast as the fake can send it.
    control(
        fake,
        "/_fake/script",
        &base_script(Vec::new(), 0).to_string(),
    )?;
    let responses_body =
        |stream: bool| json!({"model": MODEL, "stream": stream, "input": PLAIN_TASK}).to_string();
    let endpoints: Vec<(String, SocketAddr, &str, String)> = [false, true]
        .into_iter()
        .flat_map(|stream| {
            let mode = if stream { "stream" } else { "stream:false" };
            vec![
                (
                    format!("oapd /api/chat, {mode}"),
                    off,
                    "/api/chat",
                    chat_body(PLAIN_TASK, stream),
                ),
                (
                    format!("oapd /v1/chat/completions, {mode}"),
                    off,
                    "/v1/chat/completions",
                    chat_body(PLAIN_TASK, stream),
                ),
                (
                    format!("oapd /v1/responses, {mode}"),
                    off,
                    "/v1/responses",
                    responses_body(stream),
                ),
                (
                    format!("fake Ollama /api/chat directly, {mode}"),
                    fake,
                    "/api/chat",
                    chat_body(PLAIN_TASK, stream),
                ),
            ]
        })
        .collect();
    let mut by_endpoint: Vec<Variant> = endpoints
        .iter()
        .map(|(label, ..)| Variant::new(label.clone()))
        .collect();
    for _ in 0..n_stream {
        for (i, (_, addr, path, body)) in endpoints.iter().enumerate() {
            by_endpoint[i].samples.push(post_ok(*addr, path, body)?);
        }
    }
    let (plain, streamed) = by_endpoint.split_at(4);
    let endpoints_plain = group(
        "(b) endpoints through oapd (url_policy off), stream:false",
        plain,
        false,
    );
    let endpoints_stream = group(
        "(b) endpoints through oapd (url_policy off), stream:true",
        streamed,
        true,
    );

    // (c) forced tools: each variant's turns are scripted, re-armed per request.
    let forced: [(&str, &str, Vec<Value>); 3] = [
        (
            "unforced request (no pattern match)",
            PLAIN_TASK,
            vec![json!({"reply": "All fine."})],
        ),
        (
            "forced, model complies",
            FORCED_TASK,
            vec![
                json!({"chunks": [{"tool_calls": [{"name": "oap_date", "arguments": {"args": "+%Y"}}]}]}),
                json!({"reply": "It is this year."}),
            ],
        ),
        (
            "forced, model ignores it (bridge extracts arguments, calls the tool)",
            FORCED_TASK,
            vec![
                json!({"reply": "All fine in the kitchen, I guess."}),
                json!({"reply": "{\"args\": \"+%Y\"}"}),
                json!({"reply": "It is this year."}),
            ],
        ),
    ];
    let mut force_variants: Vec<Variant> = forced
        .iter()
        .map(|(label, ..)| Variant::new(*label))
        .collect();
    let mut rounds: Vec<Vec<usize>> = vec![Vec::new(); forced.len()];
    for _ in 0..n_force {
        for (i, (_, task, turns)) in forced.iter().enumerate() {
            control(
                fake,
                "/_fake/script",
                &base_script(turns.clone(), 0).to_string(),
            )?;
            control(fake, "/_fake/reset", "")?;
            let (status, sample, text) = post(off, "/api/chat", &chat_body(task, true))?;
            if status != 200 || text.contains("\"error\"") {
                bail!("forced variant {i}: {status}: {text}");
            }
            force_variants[i].samples.push(sample);
            rounds[i].push(chat_rounds(fake)?);
        }
    }
    for (variant, rounds) in force_variants.iter_mut().zip(&rounds) {
        let (min, max) = (
            rounds.iter().min().copied().unwrap_or(0),
            rounds.iter().max().copied().unwrap_or(0),
        );
        variant.note = if min == max {
            format!("{min} round(s) to Ollama")
        } else {
            format!("{min}..{max} rounds to Ollama")
        };
    }
    let forced = group(
        "(c) forced tools, /api/chat stream (date runs for real)",
        &force_variants,
        true,
    );

    let validate = validate_model(&args.bins.oapd, fake, n_validate)?;
    Ok(FitnessReport {
        url,
        url_policy_acted: flagged,
        url_answers: 2 * n_stream,
        endpoints_plain,
        endpoints_stream,
        forced,
        validate,
    })
}

/// (d) `oapd validate-model` against a model scripted to pass every
/// check, basic and `--full-suite` interleaved, `runs` times each.
fn validate_model(oapd: &std::path::Path, fake: SocketAddr, runs: usize) -> Result<FitnessGroup> {
    let weather = json!({"chunks": [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}]}]});
    let good = vec![
        weather.clone(),
        weather,
        json!({"reply": "3 boxes of 14 make 42; 42 - 5 = 37"}),
        json!({"chunks": [{"tool_calls": [{"name": "set_timer", "arguments": {"minutes": 10}}]}]}),
        json!({"reply": "Paris."}),
        json!({"chunks": [{"tool_calls": [{"name": "create_reminder", "arguments": {"text": "call mum", "minutes": 15, "urgent": true, "tags": ["family", "phone"]}}]}]}),
    ];
    control(fake, "/_fake/script", &base_script(good, 0).to_string())?;
    let tmp = tempfile::Builder::new()
        .prefix("oap-bench-fitness-")
        .tempdir()?;
    let config = tmp.path().join("validate.yaml");
    std::fs::write(
        &config,
        format!(
            "ollama:\n  base_url: \"http://{fake}\"\nindex:\n  data_dir: {:?}\n",
            tmp.path().join("validate-data")
        ),
    )?;
    let mut validate: Vec<Variant> = ["basic (3 checks)", "--full-suite (6 checks)"]
        .iter()
        .map(|label| Variant::new(format!("oapd validate-model {label}")))
        .collect();
    for _ in 0..runs {
        for (i, full) in [false, true].into_iter().enumerate() {
            control(fake, "/_fake/reset", "")?;
            let mut command = Command::new(oapd);
            command
                .env_remove("OAPD_CONFIG")
                .env("RUST_LOG", "warn")
                .arg("--config")
                .arg(&config)
                .args(["validate-model", "--model", MODEL]);
            if full {
                command.arg("--full-suite");
            }
            if validate[i].samples.is_empty() {
                eprintln!("$ {command:?}");
            }
            let start = Instant::now();
            let output = command.stdin(Stdio::null()).output()?;
            let wall = ms(start.elapsed());
            let report = String::from_utf8_lossy(&output.stdout);
            if !output.status.success() {
                bail!(
                    "validate-model failed: {report}{}",
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            if validate[i].note.is_empty() {
                validate[i].note = report
                    .lines()
                    .find(|l| l.contains("checks passed"))
                    .unwrap_or("")
                    .trim()
                    .to_string();
            }
            validate[i].samples.push(Sample {
                first: wall,
                total: wall,
            });
        }
    }
    Ok(group(
        "(d) oapd validate-model wall time (process start to exit)",
        &validate,
        false,
    ))
}
