//! What a run scores: Recall@k, MRR, nDCG@10 and abstention per mode, the
//! AUROC of the "nothing fits" score, and the threshold curves.

use oap_bench::report::{Curve, CurvePoint, ModeRow};
use oap_discovery::scoring::Scoring;
use oap_discovery::Mode;

/// The abstention score of a task's best candidate, and what it was.
pub(super) struct TopScore {
    pub(crate) score: f32,
    pub(crate) positive: bool,
    /// A positive whose best candidate is expected.
    pub(crate) right: bool,
    /// A negative known to conflict with the corpus.
    pub(crate) soft: bool,
}

#[derive(Default)]
pub(super) struct Tally {
    pub(crate) positives: usize,
    pub(crate) hits: [usize; 3], // @1, @3, @5
    pub(crate) all_at_3: f64,
    pub(crate) mrr: f64,
    pub(crate) ndcg_at_10: f64,
    pub(crate) negatives: usize,
    pub(crate) negatives_rejected: usize,
    pub(crate) positives_matched_right: usize,
    pub(crate) positives_rejected: usize,
    /// (top score, is positive, top-1 right, soft negative)
    pub(crate) top_scores: Vec<TopScore>,
}

impl Tally {
    pub(super) fn summary(&self, label: &str, p50_ms: Option<f64>) -> ModeRow {
        let p = self.positives.max(1) as f64;
        let scores: Vec<(f32, bool)> = self
            .top_scores
            .iter()
            .map(|s| (s.score, s.positive))
            .collect();
        ModeRow {
            label: label.to_string(),
            recall_at_1: self.hits[0] as f64 / p,
            recall_at_3: self.hits[1] as f64 / p,
            recall_at_5: self.hits[2] as f64 / p,
            mrr: self.mrr / p,
            ndcg_at_10: self.ndcg_at_10 / p,
            all_at_3: self.all_at_3 / p,
            negatives: self.negatives,
            negatives_rejected: self.negatives_rejected,
            positives_matched_right: self.positives_matched_right as f64 / p,
            positives_rejected: self.positives_rejected as f64 / p,
            auroc: auroc(&scores),
            p50_ms,
        }
    }
}

/// nDCG@10 with binary relevance: each expected name counts once, at the
/// first rank it is found; the ideal ranking lists every expected name first.
pub(super) fn ndcg_at_10(found: &[String], expected: &[String]) -> f64 {
    let gain = |rank: usize| 1.0 / (rank as f64 + 2.0).log2();
    let mut seen: Vec<&String> = Vec::new();
    let mut dcg = 0.0;
    for (rank, name) in found.iter().take(10).enumerate() {
        if expected.contains(name) && !seen.contains(&name) {
            seen.push(name);
            dcg += gain(rank);
        }
    }
    let mut unique: Vec<&String> = expected.iter().collect();
    unique.sort();
    unique.dedup();
    let ideal: f64 = (0..unique.len().min(10)).map(gain).sum();
    if ideal > 0.0 {
        dcg / ideal
    } else {
        0.0
    }
}

pub(crate) fn auroc(scores: &[(f32, bool)]) -> f64 {
    let pos: Vec<f32> = scores.iter().filter(|s| s.1).map(|s| s.0).collect();
    let neg: Vec<f32> = scores.iter().filter(|s| !s.1).map(|s| s.0).collect();
    if pos.is_empty() || neg.is_empty() {
        return f64::NAN;
    }
    let mut wins = 0.0;
    for p in &pos {
        for n in &neg {
            wins += if p > n {
                1.0
            } else if p == n {
                0.5
            } else {
                0.0
            };
        }
    }
    wins / (pos.len() * neg.len()) as f64
}

/// Negatives rejected and positives lost per threshold, for each hybrid run.
pub(super) fn curves(runs: &[(String, Mode, Scoring)], tallies: &[Tally]) -> Vec<Curve> {
    let mut out = Vec::new();
    for ((label, mode, scoring), tally) in runs.iter().zip(tallies) {
        // Cosines for dense and hybrid, lexical evidence in lexical mode.
        let (start, step) = match mode {
            Mode::Lexical => (0.0, 0.1),
            _ => (0.20, 0.02),
        };
        let hard = tally
            .top_scores
            .iter()
            .filter(|s| !s.positive && !s.soft)
            .count();
        let soft = tally
            .top_scores
            .iter()
            .filter(|s| !s.positive && s.soft)
            .count();
        let pos = tally.positives.max(1) as f64;
        let points = (0..=20)
            .map(|i| {
                let t = start + step * i as f32;
                let below = |f: &dyn Fn(&TopScore) -> bool| {
                    tally
                        .top_scores
                        .iter()
                        .filter(|s| f(s) && s.score < t)
                        .count()
                };
                let right = tally
                    .top_scores
                    .iter()
                    .filter(|s| s.positive && s.right && s.score >= t)
                    .count();
                CurvePoint {
                    threshold: t,
                    hard_negatives_rejected: below(&|s| !s.positive && !s.soft),
                    soft_negatives_rejected: below(&|s| !s.positive && s.soft),
                    positives_rejected: below(&|s| s.positive) as f64 / pos,
                    positives_accepted_right: right as f64 / pos,
                }
            })
            .collect();
        out.push(Curve {
            label: label.clone(),
            configured_threshold: scoring.threshold(*mode),
            hard_negatives: hard,
            soft_negatives: soft,
            points,
        });
    }
    out
}
