//! The directory watch: notices manifest files added, changed or removed in
//! `manifests.dirs` and the crawl store, and rebuilds the index in the
//! background.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use oap_discovery::Engine;

use crate::config::Config;

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

/// Watches `dirs` by polling every `interval` and rebuilds the engine
/// (incrementally) when a manifest file is added, changed or removed.
/// Polling rather than inotify: it works the same on every filesystem
/// (including network mounts and bind mounts into containers) and costs a
/// directory listing every few seconds.
pub async fn watch_dirs(
    engine: Arc<Engine>,
    dirs: Vec<PathBuf>,
    baseline: DirSignature,
    interval: Duration,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let scan = {
        let dirs = dirs.clone();
        move || {
            let dirs = dirs.clone();
            tokio::task::spawn_blocking(move || dir_signature(&dirs))
        }
    };
    let mut last = baseline;
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(interval) => {}
        }
        let Ok(now) = scan().await else { continue };
        if now == last {
            continue;
        }
        // Let a burst of writes settle before indexing.
        tokio::time::sleep(interval.min(Duration::from_millis(500))).await;
        let Ok(settled) = scan().await else { continue };
        last = settled;
        rebuild_off_workers(&engine, "manifest directories changed").await;
    }
}

/// Rebuilds `engine` on a blocking thread (at background priority, see
/// `Engine::rebuild`) and logs the outcome with `why`; a failed rebuild
/// leaves the old index serving.
pub async fn rebuild_off_workers(engine: &Arc<Engine>, why: &str) {
    let engine = engine.clone();
    match tokio::task::spawn_blocking(move || engine.rebuild(false)).await {
        Ok(Ok(report)) => {
            tracing::info!(
                manifests = report.docs,
                embedded = report.embedded_rows,
                problems = report.problems.len(),
                why,
                "index rebuilt"
            );
            crate::app::log_report(&report);
        }
        Ok(Err(err)) => {
            tracing::error!(error = %err, why, "index rebuild failed; the old index keeps serving")
        }
        Err(err) => tracing::error!(error = %err, why, "rebuild task failed"),
    }
}
