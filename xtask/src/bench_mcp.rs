//! `cargo xtask bench-mcp`: oapd and the Python peer `ollama-mcp-bridge`
//! side by side, in one run, on the same `mcpServers` file in front of the
//! same fake Ollama.
//!
//! One fake Ollama (`fake-ollama`, one tools-capable model `bench`) serves
//! every run; its script is switched between runs. Three configurations,
//! each with a fresh `oapd serve` (bundled manifests off, so both bridges
//! see exactly the MCP servers' tools) and a fresh peer, both given the same
//! servers file:
//!
//! 1. `{"mcpServers": {}}`: pure proxying. `oap-bench proxy-load`
//!    (`stream:false`) at concurrency 1 and 16 directly to the fake, through
//!    oapd (discovery on, and off with `"oap_discover": false`) and through
//!    the peer.
//! 2. One real stdio server, `tests/mcp/home_server.py` (the official Python
//!    SDK, run by `target/pyclients/bin/python`): one tool round per chat.
//!    The fake's default turn calls the forecast tool under the name the
//!    bridge offered it (read from the request the fake recorded:
//!    `oap_get_forecast` for oapd, `home.get_forecast` for the peer) and its
//!    after-tool turn answers the tool result, so every chat is two model
//!    turns with a real `tools/call` between them, at any concurrency.
//!    Latency p50/p99 at concurrency 1 and requests/s at 16; the same
//!    request straight to the fake (one turn, the call handed back) is the
//!    baseline: added latency = bridge p50 - 2 x direct p50.
//! 3. Fifty tools, `tests/mcp/office_server.py`: the tools each bridge puts
//!    into the model request for a fitting task (the forecast question),
//!    counted and estimated in tokens by `oap-bench request-tokens` over the
//!    recorded request, the same estimator for both; then a tool round at
//!    concurrency 1.
//!
//! After each configuration, VmRSS/VmHWM of oapd and of the peer's Python
//! process (their MCP server children not included). Prints the runs, a
//! summary against the goals (>= 20x the peer's requests/s, <= 1/5 of its
//! added latency on the tool round, <= 5 of 50 tools injected) and writes
//! everything as JSON to `target/bench/bench-mcp.json`.
//!
//! Every process is killed when this task ends, also on error.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use oap_bench::report::{DiscoverLoadReport, ProxyLoadReport, RequestTokensReport};
use serde_json::{json, Value};

use oap_bench::machine::{loadavg, machine_description, now_utc};

use crate::bench_procs::{
    prologue, rss_of, start_fake_with, start_oapd_with, start_peer_with, Proc,
};
use crate::bench_run::{self, TempDir};
use crate::repo_root;

const USAGE: &str = "usage: cargo xtask bench-mcp [--quick] [--no-peer]\n  \
    --quick    300 requests (at most 15 s) per run instead of 2000 (60 s)\n  \
    --no-peer  measure oapd alone";

/// The model every request names.
const MODEL: &str = "bench";
/// The user message of every request: a task the forecast tool fits.
const PROMPT: &str = "Will it rain in Paris tomorrow? Get me the weather forecast.";
/// The peer's pinned release.
const PEER_VERSION: &str = "0.12.2";

/// oapd's requests/s over the peer's, at concurrency 16.
const GOAL_THROUGHPUT_RATIO: f64 = 20.0;
/// oapd's added latency on the tool round as a share of the peer's.
const GOAL_LATENCY_SHARE: f64 = 0.2;
/// Tools injected of the fifty.
const GOAL_TOOLS: usize = 5;

struct Options {
    quick: bool,
    peer: bool,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut options = Options {
        quick: false,
        peer: true,
    };
    for arg in args {
        match arg.as_str() {
            "--quick" => options.quick = true,
            "--no-peer" => options.peer = false,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    Ok(options)
}

fn exchange(addr: SocketAddr, method: &str, path: &str, body: &str) -> Result<(u16, String)> {
    oap_testkit::http::exchange(addr, method, path, body, Duration::from_secs(60))
        .with_context(|| format!("{method} http://{addr}{path}"))
}

/// The fake answers every chat with a short text.
fn text_script() -> Value {
    json!({
        "models": [{"name": MODEL, "capabilities": ["completion", "tools"]}],
        "check_host": false,
        "default_turn": {"reply": "Here is the answer you asked for."},
    })
}

/// The fake calls `tool` for Paris on every chat and answers every tool
/// result: one tool round per chat, however many run at once.
fn tool_script(tool: &str) -> Value {
    json!({
        "models": [{"name": MODEL, "capabilities": ["completion", "tools"]}],
        "check_host": false,
        "default_turn": {"chunks": [{"tool_calls": [
            {"name": tool, "arguments": {"city": "Paris"}}
        ]}]},
        "after_tool_turn": {"echo": "last_tool"},
    })
}

fn set_script(fake: SocketAddr, script: &Value) -> Result<()> {
    let (status, body) = exchange(fake, "POST", "/_fake/script", &script.to_string())?;
    if status != 200 {
        bail!("fake-ollama refused the script ({status}): {body}");
    }
    Ok(())
}

fn forget_requests(fake: SocketAddr) -> Result<()> {
    exchange(fake, "DELETE", "/_fake/requests", "")?;
    Ok(())
}

/// The bodies of the `/api/chat` requests the fake recorded, in order.
fn chat_requests(fake: SocketAddr) -> Result<Vec<Value>> {
    let (status, body) = exchange(fake, "GET", "/_fake/requests?path=/api/chat", "")?;
    if status != 200 {
        bail!("fake-ollama /_fake/requests: {status} {body}");
    }
    let recorded: Vec<Value> =
        serde_json::from_str(&body).context("fake-ollama /_fake/requests is not a JSON list")?;
    Ok(recorded
        .into_iter()
        .map(|r| r.get("body").cloned().unwrap_or(Value::Null))
        .collect())
}

/// One chat, as the load generator sends it, through `addr`.
fn chat_once(addr: SocketAddr) -> Result<Value> {
    let body = json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": PROMPT}],
        "stream": false,
    });
    let (status, text) = exchange(addr, "POST", "/api/chat", &body.to_string())?;
    if status != 200 {
        bail!("POST http://{addr}/api/chat: {status} {text}");
    }
    serde_json::from_str(&text).with_context(|| format!("answer of {addr} is not JSON: {text}"))
}

/// The tools a bridge put into the model request for one fitting chat,
/// counted by `oap-bench request-tokens` (the text script must be active).
fn injected(
    bench: &Path,
    fake: SocketAddr,
    addr: SocketAddr,
    file: &Path,
) -> Result<RequestTokensReport> {
    forget_requests(fake)?;
    chat_once(addr)?;
    let first = chat_requests(fake)?
        .into_iter()
        .next()
        .context("the fake recorded no chat request")?;
    std::fs::write(file, serde_json::to_vec_pretty(&first)?)?;
    let mut command = bench_run::command(bench, "request-tokens");
    command.arg("--quiet").arg("--request").arg(file);
    bench_run::report(&mut command)
}

/// One chat through `addr` under the tool script: checks that it took two
/// model turns with the tool's real result fed back; returns that result.
fn check_tool_round(fake: SocketAddr, addr: SocketAddr) -> Result<String> {
    forget_requests(fake)?;
    let answer = chat_once(addr)?;
    let sent = chat_requests(fake)?;
    let last = sent
        .get(1)
        .and_then(|b| b.get("messages"))
        .and_then(Value::as_array)
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or(Value::Null);
    if sent.len() != 2 || last.get("role").and_then(Value::as_str) != Some("tool") {
        bail!(
            "expected two model turns, the second ending with the tool result; \
             the fake saw {} chat requests (last message of the second: {last}); answer: {answer}",
            sent.len()
        );
    }
    let result = last
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if !result.contains("Paris") {
        bail!("the tool result does not come from the server: {result:?}");
    }
    Ok(result)
}

/// Waits until oapd's MCP server `server` is ready with `tools` tools
/// indexed, `tool` among them.
fn wait_indexed(addr: SocketAddr, server: &str, tool: &str, tools: u64) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let manifest = format!("/v1/manifests/mcp/{server}/{tool}");
    loop {
        let status = exchange(addr, "GET", "/v1/mcp/status", "")
            .ok()
            .and_then(|(_, body)| serde_json::from_str::<Value>(&body).ok())
            .unwrap_or(Value::Null);
        let ready = status["servers"].as_array().is_some_and(|servers| {
            servers.iter().any(|s| {
                s["name"] == server && s["state"] == "ready" && s["tools"].as_u64() == Some(tools)
            })
        });
        if ready && matches!(exchange(addr, "GET", &manifest, ""), Ok((200, _))) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("oapd never indexed {server}/{tool}: /v1/mcp/status {status}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

struct Runner {
    bench: PathBuf,
    fake: SocketAddr,
    fake_pid: u32,
    requests: usize,
    duration: f64,
    rows: Vec<(String, ProxyLoadReport)>,
}

impl Runner {
    /// `oap-bench proxy-load` on `addr` at `concurrency`, recorded under
    /// `key` (`configuration/target/c`).
    fn load(
        &mut self,
        key: &str,
        addr: SocketAddr,
        concurrency: usize,
        no_discover: bool,
    ) -> Result<ProxyLoadReport> {
        // The fake records every request; forget them between runs.
        forget_requests(self.fake)?;
        let mut command = bench_run::command(&self.bench, "proxy-load");
        command
            .arg("--quiet")
            .arg("--addr")
            .arg(addr.to_string())
            .args(["--mode", "chat", "--model", MODEL, "--prompt", PROMPT])
            .args(["--concurrency", &concurrency.to_string()])
            .args(["--requests", &self.requests.to_string()])
            .args(["--duration", &self.duration.to_string()])
            .args(["--warmup", &WARMUP_REQUESTS.to_string(), "--label", key]);
        if no_discover {
            command.arg("--no-discover");
        }
        let (row, ok): (ProxyLoadReport, bool) = bench_run::report_and_status(&mut command, || {})?;
        println!("{}", row.table_row());
        if !ok {
            println!(
                "(warning: {key}: {} errors: {:?})",
                row.errors, row.error_samples
            );
        }
        self.rows.push((key.to_string(), row.clone()));
        Ok(row)
    }

    /// [`Runner::load`] with the CPU each program spent on it, in ms per
    /// request: the bridge with its MCP server (`bridge_pid` and its
    /// descendants), the fake Ollama, and the whole machine (the rest is
    /// the load generator and whatever else ran). On a machine whose cores
    /// every program shares, requests/s follows the machine's CPU per
    /// request; the bridge's own share says what it would do with the cores
    /// to itself.
    fn load_with_cpu(
        &mut self,
        key: &str,
        addr: SocketAddr,
        concurrency: usize,
        bridge_pid: u32,
    ) -> Result<Value> {
        use oap_testkit::cpu::{machine_busy_seconds, process_cpu_seconds, tree_cpu_seconds};
        let fake_pid = self.fake_pid;
        let sample = |pid: u32| -> Result<[f64; 4]> {
            Ok([
                tree_cpu_seconds(pid).with_context(|| format!("CPU of process {pid}"))?,
                process_cpu_seconds(pid).with_context(|| format!("CPU of process {pid}"))?,
                tree_cpu_seconds(fake_pid).context("CPU of the fake Ollama")?,
                machine_busy_seconds().context("CPU of the machine")?,
            ])
        };
        let before = sample(bridge_pid)?;
        let row = self.load(key, addr, concurrency, false)?;
        let after = sample(bridge_pid)?;
        // Warm-up requests count: their CPU is inside the interval.
        let answered = (row.requests + WARMUP_REQUESTS)
            .saturating_sub(row.errors)
            .max(1) as f64;
        let per_request = |i: usize| (after[i] - before[i]) * 1000.0 / answered;
        let cpu = json!({
            "bridge_ms": per_request(0),
            "bridge_alone_ms": per_request(1),
            "fake_ms": per_request(2),
            "machine_ms": per_request(3),
        });
        println!(
            "CPU per request, {key}: bridge and its MCP server {:.2} ms (the bridge alone {:.2} ms), \
             fake Ollama {:.2} ms, whole machine {:.2} ms",
            per_request(0),
            per_request(1),
            per_request(2),
            per_request(3)
        );
        Ok(json!({"load": row, "cpu": cpu}))
    }
}

/// Requests each load run sends before it starts timing.
const WARMUP_REQUESTS: usize = 20;

/// `oap-bench discover-load` at concurrency 1 with the benchmark's task.
fn discovery_alone(runner: &Runner, dir: &Path, addr: SocketAddr) -> Result<DiscoverLoadReport> {
    let tasks = dir.join("prompt-task.jsonl");
    std::fs::write(&tasks, format!("{}\n", json!({"query": PROMPT})))
        .context("writing the task file")?;
    let mut command = bench_run::command(&runner.bench, "discover-load");
    command
        .arg("--quiet")
        .arg("--addr")
        .arg(addr.to_string())
        .arg("--tasks")
        .arg(&tasks)
        .args(["--concurrency", "1"])
        .args(["--requests", &runner.requests.to_string()])
        .args(["--duration", &runner.duration.to_string()])
        .args(["--warmup", "20", "--label", "home/oapd/discover-c1"]);
    let (row, ok): (DiscoverLoadReport, bool) = bench_run::report_and_status(&mut command, || {})?;
    println!("{}", row.table_row());
    if !ok {
        println!("(warning: discovery alone: {} errors)", row.errors);
    }
    Ok(row)
}

/// `{"mcpServers": {name: python script}}` with absolute paths, the file
/// both bridges read.
fn servers_file(python: &Path, servers: &[(&str, &str)]) -> Value {
    let root = repo_root();
    let entries: serde_json::Map<String, Value> = servers
        .iter()
        .map(|(name, script)| {
            let script = root.join("tests/mcp").join(script);
            (
                (*name).to_string(),
                json!({"command": python, "args": [script]}),
            )
        })
        .collect();
    json!({ "mcpServers": entries })
}

/// oapd's extra config: no bundled manifests, the servers file.
fn oapd_yaml(file: &Path) -> String {
    format!(
        "manifests:\n  bundled: false\nmcp:\n  servers_file: {:?}\n  init_timeout: 60\n",
        file.display().to_string()
    )
}

/// The SDK's Python (target/pyclients, `mcp` 2.3.0), installed when missing.
fn sdk_python() -> Result<PathBuf> {
    let python = repo_root().join("target/pyclients/bin/python");
    let has_sdk = |python: &Path| {
        Command::new(python)
            .args(["-c", "import mcp.server.mcpserver"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !has_sdk(&python) {
        crate::tasks::python_venv()?;
    }
    if !has_sdk(&python) {
        bail!("{} cannot import mcp.server.mcpserver", python.display());
    }
    Ok(python)
}

/// The peer's installed version, installing the pinned release into
/// target/peer-venv when missing.
fn peer_version() -> Result<String> {
    let root = repo_root();
    let venv = root.join("target/peer-venv");
    let python = venv.join("bin/python");
    let version = |python: &Path| {
        Command::new(python)
            .args([
                "-c",
                "import importlib.metadata as m; print(m.version('ollama-mcp-bridge'))",
            ])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    if version(&python).is_none() {
        if !python.is_file() {
            crate::tasks::run_in_root(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
        }
        crate::tasks::run_in_root(Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            &format!("ollama-mcp-bridge=={PEER_VERSION}"),
        ]))?;
    }
    version(&python).context("ollama-mcp-bridge is not importable in target/peer-venv")
}

/// VmRSS and VmHWM (MB) of oapd and of the peer, as JSON.
fn memory(what: &str, oapd: u32, peer: Option<u32>) -> Result<Value> {
    let (rss, hwm) = rss_of(oapd)?;
    println!("{what}: oapd VmRSS {rss:.1} MB, VmHWM {hwm:.1} MB");
    let mut out = json!({"oapd_rss_mb": rss, "oapd_hwm_mb": hwm});
    if let Some(pid) = peer {
        let (rss, hwm) = rss_of(pid)?;
        println!("{what}: ollama-mcp-bridge VmRSS {rss:.1} MB, VmHWM {hwm:.1} MB");
        out["peer_rss_mb"] = json!(rss);
        out["peer_hwm_mb"] = json!(hwm);
    }
    Ok(out)
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        f64::NAN
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

pub fn run(args: &[String]) -> Result<()> {
    let options = parse(args)?;
    let root = repo_root();
    let started = Instant::now();
    let (bench, bin, model_dir) = prologue()?;
    let python = sdk_python()?;
    let mut notes: Vec<String> = Vec::new();
    let peer_version = if options.peer {
        match peer_version() {
            Ok(version) => Some(version),
            Err(err) => {
                notes.push(format!("ollama-mcp-bridge not measured: {err:#}"));
                None
            }
        }
    } else {
        None
    };
    if let Some(version) = &peer_version {
        println!("peer: ollama-mcp-bridge {version}");
        if version != PEER_VERSION {
            notes.push(format!(
                "ollama-mcp-bridge {version} measured, not the pinned {PEER_VERSION}"
            ));
        }
    }

    let tmp = TempDir::new("mcp")?;
    let fake = start_fake_with(&bin.join("fake-ollama"), &tmp.0, &text_script().to_string())?;
    println!("fake Ollama on {}", fake.addr);
    let (requests, duration) = if options.quick {
        (300, 15.0)
    } else {
        (2000, 60.0)
    };
    let mut runner = Runner {
        bench: bench.clone(),
        fake: fake.addr,
        fake_pid: fake.child.id(),
        requests,
        duration,
        rows: Vec::new(),
    };
    let mut report = json!({
        "machine": machine_description(),
        "date": now_utc(),
        "quick": options.quick,
        "requests_per_run": requests,
        "prompt": PROMPT,
        "peer": peer_version.clone(),
    });

    // A configuration: its servers file, a fresh oapd and a fresh peer.
    let start_pair = |name: &str, servers: &Value| -> Result<(oap_testkit::Daemon, Option<Proc>)> {
        let dir = tmp.0.join(name);
        std::fs::create_dir_all(&dir)?;
        let file = dir.join("mcp-servers.json");
        std::fs::write(&file, serde_json::to_vec_pretty(servers)?)?;
        println!("\n== {name}: {}", servers);
        let oapd = start_oapd_with(&bin.join("oapd"), fake.addr, &model_dir, &oapd_yaml(&file))?;
        let peer = match peer_version {
            Some(_) => Some(start_peer_with(
                &dir,
                fake.addr,
                &serde_json::to_string(servers)?,
            )?),
            None => None,
        };
        Ok((oapd, peer))
    };
    println!("\n{}", ProxyLoadReport::TABLE_HEADER);

    // 1. Pure proxying.
    set_script(fake.addr, &text_script())?;
    let (oapd, peer) = start_pair("empty", &servers_file(&python, &[]))?;
    let mut pure = serde_json::Map::new();
    for c in [1, 16] {
        let direct = runner.load(&format!("empty/direct/c{c}"), fake.addr, c, false)?;
        let ours = runner.load(&format!("empty/oapd/c{c}"), oapd.addr, c, false)?;
        let bare = runner.load(&format!("empty/oapd-no-discover/c{c}"), oapd.addr, c, true)?;
        let theirs = match &peer {
            Some(peer) => Some(runner.load(&format!("empty/peer/c{c}"), peer.addr, c, false)?),
            None => None,
        };
        pure.insert(
            format!("c{c}"),
            json!({"direct": direct, "oapd": ours, "oapd_no_discover": bare, "peer": theirs}),
        );
    }
    report["empty"] = Value::Object(pure);
    report["empty"]["memory"] = memory(
        "after the pure-proxy runs",
        oapd.pid(),
        peer.as_ref().map(|p| p.child.id()),
    )?;
    drop(peer);
    drop(oapd);

    // 2. One real server: a tool round per chat.
    let (oapd, peer) = start_pair(
        "home",
        &servers_file(&python, &[("home", "home_server.py")]),
    )?;
    wait_indexed(oapd.addr, "home", "get_forecast", 4)?;
    set_script(fake.addr, &text_script())?;
    let ours_offered = injected(&bench, fake.addr, oapd.addr, &tmp.0.join("home-oapd.json"))?;
    println!("oapd offered: {:?}", ours_offered.names);
    let ours_tool = "oap_get_forecast";
    if !ours_offered.names.iter().any(|n| n == ours_tool) {
        bail!(
            "oapd did not offer {ours_tool} for {PROMPT:?}: {:?}",
            ours_offered.names
        );
    }
    set_script(fake.addr, &tool_script(ours_tool))?;
    let result = check_tool_round(fake.addr, oapd.addr)?;
    println!("oapd tool round checked: the server answered {result:?}");
    let mut home = json!({"oapd_tool": ours_tool, "oapd_offered": ours_offered});
    home["oapd_c1"] = json!(runner.load("home/oapd/c1", oapd.addr, 1, false)?);
    home["oapd_c16"] = runner.load_with_cpu("home/oapd/c16", oapd.addr, 16, oapd.pid())?;
    // Where the tool round's time goes: discovery of the same task alone
    // (the query embedding, nearly all of it), on the same daemon.
    home["oapd_discover_c1"] = json!(discovery_alone(&runner, &tmp.0, oapd.addr)?);
    // The baseline: the same chat straight to the fake, the call handed back.
    home["direct_c1"] = json!(runner.load("home/direct/c1", fake.addr, 1, false)?);
    home["direct_c16"] = json!(runner.load("home/direct/c16", fake.addr, 16, false)?);
    if let Some(peer) = &peer {
        set_script(fake.addr, &text_script())?;
        let offered = injected(&bench, fake.addr, peer.addr, &tmp.0.join("home-peer.json"))?;
        println!("ollama-mcp-bridge offered: {:?}", offered.names);
        let tool = offered
            .names
            .iter()
            .find(|n| n.ends_with("get_forecast"))
            .cloned()
            .with_context(|| format!("the peer offered no forecast tool: {:?}", offered.names))?;
        set_script(fake.addr, &tool_script(&tool))?;
        let result = check_tool_round(fake.addr, peer.addr)?;
        println!("ollama-mcp-bridge tool round checked ({tool}): the server answered {result:?}");
        home["peer_tool"] = json!(tool);
        home["peer_offered"] = json!(offered);
        home["peer_c1"] = json!(runner.load("home/peer/c1", peer.addr, 1, false)?);
        home["peer_c16"] = runner.load_with_cpu("home/peer/c16", peer.addr, 16, peer.child.id())?;
    }
    home["memory"] = memory(
        "after the tool-round runs",
        oapd.pid(),
        peer.as_ref().map(|p| p.child.id()),
    )?;
    report["home"] = home;
    drop(peer);
    drop(oapd);

    // 3. Fifty tools: what each bridge injects for a fitting task.
    let (oapd, peer) = start_pair(
        "office",
        &servers_file(&python, &[("office", "office_server.py")]),
    )?;
    wait_indexed(oapd.addr, "office", "get_forecast", 50)?;
    set_script(fake.addr, &text_script())?;
    let ours_offered = injected(
        &bench,
        fake.addr,
        oapd.addr,
        &tmp.0.join("office-oapd.json"),
    )?;
    println!(
        "oapd offered {} tools, {} tokens: {:?}",
        ours_offered.tools, ours_offered.tool_tokens, ours_offered.names
    );
    let mut office = json!({"oapd_offered": ours_offered});
    if ours_offered.names.iter().any(|n| n == ours_tool) {
        set_script(fake.addr, &tool_script(ours_tool))?;
        check_tool_round(fake.addr, oapd.addr)?;
        office["oapd_c1"] = json!(runner.load("office/oapd/c1", oapd.addr, 1, false)?);
    } else {
        notes.push(format!(
            "with fifty tools oapd did not offer {ours_tool} for the forecast task: {:?}",
            ours_offered.names
        ));
    }
    let mut peer_offered = None;
    if let Some(peer) = &peer {
        set_script(fake.addr, &text_script())?;
        let offered = injected(
            &bench,
            fake.addr,
            peer.addr,
            &tmp.0.join("office-peer.json"),
        )?;
        println!(
            "ollama-mcp-bridge offered {} tools, {} tokens",
            offered.tools, offered.tool_tokens
        );
        if let Some(tool) = offered.names.iter().find(|n| n.ends_with("get_forecast")) {
            set_script(fake.addr, &tool_script(tool))?;
            check_tool_round(fake.addr, peer.addr)?;
            office["peer_c1"] = json!(runner.load("office/peer/c1", peer.addr, 1, false)?);
        }
        office["peer_offered"] = json!(offered);
        peer_offered = Some(offered);
    }
    office["memory"] = memory(
        "after the fifty-tool runs",
        oapd.pid(),
        peer.as_ref().map(|p| p.child.id()),
    )?;
    report["office"] = office;
    drop(peer);
    drop(oapd);

    // Summary.
    let row = |key: &str| runner.rows.iter().find(|(k, _)| k == key).map(|(_, r)| r);
    println!("\n== side by side (ms; added = bridge p50 - baseline p50)");
    println!("| configuration | concurrency | bridge | p50 | p99 | req/s | added p50 |");
    println!("|---|---|---|---|---|---|---|");
    for (config, rounds) in [("empty", 1.0), ("home", 2.0), ("office", 2.0)] {
        for c in [1, 16] {
            let Some(direct) =
                row(&format!("{config}/direct/c{c}")).or_else(|| row(&format!("home/direct/c{c}")))
            else {
                continue;
            };
            let baseline = rounds * direct.p50_ms;
            for target in ["direct", "oapd", "oapd-no-discover", "peer"] {
                if config == "office" && target == "direct" {
                    continue;
                }
                if let Some(r) = row(&format!("{config}/{target}/c{c}")) {
                    let added = if target == "direct" {
                        "-".to_string()
                    } else {
                        format!("{:+.3}", r.p50_ms - baseline)
                    };
                    println!(
                        "| {config} | {c} | {target} | {:.3} | {:.3} | {:.0} | {added} |",
                        r.p50_ms, r.p99_ms, r.requests_per_s
                    );
                }
            }
        }
    }

    println!("\n== goals");
    println!("| goal | oapd | ollama-mcp-bridge | ratio | verdict |");
    println!("|---|---|---|---|---|");
    let mut goals = serde_json::Map::new();
    for (what, key) in [
        ("requests/s, tool round, c=16", "home"),
        ("requests/s, pure proxy, c=16", "empty"),
    ] {
        if let (Some(ours), Some(theirs)) = (
            row(&format!("{key}/oapd/c16")),
            row(&format!("{key}/peer/c16")),
        ) {
            let r = ratio(ours.requests_per_s, theirs.requests_per_s);
            let ok = r >= GOAL_THROUGHPUT_RATIO;
            println!(
                "| {what} (≥ {GOAL_THROUGHPUT_RATIO}x) | {:.0} | {:.0} | {r:.1}x | {} |",
                ours.requests_per_s,
                theirs.requests_per_s,
                verdict(ok)
            );
            goals.insert(
                format!("throughput_{key}_c16"),
                json!({"ratio": r, "met": ok}),
            );
        }
    }
    if let (Some(ours), Some(theirs), Some(direct)) = (
        row("home/oapd/c1"),
        row("home/peer/c1"),
        row("home/direct/c1"),
    ) {
        let baseline = 2.0 * direct.p50_ms;
        let (a, b) = (ours.p50_ms - baseline, theirs.p50_ms - baseline);
        let share = ratio(a, b);
        let ok = share <= GOAL_LATENCY_SHARE;
        println!(
            "| added latency, tool round, c=1, p50 (≤ 1/5 of the peer's) | {a:+.3} ms | {b:+.3} ms | {share:.2} | {} |",
            verdict(ok)
        );
        let (a99, b99) = (ours.p99_ms - baseline, theirs.p99_ms - baseline);
        println!(
            "| added latency, tool round, c=1, p99 (not a goal) | {a99:+.3} ms | {b99:+.3} ms | {:.2} | - |",
            ratio(a99, b99)
        );
        if let Some(discover) = report["home"]["oapd_discover_c1"]["p50_ms"].as_f64() {
            println!(
                "| of oapd's added latency: discovery of the task alone (p50, not a goal) | {discover:.3} ms | - | {:.2} | - |",
                ratio(discover, a)
            );
        }
        goals.insert(
            "added_latency_tool_round_c1".into(),
            json!({"oapd_ms": a, "peer_ms": b, "share": share, "met": ok}),
        );
    }
    // Work per request of the tool round at c=16, each bridge with its MCP
    // server: what requests/s would follow on cores the bridge had to itself.
    let cpu_of = |who: &str, what: &str| report["home"][format!("{who}_c16")]["cpu"][what].as_f64();
    if let (Some(ours), Some(theirs)) = (cpu_of("oapd", "bridge_ms"), cpu_of("peer", "bridge_ms")) {
        println!(
            "| CPU per tool round, c=16, bridge + its MCP server (not a goal) | {ours:.2} ms | {theirs:.2} ms | {:.1}x less | - |",
            ratio(theirs, ours)
        );
        if let (Some(a), Some(b)) = (cpu_of("oapd", "machine_ms"), cpu_of("peer", "machine_ms")) {
            println!(
                "| CPU per tool round, c=16, whole machine (load generator and fake included) | {a:.2} ms | {b:.2} ms | {:.1}x less | - |",
                ratio(b, a)
            );
        }
        goals.insert(
            "cpu_per_tool_round_c16".into(),
            json!({"oapd_ms": ours, "peer_ms": theirs, "ratio": ratio(theirs, ours)}),
        );
    }
    let office_ours = &report["office"]["oapd_offered"];
    let ours_tools = office_ours["tools"].as_u64().unwrap_or(u64::MAX);
    let ok = ours_tools <= GOAL_TOOLS as u64;
    println!(
        "| tools injected of 50, fitting task (≤ {GOAL_TOOLS}) | {ours_tools} ({} tokens) | {} | - | {} |",
        office_ours["tool_tokens"],
        peer_offered
            .as_ref()
            .map(|o| format!("{} ({} tokens)", o.tools, o.tool_tokens))
            .unwrap_or_else(|| "-".into()),
        verdict(ok)
    );
    goals.insert(
        "tools_injected_of_50".into(),
        json!({"oapd": ours_tools, "peer": peer_offered.as_ref().map(|o| o.tools), "met": ok}),
    );
    report["goals"] = Value::Object(goals);
    report["notes"] = json!(notes);
    for note in &notes {
        println!("\nnote: {note}");
    }
    let out = root.join("target/bench/bench-mcp.json");
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&out, serde_json::to_vec_pretty(&report)?)?;
    println!(
        "\nJSON: {}\nload average at end: {}; total {:.0} s",
        out.display(),
        loadavg(),
        started.elapsed().as_secs_f64()
    );
    drop(fake);
    Ok(())
}
