//! `cargo xtask bench-tokens [tool-tokens options]`: estimated prompt
//! tokens of the tools the bridge offers per request — direct vs budget vs
//! meta exposure — over the shared task set, and how often the labelled
//! tool is still offered. In-process through the daemon's own code path;
//! the runner builds `oap-bench`, hands every option to `oap-bench
//! tool-tokens` as given (its defaults are the shared task set and budgets
//! of 300 and 150) and prints the table of its JSON report.

use anyhow::Result;
use oap_bench::report::TokensReport;

use crate::bench_run;

pub fn run(args: &[String]) -> Result<()> {
    if bench_run::wants_help(args) {
        return bench_run::show_help("tool-tokens");
    }
    let bin = bench_run::build(&[])?;
    let mut command = bench_run::command(&bin, "tool-tokens");
    command.env("RUST_LOG", "warn").arg("--quiet").args(args);
    let report: TokensReport = bench_run::report(&mut command)?;
    println!("{}", report.table());
    Ok(())
}
