//! Running commands for the tasks: in the repository root, shown as they
//! run, failing with the command's name; cargo; the Python test venv and
//! pip in it.

use std::process::Command;

use anyhow::{bail, Context};

use crate::repo_root;

/// Prints `$ command`, runs it in the repository root, fails if it fails.
pub(crate) fn run_in_root(command: &mut Command) -> anyhow::Result<()> {
    let shown = shown(command);
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

/// `command` as `{:?}` writes it, less the variables it removes (cargo's
/// own, taken away by [`cargo`]), which would bury the command.
fn shown(command: &Command) -> String {
    let mut parts: Vec<String> = command
        .get_envs()
        .filter_map(|(name, value)| Some(format!("{}={:?}", name.to_string_lossy(), value?)))
        .collect();
    parts.push(format!("{:?}", command.get_program()));
    parts.extend(command.get_args().map(|arg| format!("{arg:?}")));
    parts.join(" ")
}

/// Cargo, without what `cargo run` told xtask about xtask itself
/// ([`is_runs_own_package_variable`]). Build scripts (ring's, through `cc`)
/// rerun when such a variable changes, so a build started here would
/// recompile ring, rustls and everything above them up to the daemon, and
/// the next plain `cargo build` all of it again.
pub(crate) fn cargo() -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(is_runs_own_package_variable) {
            command.env_remove(&name);
        }
    }
    command
}

/// Whether `name` is one of the variables cargo sets for the package it
/// runs (`CARGO_MANIFEST_DIR`, `CARGO_PKG_NAME`, ...), not one a user sets
/// to steer cargo (`CARGO_HOME`, `CARGO_TARGET_DIR`, `CARGO` itself).
fn is_runs_own_package_variable(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || matches!(
            name,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "OUT_DIR"
        )
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

#[cfg(test)]
mod tests {
    /// The test runs as cargo runs xtask, with the package's variables
    /// set; the cargo it starts must not see them.
    #[test]
    fn cargo_runs_without_the_variables_of_the_package_that_runs_it() {
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        assert!(std::env::var_os("CARGO_PKG_NAME").is_some());
        let cargo = super::cargo();
        let removed: Vec<_> = cargo
            .get_envs()
            .filter(|(_, value)| value.is_none())
            .map(|(name, _)| name.to_string_lossy().into_owned())
            .collect();
        for name in [
            "CARGO_MANIFEST_DIR",
            "CARGO_PKG_NAME",
            "CARGO_PKG_VERSION_MAJOR",
        ] {
            assert!(
                removed.iter().any(|r| r == name),
                "{name} not removed: {removed:?}"
            );
        }
        assert!(super::is_runs_own_package_variable("CARGO_PKG_VERSION_PRE"));
        for kept in ["CARGO", "CARGO_HOME", "CARGO_TARGET_DIR", "RUSTFLAGS"] {
            assert!(!super::is_runs_own_package_variable(kept), "{kept}");
        }
    }
}
