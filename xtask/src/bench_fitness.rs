//! `cargo xtask bench-fitness`: what the small-model features cost,
//! each side by side with its baseline in the same run.
//!
//! Starts the scripted fake Ollama (`fake-ollama`) and three `oapd serve`
//! instances in front of it (the bench-proxy helpers), differing only in
//! `tool_bridge.url_policy` (off, flag, remove); the `off` one also has one
//! `tool_bridge.force` rule (`^status report\b` → `local/date`). Then, one
//! request at a time on a fresh loopback connection, the variants of each
//! figure interleaved round-robin so a load spike hits all alike:
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
//! Prints p50/p95 in ms and the ratio to the baseline of each group.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::bench_proxy::{
    cargo, loadavg, machine_description, now_utc, run_shown, shown, start_fake_with,
    start_oapd_with, TempDir,
};
use crate::repo_root;

const USAGE: &str = "usage: cargo xtask bench-fitness [--quick]\n  \
    --quick    fewer requests per variant (about a minute in all)";

const MODEL: &str = "bench";
/// Per-chunk delay of the answer in (a), so first chunk and total differ.
const CHUNK_DELAY_MS: u64 = 2;
const FORCE_YAML: &str =
    "  force:\n    - pattern: \"^status report\\\\b\"\n      tool: local/date\n";
const FORCED_TASK: &str = "Status report for the kitchen, please";
const PLAIN_TASK: &str = "summarise the links about the kitchen renovation";

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
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    Ok((
        status,
        Sample {
            first: ms(first.unwrap_or(total)),
            total: ms(total),
        },
        text,
    ))
}

fn post_ok(addr: SocketAddr, path: &str, body: &str) -> Result<Sample> {
    let (status, sample, text) = post(addr, path, body)?;
    if status != 200 {
        bail!("POST {path} on {addr}: {status}: {text}");
    }
    Ok(sample)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    oap_testkit::stats::nearest_rank(sorted, p).unwrap_or(f64::NAN)
}

/// p50 and p95 of the first-byte and total times.
struct Stats {
    first: (f64, f64),
    total: (f64, f64),
}

fn stats(samples: &[Sample]) -> Stats {
    let sorted = |f: fn(&Sample) -> f64| {
        let mut v: Vec<f64> = samples.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        (percentile(&v, 50.0), percentile(&v, 95.0))
    };
    Stats {
        first: sorted(|s| s.first),
        total: sorted(|s| s.total),
    }
}

/// One measured variant: a label, a note (rounds, …) and its samples.
struct Variant {
    label: String,
    note: String,
    samples: Vec<Sample>,
}

/// Prints a group's table; the first variant is the baseline.
fn print_group(title: &str, variants: &[Variant], with_first: bool) {
    println!(
        "\n== {title} (ms; ratio = p50 / baseline p50; load average {})",
        loadavg()
    );
    if with_first {
        println!("| variant | n | first byte p50 | first byte p95 | total p50 | total p95 | first ratio | total ratio | note |");
        println!("|---|---|---|---|---|---|---|---|---|");
    } else {
        println!("| variant | n | p50 | p95 | ratio | note |");
        println!("|---|---|---|---|---|---|");
    }
    let Some(base) = variants.first().map(|v| stats(&v.samples)) else {
        return;
    };
    for variant in variants {
        let s = stats(&variant.samples);
        if with_first {
            println!(
                "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2}x | {:.2}x | {} |",
                variant.label,
                variant.samples.len(),
                s.first.0,
                s.first.1,
                s.total.0,
                s.total.1,
                s.first.0 / base.first.0,
                s.total.0 / base.total.0,
                variant.note
            );
        } else {
            println!(
                "| {} | {} | {:.1} | {:.1} | {:.2}x | {} |",
                variant.label,
                variant.samples.len(),
                s.total.0,
                s.total.1,
                s.total.0 / base.total.0,
                variant.note
            );
        }
    }
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
    let (status, body) = crate::net::http(
        fake,
        "GET",
        "/_fake/requests?path=/api/chat",
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

pub fn run(args: &[String]) -> Result<()> {
    let mut quick = false;
    for arg in args {
        match arg.as_str() {
            "--quick" => quick = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    let (n_stream, n_force, n_validate) = if quick { (40, 15, 4) } else { (300, 60, 15) };
    let root = repo_root();
    let started = Instant::now();
    println!("machine: {}", machine_description());
    println!("date: {}", now_utc());
    println!("load average at start (1/5/15 min): {}", loadavg());
    run_shown(cargo().args(["build", "--release", "-p", "oapd", "--bin", "oapd"]))?;
    crate::bench_proxy::build_fake_ollama()?;
    let bin = root.join("target/release");
    let model_dir = root.join("models/all-MiniLM-L6-v2");
    if !model_dir.is_dir() {
        bail!(
            "{} missing: run `cargo xtask fetch-model` first",
            model_dir.display()
        );
    }
    let tmp =
        TempDir(std::env::temp_dir().join(format!("oapd-bench-fitness-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&tmp.0);
    std::fs::create_dir_all(&tmp.0)?;

    let fake = start_fake_with(
        &bin.join("fake-ollama"),
        &tmp.0,
        &base_script(Vec::new(), CHUNK_DELAY_MS).to_string(),
    )?;
    println!("fake Ollama on {}", fake.addr);
    let mut oapds = Vec::new();
    for policy in ["off", "flag", "remove"] {
        let mut yaml = format!("tool_bridge:\n  url_policy: \"{policy}\"\n");
        if policy == "off" {
            yaml.push_str(FORCE_YAML);
        }
        let oapd = start_oapd_with(&bin.join("oapd"), fake.addr, &model_dir, &yaml)
            .with_context(|| format!("oapd with url_policy {policy}"))?;
        println!("oapd (url_policy {policy}) on {}", oapd.addr);
        oapds.push((policy, oapd));
    }
    let off = oapds[0].1.addr;

    // Warm-up: every instance embeds a few prompts once.
    for (_, oapd) in &oapds {
        for _ in 0..5 {
            post_ok(oapd.addr, "/api/chat", &chat_body(PLAIN_TASK, true))?;
        }
    }

    // (a) URL sanitisation.
    let mut url: Vec<Variant> = oapds
        .iter()
        .map(|(policy, _)| Variant {
            label: format!("/api/chat stream, url_policy {policy}"),
            note: String::new(),
            samples: Vec::new(),
        })
        .collect();
    let mut flagged = 0;
    for _ in 0..n_stream {
        for (i, (policy, oapd)) in oapds.iter().enumerate() {
            let (status, sample, text) =
                post(oapd.addr, "/api/chat", &chat_body(PLAIN_TASK, true))?;
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
    print_group(
        "(a) URL sanitisation, 20 chunks 2 ms apart, 5 URLs no tool returned",
        &url,
        true,
    );
    println!(
        "(answers where the policy acted: {flagged} of {})",
        2 * n_stream
    );

    // (b) endpoints: the answer as fast as the fake can send it.
    control(
        fake.addr,
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
                    fake.addr,
                    "/api/chat",
                    chat_body(PLAIN_TASK, stream),
                ),
            ]
        })
        .collect();
    let mut by_endpoint: Vec<Variant> = endpoints
        .iter()
        .map(|(label, ..)| Variant {
            label: label.clone(),
            note: String::new(),
            samples: Vec::new(),
        })
        .collect();
    for _ in 0..n_stream {
        for (i, (_, addr, path, body)) in endpoints.iter().enumerate() {
            by_endpoint[i].samples.push(post_ok(*addr, path, body)?);
        }
    }
    let (plain, streamed) = by_endpoint.split_at(4);
    print_group(
        "(b) endpoints through oapd (url_policy off), stream:false",
        plain,
        false,
    );
    print_group(
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
        .map(|(label, ..)| Variant {
            label: (*label).to_string(),
            note: String::new(),
            samples: Vec::new(),
        })
        .collect();
    let mut rounds: Vec<Vec<usize>> = vec![Vec::new(); forced.len()];
    for _ in 0..n_force {
        for (i, (_, task, turns)) in forced.iter().enumerate() {
            control(
                fake.addr,
                "/_fake/script",
                &base_script(turns.clone(), 0).to_string(),
            )?;
            control(fake.addr, "/_fake/reset", "")?;
            let (status, sample, text) = post(off, "/api/chat", &chat_body(task, true))?;
            if status != 200 || text.contains("\"error\"") {
                bail!("forced variant {i}: {status}: {text}");
            }
            force_variants[i].samples.push(sample);
            rounds[i].push(chat_rounds(fake.addr)?);
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
    print_group(
        "(c) forced tools, /api/chat stream (date runs for real)",
        &force_variants,
        true,
    );

    // (d) validate-model against a model scripted to pass every check.
    let weather = json!({"chunks": [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}]}]});
    let good = vec![
        weather.clone(),
        weather,
        json!({"reply": "3 boxes of 14 make 42; 42 - 5 = 37"}),
        json!({"chunks": [{"tool_calls": [{"name": "set_timer", "arguments": {"minutes": 10}}]}]}),
        json!({"reply": "Paris."}),
        json!({"chunks": [{"tool_calls": [{"name": "create_reminder", "arguments": {"text": "call mum", "minutes": 15, "urgent": true, "tags": ["family", "phone"]}}]}]}),
    ];
    control(
        fake.addr,
        "/_fake/script",
        &base_script(good, 0).to_string(),
    )?;
    let config = tmp.0.join("validate.yaml");
    std::fs::write(
        &config,
        format!(
            "ollama:\n  base_url: \"http://{}\"\nindex:\n  data_dir: {:?}\n",
            fake.addr,
            tmp.0.join("validate-data")
        ),
    )?;
    let mut validate: Vec<Variant> = ["basic (3 checks)", "--full-suite (6 checks)"]
        .iter()
        .map(|label| Variant {
            label: format!("oapd validate-model {label}"),
            note: String::new(),
            samples: Vec::new(),
        })
        .collect();
    for _ in 0..n_validate {
        for (i, full) in [false, true].into_iter().enumerate() {
            control(fake.addr, "/_fake/reset", "")?;
            let mut command = Command::new(bin.join("oapd"));
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
                println!("$ {}", shown(&command));
            }
            let start = Instant::now();
            let output = command.stdin(Stdio::null()).output()?;
            let ms = start.elapsed().as_secs_f64() * 1000.0;
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
                first: ms,
                total: ms,
            });
        }
    }
    print_group(
        "(d) oapd validate-model wall time (process start to exit)",
        &validate,
        false,
    );

    println!(
        "\nload average at end: {}; total {:.0} s",
        loadavg(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
