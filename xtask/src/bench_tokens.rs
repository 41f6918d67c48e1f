//! `cargo xtask bench-tokens [--top-k K] [--budget N...]`: estimated prompt
//! tokens of the tools the bridge offers per request — direct vs budget vs
//! meta exposure — over the shared task set, and how often the labelled
//! tool is still offered. In-process through the daemon's own code path
//! (`oap-bench tool-tokens`); no Ollama needed.

use anyhow::{bail, Context, Result};
use oap_bench::report::TokensReport;

use crate::bench_run;

pub fn run(args: &[String]) -> Result<()> {
    let bin = bench_run::build(&[])?;
    let mut command = bench_run::command(&bin, "tool-tokens");
    command
        .env("RUST_LOG", "warn")
        .arg("--quiet")
        .args(bench_run::SHARED_TASK_SET);
    let mut budgets = false;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--top-k" | "--budget" => {
                budgets |= arg == "--budget";
                let value = rest
                    .next()
                    .with_context(|| format!("{arg} needs a value"))?;
                command.args([arg.as_str(), value.as_str()]);
            }
            other => bail!("unknown argument {other}"),
        }
    }
    if !budgets {
        command.args(["--budget", "300", "--budget", "150"]);
    }
    let report: TokensReport = bench_run::report(&mut command)?;
    println!("{}", report.table());
    Ok(())
}
