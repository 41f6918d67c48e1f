//! LAN discovery in the daemon (`crawler.mdns`): an mDNS/DNS-SD browser
//! for `_oap._tcp.local.` feeding the crawler.
//!
//! A resolved service is validated by [`oap_crawl::mdns::lan_target`] and
//! tracked as a `lan` trust target, due at once; the crawler's schedule loop
//! fetches it (through the same `fetch_manifest` checks as every crawled
//! manifest: size, JSON, UTF-8, no `stdio`) and keeps it fresh. A goodbye
//! (or the record expiring) removes the target and its manifest and
//! rebuilds the index; a device that stops answering without one is removed
//! by the crawler's `max_failures` path. Refused advertisements are logged
//! and listed in `/v1/crawl/status` (`lan_refused`).
//!
//! The browser (`mdns-sd`, pure Rust) runs its own thread; [`browse`] owns
//! it through a guard that shuts it down when the task ends or is aborted
//! (a reload or stop aborts the generation's tasks), so no browser outlives
//! its generation.

use std::sync::Arc;

use mdns_sd::{ResolvedService, ServiceDaemon, ServiceEvent};
use oap_crawl::mdns::{lan_target, AdvertisedService, LanUpdate, SERVICE_TYPE};
use oap_crawl::Crawler;

use crate::config::Config;
use crate::rebuild::Rebuilder;

/// Shuts the mDNS daemon thread down when dropped.
struct DaemonGuard(ServiceDaemon);

impl Drop for DaemonGuard {
    fn drop(&mut self) {
        // The daemon thread exits after this command; it holds no state we
        // need, so there is nothing to wait for.
        if let Err(err) = self.0.shutdown() {
            tracing::debug!(error = %err, "mDNS daemon already stopped");
        }
    }
}

/// What the browser saw, in the crate-neutral form the validation takes.
pub fn advertised(service: &ResolvedService) -> AdvertisedService {
    let txt = service.get_properties();
    AdvertisedService {
        fullname: service.fullname.clone(),
        port: service.port,
        addresses: service
            .get_addresses()
            .iter()
            .map(|a| a.to_ip_addr())
            .collect(),
        path: txt
            .get("path")
            .map(|p| p.val().map(<[u8]>::to_vec).unwrap_or_default()),
        txt_bytes: txt
            .iter()
            .map(|p| p.key().len() + p.val().map_or(0, |v| v.len() + 1))
            .sum(),
    }
}

/// Forgets `fullname` and rebuilds when its manifest was indexed.
async fn forget(crawler: &Crawler, rebuilder: &Arc<Rebuilder>, fullname: &str, why: &str) {
    if let Some((key, existed)) = crawler.remove_lan_target(fullname) {
        tracing::info!(service = %fullname, %key, why, "LAN service removed");
        if existed {
            rebuilder.rebuild("LAN service removed").await;
        }
    }
}

async fn on_resolved(crawler: &Crawler, rebuilder: &Arc<Rebuilder>, service: &ResolvedService) {
    let seen = advertised(service);
    let target = match lan_target(&seen) {
        Ok(target) => target,
        Err(refusal) => {
            let reason = refusal.to_string();
            tracing::warn!(service = %seen.fullname, reason = %reason, "LAN service refused");
            crawler.note_lan_refusal(&seen.fullname, &reason);
            // It may have been accepted before: what it advertises now is
            // refused, so its old target goes.
            forget(
                crawler,
                rebuilder,
                &seen.fullname,
                "now advertises something refused",
            )
            .await;
            return;
        }
    };
    match crawler.add_lan_target(&target) {
        Ok(LanUpdate::Unchanged(_)) => {}
        Ok(update) => {
            tracing::info!(service = %target.fullname, key = update.key(), url = %target.url, "LAN service found");
        }
        Err(err) => {
            let reason = err.to_string();
            tracing::warn!(service = %target.fullname, reason = %reason, "LAN service refused");
            crawler.note_lan_refusal(&target.fullname, &reason);
        }
    }
}

/// Browses `_oap._tcp.local.` until the task is aborted. Failing to start
/// the browser (no multicast-capable interface, port 5353 unavailable) is
/// logged; the daemon keeps serving without LAN discovery.
pub async fn browse(crawler: Arc<Crawler>, rebuilder: Arc<Rebuilder>) {
    let daemon = match ServiceDaemon::new() {
        Ok(daemon) => DaemonGuard(daemon),
        Err(err) => {
            tracing::error!(error = %err, "LAN discovery (crawler.mdns) cannot start the mDNS browser");
            return;
        }
    };
    let events = match daemon.0.browse(SERVICE_TYPE) {
        Ok(events) => events,
        Err(err) => {
            tracing::error!(error = %err, "LAN discovery (crawler.mdns) cannot browse {SERVICE_TYPE}");
            return;
        }
    };
    tracing::info!(service_type = SERVICE_TYPE, "LAN discovery (mDNS) browsing");
    while let Ok(event) = events.recv_async().await {
        match event {
            ServiceEvent::ServiceResolved(service) => {
                on_resolved(&crawler, &rebuilder, &service).await;
            }
            ServiceEvent::ServiceRemoved(_, fullname) => {
                forget(&crawler, &rebuilder, &fullname, "goodbye or expired").await;
            }
            other => tracing::debug!(event = ?other, "mDNS event"),
        }
    }
    tracing::warn!("the mDNS browser stopped; LAN discovery is off until the next reload");
    drop(daemon);
}

/// With LAN discovery off and no crawler built: removes LAN targets left
/// in the stored crawl state by an earlier run (and their manifests).
/// Returns how many manifests were removed.
pub fn purge_stored(config: &Config) -> usize {
    let settings = oap_crawl::CrawlerSettings::new(&config.index.data_dir);
    let (mut schedule, problem) = oap_crawl::Schedule::load(&settings.state_path);
    let before = schedule.domains.len();
    let removed = oap_crawl::mdns::purge_lan(&mut schedule, &settings.remote_dir);
    // A damaged state file is the crawler's to report and replace: only
    // envelopes are removed then.
    if problem.is_none() && schedule.domains.len() != before {
        if let Err(err) = schedule.save(&settings.state_path) {
            tracing::error!(error = %err, "cannot save the crawl state");
        }
    }
    removed
}
