//! `cargo xtask pipeline-check`: the snapshot pipeline on Ray, end to end.
//!
//! Installs pipeline/requirements.txt (Ray, pinned) into the
//! target/pipeline-venv venv, then runs the one test that drives it
//! (crates/oapd/tests/it/ray_pipeline.rs, ignored in plain `cargo test`
//! because it needs that venv): a two-node Ray cluster on 127.0.0.1
//! crawls manifests from loopback HTTPS, writes request rows with the
//! scripted fake Ollama, indexes per shard, and assembles and signs a
//! snapshot whose vectors must equal one machine's bit for bit. The
//! cluster is the test's child and is stopped when it ends, failed or not.
//! `cargo xtask test` runs it after the suite.

use std::process::Command;

use crate::command::{cargo, pip_install, run_in_root};
use crate::repo_root;

/// Where the pipeline's Python lives, under target/.
const VENV: &str = "target/pipeline-venv";

/// The test that runs the pipeline (a filter of the `it` binaries).
const TEST_FILTER: &str = "ray_pipeline::";

/// `cargo xtask pipeline-check`: the venv, then the test, built as
/// `cargo test -p oapd` builds it.
pub fn run(args: &[String]) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.is_empty(),
        "pipeline-check takes no arguments (OAPD_PIPELINE_DOMAINS=N serves N domains)"
    );
    venv()?;
    run_in_root(&mut test_command(&["-p", "oapd"]))
}

/// After `cargo xtask test`'s workspace run: the same build (`--workspace`
/// resolves features as that run did, so nothing is compiled again).
pub fn after_suite() -> anyhow::Result<()> {
    venv()?;
    run_in_root(&mut test_command(&["--workspace"]))
}

fn test_command(packages: &[&str]) -> Command {
    let mut command = cargo();
    command
        .args(["test", "--release"])
        .args(packages)
        .args([
            "--test",
            "it",
            "--",
            "--ignored",
            "--nocapture",
            TEST_FILTER,
        ])
        .env(
            "OAPD_PIPELINE_PYTHON",
            repo_root().join(VENV).join("bin/python"),
        );
    command
}

/// target/pipeline-venv with pipeline/requirements.txt installed.
fn venv() -> anyhow::Result<()> {
    let root = repo_root();
    let venv = root.join(VENV);
    let python = venv.join("bin/python");
    if !python.is_file() {
        run_in_root(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    }
    pip_install(&python, &root.join("pipeline/requirements.txt"))
}
