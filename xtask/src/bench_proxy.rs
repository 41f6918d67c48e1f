//! `cargo xtask bench-proxy`: the runner of `oap-bench proxy`, which
//! measures the latency `oapd` adds in front of a fake Ollama (and the
//! Python peer `ollama-mcp-bridge`'s) and oapd's memory over a long
//! pure-proxy run (its module doc says how).
//!
//! Builds `oap-bench`, oapd and the fake Ollama, hands their paths, the
//! model and (unless `--no-peer`) `target/peer-venv/bin/ollama-mcp-bridge`
//! to it with every other option as given (`--quick`, `--leak N`), and
//! prints its report's tables.

use std::time::Instant;

use anyhow::Result;
use oap_bench::machine::loadavg;
use oap_bench::proxy_report::ProxyBenchReport;

use crate::bench_run::{self, prologue, RunnerArgs};
use crate::repo_root;

const USAGE: &str = "usage: cargo xtask bench-proxy [--quick] [--no-peer] [--leak N]\n  \
    --quick    fewer requests per run (300 instead of 2000) and a 20k leak run\n  \
    --no-peer  skip ollama-mcp-bridge even if target/peer-venv has it\n  \
    --leak N   requests in the memory run (default 100000)";

pub fn run(args: &[String]) -> Result<()> {
    if bench_run::wants_help(args) {
        println!("{USAGE}");
        return Ok(());
    }
    let runner = RunnerArgs::split(args, &[], &["--no-peer"])?;
    let started = Instant::now();
    let (bench, bin, model_dir) = prologue()?;
    let mut command = bench_run::command(&bench, "proxy");
    command
        // The tables are printed here, from the report, once.
        .arg("--quiet")
        .arg("--oapd")
        .arg(bin.join("oapd"))
        .arg("--fake-ollama")
        .arg(bin.join("fake-ollama"))
        .arg("--model-dir")
        .arg(&model_dir);
    if !runner.flag("--no-peer") {
        command
            .arg("--peer")
            .arg(repo_root().join("target/peer-venv/bin/ollama-mcp-bridge"));
    }
    command.args(&runner.rest);
    let report: ProxyBenchReport = bench_run::report(&mut command)?;
    print!("{}", report.render());
    println!(
        "\nload average at end: {}; total {:.0} s",
        loadavg(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
