//! `cargo xtask bench-memory`: the runner of `oap-bench memory`, which
//! measures what a burst of large chat bodies costs oapd in resident
//! memory and whether it gives it back, for one daemon build or two side
//! by side (its module doc says how).
//!
//! Builds the fake Ollama, `oap-bench` and (unless `--oapd PATH` names
//! another build) oapd, each alone as earlier runs cached them, hands
//! their paths and the model to it with every other option as given
//! (`--against PATH`, `--clients`, `--mb`, `--delay-ms`, `--settle`), and
//! prints its report's table.

use anyhow::Result;
use oap_bench::machine::loadavg;
use oap_bench::report::MemoryReport;

use crate::bench_run::{self, build_fake_ollama, RunnerArgs};
use crate::repo_root;
use crate::tasks::{cargo, run_in_root};

pub fn run(args: &[String]) -> Result<()> {
    if bench_run::wants_help(args) {
        println!(
            "cargo xtask bench-memory [--oapd PATH] [--against PATH] [burst options]\n  \
             --oapd PATH  the daemon binary to measure (default: target/release/oapd, built)\n"
        );
        return bench_run::show_help("memory");
    }
    let runner = RunnerArgs::split(args, &["--oapd"], &[])?;
    bench_run::print_header();
    if runner.value("--oapd").is_none() {
        run_in_root(cargo().args(["build", "--release", "-p", "oapd", "--bin", "oapd"]))?;
    }
    build_fake_ollama()?;
    let bench = bench_run::build(&[])?;
    let bin = repo_root().join("target/release");
    let oapd = runner
        .value("--oapd")
        .map_or_else(|| bin.join("oapd"), Into::into);
    let mut command = bench_run::command(&bench, "memory");
    command
        .arg("--quiet")
        .arg("--oapd")
        .arg(oapd)
        .arg("--fake-ollama")
        .arg(bin.join("fake-ollama"))
        .arg("--model-dir")
        .arg(bench_run::model_dir()?)
        .args(&runner.rest);
    let report: MemoryReport = bench_run::report(&mut command)?;
    print!("{}", report.render());
    println!("\nload average at end: {}", loadavg());
    Ok(())
}
