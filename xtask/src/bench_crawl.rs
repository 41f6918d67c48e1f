//! `cargo xtask bench-crawl [crawl-load options]`: the runner of
//! `oap-bench crawl-load` (crawler throughput, footprint and its effect on
//! discovery latency; its doc says how). Builds `oap-bench` and oapd, runs
//! it on that oapd with every option as given (`--quick`, `--count`,
//! `--rate`: see its help), prints its report as a dated Markdown
//! subsection and writes it under target/bench, to add under "Crawler" in
//! docs/BENCHMARKS.md beside the earlier runs (a run never overwrites the
//! recorded history).

use anyhow::{Context, Result};
use oap_bench::machine::loadavg;
use oap_bench::report::CrawlLoadReport;

use crate::bench_run;
use crate::repo_root;

pub fn run(args: &[String]) -> Result<()> {
    if bench_run::wants_help(args) {
        return bench_run::show_help("crawl-load");
    }
    let root = repo_root();
    let load_before = loadavg();
    let bench = bench_run::build(&[("oapd", "oapd")])?;
    let result: CrawlLoadReport = bench_run::report(
        bench_run::command(&bench, "crawl-load")
            .arg("--oapd")
            .arg(root.join("target/release/oapd"))
            .args(args),
    )?;
    let load_after = loadavg();
    let command = if args.is_empty() {
        "cargo xtask bench-crawl".to_string()
    } else {
        format!("cargo xtask bench-crawl {}", args.join(" "))
    };
    let section = result.markdown_section(&command, &load_before, &load_after);
    println!("\n{section}");
    let out = root.join("target/bench/bench-crawl.markdown");
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(&out, &section).with_context(|| format!("cannot write {}", out.display()))?;
    println!(
        "wrote {}: add it under \"Crawler\" in docs/BENCHMARKS.md",
        out.display()
    );
    Ok(())
}
