//! The JSON documents the `oap-bench` subcommands write, shared with
//! `cargo xtask bench-*`, which reads them instead of scraping text.
//!
//! Every field carries its unit in its name (`p99_ms`, `rss_peak_mb`,
//! `texts_per_s`; MB are 10^6 bytes). A figure that could not be measured
//! (no sample) is written as `null` and read back as NaN.
//!
//! This library is all of the crate that xtask compiles
//! (`default-features = false`): serde and nothing of the daemon's.

pub mod report;
