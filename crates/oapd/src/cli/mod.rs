//! The `oapd` command line: parsing (clap), one module per subcommand, and
//! the terminal rendering of discovery answers (`render`).
//! `main.rs` only calls [`main`].

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::Config;

pub(crate) mod crawl;
pub(crate) mod index;
pub(crate) mod lint;
mod render;
pub(crate) mod requests;
pub(crate) mod serve;
pub(crate) mod snapshot;
pub(crate) mod validate_model;

#[derive(Debug, Parser)]
#[command(
    name = "oapd",
    version,
    about = "A drop-in Ollama proxy that gives the model the few tools that fit, and runs them",
    long_about = "A drop-in Ollama proxy: point an app at oapd instead of Ollama. Each chat \
(/api/chat, or OpenAI's /v1/chat/completions and /v1/responses) gets the few tools that fit its \
request next to the app's own, and oapd runs the model's calls to them until it answers; every \
other path passes through to Ollama.\n\n\
An MCP server (/mcp: oap_discover, oap_invoke) and an MCP client (the servers of an mcpServers \
file, whose tools join the catalog).\n\n\
Discovery over OAP manifests (one JSON file per capability: bundled, directories, crawled) and \
MCP tools, with a local embedding model and BM25, without asking an LLM: `oapd discover TASK`.\n\n\
The status page is /ui on the same port.\n\n\
Configuration: built-in defaults, then --config FILE (YAML), then OAP_<SECTION>_<KEY> \
environment variables (e.g. OAP_SERVER_LISTEN=0.0.0.0:8300)."
)]
/// The command line: global options and one subcommand.
pub struct Cli {
    /// YAML configuration file (defaults are built in; see docs/config.example.yaml).
    #[arg(long, short, global = true, env = "OAPD_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,

    /// What became of an `OAP_CONFIG` in the environment (the old name of
    /// `OAPD_CONFIG`), logged once logging is set up.
    #[arg(skip)]
    legacy_config_variable: Option<String>,
}

/// What oapd does this run.
#[derive(Debug, Subcommand)]
pub enum Command {
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
    /// Signed index snapshots: make a key, build one off the boards, verify one.
    Snapshot {
        /// keygen, build or verify.
        #[command(subcommand)]
        command: snapshot::SnapshotCommand,
    },
    /// Request rows for a whole catalog at once, off the boards.
    Requests {
        /// generate.
        #[command(subcommand)]
        command: requests::RequestsCommand,
    },
    /// Work with manifest files.
    Manifest {
        /// What to do with the manifests.
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

/// `oapd manifest` subcommands.
#[derive(Debug, Subcommand)]
pub enum ManifestCommand {
    /// Validate manifest files; exits non-zero if any has errors.
    Lint {
        /// Manifest files to check.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
}

/// The config file's variable before it was named `OAPD_CONFIG`.
const LEGACY_CONFIG_VARIABLE: &str = "OAP_CONFIG";
/// The config file's variable (clap reads it for `--config`).
const CONFIG_VARIABLE: &str = "OAPD_CONFIG";

/// Accepts the config path under its old name: when only `OAP_CONFIG` is
/// set, it becomes `OAPD_CONFIG` for this run. Returns the warning to log.
/// Must run before any thread exists (it may set a variable).
fn adopt_legacy_config_variable() -> Option<String> {
    let legacy = std::env::var_os(LEGACY_CONFIG_VARIABLE)?;
    match std::env::var_os(CONFIG_VARIABLE) {
        None => {
            std::env::set_var(CONFIG_VARIABLE, &legacy);
            Some(format!(
                "{LEGACY_CONFIG_VARIABLE} is deprecated: read it as {CONFIG_VARIABLE}; \
                 rename it to {CONFIG_VARIABLE}"
            ))
        }
        Some(current) if current == legacy => Some(format!(
            "{LEGACY_CONFIG_VARIABLE} is deprecated and set to the same file as \
             {CONFIG_VARIABLE}: remove it"
        )),
        Some(_) => Some(format!(
            "{LEGACY_CONFIG_VARIABLE} ignored: {CONFIG_VARIABLE} is set and names \
             another file; remove {LEGACY_CONFIG_VARIABLE}"
        )),
    }
}

/// Parses the command line and runs it; errors are printed, not returned.
pub fn main() -> ExitCode {
    // Single-threaded here: nothing else reads the environment yet.
    let legacy_config_variable = adopt_legacy_config_variable();
    let mut cli = Cli::parse();
    cli.legacy_config_variable = legacy_config_variable;
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("oapd: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        // Linting needs no config, model or index.
        Command::Manifest {
            command: ManifestCommand::Lint { files },
        } => {
            if let Some(warning) = &cli.legacy_config_variable {
                eprintln!("oapd: warning: {warning}");
            }
            let mut stdout = std::io::stdout().lock();
            let any_error = lint::lint(&files, &mut stdout)?;
            Ok(if any_error {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        command => {
            let loaded = Config::load(cli.config.as_deref(), crate::config::process_env())?;
            pin_compute_threads(loaded.config.embedding.threads);
            crate::logging::init(&loaded.config.log, loaded.config.server.log_content);
            if let Some(warning) = &cli.legacy_config_variable {
                tracing::warn!(warning = %warning, "configuration");
            }
            for warning in &loaded.warnings {
                tracing::warn!(warning = %warning, "configuration");
            }
            if let Command::ValidateModel {
                model,
                full_suite,
                timeout,
            } = command
            {
                return validate_model::run(&loaded.config, &model, full_suite, timeout);
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
        Command::Serve => serve::run(config, config_path)?,
        Command::Discover { task, top_k, json } => index::discover(&config, &task, top_k, json)?,
        Command::Index { force } => index::index(&config, force)?,
        Command::Config => {
            println!("{}", config.effective_yaml());
            print!("{}", crate::mcp::describe_specs(&config));
        }
        Command::Crawl { once, domains } => return crawl::run(&config, once, &domains),
        Command::Snapshot { command } => snapshot::run(&config, command)?,
        Command::Requests { command } => requests::run(command)?,
        Command::Manifest { .. } | Command::ValidateModel { .. } => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// `oapd --help` names what people run oapd for in the order they meet
    /// it: the Ollama proxy with its tools, then MCP, then discovery, then
    /// the status page.
    #[test]
    fn help_says_what_oapd_is_for_in_the_order_users_meet_it() {
        // Whitespace joined, since clap wraps the text to the terminal.
        let one_line = |text: String| text.split_whitespace().collect::<Vec<_>>().join(" ");
        let help = one_line(Cli::command().render_long_help().to_string());
        let at = |needle: &str| {
            help.find(needle)
                .unwrap_or_else(|| panic!("`oapd --help` does not mention {needle:?}:\n{help}"))
        };
        let order = [
            at("Ollama proxy"),
            at("/api/chat"),
            at("/v1/chat/completions"),
            at("tools that fit"),
            at("MCP server"),
            at("MCP client"),
            at("Discovery over OAP manifests"),
            at("status page"),
        ];
        assert!(
            order.windows(2).all(|pair| pair[0] < pair[1]),
            "out of order ({order:?}):\n{help}"
        );
        let short = one_line(Cli::command().render_help().to_string());
        assert!(short.contains("Ollama proxy"), "{short}");
    }
}
