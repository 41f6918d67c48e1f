//! `cargo xtask bench-experience [experience-replay options]`: hit rate,
//! wrong hits, tool accuracy and the discovery-step latency saved by the
//! experience cache, on a task log replayed from the shared labelled task
//! set (see `crates/oap-bench/src/experience_replay.rs` for the log and the
//! oracle). In process, no network; the index is built in
//! `target/bench/experience/`. The runner builds `oap-bench`, passes every
//! option to `oap-bench experience-replay` as given and prints its table.

use anyhow::Result;
use oap_bench::report::ExperienceReport;

use crate::bench_run;
use oap_bench::machine::{loadavg, machine_description};

pub fn run(args: &[String]) -> Result<()> {
    if bench_run::wants_help(args) {
        return bench_run::show_help("experience-replay");
    }
    let bin = bench_run::build(&[])?;
    println!("machine: {}", machine_description());
    println!("load average (1/5/15 min): {}", loadavg());
    let report: ExperienceReport = bench_run::report(
        bench_run::command(&bin, "experience-replay")
            .arg("--quiet")
            .args(args)
            .env("RUST_LOG", "warn"),
    )?;
    println!("{}", report.table());
    Ok(())
}
