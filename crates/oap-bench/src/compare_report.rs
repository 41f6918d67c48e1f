//! `oap-bench retrieval-compare`'s report ([`RetrievalCompareReport`]):
//! corpus by corpus, the previous default's retrieval quality beside the
//! new one's with BM25 as the floor, as the tables docs/BENCHMARKS.md
//! holds, and the plan a runner prepares before a comparison
//! ([`RetrievalPlan`]).

use serde::{Deserialize, Serialize};

use crate::report::{CatalogSizeReport, ModeRow, RelevanceReport};

/// What a runner must prepare before `retrieval-compare` runs with the
/// same options: the previous default's binary, and encoders beyond the
/// default one.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RetrievalPlan {
    /// Whether the comparison runs the previous default's `oap-bench`
    /// (`--previous`).
    pub previous: bool,
    /// Further encoders to fetch, as `cargo xtask fetch-model` names them.
    pub models: Vec<String>,
}

/// One setup's row of a comparison table.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SetupRow {
    /// The setup (`BM25`, `previous default`, `new default`, …).
    pub setup: String,
    /// Its quality on the corpus.
    pub row: ModeRow,
}

/// One setup's `relevance` report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SetupRelevance {
    /// The setup.
    pub setup: String,
    /// Its report.
    pub report: RelevanceReport,
}

/// What one section measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SectionBody {
    /// `retrieval` under each setup: BM25 first, then each setup's hybrid row.
    Comparison {
        /// The table's rows.
        rows: Vec<SetupRow>,
    },
    /// `relevance` per setup (each request against its own catalog).
    Relevance {
        /// One per setup.
        runs: Vec<SetupRelevance>,
    },
    /// `catalog-size`: the small catalog, then with the large corpus.
    CatalogSize {
        /// How the corpus was made from the speed benchmark's.
        note: String,
        /// The report.
        report: CatalogSizeReport,
    },
}

/// One corpus (or one half of it).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompareSection {
    /// The corpus, its files and half.
    pub title: String,
    /// What was measured on it.
    pub body: SectionBody,
}

/// `oap-bench retrieval-compare`: every corpus asked for, in order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RetrievalCompareReport {
    /// The sections, in the order run.
    pub sections: Vec<CompareSection>,
}

impl RetrievalCompareReport {
    /// Every section under its `==` title.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for section in &self.sections {
            match &section.body {
                SectionBody::Comparison { rows } => {
                    out.push_str(&format!("== {}\n", section.title));
                    out.push_str(&comparison_table(rows));
                    out.push('\n');
                }
                SectionBody::Relevance { runs } => {
                    out.push_str(&format!("== {}\n", section.title));
                    for run in runs {
                        out.push_str(&format!("-- {}\n{}\n", run.setup, run.report.table()));
                    }
                }
                SectionBody::CatalogSize { note, report } => {
                    out.push_str(&format!(
                        "{note}\n== {}\n{}\n",
                        section.title,
                        report.table()
                    ));
                }
            }
        }
        out
    }
}

/// The comparison as the table docs/BENCHMARKS.md holds.
pub fn comparison_table(rows: &[SetupRow]) -> String {
    let mut out = String::from(
        "\n| setup | R@1 | R@3 | R@5 | MRR | nDCG@10 | no-fit abstained | fitting abstained | AUROC |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for SetupRow { setup, row: m } in rows {
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
            "| {setup} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {abstained} | {:.3} | {} |\n",
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
