//! `cargo xtask bench-retrieval [--bfcl-only|--shared-only|--public-only|--relevance|--catalog-size|--hwu64 CLONE|--toollens CLONE]`:
//! retrieval quality (`oap-bench retrieval`, each corpus with the plain
//! encoder and with the default, tool-tuned one) on the shared task set, on the
//! BFCL-derived corpus and on the held-out public corpora
//! (bench/public_corpus.py: Home Assistant intents, NESTFUL), whose
//! `evaluation` split is what docs/BENCHMARKS.md reports and whose `tuning`
//! split is the only one tuning may read. `--relevance` runs only
//! `oap-bench relevance` on BFCL's relevance categories
//! (bench/bfcl_relevance.py): each request against its own small catalog,
//! which one tool fits or none does, both halves. `--catalog-size` runs only
//! `oap-bench catalog-size`: the shared set's queries against the 13 bundled
//! manifests, then against them plus the 10,000-manifest corpus of `oap-bench
//! make-corpus` less its copies of the bundled tools. `--hwu64 CLONE` runs
//! only the HWU64 voice-assistant intents (bench/hwu_corpus.py, from a git
//! clone at its pinned commit: it is not on a package registry), a tuning
//! corpus for choices between encoders, never a reported result.
//! `--toollens CLONE` runs only ToolLens (bench/toollens_corpus.py, from a
//! clone of COLT at its pinned commit): ToolBench endpoints and requests
//! that need several of them, both halves.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Result;
use oap_bench::report::{CatalogSizeReport, RelevanceReport, RetrievalReport};
use serde::de::DeserializeOwned;

use crate::bench_run;
use crate::repo_root;
use crate::tasks::run_in_root;

/// The one option (`None`: every corpus) and, for `--hwu64` and
/// `--toollens`, its clone; checked before anything is built.
fn parse(args: &[String]) -> Result<(Option<&str>, Option<&str>)> {
    const USAGE: &str = "--bfcl-only, --shared-only, --public-only, --relevance, --catalog-size, \
                         --hwu64 CLONE, --toollens CLONE";
    let only = args.first().map(String::as_str);
    let takes = match only {
        None => 0,
        Some(
            "--bfcl-only" | "--shared-only" | "--public-only" | "--relevance" | "--catalog-size",
        ) => 1,
        Some("--hwu64" | "--toollens") => 2,
        Some(flag) => anyhow::bail!("bench-retrieval: unknown option {flag} ({USAGE})"),
    };
    if takes == 2 && args.len() < 2 {
        let clone = if only == Some("--hwu64") {
            "NLU-Evaluation-Data"
        } else {
            "COLT"
        };
        anyhow::bail!(
            "bench-retrieval: {} takes the {clone} clone's directory",
            only.unwrap_or_default()
        );
    }
    if let Some(extra) = args.get(takes) {
        anyhow::bail!(
            "bench-retrieval: unexpected argument {extra}: one option at a time ({USAGE})"
        );
    }
    Ok((only, args.get(1).map(String::as_str).filter(|_| takes == 2)))
}

pub fn run(args: &[String]) -> Result<()> {
    let (only, clone) = parse(args)?;
    crate::model::run(&[])?;
    let bin = bench_run::build(&[])?;
    if only == Some("--catalog-size") {
        return catalog_size(&bin);
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
    let retrieval = |make: &dyn Fn() -> Command| both_encoders(make, RetrievalReport::table);
    // Both halves of a held-out corpus, the evaluation half first.
    let halves = |name: &str, script: &str, out: &Path| -> Result<()> {
        for split in ["evaluation", "tuning"] {
            println!("== corpus {name}, {split} split (bench/{script})");
            retrieval(&|| {
                let mut command = corpus_at(out);
                command.args(["--split", split]);
                command
            })?;
        }
        Ok(())
    };
    match (only, clone) {
        (Some("--toollens"), Some(clone)) => {
            let script = "toollens_corpus.py";
            let out = built_corpus("toollens", script, &["--colt", clone], true)?;
            return halves("toollens", script, &out);
        }
        (Some("--hwu64"), Some(clone)) => {
            let out = built_corpus("hwu64", "hwu_corpus.py", &["--hwu64", clone], true)?;
            println!("== corpus hwu64 (bench/hwu_corpus.py; tuning data only)");
            return retrieval(&|| corpus_at(&out));
        }
        _ => {}
    }
    let wants = |corpus: &str| only.is_none() || only == Some(corpus);
    if wants("--shared-only") {
        println!(
            "== corpus (a): bench/discovery-tasks.jsonl over tests/fixtures/reference-manifests"
        );
        retrieval(&|| {
            let mut command = bench_run::command(&bin, "retrieval");
            command.args(bench_run::SHARED_TASK_SET).args([
                // These three negatives match manifests added after they were
                // written (bench/TASKS.md): reported apart as soft.
                "--soft-negatives",
                "neg-001,neg-003,neg-010",
                "--curve",
            ]);
            command
        })?;
    }
    if wants("--bfcl-only") {
        let out = bfcl_corpus()?;
        println!("== corpus (b): BFCL v4 multiple/live_multiple/parallel_multiple (base names)");
        retrieval(&|| {
            let mut command = corpus_at(&out);
            command.args(["--base-names", "--curve"]);
            command
        })?;
        println!("== corpus (b), exact manifest names (secondary)");
        retrieval(&|| corpus_at(&out))?;
    }
    if wants("--public-only") {
        for corpus in ["ha-intents", "nestful"] {
            halves(corpus, "public_corpus.py", &public_corpus(corpus)?)?;
        }
    }
    if wants("--relevance") {
        let out = built_corpus("bfcl-relevance", "bfcl_relevance.py", &[], false)?;
        println!(
            "== BFCL relevance: each request against its own catalog (bench/bfcl_relevance.py)"
        );
        both_encoders(
            &|| {
                let mut command = bench_run::command(&bin, "relevance");
                command
                    .arg("--tasks")
                    .arg(out.join("tasks.jsonl"))
                    .arg("--catalogs")
                    .arg(out.join("catalogs"));
                command
            },
            RelevanceReport::table,
        )?;
    }
    Ok(())
}

/// Runs the command `make` gives twice, with the plain encoder
/// (`embedding.tool_tuning: false`) and then with the default, tool-tuned
/// one, each with the scoring the daemon takes for it, and prints each
/// report's table, so the two read side by side.
fn both_encoders<R: DeserializeOwned>(
    make: &dyn Fn() -> Command,
    table: fn(&R) -> String,
) -> Result<()> {
    for plain in [true, false] {
        let mut command = make();
        if plain {
            println!("-- the plain encoder (embedding.tool_tuning: false)");
            command.arg("--plain-model");
        } else {
            println!("-- the default: the tool-tuned encoder");
        }
        let report: R = bench_run::report(command.arg("--quiet"))?;
        println!("{}", table(&report));
    }
    Ok(())
}

/// `target/bench/<dir>`, written by `python3 bench/<script> ARGS --out DIR`:
/// on first use, or every time with `always` (a corpus read from a clone
/// whose path may differ between runs).
fn built_corpus(dir: &str, script: &str, args: &[&str], always: bool) -> Result<PathBuf> {
    let out = repo_root().join("target/bench").join(dir);
    if always || !out.join("tasks.jsonl").is_file() {
        run_in_root(
            Command::new("python3")
                .arg(format!("bench/{script}"))
                .args(args)
                .arg("--out")
                .arg(&out),
        )?;
    }
    Ok(out)
}

/// `target/bench/bfcl`, built by bench/bfcl_corpus.py on first use.
fn bfcl_corpus() -> Result<PathBuf> {
    built_corpus("bfcl", "bfcl_corpus.py", &[], false)
}

/// `target/bench/<corpus>`, built by bench/public_corpus.py on first use.
fn public_corpus(corpus: &str) -> Result<PathBuf> {
    built_corpus(corpus, "public_corpus.py", &["--corpus", corpus], false)
}

/// Copies the manifests of `from` that are not a copy of a bundled tool
/// (`make-corpus` republishes every base, the bundled ones too: a copy's
/// description starts with the bundled description) to `to`; returns how
/// many were copied.
fn without_bundled_copies(from: &Path, to: &Path) -> Result<usize> {
    let description = |path: &Path| -> Result<String> {
        let text = std::fs::read_to_string(path)?;
        let value: serde_json::Value = serde_json::from_str(&text)?;
        Ok(value["description"]
            .as_str()
            .unwrap_or_default()
            .to_string())
    };
    let mut bundled = Vec::new();
    for entry in std::fs::read_dir(repo_root().join("manifests/bundled"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "json") {
            bundled.push(description(&path)?);
        }
    }
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to)?;
    let mut copied = 0;
    for entry in std::fs::read_dir(from)? {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let text = description(&path)?;
        if bundled.iter().any(|b| text.starts_with(b.as_str())) {
            continue;
        }
        if let Some(name) = path.file_name() {
            std::fs::copy(&path, to.join(name))?;
            copied += 1;
        }
    }
    Ok(copied)
}

/// The "nothing fits" decision with 13 and with about 10,000 manifests: the
/// shared set's queries (all of whose fitting ones expect a bundled tool)
/// plus the tuning no-fit queries of Home Assistant's intents (media,
/// covers, shopping list: nothing bundled fits them either).
fn catalog_size(bin: &Path) -> Result<()> {
    let root = repo_root();
    bfcl_corpus()?;
    // The corpus of `cargo xtask bench-speed` (same command, same files).
    let bench = root.join("target/bench");
    let full = bench.join("corpus-10000/manifests");
    run_in_root(
        bench_run::command(bin, "make-corpus")
            .arg("--out")
            .arg(&full)
            .args(["--count", "10000"]),
    )?;
    let corpus = bench.join("catalog-size/manifests");
    let copied = without_bundled_copies(&full, &corpus)?;
    println!("{copied} of its manifests are not a copy of a bundled tool");
    // bench-speed's index of the whole corpus lends its vectors.
    let data = bench.join("catalog-size/data");
    let speed_index = bench.join("corpus-10000/data/index.oapx");
    if !data.join("index.oapx").is_file() && speed_index.is_file() {
        std::fs::create_dir_all(&data)?;
        std::fs::copy(&speed_index, data.join("index.oapx"))?;
    }
    let mut command = bench_run::command(bin, "catalog-size");
    command
        .args(["--tasks", "bench/discovery-tasks.jsonl"])
        .args(["--dir", "manifests/bundled", "--corpus"])
        .arg(&corpus)
        .arg("--data-dir")
        .arg(&data)
        .arg("--embed-cache")
        .arg(bench.join("catalog-size/queries.embed"));
    // NESTFUL's tuning half has no no-fit query.
    command
        .arg("--no-fit-from")
        .arg(public_corpus("ha-intents")?.join("tasks.jsonl"));
    println!("== catalog size: 13 bundled manifests, then with the corpus");
    let report: CatalogSizeReport = bench_run::report(command.arg("--quiet"))?;
    println!("{}", report.table());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn one_option_or_none_and_the_clone_for_hwu64() {
        assert_eq!(parse(&args(&[])).unwrap(), (None, None));
        assert_eq!(
            parse(&args(&["--public-only"])).unwrap(),
            (Some("--public-only"), None)
        );
        assert_eq!(
            parse(&args(&["--relevance"])).unwrap(),
            (Some("--relevance"), None)
        );
        assert_eq!(
            parse(&args(&["--toollens", "COLT"])).unwrap(),
            (Some("--toollens"), Some("COLT"))
        );
        assert_eq!(
            parse(&args(&["--hwu64", "HWU"])).unwrap(),
            (Some("--hwu64"), Some("HWU"))
        );
    }

    #[test]
    fn bad_arguments_are_named_before_anything_is_built() {
        let error = |list: &[&str]| parse(&args(list)).unwrap_err().to_string();
        assert!(error(&["--bogus"]).contains("unknown option --bogus"));
        assert!(error(&["--hwu64"]).contains("--hwu64 takes the NLU-Evaluation-Data clone"));
        assert!(error(&["--toollens"]).contains("--toollens takes the COLT clone"));
        assert!(
            error(&["--shared-only", "--bfcl-only"]).contains("unexpected argument --bfcl-only")
        );
        assert!(error(&["--hwu64", "HWU", "more"]).contains("unexpected argument more"));
    }
}
