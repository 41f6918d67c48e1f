//! Everyday tasks: run the daemon, run the tests, run the benchmarks. Each
//! fetches the model first, so a fresh clone needs nothing else.

use std::path::Path;
use std::process::Command;

// Where the rest of xtask has always found them; they live below every
// task so that a task's helpers never depend back on the tasks.
pub(crate) use crate::command::{cargo, pip_install, python_venv, run_in_root};
use crate::repo_root;

fn fetch_model() -> anyhow::Result<()> {
    crate::model::run(&[])
}

/// The default model and every other one the tests load
/// (multilingual-e5-small's tests fail, never skip, without it).
fn fetch_test_models() -> anyhow::Result<()> {
    fetch_model()?;
    crate::model::run(&["--model".to_owned(), "multilingual-e5-small".to_owned()])
}

/// `cargo xtask run [OAPD ARGS...]`: the daemon on its built-in defaults and
/// bundled manifests (`oapd serve` unless other arguments are given).
pub fn run(args: &[String]) -> anyhow::Result<()> {
    fetch_model()?;
    let mut command = cargo();
    command.args(["run", "--release", "--package", "oapd", "--"]);
    if args.is_empty() {
        command.arg("serve");
    } else {
        command.args(args);
    }
    run_in_root(&mut command)
}

/// `cargo xtask test [CARGO TEST ARGS...]`: the whole test suite, in
/// release mode (candle inference in a debug build is too slow to test, and
/// one profile means one build), after installing the Debian packages it
/// needs (xtask/debian-packages.txt).
///
/// Without ARGS the Python side (the MCP servers' packages, the client venv,
/// Home Assistant's venv and, if the machine has no CPython new enough for
/// it, that CPython's build) is made on a thread of its own while the
/// workspace's tests compile: mostly downloads and unpacking next to a
/// compile. Both are done before any test runs.
pub fn test(args: &[String]) -> anyhow::Result<()> {
    crate::test_packages::ensure()?;
    fetch_test_models()?;
    let workspace_tests = || {
        let mut command = cargo();
        command
            .args(["test", "--release", "--workspace"])
            .env("OAPD_REQUIRE_MCP_SERVERS", "1");
        command
    };
    if !args.is_empty() {
        mcp_servers()?;
        return run_in_root(workspace_tests().args(args));
    }
    // Checked before minutes of building, not when the suite reaches it.
    let chromium = std::env::var_os("OAPD_CHROMIUM").unwrap_or_else(|| "/usr/bin/chromium".into());
    anyhow::ensure!(
        Path::new(&chromium).is_file(),
        "{} is missing: the status page's test drives Debian's headless Chromium \
         (apt-get install chromium, or set OAPD_CHROMIUM)",
        Path::new(&chromium).display()
    );
    let python_side = std::thread::spawn(prepare_python_side);
    let built = run_in_root(workspace_tests().arg("--no-run"));
    let prepared = python_side
        .join()
        .map_err(|_| anyhow::anyhow!("the thread preparing the Python side panicked"))?;
    built?;
    let ha = prepared?;
    run_in_root(&mut workspace_tests())?;
    python_clients(&ha)?;
    crate::pipeline::after_suite()
}

/// `cargo xtask python-side`: only what [`test`] makes on its thread
/// beside the compile. CI starts it first thing, so that a CPython build
/// for Home Assistant is long done when the tests are built; `test` then
/// finds everything in place.
pub fn python_side(args: &[String]) -> anyhow::Result<()> {
    anyhow::ensure!(args.is_empty(), "python-side takes no arguments");
    prepare_python_side().map(|_| ())
}

/// The MCP servers' packages, the client venv and Home Assistant's venv
/// (with its CPython, built if the machine has none new enough); returns
/// that venv. Two processes doing this at once (CI's early start and the
/// test suite) take turns on a lock in target/, and the second finds the
/// first's work done.
fn prepare_python_side() -> anyhow::Result<std::path::PathBuf> {
    let target = repo_root().join("target");
    std::fs::create_dir_all(&target)?;
    let lock = std::fs::File::create(target.join(".python-side.lock"))?;
    let waited = std::time::Instant::now();
    lock.lock()?;
    if waited.elapsed().as_secs() >= 1 {
        println!(
            "waited {:.0} s for another process preparing the Python side",
            waited.elapsed().as_secs_f64()
        );
    }
    let started = std::time::Instant::now();
    mcp_servers()?;
    let ha = crate::home_assistant::venv()?;
    println!(
        "the Python side (MCP servers, client venv, Home Assistant venv) ready in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(ha)
}

/// The real MCP servers oap-mcp's tests drive: the pinned npm packages of
/// tests/mcp into target/mcp-node and the Python SDK
/// (tests/python/requirements.txt) into the target/pyclients venv.
fn mcp_servers() -> anyhow::Result<()> {
    mcp_node_servers()?;
    python_venv()
}

/// The pinned npm packages of tests/mcp into target/mcp-node (`npm ci`, no
/// install scripts); the arm64 guest takes the same tree (pure JavaScript).
pub(crate) fn mcp_node_servers() -> anyhow::Result<()> {
    let root = repo_root();
    let node = root.join("target/mcp-node");
    std::fs::create_dir_all(&node)?;
    // npm takes a prefix reached through a symlink (a CI clone's target/
    // is one) for a linked package and refuses the lock file: resolve it.
    let node = std::fs::canonicalize(&node)?;
    for file in ["package.json", "package-lock.json"] {
        std::fs::copy(root.join("tests/mcp").join(file), node.join(file))?;
    }
    run_in_root(
        Command::new("npm")
            .args([
                "ci",
                "--ignore-scripts",
                "--no-audit",
                "--no-fund",
                "--prefix",
            ])
            .arg(&node),
    )
}

/// The real `ollama` and `openai` Python packages, and Home Assistant core
/// (from the venv at `ha`), against the real daemon and the scripted fake
/// Ollama (tests/python), in venvs under target/.
fn python_clients(ha: &std::path::Path) -> anyhow::Result<()> {
    let root = repo_root();
    // `cargo test --release --workspace` just built both binaries (their
    // integration tests run them). A separate `cargo build -p oapd -p
    // fake-ollama` resolves features differently and would compile the TLS
    // stack and the daemon a second time (minutes on two cores).
    for bin in ["oapd", "fake-ollama"] {
        let path = root.join("target/release").join(bin);
        anyhow::ensure!(
            path.is_file(),
            "{} is missing: the workspace test build should have made it",
            path.display()
        );
    }
    let python = root.join("target/pyclients/bin/python");
    run_in_root(
        Command::new(&python)
            .args(["-m", "pytest", "-q", "tests/python"])
            .env("OAPD_HA_VENV", ha)
            .env("OAPD_REQUIRE_HA", "1")
            // The status page's test drives Debian's headless Chromium.
            .env("OAPD_REQUIRE_BROWSER", "1"),
    )
}
