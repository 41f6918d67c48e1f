//! `oapd`: OAP manifest discovery and tool bridge for local LLMs.
//!
//! The binary is thin: it parses the command line, loads the config, sets up
//! logging and hands over to the library (`oapd::app`).

// Product code never panics on what it is given: errors are values.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use oapd::config::Config;

#[derive(Debug, Parser)]
#[command(
    name = "oapd",
    version,
    about = "Finds the OAP capability that fits a task, and bridges it to Ollama as tools",
    long_about = "oapd indexes OAP manifests (one JSON file per capability) into a memory-mapped \
index and answers \"which capability fits this task?\" with local embeddings and BM25, \
without asking an LLM.\n\nConfiguration: built-in defaults, then --config FILE (YAML), then \
OAP_<SECTION>_<KEY> environment variables (e.g. OAP_SERVER_LISTEN=0.0.0.0:8300)."
)]
struct Cli {
    /// YAML configuration file (defaults are built in; see docs/config.example.yaml).
    #[arg(long, short, global = true, env = "OAPD_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the daemon: index the configured manifests and serve the HTTP API.
    Serve,
    /// Find the manifests that fit a task, from the command line.
    Discover {
        /// The task in plain language, e.g. "count the words in a text".
        task: String,
        /// How many candidates to show.
        #[arg(long, short = 'k', default_value_t = 5)]
        top_k: usize,
        /// Print the full JSON answer (as the HTTP API returns it).
        #[arg(long)]
        json: bool,
    },
    /// Rebuild the index from the configured manifest sources.
    Index {
        /// Re-embed every manifest instead of reusing unchanged vectors.
        #[arg(long)]
        force: bool,
    },
    /// Work with manifest files.
    Manifest {
        #[command(subcommand)]
        command: ManifestCommand,
    },
    /// Show the effective configuration (defaults + file + environment).
    Config,
    /// Check that an Ollama model calls tools correctly and reasons; records
    /// the verdict in the validation store. Exits non-zero on failure.
    ValidateModel {
        /// The Ollama model, e.g. qwen3:4b.
        #[arg(long)]
        model: String,
        /// Also check tool choice among several, no tool when none fits, and argument types.
        #[arg(long)]
        full_suite: bool,
        /// Seconds each check may take.
        #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=3600))]
        timeout: u64,
    },
    /// Fetch manifests from domains (https://DOMAIN/.well-known/oap.json)
    /// into the index: the given domains, or the configured seeds.
    Crawl {
        /// One pass over the domains, then exit (non-zero if any failed).
        /// Without it, keep crawling on the schedule until interrupted.
        #[arg(long)]
        once: bool,
        /// Domains to crawl (e.g. example.com); default: crawler.seeds.
        #[arg(value_name = "DOMAIN")]
        domains: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
enum ManifestCommand {
    /// Validate manifest files; exits non-zero if any has errors.
    Lint {
        /// Manifest files to check.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("oapd: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        // Linting needs no config, model or index.
        Command::Manifest {
            command: ManifestCommand::Lint { files },
        } => {
            let mut stdout = std::io::stdout().lock();
            let any_error = oapd::app::lint(&files, &mut stdout)?;
            Ok(if any_error {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        command => {
            let loaded = Config::load(cli.config.as_deref(), oapd::config::process_env())?;
            pin_compute_threads(loaded.config.embedding.threads);
            oapd::logging::init(&loaded.config.log);
            for warning in &loaded.warnings {
                tracing::warn!(warning = %warning, "configuration");
            }
            if let Command::ValidateModel {
                model,
                full_suite,
                timeout,
            } = command
            {
                return oapd::app::validate_model(&loaded.config, &model, full_suite, timeout);
            }
            run_with_config(command, loaded.config, cli.config)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// candle sizes its matmul split from `RAYON_NUM_THREADS`, and without it
/// re-counts the CPUs from /proc/cpuinfo on every multiplication (~17% of a
/// query's embedding time, measured). Setting it once, before any thread
/// exists, removes that cost; an operator's own value is kept.
fn pin_compute_threads(configured: Option<usize>) {
    if std::env::var_os("RAYON_NUM_THREADS").is_some() {
        return;
    }
    let threads = configured
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(1);
    // Single-threaded at this point: no other thread can read the
    // environment concurrently.
    std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
}

fn run_with_config(
    command: Command,
    config: Config,
    config_path: Option<PathBuf>,
) -> anyhow::Result<()> {
    match command {
        Command::Serve => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("cannot start the async runtime")?;
            let served = runtime.block_on(oapd::lifecycle::serve(config, config_path));
            // Requests still running after the shutdown grace are cut here:
            // dropping their tasks kills their tool process groups. Blocking
            // work (an embedding batch) gets a moment, never a hang.
            runtime.shutdown_timeout(std::time::Duration::from_secs(2));
            served?;
        }
        Command::Discover { task, top_k, json } => {
            let (embedder, _) = oapd::app::load_embedder(&config);
            let (engine, _) = oapd::app::open_engine(&config, embedder)?;
            let discovery = engine.discover(&task, top_k)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&discovery)?);
            } else {
                print!("{}", oapd::render::discovery(&discovery));
            }
        }
        Command::Index { force } => {
            let (embedder, _) = oapd::app::load_embedder(&config);
            let (engine, mut report) = oapd::app::open_engine(&config, embedder)?;
            if force {
                report = engine.rebuild_at(true, oap_discovery::Priority::Foreground)?;
            }
            println!(
                "{} manifests, {} rows ({} embedded, index {}), {} problems, {} collisions, {:.0} ms",
                report.docs,
                report.rows,
                report.embedded_rows,
                if report.reused_index { "unchanged" } else { "written" },
                report.problems.len(),
                report.collisions.len(),
                report.elapsed_ms
            );
        }
        Command::Config => println!("{}", config.effective_yaml()),
        Command::Crawl { once, domains } => return oapd::crawl::cli(&config, once, &domains),
        Command::Manifest { .. } | Command::ValidateModel { .. } => {}
    }
    Ok(())
}
