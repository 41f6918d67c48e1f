//! `cargo xtask bench-retrieval [--shared-only|--spoken-only|--languages-only|--bfcl-only|--public-only|--relevance|--catalog-size|--hwu64 CLONE|--toollens CLONE]`:
//! retrieval quality (`oap-bench retrieval`) of the previous default
//! beside the new one, corpus by corpus, with BM25 (the lexical mode) as
//! the floor; held-out corpora in their tuning and evaluation halves apart.
//!
//! "The previous default" is the `oap-bench` of the last release whose
//! discovery came before request rows, Snowball stemming and spoken
//! arithmetic ([`PREVIOUS_DEFAULT`]), built once from the repository's own
//! history into `target/bench/previous/` and run on the same files: its
//! figures are what that release's daemon would answer, not a
//! reconstruction by flags. "The new default" is this tree's engine with
//! the bundled tools' request rows. On the spoken set a third row adds the
//! stand-in for generated request rows (bench/request-rows/); in every
//! language the multilingual encoder is run too.
//!
//! Corpora: the shared set (bench/discovery-tasks.jsonl), the spoken set
//! (bench/spoken-tasks.jsonl, both halves), both translated into German,
//! French, Spanish and Dutch (bench/i18n/), BFCL, Home Assistant's intents
//! and NESTFUL (bench/public_corpus.py, both halves), and BFCL's relevance
//! catalogs (`--relevance`: `oap-bench relevance`, each request against
//! its own small catalog). `--catalog-size` runs `oap-bench catalog-size`
//! (13 bundled manifests, then 10,000). `--hwu64 CLONE` and `--toollens
//! CLONE` read corpora that no registry ships from git clones at pinned
//! commits (HWU64: tuning data only; ToolLens: both halves).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};
use oap_bench::report::{CatalogSizeReport, ModeRow, RelevanceReport, RetrievalReport};

use crate::bench_run;
use crate::repo_root;
use crate::tasks::run_in_root;

/// The release whose `oap-bench` stands for the previous default: the
/// last commit before request rows, Snowball stemming, spoken arithmetic
/// and the explained decision.
pub(crate) const PREVIOUS_DEFAULT: &str = "b23044118ec80700738398827edf4bca479302bf";

/// The languages the shared and spoken sets are translated into.
const LANGUAGES: [&str; 4] = ["de", "fr", "es", "nl"];

/// The spoken set's catalog: the bundled tools first (what a daemon on its
/// defaults serves), then the reference manifests.
const SPOKEN_CATALOG: [&str; 6] = [
    "--dir",
    "manifests/bundled",
    "--dir",
    "tests/fixtures/reference-manifests/manifest-repo",
    "--dir",
    "tests/fixtures/reference-manifests/oap-dev",
];

/// What the new default adds to a run: the bundled tools' shipped request
/// rows (attached by name; the reference folders carry the same tools).
const NEW_DEFAULT: [&str; 2] = ["--request-rows", "manifests/bundled-requests.json"];

/// The stand-in for generated request rows of the reference manifests.
const GENERATED_STAND_IN: [&str; 2] = ["--request-rows", "bench/request-rows/reference.json"];

/// The multilingual encoder, as `embedding.model` names it.
const MULTILINGUAL: [&str; 2] = ["--model", "multilingual-e5-small"];

/// The one option (`None`: every corpus) and, for `--hwu64` and
/// `--toollens`, its clone; checked before anything is built.
fn parse(args: &[String]) -> Result<(Option<&str>, Option<&str>)> {
    const USAGE: &str = "--shared-only, --spoken-only, --languages-only, --bfcl-only, \
                         --public-only, --relevance, --catalog-size, --hwu64 CLONE, --toollens CLONE";
    let only = args.first().map(String::as_str);
    let takes = match only {
        None => 0,
        Some(
            "--bfcl-only" | "--shared-only" | "--spoken-only" | "--languages-only"
            | "--public-only" | "--relevance" | "--catalog-size",
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

/// The two `oap-bench` binaries every comparison runs.
struct Benches {
    previous: PathBuf,
    new: PathBuf,
}

/// One setup of a comparison: its label, which binary, and the arguments
/// it adds to the corpus's own.
struct Setup {
    label: &'static str,
    previous: bool,
    args: Vec<&'static str>,
}

impl Setup {
    fn previous() -> Setup {
        Setup {
            label: "previous default",
            previous: true,
            args: Vec::new(),
        }
    }

    fn new_default() -> Setup {
        Setup {
            label: "new default",
            previous: false,
            args: NEW_DEFAULT.to_vec(),
        }
    }

    fn with(label: &'static str, extra: &[&'static str]) -> Setup {
        let mut setup = Setup::new_default();
        setup.label = label;
        setup.args.extend_from_slice(extra);
        setup
    }
}

impl Benches {
    /// Runs `corpus` (the arguments naming tasks and manifests) under each
    /// setup and prints one table: BM25 as the new build ranks lexically,
    /// then each setup's hybrid (default) row.
    fn compare(&self, corpus: &[String], setups: &[Setup]) -> Result<()> {
        let mut rows: Vec<(String, ModeRow)> = Vec::new();
        for setup in setups {
            let bin = if setup.previous {
                &self.previous
            } else {
                &self.new
            };
            let mut command = bench_run::command(bin, "retrieval");
            command.args(corpus).args(&setup.args).arg("--quiet");
            let report: RetrievalReport = bench_run::report(&mut command)?;
            let pick = |label: &str| {
                report
                    .modes
                    .iter()
                    .find(|m| m.label == label)
                    .cloned()
                    .with_context(|| format!("{}: no {label} row in the report", setup.label))
            };
            // BM25 as this tree ranks it lexically (its terms, its stemmer).
            if setup.label == "new default" {
                rows.insert(0, ("BM25".to_string(), pick("Lexical")?));
            }
            rows.push((setup.label.to_string(), pick("Hybrid")?));
        }
        println!("{}", comparison_table(&rows));
        Ok(())
    }
}

/// The comparison as the table docs/BENCHMARKS.md holds.
fn comparison_table(rows: &[(String, ModeRow)]) -> String {
    let mut out = String::from(
        "\n| setup | R@1 | R@3 | R@5 | MRR | nDCG@10 | no-fit abstained | fitting abstained | AUROC |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for (label, m) in rows {
        let abstained = if m.negatives > 0 {
            format!(
                "{}/{} ({:.3})",
                m.negatives_rejected,
                m.negatives,
                m.negatives_rejected as f64 / m.negatives as f64
            )
        } else {
            "–".to_string()
        };
        out.push_str(&format!(
            "| {label} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {abstained} | {:.3} | {} |\n",
            m.recall_at_1,
            m.recall_at_3,
            m.recall_at_5,
            m.mrr,
            m.ndcg_at_10,
            m.positives_rejected,
            if m.negatives > 0 {
                format!("{:.3}", m.auroc)
            } else {
                "–".to_string()
            },
        ));
    }
    out
}

fn strings(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|p| p.to_string()).collect()
}

pub fn run(args: &[String]) -> Result<()> {
    let (only, clone) = parse(args)?;
    crate::model::run(&[])?;
    let new = bench_run::build(&[])?;
    if only == Some("--catalog-size") {
        return catalog_size(&new);
    }
    let benches = Benches {
        previous: previous_bench()?,
        new,
    };
    let default_pair = || vec![Setup::previous(), Setup::new_default()];
    // A corpus built by a bench script: its tasks.jsonl and manifests/.
    let corpus_at = |out: &Path| -> Vec<String> {
        vec![
            "--tasks".into(),
            out.join("tasks.jsonl").display().to_string(),
            "--dir".into(),
            out.join("manifests").display().to_string(),
        ]
    };
    // Both halves of a held-out corpus, the evaluation half first.
    let halves = |name: &str, corpus: Vec<String>, setups: &dyn Fn() -> Vec<Setup>| -> Result<()> {
        for split in ["evaluation", "tuning"] {
            println!("== {name}, {split} half");
            let mut args = corpus.clone();
            args.extend(strings(&["--split", split]));
            benches.compare(&args, &setups())?;
        }
        Ok(())
    };
    match (only, clone) {
        (Some("--toollens"), Some(clone)) => {
            let out = built_corpus("toollens", "toollens_corpus.py", &["--colt", clone], true)?;
            return halves(
                "ToolLens (bench/toollens_corpus.py)",
                corpus_at(&out),
                &default_pair,
            );
        }
        (Some("--hwu64"), Some(clone)) => {
            let out = built_corpus("hwu64", "hwu_corpus.py", &["--hwu64", clone], true)?;
            println!("== HWU64 (bench/hwu_corpus.py; tuning data only)");
            return benches.compare(&corpus_at(&out), &default_pair());
        }
        _ => {}
    }
    let wants = |corpus: &str| only.is_none() || only == Some(corpus);
    let languages = wants("--languages-only");
    if languages {
        crate::model::run(&strings(&MULTILINGUAL))?;
    }
    let multilingual = || Setup::with("multilingual encoder", &MULTILINGUAL);
    if wants("--shared-only") || languages {
        for language in std::iter::once("en").chain(LANGUAGES) {
            let asked = if language == "en" {
                wants("--shared-only")
            } else {
                languages
            };
            if !asked {
                continue;
            }
            let tasks = match language {
                "en" => "bench/discovery-tasks.jsonl".to_string(),
                lang => format!("bench/i18n/discovery-tasks.{lang}.jsonl"),
            };
            println!("== shared set ({language}): {tasks} over tests/fixtures/reference-manifests");
            let mut corpus = strings(&["--tasks", &tasks]);
            corpus.extend(strings(&bench_run::SHARED_TASK_SET[2..]));
            let mut setups = default_pair();
            if languages {
                setups.push(multilingual());
            }
            benches.compare(&corpus, &setups)?;
        }
    }
    if wants("--spoken-only") || languages {
        for language in std::iter::once("en").chain(LANGUAGES) {
            let asked = if language == "en" {
                wants("--spoken-only")
            } else {
                languages
            };
            if !asked {
                continue;
            }
            let tasks = match language {
                "en" => "bench/spoken-tasks.jsonl".to_string(),
                lang => format!("bench/i18n/spoken-tasks.{lang}.jsonl"),
            };
            let mut corpus = strings(&["--tasks", &tasks]);
            corpus.extend(strings(&SPOKEN_CATALOG));
            let setups = || {
                let mut setups = default_pair();
                setups.push(Setup::with(
                    "new default + generated rows (stand-in)",
                    &GENERATED_STAND_IN,
                ));
                if languages {
                    let mut both = MULTILINGUAL.to_vec();
                    both.extend_from_slice(&GENERATED_STAND_IN);
                    setups.push(multilingual());
                    setups.push(Setup::with(
                        "multilingual + generated rows (stand-in)",
                        &both,
                    ));
                }
                setups
            };
            halves(
                &format!("spoken set ({language}): {tasks}"),
                corpus,
                &setups,
            )?;
        }
    }
    if wants("--bfcl-only") {
        let out = bfcl_corpus()?;
        println!("== BFCL v4 multiple/live_multiple/parallel_multiple (base names)");
        let mut corpus = corpus_at(&out);
        corpus.push("--base-names".into());
        benches.compare(&corpus, &default_pair())?;
    }
    if wants("--public-only") {
        for corpus in ["ha-intents", "nestful"] {
            let out = public_corpus(corpus)?;
            halves(
                &format!("{corpus} (bench/public_corpus.py)"),
                corpus_at(&out),
                &default_pair,
            )?;
        }
    }
    if wants("--relevance") {
        let out = built_corpus("bfcl-relevance", "bfcl_relevance.py", &[], false)?;
        println!(
            "== BFCL relevance: each request against its own catalog (bench/bfcl_relevance.py)"
        );
        for (label, bin, extra) in [
            ("previous default", &benches.previous, &[][..]),
            ("new default", &benches.new, &NEW_DEFAULT[..]),
        ] {
            println!("-- {label}");
            let mut command = bench_run::command(bin, "relevance");
            command
                .arg("--tasks")
                .arg(out.join("tasks.jsonl"))
                .arg("--catalogs")
                .arg(out.join("catalogs"))
                .args(extra)
                .arg("--quiet");
            let report: RelevanceReport = bench_run::report(&mut command)?;
            println!("{}", report.table());
        }
    }
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
            parse(&args(&["--languages-only"])).unwrap(),
            (Some("--languages-only"), None)
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
