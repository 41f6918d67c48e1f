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
mod fitness;
mod make_corpus;
mod mcp_bench;
mod memory_burst;
mod procs;
mod proxy_bench;
mod proxy_load;
mod relevance;
mod request_tokens;
mod retrieval;
mod retrieval_compare;
mod search;
mod snapshot_swap;
mod soak;
mod soak_plot;
mod speed;
mod subprocess;
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
    /// The latency oapd (and the peer) adds in front of a fake Ollama it
    /// starts, side by side, and oapd's memory over a long run.
    Proxy(proxy_bench::Args),
    /// oapd and the peer side by side on the same MCP servers in front of
    /// a fake Ollama it starts: latency, requests/s, tools injected, memory.
    Mcp(mcp_bench::Args),
    /// The tools one recorded chat request offers and their tokens.
    RequestTokens(request_tokens::Args),
    /// Tool tokens per request: direct vs budget vs meta exposure.
    ToolTokens(tool_tokens::Args),
    /// The experience cache over a replayed task log.
    ExperienceReplay(experience_replay::Args),
    /// The whole appliance under load with faults for N minutes: per-minute
    /// records, pass criteria (non-zero exit naming what failed).
    Soak(soak::Args),
    /// Draw a soak's records into a PNG (no JSON report).
    SoakPlot(soak_plot::Args),
    /// What the small-model features cost a request (URL sanitisation,
    /// the chat endpoints, forced tools, `oapd validate-model`), against
    /// three daemons and a fake Ollama it starts.
    Fitness(fitness::Args),
    /// A running daemon's resident memory around a burst of large chat
    /// bodies, and whether it gives it back.
    MemoryBurst(memory_burst::Args),
    /// The same burst against daemon builds it starts, side by side, with
    /// the verdicts of the last.
    Memory(memory_burst::BuildsArgs),
    /// Write a deterministic corpus of valid manifests (no JSON report).
    MakeCorpus(make_corpus::Args),
    /// Dense and BM25 search over synthetic indexes.
    Search(search::Args),
    /// The embedding model's load time, query latency and throughput.
    Embed(embed::Args),
    /// CPU time per text of realistic queries embedded B at a time.
    EmbedBatches(embed_batches::Args),
    /// Speed and footprint of the discovery engine: embedding, search, the
    /// daemon under discovery load, start-up on a large index.
    Speed(speed::Args),
    /// The previous default's retrieval quality beside the new one's,
    /// corpus by corpus, BM25 as the floor.
    RetrievalCompare(retrieval_compare::Args),
    /// Recall@k, MRR and abstention of the retrieval modes. Boxed: its
    /// options outweigh every other subcommand's.
    Retrieval(Box<retrieval::Args>),
    /// The "nothing fits" decision against a small catalog and against it
    /// plus a large corpus.
    CatalogSize(catalog_size::Args),
    /// "Nothing fits" when each task brings its own small catalog.
    Relevance(relevance::Args),
    /// A board pulling and swapping in a large signed snapshot: pull
    /// time, memory against a crawl rebuild's, discover latency.
    SnapshotSwap(snapshot_swap::Args),
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
        Bench::Proxy(args) => {
            let report = proxy_bench::run(args)?;
            table(report.render());
            emit(&report, json)?;
        }
        Bench::Mcp(args) => {
            let report = mcp_bench::run(args)?;
            table(report.render());
            emit(&report, json)?;
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
        Bench::SoakPlot(args) => soak_plot::run(args)?,
        Bench::Fitness(args) => {
            let report = fitness::run(args)?;
            table(report.render());
            emit(&report, json)?;
        }
        Bench::SnapshotSwap(args) => emit(&snapshot_swap::run(args)?, json)?,
        Bench::MemoryBurst(args) => emit(&memory_burst::run(args)?, json)?,
        Bench::Memory(args) => {
            let report = memory_burst::run_builds(args)?;
            table(report.render());
            emit(&report, json)?;
        }
        Bench::MakeCorpus(args) => make_corpus::run(args)?,
        Bench::Search(args) => emit(&search::run(args)?, json)?,
        Bench::Embed(args) => emit(&embed::run(args)?, json)?,
        Bench::EmbedBatches(args) => emit(&embed_batches::run(args)?, json)?,
        Bench::Speed(args) => {
            let report = speed::run(args)?;
            table(report.render());
            emit(&report, json)?;
        }
        Bench::RetrievalCompare(args) => match args.plan() {
            Some(plan) => emit(&plan, json)?,
            None => {
                let report = retrieval_compare::run(args)?;
                table(report.render());
                emit(&report, json)?;
            }
        },
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

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::Cli;

    #[test]
    fn the_one_parser_is_consistent() {
        Cli::command().debug_assert();
    }

    /// `oap-bench SUBCOMMAND --help` explains every option: the runners in
    /// xtask pass their users' options through, so this help is theirs.
    #[test]
    fn every_subcommand_and_option_is_documented_in_help() {
        let cli = Cli::command();
        let mut undocumented = Vec::new();
        for sub in cli.get_subcommands() {
            if sub.get_about().is_none() {
                undocumented.push(sub.get_name().to_string());
            }
            for arg in sub.get_arguments() {
                let builtin = matches!(arg.get_id().as_str(), "help" | "version");
                if !builtin && !arg.is_global_set() && arg.get_help().is_none() {
                    undocumented.push(format!("{} --{}", sub.get_name(), arg.get_id()));
                }
            }
        }
        assert!(undocumented.is_empty(), "no help text: {undocumented:?}");
    }

    fn retrieval_compare(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(["oap-bench", "retrieval-compare"].iter().chain(args))
    }

    /// The plan of `retrieval-compare` for `args`: what the runner prepares.
    fn plan(args: &[&str]) -> oap_bench::compare_report::RetrievalPlan {
        let mut all = vec!["--plan"];
        all.extend_from_slice(args);
        match retrieval_compare(&all).expect("parsed").bench {
            super::Bench::RetrievalCompare(args) => args.plan().expect("--plan"),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn retrieval_compare_takes_one_corpus_option_or_none_and_plans_for_it() {
        for args in [
            &[][..],
            &["--public-only"],
            &["--relevance"],
            &["--toollens", "COLT"],
            &["--hwu64", "HWU", "--previous", "/tmp/old"],
        ] {
            let parsed = retrieval_compare(args);
            assert!(parsed.is_ok(), "{args:?}: {parsed:?}");
        }
        let every = plan(&[]);
        assert!(every.previous);
        assert_eq!(every.models, ["multilingual-e5-small"]);
        let languages = plan(&["--languages-only"]);
        assert_eq!(languages.models, ["multilingual-e5-small"]);
        let shared = plan(&["--shared-only"]);
        assert!(shared.previous && shared.models.is_empty());
        assert!(!plan(&["--catalog-size"]).previous);
    }

    #[test]
    fn retrieval_compare_names_a_bad_option_before_anything_runs() {
        let error = |args: &[&str]| {
            retrieval_compare(args)
                .map(|_| ())
                .expect_err("refused")
                .to_string()
        };
        assert!(error(&["--bogus"]).contains("--bogus"));
        assert!(error(&["--hwu64"]).contains("--hwu64 <CLONE>"));
        assert!(error(&["--toollens"]).contains("--toollens <CLONE>"));
        let two = error(&["--shared-only", "--bfcl-only"]);
        assert!(two.contains("cannot be used with"), "{two}");
        assert!(error(&["--hwu64", "HWU", "more"]).contains("more"));
    }

    #[test]
    fn speed_refuses_zero_runs_or_an_empty_corpus() {
        let speed = |extra: &[&str]| {
            let mut args = vec![
                "oap-bench",
                "speed",
                "--oapd",
                "target/release/oapd",
                "--model-dir",
                "models/all-MiniLM-L6-v2",
                "--cache",
                "target/bench",
            ];
            args.extend_from_slice(extra);
            Cli::try_parse_from(args)
        };
        assert!(speed(&["--quick", "--runs", "3", "--corpus", "1000"]).is_ok());
        for (flag, bad) in [("--runs", "0"), ("--corpus", "0")] {
            let err = speed(&[flag, bad]).map(|_| ()).expect_err("refused");
            assert!(err.to_string().contains(flag), "{err}");
        }
    }

    #[test]
    fn fitness_and_memory_take_what_their_runners_pass() {
        let fitness = Cli::try_parse_from([
            "oap-bench",
            "fitness",
            "--oapd",
            "target/release/oapd",
            "--fake-ollama",
            "target/release/fake-ollama",
            "--model-dir",
            "models/all-MiniLM-L6-v2",
            "--quick",
        ]);
        assert!(fitness.is_ok(), "{fitness:?}");
        let memory = Cli::try_parse_from([
            "oap-bench",
            "memory",
            "--oapd",
            "/tmp/new",
            "--against",
            "/tmp/old",
            "--fake-ollama",
            "target/release/fake-ollama",
            "--model-dir",
            "models/all-MiniLM-L6-v2",
            "--clients",
            "4",
            "--mb",
            "5",
        ]);
        assert!(memory.is_ok(), "{memory:?}");
        let burst = Cli::try_parse_from([
            "oap-bench",
            "memory-burst",
            "--addr",
            "127.0.0.1:1",
            "--pid",
            "1",
            "--fake",
            "127.0.0.1:2",
            "--clients",
            "0",
        ]);
        let err = burst.map(|_| ()).expect_err("--clients 0 is refused");
        assert!(err.to_string().contains("--clients"), "{err}");
    }
}
