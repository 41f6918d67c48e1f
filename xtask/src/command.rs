//! Running commands for the tasks: in the repository root, shown as they
//! run, failing with the command's name; cargo; the Python test venv and
//! pip in it.

use std::process::Command;

use anyhow::{bail, Context};

use crate::repo_root;

/// Prints `$ command`, runs it in the repository root, fails if it fails.
pub(crate) fn run_in_root(command: &mut Command) -> anyhow::Result<()> {
    let shown = format!("{command:?}");
    println!("$ {shown}");
    let status = command
        .current_dir(repo_root())
        .status()
        .with_context(|| format!("cannot start {shown}"))?;
    if !status.success() {
        bail!("{shown} failed: {status}");
    }
    Ok(())
}

pub(crate) fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// `python -m pip install -r requirements` (quietly), for the test venvs.
pub(crate) fn pip_install(
    python: &std::path::Path,
    requirements: &std::path::Path,
) -> anyhow::Result<()> {
    run_in_root(
        Command::new(python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(requirements),
    )
}

/// The target/pyclients venv with tests/python/requirements.txt installed.
pub(crate) fn python_venv() -> anyhow::Result<()> {
    let root = repo_root();
    let venv = root.join("target/pyclients");
    let python = venv.join("bin/python");
    if !python.is_file() {
        run_in_root(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    }
    pip_install(&python, &root.join("tests/python/requirements.txt"))
}
