//! `cargo xtask bench-experience`: hit rate, wrong hits, tool accuracy and
//! the discovery-step latency saved by the experience cache, on a task log
//! replayed from the shared labelled task set (see
//! `crates/oap-bench/src/experience_replay.rs` for the log and the oracle).
//! In process, no network; the index is built in `target/bench/experience/`.

use anyhow::{bail, Context, Result};
use oap_bench::report::ExperienceReport;

use crate::{bench_run, repo_root};

const USAGE: &str = "usage: cargo xtask bench-experience [--thresholds 0.80,0.85,0.90,0.95]";

pub fn run(args: &[String]) -> Result<()> {
    let mut thresholds = "0.80,0.85,0.90,0.95".to_string();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--thresholds" => {
                thresholds = it.next().context("--thresholds needs a value")?.clone();
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    let root = repo_root();
    let tasks = root.join("bench/discovery-tasks.jsonl");
    let manifests = root.join("tests/fixtures/reference-manifests/oap-dev");
    let model = root.join("models/all-MiniLM-L6-v2");
    for (what, path) in [
        ("task set", &tasks),
        ("manifests", &manifests),
        ("model", &model),
    ] {
        if !path.exists() {
            bail!("{what} missing: {}", path.display());
        }
    }
    let bin = bench_run::build(&[])?;
    let work = root.join("target/bench/experience");
    std::fs::create_dir_all(&work)?;
    println!(
        "machine: {} cores; load average (1/5/15 min): {}",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let report: ExperienceReport = bench_run::report(
        bench_run::command(&bin, "experience-replay")
            .arg("--quiet")
            .arg("--tasks")
            .arg(&tasks)
            .arg("--manifests")
            .arg(&manifests)
            .arg("--model")
            .arg(&model)
            .arg("--work")
            .arg(&work)
            .args(["--thresholds", &thresholds])
            .env("RUST_LOG", "warn"),
    )?;
    println!("{}", report.table());
    Ok(())
}
