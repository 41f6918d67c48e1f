//! This binary's own subcommands run as child processes, for a benchmark
//! that wants one in a process of its own (the embedding runs, whose
//! thread-count variables differ between runs; a load generator whose
//! target's memory is sampled meanwhile): the child's stderr shown as it
//! comes, its stdout read as its JSON report.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

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

/// Runs `command`, calling `tick` every 50 ms while it runs (to sample
/// another process's memory, say). Returns its JSON report and whether it
/// exited successfully: a load run with failed requests still reports.
pub(crate) fn report_and_status<T: DeserializeOwned>(
    command: &mut Command,
    mut tick: impl FnMut(),
) -> Result<(T, bool)> {
    let shown = shown(command);
    eprintln!("$ {shown}");
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("cannot start {shown}"))?;
    let mut stdout = child.stdout.take().context("no stdout pipe")?;
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        stdout.read_to_string(&mut text).map(|_| text)
    });
    let status = loop {
        tick();
        if let Some(status) = child.try_wait()? {
            break status;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = reader
        .join()
        .map_err(|_| anyhow::anyhow!("{shown}: stdout reader failed"))?
        .with_context(|| format!("{shown}: stdout"))?;
    if !status.success() && text.trim().is_empty() {
        // Refused its arguments or failed before measuring: it said why on stderr.
        anyhow::bail!("{shown} failed ({status})");
    }
    let report = serde_json::from_str(&text)
        .with_context(|| format!("{shown} ({status}) wrote no JSON report"))?;
    Ok((report, status.success()))
}

/// [`report_and_status`] for a run that must succeed.
pub(crate) fn report<T: DeserializeOwned>(command: &mut Command) -> Result<T> {
    let shown = shown(command);
    let (report, ok) = report_and_status(command, || {})?;
    if !ok {
        anyhow::bail!("{shown} failed");
    }
    Ok(report)
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
