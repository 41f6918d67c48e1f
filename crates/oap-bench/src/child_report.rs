//! A benchmark run as a child process, read as its one JSON report: its
//! stdout is the report, its stderr is shown as it comes. `cargo xtask
//! bench-*` runs `oap-bench` this way, and `oap-bench` runs some of its own
//! subcommands this way (in processes of their own); both read the report
//! through these two functions.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};
use serde::de::DeserializeOwned;

/// Runs `command` (printed as `shown`), calling `tick` every 50 ms while it
/// runs (to sample another process's memory, say). Returns its JSON report
/// and whether it exited successfully: a load run with failed requests
/// still reports them.
pub fn report_and_status<T: DeserializeOwned>(
    command: &mut Command,
    shown: &str,
    mut tick: impl FnMut(),
) -> Result<(T, bool)> {
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
pub fn report<T: DeserializeOwned>(command: &mut Command, shown: &str) -> Result<T> {
    let (report, ok) = report_and_status(command, shown, || {})?;
    if !ok {
        anyhow::bail!("{shown} failed");
    }
    Ok(report)
}
