//! `cargo xtask bench-tokens [--top-k K] [--budget N...]`: estimated prompt
//! tokens of the tools the bridge offers per request — direct vs budget vs
//! meta exposure — over the shared task set, and how often the labelled
//! tool is still offered. In-process through the daemon's own code path
//! (`crates/oapd/examples/tool_tokens.rs`); no Ollama needed.

use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::repo_root;

pub fn run(args: &[String]) -> Result<()> {
    let root = repo_root();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(&cargo)
        .current_dir(&root)
        .args([
            "build",
            "--release",
            "-p",
            "oapd",
            "--example",
            "tool_tokens",
        ])
        .status()
        .context("cannot run cargo")?;
    if !status.success() {
        bail!("building the tool_tokens example failed: {status}");
    }
    let mut command = Command::new(root.join("target/release/examples/tool_tokens"));
    command.current_dir(&root).env("RUST_LOG", "warn").args([
        "--tasks",
        "bench/discovery-tasks.jsonl",
        "--dir",
        "tests/fixtures/reference-manifests/oap-dev",
        "--dir",
        "tests/fixtures/reference-manifests/manifest-repo",
    ]);
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
    println!("$ {command:?}");
    let status = command.status().context("cannot run tool_tokens")?;
    if !status.success() {
        bail!("tool_tokens failed: {status}");
    }
    Ok(())
}
