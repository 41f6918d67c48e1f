//! `cargo xtask bench-mcp`: the runner of `oap-bench mcp`, which measures
//! oapd and the Python peer `ollama-mcp-bridge` side by side on the same
//! `mcpServers` files in front of the same fake Ollama (its module doc
//! says how).
//!
//! Builds `oap-bench`, oapd and the fake Ollama; makes sure of the Python
//! the test servers need (the SDK in `target/pyclients`) and, unless
//! `--no-peer`, of the peer's pinned release in `target/peer-venv`
//! (installed when missing); hands all their paths and the model to it
//! with every other option as given (`--quick`), prints its report's
//! tables and keeps the report as `target/bench/bench-mcp.json`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Result};
use oap_bench::machine::loadavg;
use oap_bench::mcp_report::{McpBenchReport, PEER_VERSION};

use crate::bench_run::{self, prologue, RunnerArgs};
use crate::repo_root;
use crate::tasks::run_in_root;

const USAGE: &str = "usage: cargo xtask bench-mcp [--quick] [--no-peer]\n  \
    --quick    300 requests (at most 15 s) per run instead of 2000 (60 s)\n  \
    --no-peer  measure oapd alone";

pub fn run(args: &[String]) -> Result<()> {
    if bench_run::wants_help(args) {
        println!("{USAGE}");
        return Ok(());
    }
    let runner = RunnerArgs::split(args, &[], &["--no-peer"])?;
    let started = Instant::now();
    let (bench, bin, model_dir) = prologue()?;
    let mut command = bench_run::command(&bench, "mcp");
    command
        // The tables are printed here, from the report, once.
        .arg("--quiet")
        .arg("--oapd")
        .arg(bin.join("oapd"))
        .arg("--fake-ollama")
        .arg(bin.join("fake-ollama"))
        .arg("--model-dir")
        .arg(&model_dir)
        .arg("--python")
        .arg(sdk_python()?)
        .arg("--servers")
        .arg(repo_root().join("tests/mcp"));
    if !runner.flag("--no-peer") {
        command.arg("--peer-venv").arg(peer_venv());
    }
    command.args(&runner.rest);
    let report: McpBenchReport = bench_run::report(&mut command)?;
    print!("{}", report.render());
    let out = repo_root().join("target/bench/bench-mcp.json");
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
    Ok(())
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

/// `target/peer-venv`, with the peer's pinned release installed when it
/// has none; a failed install is reported and left to `oap-bench mcp`,
/// which notes the peer as not measured.
fn peer_venv() -> PathBuf {
    let venv = repo_root().join("target/peer-venv");
    let python = venv.join("bin/python");
    let installed = Command::new(&python)
        .args([
            "-c",
            "import importlib.metadata as m; m.version('ollama-mcp-bridge')",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if !installed {
        let install = || -> Result<()> {
            if !python.is_file() {
                run_in_root(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
            }
            run_in_root(Command::new(&python).args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                &format!("ollama-mcp-bridge=={PEER_VERSION}"),
            ]))
        };
        if let Err(err) = install() {
            println!("ollama-mcp-bridge {PEER_VERSION} not installed: {err:#}");
        }
    }
    venv
}
