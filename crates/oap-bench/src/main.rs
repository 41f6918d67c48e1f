//! `oap-bench`: the workspace's benchmarks in one binary, a subcommand per
//! benchmark. Every measuring subcommand writes ONE JSON document (the
//! structs of [`oap_bench::report`]) to stdout or `--json PATH`; progress
//! and human-readable tables go to stderr. `cargo xtask bench-*` builds
//! this binary once, runs it and reads the JSON.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::string_slice,
    clippy::disallowed_methods,
    reason = "a benchmark program run by developers, not the daemon: it stops on the first surprise"
)]

mod catalog_size;
mod client;
mod crawl_load;
mod discover_load;
mod embed;
mod embed_batches;
mod experience_replay;
mod make_corpus;
mod proxy_load;
mod relevance;
mod request_tokens;
mod retrieval;
mod search;
mod soak;
mod tool_tokens;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde::Serialize;

#[derive(Parser, Debug)]
#[command(
    name = "oap-bench",
    about = "The oapd workspace's benchmarks (JSON on stdout)"
)]
struct Cli {
    /// Write the JSON report to this file instead of stdout.
    #[arg(long, global = true)]
    json: Option<PathBuf>,
    /// No result table on stderr (the caller renders the JSON); progress
    /// still goes there.
    #[arg(long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Subcommand, Debug)]
enum Bench {
    /// Crawl a generated corpus from loopback HTTPS: manifests/s, RSS,
    /// /v1/discover latency before, during and after.
    CrawlLoad(crawl_load::Args),
    /// Load `POST /v1/discover` on a running daemon.
    DiscoverLoad(discover_load::Args),
    /// Load `POST /api/chat` on a running daemon, fake Ollama or peer proxy.
    ProxyLoad(proxy_load::Args),
    /// The tools one recorded chat request offers and their tokens.
    RequestTokens(request_tokens::Args),
    /// Tool tokens per request: direct vs budget vs meta exposure.
    ToolTokens(tool_tokens::Args),
    /// The experience cache over a replayed task log.
    ExperienceReplay(experience_replay::Args),
    /// The whole appliance under load with faults for N minutes: per-minute
    /// records, pass criteria (non-zero exit naming what failed).
    Soak(soak::Args),
    /// Write a deterministic corpus of valid manifests (no JSON report).
    MakeCorpus(make_corpus::Args),
    /// Dense and BM25 search over synthetic indexes.
    Search(search::Args),
    /// The embedding model's load time, query latency and throughput.
    Embed(embed::Args),
    /// CPU time per text of realistic queries embedded B at a time.
    EmbedBatches(embed_batches::Args),
    /// Recall@k, MRR and abstention of the retrieval modes. Boxed: its
    /// options outweigh every other subcommand's.
    Retrieval(Box<retrieval::Args>),
    /// The "nothing fits" decision against a small catalog and against it
    /// plus a large corpus.
    CatalogSize(catalog_size::Args),
    /// "Nothing fits" when each task brings its own small catalog.
    Relevance(relevance::Args),
}

/// Writes `report` as pretty JSON to `path` or stdout.
fn emit(report: &impl Serialize, path: Option<&PathBuf>) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(report)?;
    text.push('\n');
    match path {
        Some(path) => std::fs::write(path, text)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display())),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<bool> {
    let json = cli.json.as_ref();
    let table = |text: String| {
        if !cli.quiet {
            eprintln!("{text}");
        }
    };
    match cli.bench {
        Bench::CrawlLoad(args) => emit(&crawl_load::run(args)?, json)?,
        Bench::DiscoverLoad(args) => {
            let report = discover_load::run(args)?;
            table(report.table_row());
            emit(&report, json)?;
            return Ok(load_ok(
                "discover-load",
                report.errors,
                &report.error_samples,
            ));
        }
        Bench::ProxyLoad(args) => {
            let report = proxy_load::run(args)?;
            table(report.table_row());
            emit(&report, json)?;
            return Ok(load_ok("proxy-load", report.errors, &report.error_samples));
        }
        Bench::RequestTokens(args) => {
            let report = request_tokens::run(args)?;
            table(format!(
                "{} tools, {} tokens (estimated)",
                report.tools, report.tool_tokens
            ));
            emit(&report, json)?;
        }
        Bench::ToolTokens(args) => {
            let report = tool_tokens::run(args)?;
            table(report.table());
            emit(&report, json)?;
        }
        Bench::ExperienceReplay(args) => {
            let report = experience_replay::run(args)?;
            table(report.table());
            emit(&report, json)?;
        }
        Bench::Soak(args) => {
            let report = soak::run(args)?;
            emit(&report, json)?;
            for failure in &report.failures {
                eprintln!("oap-bench soak: FAILED: {failure}");
            }
            for note in &report.notes {
                eprintln!("oap-bench soak: note: {note}");
            }
            return Ok(report.passed);
        }
        Bench::MakeCorpus(args) => make_corpus::run(args)?,
        Bench::Search(args) => emit(&search::run(args)?, json)?,
        Bench::Embed(args) => emit(&embed::run(args)?, json)?,
        Bench::EmbedBatches(args) => emit(&embed_batches::run(args)?, json)?,
        Bench::Retrieval(args) => {
            let report = retrieval::run(*args)?;
            table(report.table());
            emit(&report, json)?;
        }
        Bench::CatalogSize(args) => {
            let report = catalog_size::run(args)?;
            table(report.table());
            emit(&report, json)?;
        }
        Bench::Relevance(args) => {
            let report = relevance::run(args)?;
            table(report.table());
            emit(&report, json)?;
        }
    }
    Ok(true)
}

/// A load run with failed requests still reports, then exits non-zero.
fn load_ok(name: &str, errors: usize, samples: &[String]) -> bool {
    for err in samples {
        eprintln!("oap-bench {name}: error: {err}");
    }
    errors == 0
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(err) => {
            eprintln!("oap-bench: {err:#}");
            ExitCode::FAILURE
        }
    }
}
