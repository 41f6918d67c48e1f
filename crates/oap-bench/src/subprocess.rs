//! This binary's own subcommands run as child processes, for a benchmark
//! that wants one in a process of its own (the embedding runs, whose
//! thread-count variables differ between runs; a load generator whose
//! target's memory is sampled meanwhile): the child's stderr shown as it
//! comes, its stdout read as its JSON report.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result};
use serde::de::DeserializeOwned;

/// `oap-bench SUBCOMMAND --quiet` of this binary (its table is the
/// caller's to print).
pub(crate) fn command(subcommand: &str) -> Result<Command> {
    let exe = std::env::current_exe().context("the oap-bench binary's path")?;
    Ok(command_of(&exe, subcommand))
}

/// `BIN SUBCOMMAND --quiet` of another `oap-bench` binary (an earlier
/// release's).
pub(crate) fn command_of(bin: &Path, subcommand: &str) -> Command {
    let mut command = Command::new(bin);
    command.arg(subcommand).arg("--quiet");
    command
}

/// A command as it would be typed, without the binary's directory.
fn shown(command: &Command) -> String {
    let mut parts = vec!["oap-bench".to_string()];
    parts.extend(command.get_args().map(|a| a.to_string_lossy().into_owned()));
    parts.join(" ")
}

/// [`oap_bench::child_report::report_and_status`], shown as typed.
pub(crate) fn report_and_status<T: DeserializeOwned>(
    command: &mut Command,
    tick: impl FnMut(),
) -> Result<(T, bool)> {
    let shown = shown(command);
    oap_bench::child_report::report_and_status(command, &shown, tick)
}

/// [`oap_bench::child_report::report`], shown as typed.
pub(crate) fn report<T: DeserializeOwned>(command: &mut Command) -> Result<T> {
    let shown = shown(command);
    oap_bench::child_report::report(command, &shown)
}

/// Runs `command` (one that writes no report) to its end, its output on
/// stderr (stdout is this process's report); fails when it does.
pub(crate) fn run(command: &mut Command) -> Result<()> {
    let shown = shown(command);
    eprintln!("$ {shown}");
    let status = command
        .stdin(Stdio::null())
        .stdout(std::io::stderr())
        .status()
        .with_context(|| format!("cannot start {shown}"))?;
    if !status.success() {
        anyhow::bail!("{shown}: {status}");
    }
    Ok(())
}
