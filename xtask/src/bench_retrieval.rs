//! `cargo xtask bench-retrieval [--bfcl-only|--shared-only]`: retrieval
//! quality (`oap-bench retrieval`) on the shared task set and on the
//! BFCL-derived corpus.

use std::path::Path;
use std::process::Command;

use anyhow::Result;
use oap_bench::report::RetrievalReport;

use crate::bench_run;
use crate::repo_root;
use crate::tasks::run_in_root;

pub fn run(args: &[String]) -> Result<()> {
    crate::model::run(&[])?;
    let root = repo_root();
    let bin = bench_run::build(&[])?;
    let eval = |args: &mut Command| -> Result<()> {
        let report: RetrievalReport = bench_run::report(args.arg("--quiet"))?;
        println!("{}", report.table());
        Ok(())
    };
    let only = args.first().map(String::as_str);
    if only != Some("--bfcl-only") {
        println!(
            "== corpus (a): bench/discovery-tasks.jsonl over tests/fixtures/reference-manifests"
        );
        eval(bench_run::command(&bin, "retrieval").args([
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
        eval(
            bench_run::command(&bin, "retrieval")
                .arg("--tasks")
                .arg(out.join("tasks.jsonl"))
                .arg("--dir")
                .arg(out.join("manifests"))
                .args(["--base-names", "--curve"]),
        )?;
        println!("== corpus (b), exact manifest names (secondary)");
        eval(
            bench_run::command(&bin, "retrieval")
                .arg("--tasks")
                .arg(out.join("tasks.jsonl"))
                .arg("--dir")
                .arg(out.join("manifests")),
        )?;
    }
    Ok(())
}
