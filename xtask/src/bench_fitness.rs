//! `cargo xtask bench-fitness`: the runner of `oap-bench fitness`, which
//! measures what the small-model features cost, each side by side with
//! its baseline in the same run (its module doc says how).
//!
//! Builds oapd, the fake Ollama and `oap-bench`, each alone as earlier
//! runs cached them, hands their paths and the model to it with every
//! other option as given (`--quick`), and prints its report's p50/p95
//! tables in ms with the ratio to each group's baseline.

use std::time::Instant;

use anyhow::Result;
use oap_bench::machine::loadavg;
use oap_bench::report::FitnessReport;

use crate::bench_run::{self, build_fake_ollama};
use crate::repo_root;
use crate::tasks::{cargo, run_in_root};

pub fn run(args: &[String]) -> Result<()> {
    if bench_run::wants_help(args) {
        return bench_run::show_help("fitness");
    }
    let started = Instant::now();
    bench_run::print_header();
    run_in_root(cargo().args(["build", "--release", "-p", "oapd", "--bin", "oapd"]))?;
    build_fake_ollama()?;
    let bench = bench_run::build(&[])?;
    let bin = repo_root().join("target/release");
    let mut command = bench_run::command(&bench, "fitness");
    command
        .arg("--quiet")
        .arg("--oapd")
        .arg(bin.join("oapd"))
        .arg("--fake-ollama")
        .arg(bin.join("fake-ollama"))
        .arg("--model-dir")
        .arg(bench_run::model_dir()?)
        .args(args);
    let report: FitnessReport = bench_run::report(&mut command)?;
    print!("{}", report.render());
    println!(
        "\nload average at end: {}; total {:.0} s",
        loadavg(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
