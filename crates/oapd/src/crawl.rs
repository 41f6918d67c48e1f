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
use serde::{Deserialize, Serialize};

use crate::config::Config;

/// Largest seeds file read.
pub const MAX_SEEDS_FILE_BYTES: u64 = 1 << 20;

/// Largest `crawler.ca_file` read (a PEM bundle of every public root is
/// about 200 KiB).
pub const MAX_CA_FILE_BYTES: u64 = 1 << 20;

/// `crawler:` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CrawlerConfig {
    /// Crawl in the background while serving (seeds and registered domains).
    pub enabled: bool,
    /// Domains to crawl (`example.com`, or `example.com:8443`).
    pub seeds: Vec<String>,
    /// A file of domains, one per line, `#` starts a comment.
    pub seeds_file: Option<PathBuf>,
    /// Seconds between successful fetches of a domain.
    pub interval: u64,
    /// Relative jitter of every delay (0 .. 0.5).
    pub jitter: f32,
    /// Seconds before the first retry of a failing domain; doubles per failure.
    pub retry_base: u64,
    /// Consecutive failures after which a domain's manifest leaves the index.
    pub max_failures: u32,
    /// Seconds one manifest fetch may take in all (defeats slow servers).
    pub fetch_timeout: u64,
    /// Seconds one crawl pass may take; domains not reached stay due.
    pub round_timeout: u64,
    /// Fetches in flight at once.
    pub concurrency: usize,
    /// Most domains tracked.
    pub max_domains: usize,
    /// Extra CA certificates (PEM) trusted for crawling, for private deployments.
    pub ca_file: Option<PathBuf>,
    /// Address ranges crawled domains may resolve to despite being private
    /// (CIDR). Default: public addresses only.
    pub allow_private: Vec<String>,
    /// Static `name=address` entries consulted before DNS (like /etc/hosts;
    /// the addresses are still checked against the SSRF rules).
    pub hosts: Vec<String>,
    /// Seconds between polls of `manifests.dirs` for added, changed or
    /// removed files where inotify cannot watch them (network filesystems,
    /// inotify unavailable, directories not there yet); 0 disables the
    /// watch.
    pub watch_interval: u64,
    /// Look up the `_oap.<domain> TXT "v=oap1"` participation hint in DNS
    /// (recorded in the crawl status; never required).
    pub check_txt: bool,
    /// Discover manifests advertised on the LAN over mDNS/DNS-SD
    /// (`_oap._tcp.local.`, TXT `path=`), crawled with `lan` trust over
    /// plain HTTP. Runs the crawler for LAN targets even when `enabled` is
    /// false. Off by default (it joins the mDNS multicast group on every
    /// interface); on in the appliance image.
    pub mdns: bool,
}

impl Default for CrawlerConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            seeds: Vec::new(),
            seeds_file: None,
            interval: 6 * 3600,
            jitter: 0.1,
            retry_base: 60,
            max_failures: 5,
            fetch_timeout: 10,
            round_timeout: 300,
            concurrency: 4,
            max_domains: 10_000,
            ca_file: None,
            allow_private: Vec::new(),
            hosts: Vec::new(),
            watch_interval: 2,
            check_txt: true,
            mdns: false,
        }
    }
}

impl CrawlerConfig {
    /// Problems as `(key, message)`.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut range = |key: &str, value: u64, min: u64, max: u64| {
            if value < min || value > max {
                out.push((
                    format!("crawler.{key}"),
                    format!("must be between {min} and {max}, got {value}"),
                ));
            }
        };
        range("interval", self.interval, 1, 30 * 86400);
        range("retry_base", self.retry_base, 1, 86400);
        range("max_failures", self.max_failures.into(), 1, 1000);
        range("fetch_timeout", self.fetch_timeout, 1, 300);
        range("round_timeout", self.round_timeout, 1, 86400);
        range("concurrency", self.concurrency as u64, 1, 64);
        range("max_domains", self.max_domains as u64, 1, 1_000_000);
        range("watch_interval", self.watch_interval, 0, 3600);
        if !(0.0..=0.5).contains(&self.jitter) {
            out.push((
                "crawler.jitter".into(),
                format!("must be between 0 and 0.5, got {}", self.jitter),
            ));
        }
        for (i, seed) in self.seeds.iter().enumerate() {
            if let Err(e) = oap_crawl::normalize_domain(seed) {
                out.push((format!("crawler.seeds[{i}]"), e.to_string()));
            }
        }
        for (i, range) in self.allow_private.iter().enumerate() {
            if range.parse::<oap_exec::Cidr>().is_err() {
                out.push((
                    format!("crawler.allow_private[{i}]"),
                    format!("expected an address or CIDR range like 192.168.1.0/24, got {range:?}"),
                ));
            }
        }
        for (i, entry) in self.hosts.iter().enumerate() {
            if let Err(e) = parse_host_entry(entry) {
                out.push((format!("crawler.hosts[{i}]"), e));
            }
        }
        out
    }
}

fn parse_host_entry(entry: &str) -> Result<(String, IpAddr), String> {
    let (name, addr) = entry
        .split_once('=')
        .ok_or_else(|| format!("expected name=address, got {entry:?}"))?;
    let ip: IpAddr = addr
        .trim()
        .parse()
        .map_err(|_| format!("{addr:?} is not an IP address (in {entry:?})"))?;
    let name = name.trim().trim_end_matches('.').to_ascii_lowercase();
    if name.is_empty() {
        return Err(format!("empty name in {entry:?}"));
    }
    Ok((name, ip))
}

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
        let engine = crate::catalog_sink::sink(&api.engine);
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
                .run(
                    crate::catalog_sink::sink(&engine),
                    Duration::from_secs(1),
                    async {
                        let _ = tokio::signal::ctrl_c().await;
                    },
                )
                .await;
            return Ok(());
        }
        let sink = crate::catalog_sink::sink(&engine);
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
