//! What the server starts for one engine generation: the chat bridge and
//! its pass-through wiring, and the background tasks (directory watch,
//! crawler schedule, LAN discovery) that keep the index current.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use oap_discovery::Engine;
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::rebuild::Rebuilder;
use crate::server::bridge::chat::ChatService;
use crate::watch::{self, DirSignature};
use oap_bridge::tool_loop::{BridgeSettings, Capabilities, ChatContext};
use oap_bridge::upstream::Upstream;

/// Background tasks of one engine generation (crawler, directory watch).
pub type CrawlTasks = Vec<JoinHandle<()>>;

/// Starts the directory watch and, when `crawler.enabled`, the crawler's
/// schedule loop, for `engine`. The caller owns the returned tasks: a
/// reload aborts them and starts new ones for the new engine (the
/// crawler's schedule and store are files, so nothing is lost).
pub fn start_crawler(
    config: &Config,
    rebuilder: &Arc<Rebuilder>,
    watch_baseline: DirSignature,
) -> anyhow::Result<(Option<Arc<oap_crawl::Crawler>>, CrawlTasks)> {
    let engine = rebuilder.engine();
    let mut tasks = Vec::new();
    let mut dropped_seeds = 0;
    // LAN discovery (crawler.mdns) needs the crawler for its LAN targets
    // even when internet crawling (crawler.enabled) is off; the crawler then
    // fetches LAN targets only and refuses registrations.
    let crawler = if config.crawler.enabled || config.crawler.mdns {
        let crawler = Arc::new(
            crate::crawl::build_for(config, config.crawler.enabled).context("crawler setup")?,
        );
        let mut seeds_added = 0;
        if config.crawler.enabled {
            let seeds = crate::crawl::seeds(config)?;
            let added = crate::crawl::add_seeds(&crawler, &seeds, oap_crawl::AddedBy::Seed);
            seeds_added = added.len();
            dropped_seeds = crawler.retain_seeds(&added).len();
        }
        tracing::info!(
            seeds = seeds_added,
            dropped = dropped_seeds,
            internet = config.crawler.enabled,
            mdns = config.crawler.mdns,
            "crawler started"
        );
        Some(crawler)
    } else {
        None
    };
    let mut lan_removed = 0;
    if !config.crawler.mdns {
        // LAN discovery off: no LAN tools, also none left from a run with it on.
        let removed = match &crawler {
            Some(crawler) => crawler.purge_lan_targets(),
            None => crate::crawl::mdns::purge_stored(config),
        };
        if removed > 0 {
            tracing::info!(removed, "LAN manifests removed (crawler.mdns is off)");
            lan_removed = removed;
        }
    }
    // Manifests that left the store at start (dropped seeds, LAN manifests
    // with mDNS off): one rebuild covers them all.
    if dropped_seeds > 0 || lan_removed > 0 {
        let rebuilder = rebuilder.clone();
        tasks.push(tokio::spawn(async move {
            rebuilder.rebuild("manifests left the store at start").await;
        }));
    }
    // Runs with the watching off too (watch_interval 0): it also retries
    // failed rebuilds.
    tasks.push(tokio::spawn(watch::watch_dirs(
        rebuilder.clone(),
        watch::watched_dirs(config),
        watch_baseline,
        Duration::from_secs(config.crawler.watch_interval),
        std::future::pending(),
    )));
    if let Some(crawler) = &crawler {
        tasks.push(tokio::spawn(crawler.clone().run(
            crate::crawl::metered_sink(engine),
            Duration::from_secs(1),
            std::future::pending(),
        )));
        if config.crawler.mdns {
            tasks.push(tokio::spawn(crate::crawl::mdns::browse(
                crawler.clone(),
                rebuilder.clone(),
            )));
        }
    }
    Ok((crawler, tasks))
}

/// The client for `ollama.base_url`: TLS with `ollama.ca_file` for an
/// `https://` URL, `ollama.api_key` on every request, each response head
/// awaited at most `head_timeout`.
pub fn upstream(config: &Config, head_timeout: Duration) -> anyhow::Result<Upstream> {
    let o = &config.ollama;
    let ca_pem = match &o.ca_file {
        None => None,
        Some(path) => Some(crate::files::read_ca_file("ollama.ca_file", path)?),
    };
    let options = oap_bridge::upstream::UpstreamOptions {
        ca_pem,
        api_key: o.api_key.clone(),
    };
    let upstream =
        Upstream::with_options(&o.base_url, head_timeout, &options).context("ollama.base_url")?;
    Ok(upstream.with_observer(Arc::new(
        |exchange: &oap_bridge::upstream::UpstreamExchange<'_>| {
            crate::metrics::get().upstream(exchange)
        },
    )))
}

/// The chat bridge and pass-through wiring for `config`, running tools
/// with `runner` (built from the same `config`: one executor per handler
/// generation, whose context the MCP hub shares).
pub fn chat_service(
    config: &Config,
    engine: Arc<Engine>,
    runner: crate::tools::ExecRunner,
) -> anyhow::Result<ChatService> {
    let upstream = upstream(config, Duration::from_secs(config.ollama.timeout))?;
    let sandbox = runner.sandbox.clone();
    sandbox.log();
    let ctx = ChatContext {
        upstream,
        runner: Arc::new(runner),
        capabilities: Arc::new(Capabilities::default()),
        deadline: Duration::from_secs(config.ollama.chat_deadline),
        max_parallel_tools: config.tools.max_parallel,
        mixed_turns: Default::default(),
        text_tool_calls: config.tool_bridge.text_tool_calls.clone(),
    };
    // The store is the process's (conversations survive a reload); its
    // limits are this configuration's. Set last, once nothing can fail.
    crate::server::bridge::response_store::ResponseStore::shared().set_limits(
        crate::server::bridge::response_store::Limits::from(&config.tool_bridge.response_store),
    );
    Ok(ChatService {
        engine: engine.clone(),
        ctx: Arc::new(ctx),
        settings: BridgeSettings {
            enabled: config.tool_bridge.enabled,
            default_top_k: config.tool_bridge.default_top_k,
            max_rounds: config.tool_bridge.max_rounds,
        },
        max_request_bytes: config.ollama.max_request_bytes,
        // A client token is stripped too, even where no operator token is set.
        strips_authorization: config.server.auth_token.is_some()
            || !config.server.clients.0.is_empty(),
        exposure: oap_bridge::exposure::ExposureSettings::from_config(&config.tool_bridge),
        validation: Arc::new(oap_bridge::validation::ValidationGate::new(
            &config.index.data_dir,
            config.tool_bridge.only_validated_models,
        )),
        experience: oap_bridge::experience::Experience::open(
            &config.experience,
            &config.index.data_dir,
            engine.clone(),
        ),
        sandbox,
        keepalive: Duration::from_secs(config.tool_bridge.stream_keepalive),
    })
}
