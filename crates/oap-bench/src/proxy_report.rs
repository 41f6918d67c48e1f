//! `oap-bench proxy`'s report ([`ProxyBenchReport`]) and the tables
//! `cargo xtask bench-proxy` prints from it: every target side by side per
//! mode and concurrency, then the figures against their targets.

use serde::{Deserialize, Serialize};

use crate::report::ProxyLoadReport;

/// oapd's added latency (pure proxy, `stream:false`, one client), p50.
pub const TARGET_ADDED_P50_MS: f64 = 1.0;
/// oapd's added time to the first NDJSON line (pure proxy, one client), p50.
pub const TARGET_FIRST_TOKEN_MS: f64 = 2.0;
/// VmRSS growth allowed between 10k and `--leak` requests.
pub const TARGET_LEAK_MB: f64 = 5.0;
/// Requests of the memory run's first part, the baseline of its growth.
pub const LEAK_BASELINE_REQUESTS: usize = 10_000;

/// One mode at one concurrency: a run per target, the direct one first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProxyBenchLine {
    /// `chat` or `stream`.
    pub mode: String,
    /// Workers, one keep-alive connection each.
    pub concurrency: usize,
    /// One `proxy-load` report per target, in [`ProxyBenchReport::targets`]' order.
    pub runs: Vec<ProxyLoadReport>,
}

/// oapd's resident memory around the pure-proxy memory run (MB, 10^6 bytes).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProxyBenchMemory {
    /// Pure-proxy requests in all (`--leak`).
    pub leak: usize,
    /// VmRSS right after start.
    pub rss_start_mb: f64,
    /// VmRSS before the memory run (after the latency runs).
    pub rss_before_mb: f64,
    /// VmRSS after the first 10,000 requests.
    pub rss_10k_mb: f64,
    /// VmRSS after all of them.
    pub rss_end_mb: f64,
    /// The largest VmRSS sampled every 50 ms during the run.
    pub rss_peak_mb: f64,
    /// VmHWM at the end.
    pub hwm_end_mb: f64,
    /// Requests sent.
    pub requests: usize,
    /// Requests that failed.
    pub errors: usize,
    /// Requests/s of the first 10,000.
    pub first_requests_per_s: f64,
    /// Requests/s of the rest.
    pub rest_requests_per_s: f64,
}

/// `oap-bench proxy`: the latency oapd adds in front of a fake Ollama (and
/// the peer's), and its memory over a long pure-proxy run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProxyBenchReport {
    /// The targets' labels: direct, oapd pure proxy, oapd with discovery,
    /// and the peer when it ran.
    pub targets: Vec<String>,
    /// Per mode and concurrency.
    pub lines: Vec<ProxyBenchLine>,
    /// The memory run.
    pub memory: ProxyBenchMemory,
    /// What was not measured and why.
    pub notes: Vec<String>,
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

impl ProxyBenchReport {
    fn line(&self, mode: &str, concurrency: usize) -> &[ProxyLoadReport] {
        self.lines
            .iter()
            .find(|l| l.mode == mode && l.concurrency == concurrency)
            .map_or(&[][..], |l| l.runs.as_slice())
    }

    /// Every target against the direct one (ms; added = proxy - direct;
    /// ratio = proxy / direct).
    pub fn side_by_side(&self) -> String {
        let mut s = String::from(
            "== side by side (ms; added = proxy - direct; ratio = proxy / direct)\n\
             | mode | concurrency | target | p50 | p99 | first line p50 | first line p99 | req/s | \
             added p50 | added first line p50 | p50 ratio | req/s ratio |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for line in &self.lines {
            let Some(direct) = line.runs.first() else {
                continue;
            };
            for (target, row) in self.targets.iter().zip(&line.runs) {
                s += &format!(
                    "| {} | {} | {target} | {:.3} | {:.3} | {:.3} | {:.3} | {:.0} | {:+.3} | {:+.3} | {:.2}x | {:.2}x |\n",
                    line.mode,
                    line.concurrency,
                    row.p50_ms,
                    row.p99_ms,
                    row.first_line_p50_ms,
                    row.first_line_p99_ms,
                    row.requests_per_s,
                    row.p50_ms - direct.p50_ms,
                    row.first_line_p50_ms - direct.first_line_p50_ms,
                    row.p50_ms / direct.p50_ms,
                    row.requests_per_s / direct.requests_per_s,
                );
            }
        }
        s
    }

    /// The figures against their targets; only one client's pure-proxy
    /// figures are judged.
    pub fn against_targets(&self) -> String {
        let mut s = String::from(
            "== figures vs targets\n| figure | value | target | verdict |\n|---|---|---|---|\n",
        );
        let mut concurrencies: Vec<usize> = Vec::new();
        for line in &self.lines {
            if !concurrencies.contains(&line.concurrency) {
                concurrencies.push(line.concurrency);
            }
        }
        for c in concurrencies {
            let (chat, stream) = (self.line("chat", c), self.line("stream", c));
            for (i, what) in [(1, "pure proxy overhead"), (2, "bridge with discovery")] {
                let (Some(direct), Some(proxied)) = (chat.first(), chat.get(i)) else {
                    continue;
                };
                let (Some(direct_stream), Some(proxied_stream)) = (stream.first(), stream.get(i))
                else {
                    continue;
                };
                s += &figure_rows(
                    what,
                    c,
                    i == 1,
                    [direct, proxied, direct_stream, proxied_stream],
                );
            }
        }
        s += &self.memory_rows();
        s
    }

    fn memory_rows(&self) -> String {
        let m = &self.memory;
        let growth = m.rss_end_mb - m.rss_10k_mb;
        let thousands = m.leak / 1000;
        format!(
            "| oapd VmRSS: after start / before memory run / after 10k / after {thousands}k (peak sampled; VmHWM) | {:.1} / {:.1} / {:.1} / {:.1} MB ({:.1}; {:.1}) | growth 10k→{thousands}k ≤ {TARGET_LEAK_MB} MB | {} |\n\
             | memory run: requests / errors / req/s (10k part, rest) | {} / {} / {:.0}, {:.0} | 0 errors | {} |\n",
            m.rss_start_mb,
            m.rss_before_mb,
            m.rss_10k_mb,
            m.rss_end_mb,
            m.rss_peak_mb,
            m.hwm_end_mb,
            verdict(growth <= TARGET_LEAK_MB && m.errors == 0),
            m.requests,
            m.errors,
            m.first_requests_per_s,
            m.rest_requests_per_s,
            verdict(m.errors == 0)
        )
    }

    /// Both tables and the notes, as `cargo xtask bench-proxy` prints them.
    pub fn render(&self) -> String {
        let mut s = format!("\n{}\n{}", self.side_by_side(), self.against_targets());
        for note in &self.notes {
            s += &format!("\nnote: {note}\n");
        }
        s
    }
}

/// The three rows of one proxied target at one concurrency: added latency,
/// first-chunk overhead, req/s. `runs`: direct and proxied `chat`, then
/// direct and proxied `stream`.
fn figure_rows(what: &str, c: usize, judged: bool, runs: [&ProxyLoadReport; 4]) -> String {
    let [direct, proxied, direct_stream, proxied_stream] = runs;
    let judged = judged && c == 1;
    let added = proxied.p50_ms - direct.p50_ms;
    let added99 = proxied.p99_ms - direct.p99_ms;
    let first = proxied_stream.first_line_p50_ms - direct_stream.first_line_p50_ms;
    let first99 = proxied_stream.first_line_p99_ms - direct_stream.first_line_p99_ms;
    let judge = |ok: bool| if judged { verdict(ok) } else { "-" };
    format!(
        "| {what}: added latency, stream:false, c={c}: p50 / p99 | {added:+.3} / {added99:+.3} ms | ≤ {TARGET_ADDED_P50_MS} ms (p50) | {} |\n\
         | {what}: first-chunk overhead, stream:true, c={c}: p50 / p99 | {first:+.3} / {first99:+.3} ms | ≤ {TARGET_FIRST_TOKEN_MS} ms (p50) | {} |\n\
         | {what}: req/s, stream:false, c={c} (direct) | {:.0} ({:.0}) | - | - |\n",
        judge(added <= TARGET_ADDED_P50_MS),
        judge(first <= TARGET_FIRST_TOKEN_MS),
        proxied.requests_per_s,
        direct.requests_per_s
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(label: &str, p50_ms: f64, first_line_p50_ms: f64) -> ProxyLoadReport {
        ProxyLoadReport {
            label: label.to_string(),
            mode: String::new(),
            concurrency: 1,
            requests: 300,
            errors: 0,
            p50_ms,
            p99_ms: p50_ms * 2.0,
            max_ms: p50_ms * 3.0,
            first_line_p50_ms,
            first_line_p99_ms: first_line_p50_ms * 2.0,
            requests_per_s: 1000.0 / p50_ms,
            error_samples: Vec::new(),
        }
    }

    /// Only one client's pure-proxy figures are judged: a slow discovery
    /// run and a slow run at 16 clients are shown, not failed.
    #[test]
    fn one_clients_pure_proxy_figures_are_judged_and_the_rest_shown() {
        let line = |mode: &str, concurrency, discovery_ms| ProxyBenchLine {
            mode: mode.to_string(),
            concurrency,
            runs: vec![
                run("direct", 1.0, 0.5),
                run("pure", 1.5, 1.0),
                run("discovery", discovery_ms, 9.0),
            ],
        };
        let report = ProxyBenchReport {
            targets: vec!["direct".into(), "pure".into(), "discovery".into()],
            lines: vec![
                line("chat", 1, 9.0),
                line("chat", 16, 9.0),
                line("stream", 1, 9.0),
                line("stream", 16, 9.0),
            ],
            memory: ProxyBenchMemory {
                leak: 20_000,
                rss_start_mb: 40.0,
                rss_before_mb: 45.0,
                rss_10k_mb: 46.0,
                rss_end_mb: 52.0,
                rss_peak_mb: 53.0,
                hwm_end_mb: 54.0,
                requests: 20_000,
                errors: 0,
                first_requests_per_s: 4000.0,
                rest_requests_per_s: 3900.0,
            },
            notes: vec!["peer not measured".into()],
        };
        let text = report.render();
        assert!(text.contains("| pure proxy overhead: added latency, stream:false, c=1: p50 / p99 | +0.500 / +1.000 ms | ≤ 1 ms (p50) | met |"), "{text}");
        assert!(text.contains("| bridge with discovery: added latency, stream:false, c=1: p50 / p99 | +8.000 / +16.000 ms | ≤ 1 ms (p50) | - |"), "{text}");
        assert!(text.contains("| chat | 16 | pure | 1.500 |"), "{text}");
        assert!(
            text.contains("growth 10k→20k ≤ 5 MB | MISSED |"),
            "6 MB growth: {text}"
        );
        assert!(text.contains("\nnote: peer not measured\n"), "{text}");
    }
}
