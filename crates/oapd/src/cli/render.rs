//! Human-readable renderings for the command line.

use std::fmt::Write;

use oap_discovery::Discovery;

/// A discovery answer as a short table: the match (or why there is none),
/// then the candidates with their scores.
pub fn discovery(discovery: &Discovery) -> String {
    let mut out = String::new();
    match &discovery.best {
        Some(best) => {
            let _ = writeln!(
                out,
                "match: {} ({}), score {:.3} >= threshold {:.3}",
                best.name, best.id, best.score, discovery.meta.threshold
            );
        }
        None => match discovery.candidates.first() {
            Some(first) => {
                let _ = writeln!(
                    out,
                    "no fitting capability: the best-ranked score {:.3} < threshold {:.3}",
                    first.score, discovery.meta.threshold
                );
            }
            None => {
                let _ = writeln!(out, "no fitting capability: no candidate");
            }
        },
    }
    for (rank, candidate) in discovery.candidates.iter().enumerate() {
        let mut description: String = candidate.description.chars().take(70).collect();
        if candidate.description.chars().count() > 70 {
            description.push('…');
        }
        let _ = writeln!(
            out,
            "{:>2}. {:<24} {:.3} {} {}",
            rank + 1,
            candidate.id,
            candidate.score,
            if candidate.fits { "fits" } else { "    " },
            description
        );
    }
    let _ = writeln!(
        out,
        "({:?} retrieval over {} manifests, {:.1} ms)",
        discovery.meta.mode, discovery.meta.index_docs, discovery.meta.total_ms
    );
    out
}
