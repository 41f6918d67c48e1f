//! `oapd discover` and `oapd index`: the index from the command line.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use oap_discovery::{BuildReport, Engine, McpTools};

use crate::app::{load_embedder, open_engine_with};
use crate::config::Config;
use crate::mcp::McpServers;

/// Opens the engine as the daemon does: with the configured MCP servers'
/// tools as a source, so a rebuild from the command line keeps them. The
/// servers run for the command's life only.
/// With `force`, the index is rebuilt while the servers still run.
fn open_with_servers(config: &Config, force: bool) -> anyhow::Result<(Engine, BuildReport)> {
    let (embedder, _) = load_embedder(config);
    let open = |tools: Option<Arc<dyn McpTools>>| -> anyhow::Result<(Engine, BuildReport)> {
        let (engine, mut report) = open_engine_with(config, embedder.clone(), tools)?;
        if force {
            report = engine.rebuild_at(true, oap_discovery::Priority::Foreground)?;
        }
        Ok((engine, report))
    };
    let (specs, _) = crate::mcp::read_specs(config);
    if specs.is_empty() {
        return open(None);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("cannot start the runtime for the MCP servers")?;
    let runner = crate::tools::ExecRunner::new(config).context("tool execution setup")?;
    let servers = runtime.block_on(async {
        let servers = McpServers::start(
            config,
            runner.hub_context(),
            runner.connection_basis().clone(),
        );
        // One initialize deadline and a little to list the tools.
        servers
            .settled(Duration::from_secs(config.mcp.init_timeout) + Duration::from_secs(5))
            .await;
        servers
    });
    let tools: Arc<dyn McpTools> = servers.clone();
    let opened = open(Some(tools));
    runtime.block_on(servers.shutdown());
    opened
}

/// Prints the manifests that fit `task` (as the HTTP API's JSON with `json`).
pub fn discover(config: &Config, task: &str, top_k: usize, json: bool) -> anyhow::Result<()> {
    let (engine, _) = open_with_servers(config, false)?;
    let discovery = engine.discover(task, top_k)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&discovery)?);
    } else {
        print!("{}", super::render::discovery(&discovery));
    }
    Ok(())
}

/// Opens (building when needed) the index, or rebuilds it with `force`, and
/// prints one line about it.
pub fn index(config: &Config, force: bool) -> anyhow::Result<()> {
    let (_engine, report) = open_with_servers(config, force)?;
    println!(
        "{} manifests, {} rows ({} embedded, index {}), {} problems, {} collisions, {:.0} ms",
        report.docs,
        report.rows,
        report.embedded_rows,
        if report.reused_index {
            "unchanged"
        } else {
            "written"
        },
        report.problems.len(),
        report.collisions.len(),
        report.elapsed_ms
    );
    Ok(())
}
