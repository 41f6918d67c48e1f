//! The JSON documents the `oap-bench` subcommands write, shared with
//! `cargo xtask bench-*`, which reads them instead of scraping text.
//!
//! Every field carries its unit in its name (`p99_ms`, `rss_peak_mb`,
//! `texts_per_s`; MB are 10^6 bytes). A figure that could not be measured
//! (no sample) is written as `null` and read back as NaN.
//!
//! This library is all of the crate that xtask compiles
//! (`default-features = false`): serde and nothing of the daemon's.
//!
//! # Architecture
//!
//! Every benchmark program, as one binary with a clap subcommand each
//! (`embed`, `search`, `discover-load`, `proxy-load`, `crawl-load`,
//! `tool-tokens`, `request-tokens`, `experience-replay`, `retrieval`, `catalog-size`, `relevance`,
//! `fitness`, `memory-burst`, `soak`, and `make-corpus`, which writes a corpus and measures
//! nothing). The two largest are split by concern: `soak/` (load, faults,
//! the processes it runs, sampling, the leak verdict, the crawled side's
//! server) and `retrieval/` (options, task set, encoder and its cache,
//! metrics). `soak` runs the whole appliance
//! (the daemon, the crawler against loopback HTTPS domains, the fake Ollama
//! as a child process) under LAN load with faults on a schedule, writes a
//! JSON line per minute and judges the pass criteria itself; leaks are
//! judged per daemon process (each against itself from its settle point, and
//! processes against each other at the same age), since its restarts split
//! the run into processes. A measuring subcommand writes one
//! JSON document (stdout or `--json FILE`); progress and human tables go to
//! stderr. The library target is only `oap_bench::report`, the serde structs
//! of those documents, with units in the field names (`p99_ms`,
//! `rss_peak_mb`); everything else sits behind the default `run` feature.
//!
//! **Architecture Invariant.** No caller reads what a benchmark prints for
//! people: `cargo xtask bench-*` builds `oap-bench` once, runs it and reads
//! its JSON through `oap_bench::report` (`default-features = false`, so xtask
//! compiles serde and nothing of the daemon's). Daemons a benchmark starts go
//! through the kit's `DaemonBuilder`.

#[allow(
    clippy::disallowed_methods,
    reason = "reads /proc and runs lscpu/date for a report's header, not daemon input"
)]
pub mod machine;
pub mod proxy_report;
pub mod report;
