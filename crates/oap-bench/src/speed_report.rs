//! `oap-bench speed`'s report ([`SpeedReport`]) and the summary
//! `cargo xtask bench-speed` prints from it: every figure with its target
//! and verdict, every `/v1/discover` load run, and the notes.

use serde::{Deserialize, Serialize};

use crate::report::DiscoverLoadReport;

/// Query embedding p50, ms.
pub const TARGET_EMBED_P50_MS: f64 = 15.0;
/// Dense search over 100,000 rows p50, ms.
pub const TARGET_SEARCH_100K_MS: f64 = 5.0;
/// `/v1/discover` at concurrency 1: almost all of it is the query embedding.
pub const TARGET_DISCOVER_P50_MS: f64 = 6.0;
/// Its p99.
pub const TARGET_DISCOVER_P99_MS: f64 = 12.0;
/// The daemon's VmRSS, MB.
pub const TARGET_RSS_MB: f64 = 200.0;
/// Spawn to ready on an existing index, ms.
pub const TARGET_READY_MS: f64 = 1000.0;

/// One line of the summary: figure, measured, target, verdict.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SpeedFigure {
    /// What was measured, and how.
    pub name: String,
    /// The figure as printed, units included.
    pub value: String,
    /// The target, or `-`.
    pub target: String,
    /// `met`, `MISSED`, or `-` for a figure without a target.
    pub verdict: String,
}

/// `oap-bench speed`: speed and footprint of the discovery engine, every
/// figure from one run so that ratios between them mean something.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SpeedReport {
    /// CPU, cores, memory and kernel.
    pub machine: String,
    /// When the run started (UTC).
    pub date: String,
    /// The source measured (short commit, and whether it had changes).
    pub source: String,
    /// The 1/5/15 minute load averages before the run.
    pub load_before: String,
    /// And after.
    pub load_after: String,
    /// The summary lines, in the order measured.
    pub figures: Vec<SpeedFigure>,
    /// Every `/v1/discover` load run.
    pub load_runs: Vec<DiscoverLoadReport>,
    /// The load average as each section started, and what else to know.
    pub notes: Vec<String>,
}

impl SpeedReport {
    /// Adds a figure; `ok` is its verdict, `None` for a figure without a
    /// target.
    pub fn add(&mut self, name: impl Into<String>, value: String, target: &str, ok: Option<bool>) {
        self.figures.push(SpeedFigure {
            name: name.into(),
            value,
            target: target.to_string(),
            verdict: match ok {
                Some(true) => "met",
                Some(false) => "MISSED",
                None => "-",
            }
            .to_string(),
        });
    }

    /// The summary: the figures, the load runs and the notes.
    pub fn render(&self) -> String {
        let mut out = format!(
            "\n== summary ({}; {}; source {})\n",
            self.date, self.machine, self.source
        );
        out.push_str(&format!(
            "load average (1/5/15 min): before {}, after {}\n",
            self.load_before, self.load_after
        ));
        out.push_str("\n| figure | measured | target | verdict |\n|---|---|---|---|\n");
        for f in &self.figures {
            out.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                f.name, f.value, f.target, f.verdict
            ));
        }
        out.push_str(&format!("\n{}\n", DiscoverLoadReport::TABLE_HEADER));
        for row in &self.load_runs {
            out.push_str(&format!("{}\n", row.table_row()));
        }
        for note in &self.notes {
            out.push_str(&format!("- {note}\n"));
        }
        out
    }
}
