//! The corpora `retrieval-compare` reads that bench scripts build (BFCL,
//! the public corpora, the relevance catalogs, the clones' corpora), kept
//! under `--corpora` and built on first use, and the catalog-size run over
//! the speed benchmark's synthetic corpus.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Result;
use oap_bench::compare_report::{CompareSection, SectionBody};
use oap_bench::report::CatalogSizeReport;

use crate::subprocess;

/// Where the built corpora are kept.
pub(super) struct Corpora {
    dir: PathBuf,
}

impl Corpora {
    pub(super) fn new(dir: &Path) -> Corpora {
        Corpora {
            dir: dir.to_path_buf(),
        }
    }

    /// `<corpora>/<dir>`, written by `python3 bench/<script> ARGS --out DIR`:
    /// on first use, or every time with `always` (a corpus read from a clone
    /// whose path may differ between runs).
    pub(super) fn built(
        &self,
        dir: &str,
        script: &str,
        args: &[&str],
        always: bool,
    ) -> Result<PathBuf> {
        let out = self.dir.join(dir);
        if always || !out.join("tasks.jsonl").is_file() {
            subprocess::run(
                Command::new("python3")
                    .arg(format!("bench/{script}"))
                    .args(args)
                    .arg("--out")
                    .arg(&out),
            )?;
        }
        Ok(out)
    }

    /// `<corpora>/bfcl`, built by bench/bfcl_corpus.py on first use.
    pub(super) fn bfcl(&self) -> Result<PathBuf> {
        self.built("bfcl", "bfcl_corpus.py", &[], false)
    }

    /// `<corpora>/<corpus>`, built by bench/public_corpus.py on first use.
    pub(super) fn public(&self, corpus: &str) -> Result<PathBuf> {
        self.built(corpus, "public_corpus.py", &["--corpus", corpus], false)
    }
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
    for entry in std::fs::read_dir("manifests/bundled")? {
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
pub(super) fn catalog_size(corpora: &Corpora) -> Result<CompareSection> {
    corpora.bfcl()?;
    // The corpus of `oap-bench speed` (same command, same files).
    let bench = &corpora.dir;
    let full = bench.join("corpus-10000/manifests");
    subprocess::run(
        subprocess::command("make-corpus")?
            .arg("--out")
            .arg(&full)
            .args(["--count", "10000"]),
    )?;
    let corpus = bench.join("catalog-size/manifests");
    let copied = without_bundled_copies(&full, &corpus)?;
    let note = format!("{copied} of its manifests are not a copy of a bundled tool");
    eprintln!("{note}");
    // The speed benchmark's index of the whole corpus lends its vectors.
    let data = bench.join("catalog-size/data");
    let speed_index = bench.join("corpus-10000/data/index.oapx");
    if !data.join("index.oapx").is_file() && speed_index.is_file() {
        std::fs::create_dir_all(&data)?;
        std::fs::copy(&speed_index, data.join("index.oapx"))?;
    }
    let mut command = subprocess::command("catalog-size")?;
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
        .arg(corpora.public("ha-intents")?.join("tasks.jsonl"));
    let title = "catalog size: 13 bundled manifests, then with the corpus";
    eprintln!("== {title}");
    let report: CatalogSizeReport = subprocess::report(&mut command)?;
    Ok(CompareSection {
        title: title.to_string(),
        body: SectionBody::CatalogSize { note, report },
    })
}
