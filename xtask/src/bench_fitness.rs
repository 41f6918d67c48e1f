//! `cargo xtask bench-fitness`: what the small-model features cost, each
//! side by side with its baseline in the same run.
//!
//! The runner: builds `oap-bench`, oapd and the fake Ollama, starts the
//! fake and three `oapd serve` instances in front of it (the bench-proxy
//! launchers), differing only in `tool_bridge.url_policy` (off, flag,
//! remove; the `off` one also has one `tool_bridge.force` rule), and hands
//! them to `oap-bench fitness`, which measures (its module doc says what)
//! and whose JSON report is printed here as p50/p95 tables in ms with the
//! ratio to each group's baseline. Its options (`--quick`) are that
//! subcommand's, passed on as given.

use std::time::Instant;

use anyhow::{Context, Result};
use oap_bench::report::FitnessReport;

use oap_bench::machine::{loadavg, machine_description, now_utc};

use crate::bench_procs::{fake_script, start_fake_with, start_oapd_with};
use crate::bench_run::{self, build_fake_ollama, TempDir};
use crate::repo_root;
use crate::tasks::{cargo, run_in_root};

const FORCE_YAML: &str =
    "  force:\n    - pattern: \"^status report\\\\b\"\n      tool: local/date\n";

pub fn run(args: &[String]) -> Result<()> {
    if bench_run::wants_help(args) {
        return bench_run::show_help("fitness");
    }
    let started = Instant::now();
    println!("machine: {}", machine_description());
    println!("date: {}", now_utc());
    println!("load average at start (1/5/15 min): {}", loadavg());
    // Three builds, as before the measuring moved into `oap-bench`: each
    // package alone, so that its build is the one earlier runs cached.
    run_in_root(cargo().args(["build", "--release", "-p", "oapd", "--bin", "oapd"]))?;
    build_fake_ollama()?;
    let bench = bench_run::build(&[])?;
    let bin = repo_root().join("target/release");
    let model_dir = bench_run::model_dir()?;
    let tmp = TempDir::new("fitness")?;

    let fake = start_fake_with(&bin.join("fake-ollama"), &tmp.0, &fake_script())?;
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
        oapds.push(oapd);
    }
    let mut command = bench_run::command(&bench, "fitness");
    command
        .arg("--fake")
        .arg(fake.addr.to_string())
        .arg("--oapd")
        .arg(bin.join("oapd"));
    for (flag, oapd) in ["--off", "--flag", "--remove"].iter().zip(&oapds) {
        command.arg(flag).arg(oapd.addr.to_string());
    }
    let report: FitnessReport = bench_run::report(command.args(args))?;

    print!("{}", report.url.table());
    println!(
        "(answers where the policy acted: {} of {})",
        report.url_policy_acted, report.url_answers
    );
    for group in [
        &report.endpoints_plain,
        &report.endpoints_stream,
        &report.forced,
        &report.validate,
    ] {
        print!("{}", group.table());
    }
    println!(
        "\nload average at end: {}; total {:.0} s",
        loadavg(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
