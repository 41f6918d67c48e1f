//! The `crawler:` section. Building a crawler from it is `crate::crawl`'s
//! business; this is only the data and its checks.

use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

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

/// One `crawler.hosts` entry, `name=address`: the lower-cased name without
/// a trailing dot, and the address.
pub(crate) fn parse_host_entry(entry: &str) -> Result<(String, IpAddr), String> {
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
