//! `oap-bench retrieval-compare` (what `cargo xtask bench-retrieval`
//! runs): retrieval quality (`retrieval`) of the previous default beside
//! the new one, corpus by corpus, with BM25 (the lexical mode) as the
//! floor; held-out corpora in their tuning and evaluation halves apart.
//!
//! "The previous default" is the `oap-bench` of the last release whose
//! discovery came before request rows, Snowball stemming and spoken
//! arithmetic, which the runner builds from the repository's own history
//! and names with `--previous`; it runs on the same files, so its figures
//! are what that release's daemon would answer, not a reconstruction by
//! flags. "The new default" is this binary's engine with the bundled
//! tools' request rows. On the spoken set a third row adds the stand-in
//! for generated request rows (bench/request-rows/); in every language the
//! multilingual encoder is run too. Each setup runs as a child process
//! (`subprocess.rs`) whose JSON report is read here.
//!
//! Corpora: the shared set (bench/discovery-tasks.jsonl), the spoken set
//! (bench/spoken-tasks.jsonl, both halves), both translated into German,
//! French, Spanish and Dutch (bench/i18n/), BFCL, Home Assistant's intents
//! and NESTFUL (bench/public_corpus.py, both halves), and BFCL's relevance
//! catalogs (`--relevance`: `relevance`, each request against its own
//! small catalog). `--catalog-size` runs `catalog-size` (13 bundled
//! manifests, then 10,000). `--hwu64 CLONE` and `--toollens CLONE` read
//! corpora that no registry ships from git clones at pinned commits
//! (HWU64: tuning data only; ToolLens: both halves). The corpora the bench
//! scripts build are kept under `--corpora` (`corpora.rs`). `--plan`
//! says, for the same options, what the runner must prepare.

mod corpora;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use oap_bench::compare_report::{
    CompareSection, RetrievalCompareReport, RetrievalPlan, SectionBody, SetupRelevance, SetupRow,
};
use oap_bench::report::{RelevanceReport, RetrievalReport};

use crate::subprocess;
use corpora::Corpora;

/// The languages the shared and spoken sets are translated into.
const LANGUAGES: [&str; 4] = ["de", "fr", "es", "nl"];

/// The shared set's catalog: the reference manifests.
const SHARED_CATALOG: [&str; 4] = [
    "--dir",
    "tests/fixtures/reference-manifests/oap-dev",
    "--dir",
    "tests/fixtures/reference-manifests/manifest-repo",
];

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
const MULTILINGUAL_MODEL: &str = "multilingual-e5-small";
const MULTILINGUAL: [&str; 2] = ["--model", MULTILINGUAL_MODEL];

/// The previous default beside the new one, corpus by corpus (see the
/// module doc). With no corpus option, every corpus but the clones'.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The previous default's `oap-bench` (built from the repository's
    /// history; needed unless `--catalog-size`).
    #[arg(long)]
    previous: Option<PathBuf>,
    /// Where the corpora the bench scripts build are kept.
    #[arg(long, default_value = "target/bench")]
    corpora: PathBuf,
    /// Print what the runner must prepare for these options (JSON) and
    /// measure nothing.
    #[arg(long)]
    plan: bool,
    #[command(flatten)]
    only: Only,
}

/// At most one corpus option.
#[derive(clap::Args, Debug, Default)]
#[group(multiple = false)]
pub struct Only {
    /// Only the shared set.
    #[arg(long)]
    shared_only: bool,
    /// Only the spoken set.
    #[arg(long)]
    spoken_only: bool,
    /// Only the translated sets, the multilingual encoder too.
    #[arg(long)]
    languages_only: bool,
    /// Only BFCL.
    #[arg(long)]
    bfcl_only: bool,
    /// Only Home Assistant's intents and NESTFUL.
    #[arg(long)]
    public_only: bool,
    /// Only BFCL's relevance catalogs.
    #[arg(long)]
    relevance: bool,
    /// Only "nothing fits" with 13 and with 10,000 manifests.
    #[arg(long)]
    catalog_size: bool,
    /// HWU64 from this clone of NLU-Evaluation-Data (tuning data only).
    #[arg(long, value_name = "CLONE")]
    hwu64: Option<PathBuf>,
    /// ToolLens from this clone of COLT.
    #[arg(long, value_name = "CLONE")]
    toollens: Option<PathBuf>,
}

impl Only {
    /// Whether no corpus option was given (every corpus).
    fn all(&self) -> bool {
        !(self.shared_only
            || self.spoken_only
            || self.languages_only
            || self.bfcl_only
            || self.public_only
            || self.relevance
            || self.catalog_size
            || self.hwu64.is_some()
            || self.toollens.is_some())
    }
}

impl Args {
    /// What the runner prepares for these options.
    pub fn plan(&self) -> Option<RetrievalPlan> {
        self.plan.then(|| RetrievalPlan {
            previous: !self.only.catalog_size,
            models: if self.only.all() || self.only.languages_only {
                vec![MULTILINGUAL_MODEL.to_string()]
            } else {
                Vec::new()
            },
        })
    }
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

fn strings(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|p| p.to_string()).collect()
}

fn default_pair() -> Vec<Setup> {
    vec![Setup::previous(), Setup::new_default()]
}

/// The two binaries every comparison runs, and the sections so far.
struct Comparison {
    previous: PathBuf,
    report: RetrievalCompareReport,
}

impl Comparison {
    /// `oap-bench SUBCOMMAND --quiet` of the previous default or of this
    /// binary.
    fn command(&self, previous: bool, subcommand: &str) -> Result<std::process::Command> {
        if previous {
            Ok(subprocess::command_of(&self.previous, subcommand))
        } else {
            subprocess::command(subcommand)
        }
    }

    /// Runs `corpus` (the arguments naming tasks and manifests) under each
    /// setup: BM25 as the new build ranks lexically, then each setup's
    /// hybrid (default) row.
    fn compare(&mut self, title: String, corpus: &[String], setups: &[Setup]) -> Result<()> {
        eprintln!("== {title}");
        let mut rows = Vec::new();
        for setup in setups {
            let mut command = self.command(setup.previous, "retrieval")?;
            command.args(corpus).args(&setup.args);
            let report: RetrievalReport = subprocess::report(&mut command)?;
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
                rows.insert(
                    0,
                    SetupRow {
                        setup: "BM25".to_string(),
                        row: pick("Lexical")?,
                    },
                );
            }
            rows.push(SetupRow {
                setup: setup.label.to_string(),
                row: pick("Hybrid")?,
            });
        }
        self.report.sections.push(CompareSection {
            title,
            body: SectionBody::Comparison { rows },
        });
        Ok(())
    }

    /// Both halves of a held-out corpus, the evaluation half first.
    fn halves(
        &mut self,
        name: &str,
        corpus: &[String],
        setups: &dyn Fn() -> Vec<Setup>,
    ) -> Result<()> {
        for split in ["evaluation", "tuning"] {
            let mut args = corpus.to_vec();
            args.extend(strings(&["--split", split]));
            self.compare(format!("{name}, {split} half"), &args, &setups())?;
        }
        Ok(())
    }
}

/// A corpus built by a bench script: its tasks.jsonl and manifests/.
fn corpus_at(out: &Path) -> Vec<String> {
    vec![
        "--tasks".into(),
        out.join("tasks.jsonl").display().to_string(),
        "--dir".into(),
        out.join("manifests").display().to_string(),
    ]
}

pub fn run(args: Args) -> Result<RetrievalCompareReport> {
    let corpora = Corpora::new(&args.corpora);
    if args.only.catalog_size {
        return Ok(RetrievalCompareReport {
            sections: vec![corpora::catalog_size(&corpora)?],
        });
    }
    let mut comparison = Comparison {
        previous: args
            .previous
            .clone()
            .context("--previous: the previous default's oap-bench is needed")?,
        report: RetrievalCompareReport {
            sections: Vec::new(),
        },
    };
    let only = &args.only;
    if let Some(clone) = &only.toollens {
        let clone = clone.display().to_string();
        let out = corpora.built("toollens", "toollens_corpus.py", &["--colt", &clone], true)?;
        comparison.halves(
            "ToolLens (bench/toollens_corpus.py)",
            &corpus_at(&out),
            &default_pair,
        )?;
        return Ok(comparison.report);
    }
    if let Some(clone) = &only.hwu64 {
        let clone = clone.display().to_string();
        let out = corpora.built("hwu64", "hwu_corpus.py", &["--hwu64", &clone], true)?;
        comparison.compare(
            "HWU64 (bench/hwu_corpus.py; tuning data only)".into(),
            &corpus_at(&out),
            &default_pair(),
        )?;
        return Ok(comparison.report);
    }
    let languages = only.all() || only.languages_only;
    let multilingual = || Setup::with("multilingual encoder", &MULTILINGUAL);
    for language in std::iter::once("en").chain(LANGUAGES) {
        let asked = if language == "en" {
            only.all() || only.shared_only
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
        let mut corpus = strings(&["--tasks", &tasks]);
        corpus.extend(strings(&SHARED_CATALOG));
        let mut setups = default_pair();
        if languages {
            setups.push(multilingual());
        }
        comparison.compare(
            format!("shared set ({language}): {tasks} over tests/fixtures/reference-manifests"),
            &corpus,
            &setups,
        )?;
    }
    for language in std::iter::once("en").chain(LANGUAGES) {
        let asked = if language == "en" {
            only.all() || only.spoken_only
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
        comparison.halves(
            &format!("spoken set ({language}): {tasks}"),
            &corpus,
            &setups,
        )?;
    }
    if only.all() || only.bfcl_only {
        let out = corpora.bfcl()?;
        let mut corpus = corpus_at(&out);
        corpus.push("--base-names".into());
        comparison.compare(
            "BFCL v4 multiple/live_multiple/parallel_multiple (base names)".into(),
            &corpus,
            &default_pair(),
        )?;
    }
    if only.all() || only.public_only {
        for corpus in ["ha-intents", "nestful"] {
            let out = corpora.public(corpus)?;
            comparison.halves(
                &format!("{corpus} (bench/public_corpus.py)"),
                &corpus_at(&out),
                &default_pair,
            )?;
        }
    }
    if only.all() || only.relevance {
        let out = corpora.built("bfcl-relevance", "bfcl_relevance.py", &[], false)?;
        let title =
            "BFCL relevance: each request against its own catalog (bench/bfcl_relevance.py)";
        eprintln!("== {title}");
        let mut runs = Vec::new();
        for (label, previous, extra) in [
            ("previous default", true, &[][..]),
            ("new default", false, &NEW_DEFAULT[..]),
        ] {
            let mut command = comparison.command(previous, "relevance")?;
            command
                .arg("--tasks")
                .arg(out.join("tasks.jsonl"))
                .arg("--catalogs")
                .arg(out.join("catalogs"))
                .args(extra);
            let report: RelevanceReport = subprocess::report(&mut command)?;
            runs.push(SetupRelevance {
                setup: label.to_string(),
                report,
            });
        }
        comparison.report.sections.push(CompareSection {
            title: title.to_string(),
            body: SectionBody::Relevance { runs },
        });
    }
    Ok(comparison.report)
}
