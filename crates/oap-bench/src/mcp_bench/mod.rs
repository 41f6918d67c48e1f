//! `oap-bench mcp`: oapd and the Python peer `ollama-mcp-bridge` side by
//! side, in one run, on the same `mcpServers` file in front of the same
//! fake Ollama.
//!
//! One fake Ollama (`fake-ollama`, one tools-capable model `bench`) serves
//! every run; its script is switched between runs. Three configurations,
//! each with a fresh `oapd serve` (bundled manifests off, so both bridges
//! see exactly the MCP servers' tools) and a fresh peer, both given the same
//! servers file:
//!
//! 1. `{"mcpServers": {}}`: pure proxying. `proxy-load` (`stream:false`) at
//!    concurrency 1 and 16 directly to the fake, through oapd (discovery
//!    on, and off with `"oap_discover": false`) and through the peer.
//! 2. One real stdio server, `tests/mcp/home_server.py` (the official Python
//!    SDK, run by `--python`): one tool round per chat. The fake's default
//!    turn calls the forecast tool under the name the bridge offered it
//!    (read from the request the fake recorded: `oap_get_forecast` for
//!    oapd, `home.get_forecast` for the peer) and its after-tool turn
//!    answers the tool result, so every chat is two model turns with a real
//!    `tools/call` between them, at any concurrency. Latency p50/p99 at
//!    concurrency 1 and requests/s at 16; the same request straight to the
//!    fake (one turn, the call handed back) is the baseline: added latency
//!    = bridge p50 - 2 x direct p50.
//! 3. Fifty tools, `tests/mcp/office_server.py`: the tools each bridge puts
//!    into the model request for a fitting task (the forecast question),
//!    counted and estimated in tokens by `request-tokens` over the recorded
//!    request, the same estimator for both; then a tool round at
//!    concurrency 1.
//!
//! After each configuration, VmRSS/VmHWM of oapd and of the peer's Python
//! process (their MCP server children not included). The load runs go on
//! in this process (`runner.rs`); the fake's scripts and the checks of a
//! tool round are `bridge.rs`. The report is a [`McpBenchReport`], whose
//! `render` is the summary against the goals (>= 20x the peer's
//! requests/s, <= 1/5 of its added latency on the tool round, <= 5 of 50
//! tools injected) that `cargo xtask bench-mcp` prints. Every process
//! started here is killed when the run ends, also on error.

mod bridge;
mod runner;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use oap_bench::machine::{machine_description, now_utc};
use oap_bench::mcp_report::{McpBenchReport, McpOffered, PEER_VERSION};
use oap_bench::report::ProxyLoadReport;
use oap_testkit::Daemon;
use serde_json::{json, Value};

use crate::procs::{self, Proc};
use bridge::{check_tool_round, set_script, text_script, tool_script, wait_indexed};
use runner::{injected, Runner};

/// The model every request names.
const MODEL: &str = "bench";
/// The user message of every request: a task the forecast tool fits.
const PROMPT: &str = "Will it rain in Paris tomorrow? Get me the weather forecast.";
/// oapd's name of the home server's forecast tool.
const OAPD_FORECAST: &str = "oap_get_forecast";

/// oapd and `ollama-mcp-bridge` on the same MCP servers (see the module doc).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// `--oapd`, `--fake-ollama`, `--model-dir`.
    #[command(flatten)]
    bins: procs::Binaries,
    /// A Python with the official MCP SDK, which runs the test servers.
    #[arg(long)]
    python: PathBuf,
    /// The directory of the test servers (`home_server.py`, `office_server.py`).
    #[arg(long)]
    servers: PathBuf,
    /// The venv of `ollama-mcp-bridge` to measure too (one it cannot import
    /// from is a note, not an error).
    #[arg(long)]
    peer_venv: Option<PathBuf>,
    /// 300 requests (at most 15 s) per run instead of 2000 (60 s).
    #[arg(long)]
    quick: bool,
}

/// The peer's installed version in `venv`.
fn peer_version(venv: &Path) -> Result<String> {
    let python = venv.join("bin/python");
    let output = Command::new(&python)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('ollama-mcp-bridge'))",
        ])
        .output()
        .with_context(|| format!("cannot run {}", python.display()))?;
    if !output.status.success() {
        bail!("ollama-mcp-bridge is not importable in {}", venv.display());
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// `{"mcpServers": {name: python script}}` with absolute paths, the file
/// both bridges read.
fn servers_file(args: &Args, servers: &[(&str, &str)]) -> Result<Value> {
    let dir = std::path::absolute(&args.servers).context("--servers")?;
    let entries: serde_json::Map<String, Value> = servers
        .iter()
        .map(|(name, script)| {
            (
                (*name).to_string(),
                json!({"command": args.python, "args": [dir.join(script)]}),
            )
        })
        .collect();
    Ok(json!({ "mcpServers": entries }))
}

/// oapd's extra config: no bundled manifests, the servers file.
fn oapd_yaml(file: &Path) -> String {
    format!(
        "manifests:\n  bundled: false\nmcp:\n  servers_file: {:?}\n  init_timeout: 60\n",
        file.display().to_string()
    )
}

/// The processes and files of one benchmark run.
struct Bench<'a> {
    args: &'a Args,
    tmp: &'a Path,
    fake: &'a Proc,
    /// The peer's executable, when it is measured.
    peer: Option<PathBuf>,
}

impl Bench<'_> {
    /// A configuration: its servers file, a fresh oapd and a fresh peer.
    fn start_pair(&self, name: &str, servers: &Value) -> Result<(Daemon, Option<Proc>)> {
        let dir = self.tmp.join(name);
        std::fs::create_dir_all(&dir)?;
        let file = dir.join("mcp-servers.json");
        std::fs::write(&file, serde_json::to_vec_pretty(servers)?)?;
        eprintln!("\n== {name}: {servers}");
        let oapd = procs::start_oapd(
            &self.args.bins.oapd,
            self.fake.addr,
            &self.args.bins.model_dir,
            &oapd_yaml(&file),
        )?;
        let peer = match &self.peer {
            Some(bin) => Some(procs::start_peer(
                bin,
                &dir,
                self.fake.addr,
                &serde_json::to_string(servers)?,
            )?),
            None => None,
        };
        Ok((oapd, peer))
    }
}

/// Starts the fake, then each configuration's pair, and measures.
pub fn run(args: Args) -> Result<McpBenchReport> {
    let mut notes = Vec::new();
    let peer_version = match &args.peer_venv {
        Some(venv) => match peer_version(venv) {
            Ok(version) => Some(version),
            Err(err) => {
                notes.push(format!("ollama-mcp-bridge not measured: {err:#}"));
                None
            }
        },
        None => None,
    };
    if let Some(version) = &peer_version {
        eprintln!("peer: ollama-mcp-bridge {version}");
        if version != PEER_VERSION {
            notes.push(format!(
                "ollama-mcp-bridge {version} measured, not the pinned {PEER_VERSION}"
            ));
        }
    }
    let tmp = tempfile::tempdir()?;
    let fake = procs::start_fake(
        &args.bins.fake_ollama,
        tmp.path(),
        &text_script().to_string(),
    )?;
    eprintln!("fake Ollama on {}", fake.addr);
    let (requests, duration) = if args.quick {
        (300, 15.0)
    } else {
        (2000, 60.0)
    };
    let mut runner = Runner {
        fake: fake.addr,
        fake_pid: fake.child.id(),
        requests,
        duration,
        report: McpBenchReport {
            machine: machine_description(),
            date: now_utc(),
            quick: args.quick,
            requests_per_run: requests,
            prompt: PROMPT.to_string(),
            peer: peer_version.clone(),
            runs: Vec::new(),
            cpu: Vec::new(),
            oapd_discover_c1: None,
            offered: Vec::new(),
            memory: Vec::new(),
            notes,
        },
    };
    let bench = Bench {
        args: &args,
        tmp: tmp.path(),
        fake: &fake,
        peer: peer_version.as_ref().and_then(|_| {
            args.peer_venv
                .as_ref()
                .map(|venv| venv.join("bin/ollama-mcp-bridge"))
        }),
    };
    eprintln!("\n{}", ProxyLoadReport::TABLE_HEADER);
    pure_proxy(&bench, &mut runner)?;
    tool_round(&bench, &mut runner)?;
    fifty_tools(&bench, &mut runner)?;
    Ok(runner.report)
}

/// Configuration 1, pure proxying.
fn pure_proxy(bench: &Bench, runner: &mut Runner) -> Result<()> {
    let fake = bench.fake.addr;
    set_script(fake, &text_script())?;
    let (oapd, peer) = bench.start_pair("empty", &servers_file(bench.args, &[])?)?;
    for c in [1, 16] {
        runner.load(&format!("empty/direct/c{c}"), fake, c, false)?;
        runner.load(&format!("empty/oapd/c{c}"), oapd.addr, c, false)?;
        runner.load(&format!("empty/oapd-no-discover/c{c}"), oapd.addr, c, true)?;
        if let Some(peer) = &peer {
            runner.load(&format!("empty/peer/c{c}"), peer.addr, c, false)?;
        }
    }
    runner.record_memory(
        "pure-proxy",
        oapd.pid(),
        peer.as_ref().map(|p| p.child.id()),
    )?;
    Ok(())
}

/// Configuration 2, one real server: a tool round per chat.
fn tool_round(bench: &Bench, runner: &mut Runner) -> Result<()> {
    let fake = bench.fake.addr;
    let (oapd, peer) = bench.start_pair(
        "home",
        &servers_file(bench.args, &[("home", "home_server.py")])?,
    )?;
    wait_indexed(oapd.addr, "home", "get_forecast", 4)?;
    set_script(fake, &text_script())?;
    let ours = injected(fake, oapd.addr, &bench.tmp.join("home-oapd.json"))?;
    eprintln!("oapd offered: {:?}", ours.names);
    if !ours.names.iter().any(|n| n == OAPD_FORECAST) {
        bail!(
            "oapd did not offer {OAPD_FORECAST} for {PROMPT:?}: {:?}",
            ours.names
        );
    }
    runner.report.offered.push(McpOffered {
        key: "home/oapd".into(),
        forecast_tool: Some(OAPD_FORECAST.into()),
        tools: ours,
    });
    set_script(fake, &tool_script(OAPD_FORECAST))?;
    let result = check_tool_round(fake, oapd.addr)?;
    eprintln!("oapd tool round checked: the server answered {result:?}");
    runner.load("home/oapd/c1", oapd.addr, 1, false)?;
    runner.load_with_cpu("home/oapd/c16", oapd.addr, 16, oapd.pid())?;
    // Where the tool round's time goes: discovery of the same task alone
    // (the query embedding, nearly all of it), on the same daemon.
    runner.report.oapd_discover_c1 = Some(runner.discovery_alone(bench.tmp, oapd.addr)?);
    // The baseline: the same chat straight to the fake, the call handed back.
    runner.load("home/direct/c1", fake, 1, false)?;
    runner.load("home/direct/c16", fake, 16, false)?;
    if let Some(peer) = &peer {
        set_script(fake, &text_script())?;
        let offered = injected(fake, peer.addr, &bench.tmp.join("home-peer.json"))?;
        eprintln!("ollama-mcp-bridge offered: {:?}", offered.names);
        let tool = offered
            .names
            .iter()
            .find(|n| n.ends_with("get_forecast"))
            .cloned()
            .with_context(|| format!("the peer offered no forecast tool: {:?}", offered.names))?;
        set_script(fake, &tool_script(&tool))?;
        let result = check_tool_round(fake, peer.addr)?;
        eprintln!("ollama-mcp-bridge tool round checked ({tool}): the server answered {result:?}");
        runner.report.offered.push(McpOffered {
            key: "home/peer".into(),
            forecast_tool: Some(tool),
            tools: offered,
        });
        runner.load("home/peer/c1", peer.addr, 1, false)?;
        runner.load_with_cpu("home/peer/c16", peer.addr, 16, peer.child.id())?;
    }
    runner.record_memory(
        "tool-round",
        oapd.pid(),
        peer.as_ref().map(|p| p.child.id()),
    )?;
    Ok(())
}

/// Configuration 3, fifty tools: what each bridge injects for a fitting task.
fn fifty_tools(bench: &Bench, runner: &mut Runner) -> Result<()> {
    let fake = bench.fake.addr;
    let (oapd, peer) = bench.start_pair(
        "office",
        &servers_file(bench.args, &[("office", "office_server.py")])?,
    )?;
    wait_indexed(oapd.addr, "office", "get_forecast", 50)?;
    set_script(fake, &text_script())?;
    let ours = injected(fake, oapd.addr, &bench.tmp.join("office-oapd.json"))?;
    eprintln!(
        "oapd offered {} tools, {} tokens: {:?}",
        ours.tools, ours.tool_tokens, ours.names
    );
    let offers_forecast = ours.names.iter().any(|n| n == OAPD_FORECAST);
    if !offers_forecast {
        runner.report.notes.push(format!(
            "with fifty tools oapd did not offer {OAPD_FORECAST} for the forecast task: {:?}",
            ours.names
        ));
    }
    runner.report.offered.push(McpOffered {
        key: "office/oapd".into(),
        forecast_tool: offers_forecast.then(|| OAPD_FORECAST.into()),
        tools: ours,
    });
    if offers_forecast {
        set_script(fake, &tool_script(OAPD_FORECAST))?;
        check_tool_round(fake, oapd.addr)?;
        runner.load("office/oapd/c1", oapd.addr, 1, false)?;
    }
    if let Some(peer) = &peer {
        set_script(fake, &text_script())?;
        let offered = injected(fake, peer.addr, &bench.tmp.join("office-peer.json"))?;
        eprintln!(
            "ollama-mcp-bridge offered {} tools, {} tokens",
            offered.tools, offered.tool_tokens
        );
        let tool = offered
            .names
            .iter()
            .find(|n| n.ends_with("get_forecast"))
            .cloned();
        runner.report.offered.push(McpOffered {
            key: "office/peer".into(),
            forecast_tool: tool.clone(),
            tools: offered,
        });
        if let Some(tool) = tool {
            set_script(fake, &tool_script(&tool))?;
            check_tool_round(fake, peer.addr)?;
            runner.load("office/peer/c1", peer.addr, 1, false)?;
        }
    }
    runner.record_memory(
        "fifty-tool",
        oapd.pid(),
        peer.as_ref().map(|p| p.child.id()),
    )?;
    Ok(())
}
