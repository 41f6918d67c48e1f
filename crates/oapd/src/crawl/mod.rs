//! The crawler in the daemon: the `crawler:` config section, building an
//! [`oap_crawl::Crawler`] from it, the seed list, the static host map, and
//! the `/v1/crawl/status` and `/v1/manifests/register` handlers. The
//! directory watch is `crate::watch`.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use oap_crawl::{AddedBy, Crawler, CrawlerSettings};
use oap_exec::{BoxFuture, ExecPolicy, Executor, Resolver, SystemResolver};
use serde::Deserialize;

use crate::config::{parse_host_entry, Config};

/// The section is part of the config tree; its old path stays.
pub use crate::config::CrawlerConfig;

pub mod mdns;
pub mod txt_dns;

/// Largest seeds file read.
pub const MAX_SEEDS_FILE_BYTES: u64 = 1 << 20;

/// Largest `crawler.ca_file` read (a PEM bundle of every public root is
/// about 200 KiB).
pub const MAX_CA_FILE_BYTES: u64 = 1 << 20;

/// `crawler.hosts` first, then the system resolver.
struct HostsResolver {
    table: HashMap<String, IpAddr>,
}

impl Resolver for HostsResolver {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>> {
        match self.table.get(&host.to_ascii_lowercase()) {
            Some(ip) => {
                let addr = SocketAddr::new(*ip, port);
                Box::pin(async move { Ok(vec![addr]) })
            }
            None => SystemResolver.resolve(host, port),
        }
    }
}

/// The crawler for `config` (its state lives in `index.data_dir`), for
/// the command line: internet domains on, whatever `crawler.enabled` says.
pub fn build(config: &Config) -> anyhow::Result<Crawler> {
    build_for(config, true)
}

/// The crawler for `config`; `internet` says whether it crawls internet
/// domains (the daemon: `crawler.enabled`). LAN targets are crawled when
/// `crawler.mdns` is on.
pub fn build_for(config: &Config, internet: bool) -> anyhow::Result<Crawler> {
    let c = &config.crawler;
    let policy = ExecPolicy {
        max_redirects: 3,
        allow_private: c
            .allow_private
            .iter()
            .map(|r| r.parse())
            .collect::<Result<_, _>>()
            .context("crawler.allow_private")?,
        ..ExecPolicy::default()
    };
    let table = c
        .hosts
        .iter()
        .map(|e| parse_host_entry(e).map_err(anyhow::Error::msg))
        .collect::<anyhow::Result<HashMap<_, _>>>()
        .context("crawler.hosts")?;
    let mut executor = Executor::new(policy)?.with_resolver(Arc::new(HostsResolver {
        table: table.clone(),
    }));
    if let Some(ca_file) = &c.ca_file {
        let pem = crate::files::read_regular(ca_file, MAX_CA_FILE_BYTES)
            .with_context(|| format!("crawler.ca_file: cannot read {}", ca_file.display()))?;
        executor = executor
            .with_extra_roots_pem(&pem)
            .with_context(|| format!("crawler.ca_file {}", ca_file.display()))?;
    }
    let mut settings = CrawlerSettings::new(&config.index.data_dir);
    settings.schedule.interval = Duration::from_secs(c.interval);
    settings.schedule.jitter = f64::from(c.jitter);
    settings.schedule.retry_base = Duration::from_secs(c.retry_base);
    settings.schedule.max_failures = c.max_failures;
    settings.fetch.timeout = Duration::from_secs(c.fetch_timeout);
    settings.round_timeout = Duration::from_secs(c.round_timeout);
    settings.concurrency = c.concurrency;
    settings.max_domains = c.max_domains;
    settings.internet = internet;
    settings.lan = c.mdns;
    let txt: Option<Arc<dyn oap_crawl::TxtResolver>> = c.check_txt.then(|| {
        let local = table.keys().cloned();
        Arc::new(crate::txt_dns::DnsTxtResolver::new(local)) as Arc<dyn oap_crawl::TxtResolver>
    });
    Ok(Crawler::new(settings, Arc::new(executor), txt))
}

/// The remote-manifest source for the engine.
pub fn remote_dir(config: &Config) -> PathBuf {
    CrawlerSettings::new(&config.index.data_dir).remote_dir
}

/// Seeds from the config and the seeds file. Bad lines are logged and skipped.
pub fn seeds(config: &Config) -> anyhow::Result<Vec<String>> {
    let mut seeds = config.crawler.seeds.clone();
    if let Some(path) = &config.crawler.seeds_file {
        let bytes = match crate::files::read_regular(path, MAX_SEEDS_FILE_BYTES) {
            Ok(bytes) => bytes,
            Err(crate::files::ReadError::TooLarge {
                size: Some(size), ..
            }) => anyhow::bail!(
                "crawler.seeds_file {} is {size} bytes; the limit is {MAX_SEEDS_FILE_BYTES}",
                path.display(),
            ),
            Err(err) => anyhow::bail!("crawler.seeds_file: cannot read {}: {err}", path.display()),
        };
        let text = String::from_utf8(bytes)
            .with_context(|| format!("crawler.seeds_file {} is not UTF-8", path.display()))?;
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("").trim();
            if !line.is_empty() {
                seeds.push(line.to_string());
            }
        }
    }
    Ok(seeds)
}

/// Adds every seed; returns the normalised names.
pub fn add_seeds(crawler: &Crawler, seeds: &[String], added_by: AddedBy) -> Vec<String> {
    let mut added = Vec::new();
    for seed in seeds {
        match crawler.add_domain(seed, added_by) {
            Ok(domain) => added.push(domain),
            Err(err) => tracing::warn!(seed = %seed, error = %err, "seed skipped"),
        }
    }
    added
}

/// `POST /v1/manifests/register` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    pub domain: serde_json::Value,
}

/// Seconds to wait for a registered domain's first fetch before answering
/// 202 (the fetch goes on in the background).
pub fn register_wait(config_fetch_timeout: Duration) -> Duration {
    config_fetch_timeout + Duration::from_secs(2)
}

/// The status document of `GET /v1/crawl/status`.
pub fn status_json(crawler: Option<&Crawler>, background: bool) -> serde_json::Value {
    let now = oap_crawl::now_ms();
    let domains: Vec<serde_json::Value> = crawler
        .map(|c| c.status())
        .unwrap_or_default()
        .into_iter()
        .map(|s| {
            let mut v = serde_json::to_value(&s).unwrap_or_default();
            if let Some(obj) = v.as_object_mut() {
                obj.insert(
                    "next_due_in_s".into(),
                    serde_json::json!(s.next_due_ms.saturating_sub(now) as f64 / 1000.0),
                );
            }
            v
        })
        .collect();
    serde_json::json!({
        "enabled": crawler.is_some(),
        "background": background,
        "internet": crawler.is_some_and(|c| c.settings().internet),
        "mdns": crawler.is_some_and(|c| c.settings().lan),
        "domains": domains,
        "lan_refused": crawler.map(|c| c.lan_refusals()).unwrap_or_default(),
    })
}

/// Read-only helper for tests and the CLI.
pub fn state_path(config: &Config) -> PathBuf {
    CrawlerSettings::new(Path::new(&config.index.data_dir)).state_path
}

/// Largest registration body.
pub const MAX_REGISTER_BODY_BYTES: usize = 4096;

/// `POST /v1/manifests/register {"domain": "example.com"}`: operator only.
/// Refused when no `server.auth_token` is configured — without a token any
/// device on the LAN could make the board fetch and index arbitrary
/// domains. Fetches the domain at once and answers with the result (200 or
/// 422), or 202 when the fetch takes longer than the fetch timeout.
pub async fn register(
    api: Arc<crate::api::Api>,
    request: hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<crate::http::Body> {
    use crate::http;
    use hyper::StatusCode;
    if api.settings.auth_token.is_none() {
        return http::error(
            StatusCode::FORBIDDEN,
            "registration needs an operator token: set server.auth_token and send it as a bearer token",
        );
    }
    let Some(crawler) = api.crawler.clone() else {
        return http::error(
            StatusCode::NOT_FOUND,
            "the crawler is disabled (crawler.enabled: false)",
        );
    };
    let body = match http::read_body(request.into_body(), MAX_REGISTER_BODY_BYTES).await {
        Ok(body) => body,
        Err(err) => return err.into_response(),
    };
    let parsed: RegisterRequest = match serde_json::from_slice(&body) {
        Ok(parsed) => parsed,
        Err(err) => {
            return http::error(
                StatusCode::BAD_REQUEST,
                format!(
                "request body is not a valid registration ({{\"domain\": \"example.com\"}}): {err}"
            ),
            )
        }
    };
    let Some(raw) = parsed.domain.as_str() else {
        return http::error(StatusCode::BAD_REQUEST, "domain: expected a string");
    };
    let domain = match crawler.add_domain(raw, AddedBy::Register) {
        Ok(domain) => domain,
        Err(err @ oap_crawl::crawler::AddError::Full(_)) => {
            return http::error(StatusCode::CONFLICT, err.to_string())
        }
        Err(err @ oap_crawl::crawler::AddError::InternetDisabled) => {
            return http::error(StatusCode::NOT_FOUND, err.to_string())
        }
        Err(err) => return http::error(StatusCode::BAD_REQUEST, err.to_string()),
    };
    tracing::info!(%domain, "domain registered");
    let task = {
        let crawler = crawler.clone();
        let engine = api.engine.clone();
        let domain = domain.clone();
        tokio::spawn(async move {
            crawler.crawl_pass(Some(&[domain]), Some(&engine)).await;
        })
    };
    let finished = tokio::time::timeout(register_wait(api.crawler_fetch_timeout), task)
        .await
        .is_ok();
    let state = crawler.status().into_iter().find(|s| s.domain == domain);
    let result = state.as_ref().and_then(|s| s.last_result.clone());
    match (finished, result) {
        (true, Some(result)) if !result.starts_with("error") => http::json(
            StatusCode::OK,
            &serde_json::json!({"domain": domain, "result": result, "state": state}),
        ),
        (true, Some(result)) => http::json(
            StatusCode::UNPROCESSABLE_ENTITY,
            &serde_json::json!({
                "error": format!("{domain}: {}", result.trim_start_matches("error: ")),
                "domain": domain,
                "state": state,
            }),
        ),
        _ => http::json(
            StatusCode::ACCEPTED,
            &serde_json::json!({"domain": domain, "result": "queued", "state": state}),
        ),
    }
}

/// `oapd crawl [--once] [DOMAIN...]`. Prints one line per domain; with
/// `--once`, fails when any domain failed.
pub fn cli(config: &Config, once: bool, domains: &[String]) -> anyhow::Result<()> {
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
                .run(engine, Duration::from_secs(1), async {
                    let _ = tokio::signal::ctrl_c().await;
                })
                .await;
            return Ok(());
        }
        let report = crawler.crawl_pass(Some(&names), Some(&engine)).await;
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
