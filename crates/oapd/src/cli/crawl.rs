//! `oapd crawl`: fetch manifests from domains into the index, once or on
//! the schedule.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use oap_crawl::AddedBy;

use crate::config::Config;
use crate::crawl::{build, seeds};

/// `oapd crawl [--once] [DOMAIN...]`. Prints one line per domain; with
/// `--once`, fails when any domain failed.
pub fn run(config: &Config, once: bool, domains: &[String]) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let (embedder, _) = crate::app::load_embedder(config);
        let blocking = config.clone();
        let (engine, _) =
            tokio::task::spawn_blocking(move || crate::app::open_engine(&blocking, embedder))
                .await
                .context("start-up task failed")??;
        let engine = Arc::new(engine);
        let crawler = Arc::new(build(config)?);
        let (targets, added_by) = if domains.is_empty() {
            (seeds(config)?, AddedBy::Seed)
        } else {
            (domains.to_vec(), AddedBy::Cli)
        };
        let mut names = Vec::new();
        for raw in &targets {
            names.push(
                crawler
                    .add_domain(raw, added_by)
                    .map_err(|e| anyhow::anyhow!("{e}"))?,
            );
        }
        if names.is_empty() {
            anyhow::bail!("nothing to crawl: give DOMAIN arguments or set crawler.seeds");
        }
        if !once {
            tracing::info!(
                domains = names.len(),
                "crawling on schedule until interrupted"
            );
            crawler
                .run(
                    oap_crawl::sink::engine_sink(&engine),
                    Duration::from_secs(1),
                    async {
                        let _ = tokio::signal::ctrl_c().await;
                    },
                )
                .await;
            return Ok(());
        }
        let sink = oap_crawl::sink::engine_sink(&engine);
        let report = crawler.crawl_pass(Some(&names), Some(&sink)).await;
        for state in crawler.status() {
            if !names.contains(&state.domain) {
                continue;
            }
            println!(
                "{}: {}{}",
                state.domain,
                state.last_result.as_deref().unwrap_or("not fetched"),
                state
                    .manifest_id
                    .as_deref()
                    .map(|id| format!(" ({id})"))
                    .unwrap_or_default()
            );
        }
        if let Some(err) = &report.rebuild_error {
            anyhow::bail!("index rebuild failed: {err}");
        }
        println!(
            "{} updated, {} unchanged, {} failed; index: {} manifests",
            report.updated,
            report.unchanged,
            report.failed,
            engine.stats().docs
        );
        if report.failed > 0 || report.deferred > 0 {
            anyhow::bail!(
                "{} of {} domains failed",
                report.failed + report.deferred,
                names.len()
            );
        }
        Ok(())
    })
}
