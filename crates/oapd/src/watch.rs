//! The directory watch: notices manifest files added, changed or removed in
//! `manifests.dirs` and the crawl store, and rebuilds the index in the
//! background.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::config::Config;
use crate::rebuild::{Rebuilder, WatchState};

/// What a directory looks like: names, sizes and modification times of
/// its `*.json` files. A change means a rebuild.
pub type DirSignature = Vec<(PathBuf, u64, Option<SystemTime>)>;

/// The directories the watch covers: `manifests.dirs` and the crawl store
/// (so `oapd crawl --once` next to a running daemon shows up).
pub fn watched_dirs(config: &Config) -> Vec<PathBuf> {
    let mut dirs = config.manifests.dirs.clone();
    dirs.push(crate::crawl::remote_dir(config));
    dirs
}

/// The current signature of `dirs`; take it before the engine loads them,
/// so a change in between is not missed.
pub fn dir_signature(dirs: &[PathBuf]) -> DirSignature {
    let mut out = Vec::new();
    for dir in dirs {
        let Ok(listing) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in listing.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "json") {
                let meta = entry.metadata().ok();
                out.push((
                    path,
                    meta.as_ref().map_or(0, |m| m.len()),
                    meta.and_then(|m| m.modified().ok()),
                ));
            }
        }
    }
    out.sort();
    out
}

/// How often the watch looks whether a rebuild it did not start (the
/// crawler's, say) failed, so it retries that one too.
const BEHIND_CHECK: Duration = Duration::from_secs(10);

/// Watches `dirs` by polling every `interval` and rebuilds the engine
/// (incrementally) when a manifest file is added, changed or removed.
/// Polling rather than inotify: it works the same on every filesystem
/// (including network mounts and bind mounts into containers) and costs a
/// directory listing every few seconds. A zero `interval` turns the
/// watching off.
///
/// It also retries failed rebuilds (whoever started them) with
/// [`crate::rebuild::backoff`] until one succeeds; a change seen in the
/// meantime retries at once.
pub async fn watch_dirs(
    rebuilder: Arc<Rebuilder>,
    dirs: Vec<PathBuf>,
    baseline: DirSignature,
    interval: Duration,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let watching = !interval.is_zero();
    rebuilder.set_watch(if watching {
        WatchState::Poll
    } else {
        WatchState::Off
    });
    let scan = {
        let dirs = dirs.clone();
        move || {
            let dirs = dirs.clone();
            tokio::task::spawn_blocking(move || dir_signature(&dirs))
        }
    };
    let mut last = baseline;
    loop {
        let retry = rebuilder.retry_due();
        let retry_at = retry.map_or_else(tokio::time::Instant::now, tokio::time::Instant::from_std);
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(interval), if watching => {}
            _ = tokio::time::sleep_until(retry_at), if retry.is_some() => {
                rebuilder.rebuild("retrying a failed rebuild").await;
                continue;
            }
            _ = tokio::time::sleep(BEHIND_CHECK), if retry.is_none() && !watching => continue,
        }
        let Ok(now) = scan().await else { continue };
        if now == last {
            continue;
        }
        // Let a burst of writes settle before indexing.
        tokio::time::sleep(interval.min(Duration::from_millis(500))).await;
        let Ok(settled) = scan().await else { continue };
        last = settled;
        rebuilder.rebuild("manifest directories changed").await;
    }
}
