//! Everyday tasks: run the daemon, run the tests, run the benchmarks. Each
//! fetches the model first, so a fresh clone needs nothing else.

use std::path::Path;
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

fn fetch_model() -> anyhow::Result<()> {
    crate::model::run(&[])
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
/// one profile means one build).
pub fn test(args: &[String]) -> anyhow::Result<()> {
    fetch_model()?;
    mcp_servers()?;
    run_in_root(
        cargo()
            .args(["test", "--release", "--workspace"])
            .env("OAPD_REQUIRE_MCP_SERVERS", "1")
            .args(args),
    )?;
    if args.is_empty() {
        python_clients()?;
    }
    Ok(())
}

/// The real MCP servers oap-mcp's tests drive: the pinned npm packages of
/// tests/mcp into target/mcp-node (`npm ci`, no install scripts) and the
/// Python SDK (tests/python/requirements.txt) into the target/pyclients venv.
fn mcp_servers() -> anyhow::Result<()> {
    let root = repo_root();
    let node = root.join("target/mcp-node");
    std::fs::create_dir_all(&node)?;
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
    )?;
    python_venv()
}

/// The target/pyclients venv with tests/python/requirements.txt installed.
fn python_venv() -> anyhow::Result<()> {
    let root = repo_root();
    let venv = root.join("target/pyclients");
    let python = venv.join("bin/python");
    if !python.is_file() {
        run_in_root(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    }
    run_in_root(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(root.join("tests/python/requirements.txt")),
    )
}

/// The real `ollama` and `openai` Python packages against the real daemon
/// and the scripted fake Ollama (tests/python), in a venv under target/.
fn python_clients() -> anyhow::Result<()> {
    let root = repo_root();
    run_in_root(cargo().args([
        "build",
        "--release",
        "--package",
        "oapd",
        "--package",
        "fake-ollama",
        "--bins",
    ]))?;
    python_venv()?;
    let python = root.join("target/pyclients/bin/python");
    run_in_root(Command::new(&python).args(["-m", "pytest", "-q", "tests/python"]))
}

/// `cargo xtask bench-retrieval [--bfcl-only|--shared-only]`: retrieval
/// quality on the shared task set and on the BFCL-derived corpus.
pub fn bench_retrieval(args: &[String]) -> anyhow::Result<()> {
    fetch_model()?;
    let root = repo_root();
    run_in_root(cargo().args([
        "build",
        "--release",
        "--package",
        "oap-discovery",
        "--example",
        "retrieval_eval",
    ]))?;
    let eval = root.join("target/release/examples/retrieval_eval");
    let only = args.first().map(String::as_str);
    if only != Some("--bfcl-only") {
        println!(
            "== corpus (a): bench/discovery-tasks.jsonl over tests/fixtures/reference-manifests"
        );
        run_in_root(Command::new(&eval).args([
            "--tasks",
            "bench/discovery-tasks.jsonl",
            "--dir",
            "tests/fixtures/reference-manifests/oap-dev",
            "--dir",
            "tests/fixtures/reference-manifests/manifest-repo",
            // These three negatives match manifests added after they were
            // written (bench/TASKS.md): reported apart as soft.
            "--soft-negatives",
            "neg-001,neg-003,neg-010",
            "--curve",
        ]))?;
    }
    if only != Some("--shared-only") {
        let out = root.join("target/bench/bfcl");
        if !Path::new(&out).join("tasks.jsonl").is_file() {
            run_in_root(
                Command::new("python3")
                    .arg("bench/bfcl_corpus.py")
                    .arg("--out")
                    .arg(&out),
            )?;
        }
        println!("== corpus (b): BFCL v4 multiple/live_multiple/parallel_multiple (base names)");
        run_in_root(
            Command::new(&eval)
                .arg("--tasks")
                .arg(out.join("tasks.jsonl"))
                .arg("--dir")
                .arg(out.join("manifests"))
                .args(["--base-names", "--curve"]),
        )?;
        println!("== corpus (b), exact manifest names (secondary)");
        run_in_root(
            Command::new(&eval)
                .arg("--tasks")
                .arg(out.join("tasks.jsonl"))
                .arg("--dir")
                .arg(out.join("manifests")),
        )?;
    }
    Ok(())
}
