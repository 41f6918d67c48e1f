//! What every `bench-*` task shares: building the `oap-bench` binary (once
//! per task, with whatever else the task runs) and reading the JSON report
//! of one of its runs. No task reads what a benchmark prints for people.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};
use oap_bench::machine::{loadavg, machine_description, now_utc};
use serde::de::DeserializeOwned;

use crate::repo_root;
use crate::tasks::{cargo, run_in_root};

/// Builds `oap-bench` and, from `also`, more `--package P --bin B` pairs
/// (`&[("oapd", "oapd")]`), in one release build; returns `oap-bench`'s path.
pub(crate) fn build(also: &[(&str, &str)]) -> Result<PathBuf> {
    let mut command = build_command();
    for (package, bin) in also {
        command.args(["--package", package, "--bin", bin]);
    }
    run_in_root(&mut command)?;
    Ok(repo_root().join("target/release/oap-bench"))
}

/// Builds the scripted fake Ollama (release) for the benches and the
/// image boot test; it lands in `target/release/fake-ollama`.
pub(crate) fn build_fake_ollama() -> Result<()> {
    run_in_root(cargo().args([
        "build",
        "--release",
        "-p",
        "fake-ollama",
        "--bin",
        "fake-ollama",
    ]))
}

/// `cargo build --release` of the `oap-bench` binary, to run in a source
/// tree (this one, or an earlier release's).
pub(crate) fn build_command() -> Command {
    let mut command = cargo();
    command.args([
        "build",
        "--release",
        "--package",
        "oap-bench",
        "--bin",
        "oap-bench",
    ]);
    command
}

/// `oap-bench SUBCOMMAND ARGS...` as a command to finish and run.
pub(crate) fn command(bin: &std::path::Path, subcommand: &str) -> Command {
    let mut command = Command::new(bin);
    command.arg(subcommand);
    command
}

/// Runs `command` (an `oap-bench` subcommand) in the repository root, its
/// stderr shown as it comes, calling `tick` every 50 ms while it runs (to
/// sample another process's memory, say). Returns its JSON report and
/// whether it exited successfully: a load run with failed requests still
/// reports them.
pub(crate) fn report_and_status<T: DeserializeOwned>(
    command: &mut Command,
    tick: impl FnMut(),
) -> Result<(T, bool)> {
    let shown = shown(command);
    oap_bench::child_report::report_and_status(command.current_dir(repo_root()), &shown, tick)
}

/// [`report_and_status`] for a run that must succeed.
pub(crate) fn report<T: DeserializeOwned>(command: &mut Command) -> Result<T> {
    let shown = shown(command);
    oap_bench::child_report::report(command.current_dir(repo_root()), &shown)
}

/// A command as it would be typed: the variables it sets (but `RUST_LOG`),
/// then the program and arguments, paths under the repository shortened.
pub(crate) fn shown(command: &Command) -> String {
    let root = format!("{}/", repo_root().display());
    let mut parts: Vec<String> = command
        .get_envs()
        .filter_map(|(k, v)| Some(format!("{}={}", k.to_string_lossy(), v?.to_string_lossy())))
        .filter(|kv| !kv.starts_with("RUST_LOG="))
        .collect();
    parts.push(command.get_program().to_string_lossy().into_owned());
    parts.extend(command.get_args().map(|a| a.to_string_lossy().into_owned()));
    parts
        .iter()
        .map(|p| p.replace(&root, ""))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether a task's arguments ask for help: the options are the
/// `oap-bench` subcommand's, and so is the help.
pub(crate) fn wants_help(args: &[String]) -> bool {
    args.iter().any(|a| a == "-h" || a == "--help")
}

/// Builds `oap-bench` alone and prints `oap-bench SUBCOMMAND --help`.
pub(crate) fn show_help(subcommand: &str) -> Result<()> {
    let bench = build(&[])?;
    run_in_root(command(&bench, subcommand).arg("--help"))
}

/// The header of a benchmark's output: the machine, the date and the load
/// average, printed before anything is built.
pub(crate) fn print_header() {
    println!("machine: {}", machine_description());
    println!("date: {}", now_utc());
    println!("load average at start (1/5/15 min): {}", loadavg());
}

/// What the benches whose daemons `oap-bench` starts share before they
/// measure: the header printed, `oap-bench`, oapd and the fake Ollama
/// built, and the model checked. Returns the `oap-bench` binary,
/// `target/release` and the model directory.
pub(crate) fn prologue() -> Result<(PathBuf, PathBuf, PathBuf)> {
    print_header();
    let bench = build(&[("oapd", "oapd")])?;
    build_fake_ollama()?;
    let bin = repo_root().join("target/release");
    Ok((bench, bin, model_dir()?))
}

/// The embedding model directory the benchmarks load, which must exist.
pub(crate) fn model_dir() -> Result<PathBuf> {
    let dir = repo_root().join("models/all-MiniLM-L6-v2");
    if !dir.is_dir() {
        anyhow::bail!(
            "{} missing: run `cargo xtask fetch-model` first",
            dir.display()
        );
    }
    Ok(dir)
}

/// A task's arguments split in two: the runner's own options (what to
/// build, what to draw afterwards), which only the runner understands, and
/// the rest, which are the `oap-bench` subcommand's and passed on as given
/// (its parser checks them and names what is wrong).
#[derive(Debug, Default)]
pub(crate) struct RunnerArgs {
    values: std::collections::BTreeMap<&'static str, String>,
    flags: std::collections::BTreeSet<&'static str>,
    /// The subcommand's arguments, in their order.
    pub(crate) rest: Vec<String>,
}

impl RunnerArgs {
    /// Takes the options named in `with_value` (each followed by its value)
    /// and the flags in `flags` out of `args`.
    pub(crate) fn split(
        args: &[String],
        with_value: &[&'static str],
        flags: &[&'static str],
    ) -> Result<RunnerArgs> {
        let mut split = RunnerArgs::default();
        let mut iter = args.iter();
        while let Some(arg) = iter.next() {
            if let Some(name) = with_value.iter().find(|name| **name == arg.as_str()) {
                let value = iter
                    .next()
                    .with_context(|| format!("{name} needs a value"))?;
                split.values.insert(name, value.clone());
            } else if let Some(name) = flags.iter().find(|name| **name == arg.as_str()) {
                split.flags.insert(name);
            } else {
                split.rest.push(arg.clone());
            }
        }
        Ok(split)
    }

    /// The value given to runner option `name`, if it was given.
    pub(crate) fn value(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// Whether runner flag `name` was given.
    pub(crate) fn flag(&self, name: &str) -> bool {
        self.flags.contains(name)
    }
}

#[cfg(test)]
mod tests {
    use super::RunnerArgs;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_runners_options_are_taken_out_and_the_rest_passed_on_in_order() {
        let split = RunnerArgs::split(
            &args(&[
                "--minutes",
                "0.5",
                "--bin-dir",
                "/b",
                "--no-plot",
                "--crawl",
                "9",
            ]),
            &["--bin-dir", "--replot"],
            &["--no-plot"],
        )
        .expect("split");
        assert_eq!(split.value("--bin-dir"), Some("/b"));
        assert_eq!(split.value("--replot"), None);
        assert!(split.flag("--no-plot"));
        assert_eq!(split.rest, args(&["--minutes", "0.5", "--crawl", "9"]));
    }

    #[test]
    fn a_runner_option_without_its_value_is_refused_by_name() {
        let err =
            RunnerArgs::split(&args(&["--bin-dir"]), &["--bin-dir"], &[]).expect_err("refused");
        assert!(err.to_string().contains("--bin-dir needs a value"), "{err}");
    }
}
