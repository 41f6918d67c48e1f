//! `cargo xtask bench-retrieval [--bfcl-only|--shared-only|--public-only]`:
//! retrieval quality (`oap-bench retrieval`) on the shared task set, on the
//! BFCL-derived corpus and on the held-out public corpora
//! (bench/public_corpus.py: Home Assistant intents, NESTFUL), whose
//! `evaluation` split is what docs/BENCHMARKS.md reports and whose `tuning`
//! split is the only one tuning may read.

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
    if let Some(flag) =
        only.filter(|f| !matches!(*f, "--bfcl-only" | "--shared-only" | "--public-only"))
    {
        anyhow::bail!(
            "bench-retrieval: unknown option {flag} (--bfcl-only, --shared-only, --public-only)"
        );
    }
    let wants = |corpus: &str| only.is_none() || only == Some(corpus);
    if wants("--shared-only") {
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
    // A corpus built by a bench script: its tasks.jsonl and manifests/.
    let corpus_at = |out: &Path| {
        let mut command = bench_run::command(&bin, "retrieval");
        command
            .arg("--tasks")
            .arg(out.join("tasks.jsonl"))
            .arg("--dir")
            .arg(out.join("manifests"));
        command
    };
    if wants("--bfcl-only") {
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
        eval(corpus_at(&out).args(["--base-names", "--curve"]))?;
        println!("== corpus (b), exact manifest names (secondary)");
        eval(&mut corpus_at(&out))?;
    }
    if wants("--public-only") {
        for corpus in ["ha-intents", "nestful"] {
            let out = root.join("target/bench").join(corpus);
            if !Path::new(&out).join("tasks.jsonl").is_file() {
                run_in_root(
                    Command::new("python3")
                        .arg("bench/public_corpus.py")
                        .args(["--corpus", corpus, "--out"])
                        .arg(&out),
                )?;
            }
            for split in ["evaluation", "tuning"] {
                println!("== corpus {corpus}, {split} split (bench/public_corpus.py)");
                eval(corpus_at(&out).args(["--split", split]))?;
            }
        }
    }
    Ok(())
}
