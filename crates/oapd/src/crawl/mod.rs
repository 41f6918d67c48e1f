//! The crawler in the daemon: building an [`oap_crawl::Crawler`] from the
//! `crawler:` section, the seed list, the static host map, LAN discovery
//! over mDNS ([`mdns`]) and the DNS TXT participation hint ([`txt_dns`]).
//! Its HTTP endpoints are in `crate::server::crawl`, the `oapd crawl`
//! command in `crate::cli::crawl`, the directory watch in `crate::watch`.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use oap_crawl::{AddedBy, Crawler, CrawlerSettings};
use oap_exec::{BoxFuture, ExecPolicy, Executor, Resolver, SystemResolver};

use crate::config::{parse_host_entry, Config};

pub(crate) mod mdns;
pub(crate) mod txt_dns;

/// The engine as the crawler's catalog sink, each of its rebuilds counted
/// in the daemon's metrics like the background rebuilder's (the crawler
/// rebuilds the index itself, after a slice of domains or a registration).
pub fn metered_sink(engine: &Arc<oap_discovery::Engine>) -> Arc<dyn oap_crawl::CatalogSink> {
    Arc::new(MeteredSink(oap_crawl::sink::engine_sink(engine)))
}

struct MeteredSink(Arc<dyn oap_crawl::CatalogSink>);

impl oap_crawl::CatalogSink for MeteredSink {
    fn indexed(&self) -> usize {
        self.0.indexed()
    }

    fn rebuild(&self) -> Result<serde_json::Value, String> {
        let outcome = self.0.rebuild();
        crate::metrics::get().rebuild(outcome.as_ref().ok().map(|report| {
            report
                .get("reused_index")
                .and_then(serde_json::Value::as_bool)
                != Some(true)
        }));
        outcome
    }
}

/// Largest seeds file read.
pub const MAX_SEEDS_FILE_BYTES: u64 = 1 << 20;

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
        let pem = crate::files::read_ca_file("crawler.ca_file", ca_file)?;
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
        Arc::new(txt_dns::DnsTxtResolver::new(local)) as Arc<dyn oap_crawl::TxtResolver>
    });
    Ok(
        Crawler::new(settings, Arc::new(executor), txt).with_fetch_observer(Arc::new(|outcome| {
            crate::metrics::get().crawl_fetch(outcome)
        })),
    )
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
