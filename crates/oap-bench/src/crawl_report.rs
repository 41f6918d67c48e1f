//! The Markdown section `cargo xtask bench-crawl` writes from an
//! `oap-bench crawl-load` report ([`CrawlLoadReport`]): the setup, the
//! figures, discovery latency before, during and after the crawl, and the
//! verdict on what the crawl costs discovery.

use crate::machine::{machine_description, now_utc};
use crate::report::{CrawlLoadReport, Phase};

/// Discovery p99 while crawling may be at most this multiple of idle.
pub const TARGET_RATIO: f64 = 1.5;

impl CrawlLoadReport {
    /// A dated subsection for docs/BENCHMARKS.md's "Crawler": `command` is
    /// how the run was started, the load averages are those before and
    /// after it (the machine and the date are read now).
    pub fn markdown_section(&self, command: &str, load_before: &str, load_after: &str) -> String {
        let r = self;
        let idle = r.idle_before.p99_ms;
        let idle_after = r.idle_after.p99_ms;
        let during = r.during.p99_ms;
        let ratio = during / idle;
        let ratio_after = during / idle_after;
        // The index grows from the bundled set to the full crawl while the
        // crawl runs; the verdict takes the worse of the two baselines, so a
        // noisy idle phase cannot make the crawl look cheap.
        let worst = ratio.max(ratio_after);
        let verdict = if worst <= TARGET_RATIO {
            format!("meets the target (≤ {TARGET_RATIO}) against both baselines")
        } else {
            format!(
                "misses the target (≤ {TARGET_RATIO}) against at least one baseline (worst \
                 {worst:.2}); see the analysis below the table"
            )
        };
        let row = |name: &str, phase: &Phase| {
            format!(
                "| {name} | {} | {:.1} | {:.1} |\n",
                phase.requests, phase.p50_ms, phase.p99_ms
            )
        };
        let measured = now_utc();
        format!(
            "### `{command}`, {measured}\n\n\
             `{command}` (`--quick`: 1,000 manifests). Machine: {}; load average (1/5/15 min) \
             {load_before} before, {load_after} after; measured {measured} (a shared cloud machine: \
             compare the ratios of one run, not absolute times across runs).\n\n\
             Setup: {} generated manifests (`oap-bench make-corpus`, network ones only) served over loopback \
             HTTPS (test CA, wildcard certificate) under one domain each (`m00000.crawl.bench` …, \
             all mapped to 127.0.0.1 by `crawler.hosts`, allowed by `crawler.allow_private: \
             [127.0.0.0/8]`), seeded through `crawler.seeds_file`; the real `oapd serve` with the \
             embedding model, crawler concurrency 4 (default), `MALLOC_ARENA_MAX=2` as in the \
             systemd unit. Rebuilds while serving run on idle-class threads (`SCHED_IDLE`, a pool \
             of cores − 1), after every max(256, indexed / 4) domains, and wait for running \
             queries between steps (4-text embedding chunks, the index write, its mapping and \
             unmapping). Time counts from the daemon being \
             ready until `/health` counts every crawled manifest in the index.\n\n\
             | figure | value |\n|---|---|\n\
             | manifests crawled and indexed | {} |\n\
             | all fetched after | {} |\n\
             | crawled + indexed (embedding included) after | {:.1} s |\n\
             | **throughput** | **{:.1} manifests/s** |\n\
             | daemon VmRSS while crawling, peak (sampled every 50 ms) | {:.0} MB |\n\
             | … of which anonymous (heap) / mapped files (model, index) at that peak | {:.0} MB / {:.0} MB |\n\
             | anonymous memory, peak | {:.0} MB |\n\
             | index file at the end | {:.1} MB |\n\
             | daemon VmRSS at the end / VmHWM | {:.0} MB / {:.0} MB |\n\n\
             `/v1/discover` latency, one client, {} (ms):\n\n\
             | phase | requests | p50 | p99 |\n|---|---|---|---|\n{}{}{}\n\
             p99 during the crawl / idle p99: **{ratio:.2}** against the bundled index before \
             the crawl, **{ratio_after:.2}** against the full index after it (same run) — \
             {verdict}.\n",
            machine_description(),
            r.manifests,
            r.manifests,
            r.fetched_s.map_or("–".to_string(), |s| format!("{s:.1} s")),
            r.crawl_s,
            r.manifests_per_s,
            r.rss_peak_mb,
            r.rss_peak_anon_part_mb,
            r.rss_peak_file_part_mb,
            r.anon_peak_mb,
            r.index_mb.unwrap_or(f64::NAN),
            r.rss_end_mb,
            r.hwm_mb,
            match r.discover_rate_per_s {
                rate if rate > 0.0 => format!(
                    "{rate} requests/s on a fixed schedule (latency from the scheduled start)"
                ),
                _ => "back to back".to_string(),
            },
            row(
                &format!("idle, crawler off ({} bundled manifests)", r.bundled),
                &r.idle_before
            ),
            row("during the crawl", &r.during),
            row("idle after, full index", &r.idle_after),
        )
    }
}
