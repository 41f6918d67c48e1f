//! `oapd requests generate`: request rows for a whole catalog in one run,
//! off the boards (a snapshot builder's step).
//!
//! The daemon writes request rows in the background, one slow call at a
//! time while nothing else needs the model (`crate::request_gen`). A
//! builder has a catalog of crawled tools and a model of its own, and
//! wants every row now: this command loads the manifests as the index
//! does (same catalog, so the same content hashes), asks the endpoint for
//! each tool without requests of its own through the very exchange the
//! daemon uses ([`ask::ask`]: same prompt, same strict reading, same
//! acceptance rules), and writes the daemon's cache format
//! (`generated-requests.json`), which `oapd index` and `oapd snapshot
//! build` attach when it lies in their data directory.
//!
//! The output is neither capped nor aged like the daemon's cache
//! ([`cache::Cache::save_all`]): it is the builder's whole catalog. It is
//! read back at start, so a run that stopped resumes where it was; it is
//! written every [`SAVE_EVERY`] tools, so little is lost when it stops.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use clap::Subcommand;
use oap_bridge::upstream::Upstream;
use oap_discovery::{Catalog, Source};
use tokio::task::JoinSet;

use crate::request_gen::ask::{self, AskError, ModelId};
use crate::request_gen::cache::{Cache, Entry};
use crate::request_gen::has_own_requests;

/// Tools written between two saves of the output.
const SAVE_EVERY: usize = 32;

/// Tries per tool: unusable answers, or a failed exchange, before the
/// tool is given up (the daemon gives a tool the same number).
const TRIES_PER_TOOL: u32 = 3;

/// Wait before trying a failed exchange again; doubles with each try.
const RETRY_PAUSE: Duration = Duration::from_secs(2);

/// Upper bound of `--concurrency`: more parallel calls than a model
/// server batches only queue on its side.
const MAX_CONCURRENCY: u64 = 256;

/// `oapd requests ...`.
#[derive(Debug, Subcommand)]
pub enum RequestsCommand {
    /// Ask a model for request rows for every tool without requests of
    /// its own, into a generated-requests.json (resumes a partial one).
    Generate {
        /// A directory of manifest files (repeat for several).
        #[arg(long = "manifests", value_name = "DIR")]
        manifests: Vec<PathBuf>,
        /// A crawler's store of crawled manifests (DATA_DIR/crawled of
        /// `oapd crawl`; repeat for several).
        #[arg(long = "crawled", value_name = "DIR")]
        crawled: Vec<PathBuf>,
        /// The file to write (the daemon's generated-requests.json format).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// The Ollama API to ask (its /api/tags and /api/chat), e.g.
        /// http://127.0.0.1:11434.
        #[arg(long, value_name = "URL")]
        ollama: String,
        /// The model that writes, as Ollama names it (e.g. qwen3:4b).
        #[arg(long)]
        model: String,
        /// Calls in flight at once (a model server that batches answers
        /// several at the cost of one).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=MAX_CONCURRENCY))]
        concurrency: u64,
    },
}

/// What one run did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Tools in the catalog.
    pub tools: usize,
    /// Of them, tools with requests of their own (nothing to write).
    pub own: usize,
    /// Tools the output already had rows for from this model.
    pub already: usize,
    /// Tools written this run.
    pub written: usize,
    /// Tools given up after [`TRIES_PER_TOOL`] unusable answers.
    pub given_up: usize,
}

/// Runs one `oapd requests` subcommand.
pub fn run(command: RequestsCommand) -> anyhow::Result<()> {
    let RequestsCommand::Generate {
        manifests,
        crawled,
        out,
        ollama,
        model,
        concurrency,
    } = command;
    let mut sources: Vec<Source> = manifests.into_iter().map(Source::Dir).collect();
    sources.extend(crawled.into_iter().map(Source::Remote));
    if sources.is_empty() {
        bail!("no manifests to write requests for: give --manifests DIR or --crawled DIR");
    }
    for source in &sources {
        if let Source::Dir(dir) | Source::Remote(dir) = source {
            if !dir.is_dir() {
                bail!("{} is not a directory", dir.display());
            }
        }
    }
    let upstream = Upstream::new(&ollama, ask::CALL_TIMEOUT)
        .map_err(|err| anyhow::anyhow!("--ollama {ollama:?}: {err}"))?;
    let concurrency = usize::try_from(concurrency).unwrap_or(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let Run { tally, stopped } =
        runtime.block_on(generate(&sources, &out, &upstream, &model, concurrency))?;
    println!(
        "{} tools: {} with requests of their own, {} already written, {} written now, {} given up; {}",
        tally.tools,
        tally.own,
        tally.already,
        tally.written,
        tally.given_up,
        out.display()
    );
    match stopped {
        // Non-zero, so a pipeline does not take a partial file for a
        // whole one; the rows written are in the file, and a rerun asks
        // only for the others.
        Some(why) => Err(anyhow::anyhow!(
            "{why}; stopped with {} of {} tools left unwritten; the rows written so far are \
             kept in {} and a rerun continues from them",
            tally
                .tools
                .saturating_sub(tally.own + tally.already + tally.written + tally.given_up),
            tally.tools.saturating_sub(tally.own + tally.already),
            out.display()
        )),
        None => Ok(()),
    }
}

/// A run's outcome: what it did, and why it stopped early (the endpoint
/// failed; a tool given up for bad answers does not stop it).
struct Run {
    tally: Tally,
    stopped: Option<String>,
}

/// One tool to write for.
struct Wanted {
    id: String,
    content_hash: String,
    name: String,
    description: String,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

async fn generate(
    sources: &[Source],
    out: &Path,
    upstream: &Upstream,
    model: &str,
    concurrency: usize,
) -> anyhow::Result<Run> {
    let installed = ask::list_models(upstream)
        .await
        .context("cannot list the endpoint's models")?;
    // The configured-model rule of the daemon: the name must be installed;
    // its digest joins the cache key, as on a board.
    let model = ask::choose_model(&installed, Some(model), &[])
        .map_err(|err| anyhow::anyhow!("--model {model:?}: {err}"))?;
    let mut output = Cache::load_all(out).with_context(|| format!("--out {}", out.display()))?;
    let catalog = Catalog::load(sources);
    for problem in &catalog.problems {
        tracing::warn!(location = %problem.location, problem = %problem.message, "manifest skipped");
    }
    let mut tally = Tally {
        tools: catalog.entries.len(),
        ..Tally::default()
    };
    let mut wanted = Vec::new();
    for entry in &catalog.entries {
        if has_own_requests(entry).unwrap_or(true) {
            tally.own += 1;
            continue;
        }
        if output.has(&entry.content_hash, &model.key()) {
            tally.already += 1;
            continue;
        }
        let Ok(manifest) = entry.manifest() else {
            continue;
        };
        wanted.push(Wanted {
            id: entry.id.clone(),
            content_hash: entry.content_hash.clone(),
            name: manifest.name,
            description: manifest.description,
        });
    }
    tracing::info!(
        tools = tally.tools,
        to_write = wanted.len(),
        model = %model.name,
        "writing request rows"
    );
    let model = Arc::new(model);
    let mut pending = wanted.into_iter();
    let mut calls: JoinSet<(Wanted, Result<Vec<String>, AskError>)> = JoinSet::new();
    let mut unsaved = 0;
    let mut failure: Option<String> = None;
    loop {
        while failure.is_none() && calls.len() < concurrency {
            let Some(tool) = pending.next() else { break };
            let (upstream, model) = (upstream.clone(), model.clone());
            calls.spawn(async move {
                let answer = ask_with_retries(&upstream, &model, &tool).await;
                (tool, answer)
            });
        }
        let Some(joined) = calls.join_next().await else {
            break;
        };
        let (tool, answer) = match joined {
            Ok(done) => done,
            Err(err) => {
                // Whatever was written stays written: save before stopping.
                failure.get_or_insert_with(|| format!("a generation task failed: {err}"));
                continue;
            }
        };
        match answer {
            Ok(requests) => {
                let now = unix_now();
                output.insert(Entry {
                    content_hash: tool.content_hash,
                    model: model.key(),
                    id: tool.id,
                    requests,
                    generated_unix: now,
                    last_seen_unix: now,
                });
                tally.written += 1;
                unsaved += 1;
                if unsaved >= SAVE_EVERY {
                    output.save_all(out)?;
                    unsaved = 0;
                }
            }
            Err(err) if err.is_bad_answer() => {
                // The tool is still found by its own words.
                tracing::warn!(id = %tool.id, error = %err, "request rows: tool given up");
                tally.given_up += 1;
            }
            Err(err) => {
                // The endpoint itself fails: stop asking, keep what is written.
                tracing::error!(id = %tool.id, error = %err, "request rows: the endpoint failed, stopping");
                failure.get_or_insert_with(|| {
                    format!("{}: {err} (after {TRIES_PER_TOOL} tries)", tool.id)
                });
            }
        }
    }
    output.save_all(out)?;
    Ok(Run {
        tally,
        stopped: failure,
    })
}

/// [`ask::ask`] up to [`TRIES_PER_TOOL`] times, pausing after a failed
/// exchange (a model server restarting, a request timed out).
async fn ask_with_retries(
    upstream: &Upstream,
    model: &ModelId,
    tool: &Wanted,
) -> Result<Vec<String>, AskError> {
    let mut pause = RETRY_PAUSE;
    let mut tries = 0;
    loop {
        tries += 1;
        match ask::ask(upstream, &model.name, &tool.name, &tool.description).await {
            Ok(requests) => return Ok(requests),
            Err(err) if tries >= TRIES_PER_TOOL => return Err(err),
            Err(err) if err.is_bad_answer() => {
                tracing::debug!(id = %tool.id, error = %err, "request rows: unusable answer, asking again");
            }
            Err(err) => {
                tracing::warn!(id = %tool.id, error = %err, retry_in_s = pause.as_secs(), "request rows: call failed");
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
        }
    }
}
