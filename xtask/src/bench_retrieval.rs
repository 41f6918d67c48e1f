//! `cargo xtask bench-retrieval [--shared-only|--spoken-only|--languages-only|--bfcl-only|--public-only|--relevance|--catalog-size|--hwu64 CLONE|--toollens CLONE]`:
//! the runner of `oap-bench retrieval-compare`, which compares the
//! retrieval quality of the previous default with the new one corpus by
//! corpus (its module doc says which corpora and how).
//!
//! Fetches the default model and builds `oap-bench`; asks it, with the
//! options as given, what to prepare (`--plan`: its parser names a bad
//! option before anything else is built); fetches the further encoders
//! the plan names; builds the previous default's `oap-bench` — the last
//! release before request rows, Snowball stemming and spoken arithmetic
//! ([`PREVIOUS_DEFAULT`]) — once from the repository's own history into
//! `target/bench/previous/`; then runs the comparison with every option
//! passed through and prints its report's tables.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};
use oap_bench::compare_report::{RetrievalCompareReport, RetrievalPlan};

use crate::bench_run;
use crate::repo_root;

/// The release whose `oap-bench` stands for the previous default: the
/// last commit before request rows, Snowball stemming, spoken arithmetic
/// and the explained decision.
pub(crate) const PREVIOUS_DEFAULT: &str = "b23044118ec80700738398827edf4bca479302bf";

pub fn run(args: &[String]) -> Result<()> {
    if bench_run::wants_help(args) {
        return bench_run::show_help("retrieval-compare");
    }
    crate::model::run(&[])?;
    let bench = bench_run::build(&[])?;
    let plan: RetrievalPlan = bench_run::report(
        bench_run::command(&bench, "retrieval-compare")
            .arg("--plan")
            .args(args),
    )?;
    for model in &plan.models {
        crate::model::run(&["--model".to_string(), model.clone()])?;
    }
    let mut command = bench_run::command(&bench, "retrieval-compare");
    command
        .arg("--quiet")
        .arg("--corpora")
        .arg(repo_root().join("target/bench"));
    if plan.previous {
        command.arg("--previous").arg(previous_bench()?);
    }
    let report: RetrievalCompareReport = bench_run::report(command.args(args))?;
    print!("{}", report.render());
    Ok(())
}

/// `oap-bench` as of [`PREVIOUS_DEFAULT`], built from this repository's
/// history into `target/bench/previous/` (its own build directory, so the
/// two builds never share artifacts) on first use.
fn previous_bench() -> Result<PathBuf> {
    let root = repo_root();
    let dir = root.join("target/bench/previous");
    let source = dir.join("src");
    let bin = dir.join("target/release/oap-bench");
    let stamp = dir.join("REVISION");
    if bin.is_file() && std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == PREVIOUS_DEFAULT)
    {
        return Ok(bin);
    }
    let _ = std::fs::remove_dir_all(&source);
    std::fs::create_dir_all(&source)?;
    println!(
        "== building the previous default's oap-bench ({PREVIOUS_DEFAULT}) in {}",
        dir.display()
    );
    let archive = Command::new("git")
        .args(["archive", "--format=tar", PREVIOUS_DEFAULT])
        .current_dir(&root)
        .output()
        .context("git archive")?;
    if !archive.status.success() {
        anyhow::bail!(
            "git archive {PREVIOUS_DEFAULT}: {} (a shallow clone lacks that history: git fetch --unshallow)",
            String::from_utf8_lossy(&archive.stderr).trim()
        );
    }
    let mut untar = Command::new("tar")
        .args(["-x", "-C"])
        .arg(&source)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .context("tar")?;
    {
        use std::io::Write;
        let mut stdin = untar.stdin.take().context("tar stdin")?;
        stdin.write_all(&archive.stdout)?;
    }
    if !untar.wait()?.success() {
        anyhow::bail!("tar could not unpack {PREVIOUS_DEFAULT}");
    }
    let mut build = bench_run::build_command();
    build
        .current_dir(&source)
        .env("CARGO_TARGET_DIR", dir.join("target"));
    let status = build.status().context("cargo build (previous default)")?;
    if !status.success() {
        anyhow::bail!("building the previous default's oap-bench failed");
    }
    std::fs::write(&stamp, PREVIOUS_DEFAULT)?;
    Ok(bin)
}
