//! The JSON documents the `oap-bench` subcommands write, shared with
//! `cargo xtask bench-*`, which reads them instead of scraping text, and
//! their renderings: the tables and verdicts a runner prints.
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
//! Every benchmark program, as one binary with a clap subcommand each: the
//! measuring ones (`embed`, `search`, `discover-load`, `proxy-load`,
//! `crawl-load`, `tool-tokens`, `request-tokens`, `experience-replay`,
//! `retrieval`, `catalog-size`, `relevance`, `memory-burst`), the whole
//! benchmarks `cargo xtask bench-*` runs, which start what they measure
//! (`proxy`, `mcp`, `memory`, `fitness`, `speed`, `retrieval-compare`,
//! `soak`), and `make-corpus`, which writes a corpus and measures nothing.
//! The fake Ollama, the Python peer and oapd as children killed on drop are
//! `procs.rs`, shared by every benchmark but the soak (whose processes
//! restart on fixed ports); a benchmark that wants another subcommand in a
//! process of its own runs this binary again (`subprocess.rs`). The larger
//! ones are split by concern: `soak/` (load, faults, the processes it runs,
//! sampling, the leak verdict, the crawled side's server), `retrieval/`
//! (options, task set, encoder and its cache, metrics), `mcp_bench/`,
//! `speed/`, `retrieval_compare/`. `soak` runs the whole appliance
//! (the daemon, the crawler against loopback HTTPS domains, the fake Ollama
//! as a child process) under LAN load with faults on a schedule, writes a
//! JSON line per minute and judges the pass criteria itself; leaks are
//! judged per daemon process (each against itself from its settle point, and
//! processes against each other at the same age), since its restarts split
//! the run into processes. A measuring subcommand writes one
//! JSON document (stdout or `--json FILE`); progress and human tables go to
//! stderr. The library target is the serde structs of those documents
//! (`report`, and a module per whole benchmark: `proxy_report`,
//! `mcp_report`, `speed_report`, `compare_report`, `crawl_report`) with
//! units in the field names (`p99_ms`, `rss_peak_mb`) and their `render`s,
//! targets and verdicts; everything else sits behind the default `run`
//! feature.
//!
//! **Architecture Invariant.** No caller reads what a benchmark prints for
//! people: `cargo xtask bench-*` builds `oap-bench` once, runs it and reads
//! its JSON through this library (`default-features = false`, so xtask
//! compiles serde and anyhow, nothing of the daemon's), printing the report's own
//! rendering. Daemons a benchmark starts go through the kit's
//! `DaemonBuilder`.

#[allow(
    clippy::disallowed_methods,
    reason = "reads a benchmark child's report from its stdout: this workspace's own binary, not daemon input"
)]
pub mod child_report;
pub mod compare_report;
pub mod crawl_report;
#[allow(
    clippy::disallowed_methods,
    reason = "reads /proc and runs lscpu/date for a report's header, not daemon input"
)]
pub mod machine;
pub mod mcp_report;
pub mod proxy_report;
pub mod report;
pub mod speed_report;
