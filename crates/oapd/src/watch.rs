//! The directory watch: notices manifest files added, changed or removed in
//! `manifests.dirs` and the crawl store, and rebuilds the index in the
//! background (retrying a failed rebuild, see `crate::rebuild`).
//!
//! inotify where it works: the kernel says when a directory changed, so an
//! idle daemon does no work at all (polling listed and stat'ed every file
//! every `crawler.watch_interval` seconds: 9 % of a core at 50,000 files).
//! A burst of events (a copy of a thousand files, an editor's write and
//! rename) becomes one rescan once the directory has been quiet for
//! [`QUIET`]. Polling every `crawler.watch_interval` seconds (the listing
//! compared with the last one) stays, per directory, where inotify cannot
//! do the job:
//!
//! - inotify cannot start (`fs.inotify.max_user_instances` reached) or
//!   cannot watch the directory (`fs.inotify.max_user_watches`): logged
//!   once, then polled;
//! - the directory is on a network filesystem (NFS, SMB, FUSE, 9p, ...):
//!   inotify there does not see what other machines write;
//! - the directory does not exist (yet): polled until it appears, then
//!   watched with inotify (and rescanned, its files are news).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use inotify::{EventMask, EventOwned, EventStream, Inotify, WatchDescriptor, WatchMask};
use tokio::time::{Instant, Interval, MissedTickBehavior};

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

/// A burst of inotify events ends when the directories have been quiet
/// this long ...
pub const QUIET: Duration = Duration::from_millis(200);
/// ... or this long after its first event (a directory written to without
/// pause still gets rescanned).
pub const SETTLE_MAX: Duration = Duration::from_secs(2);

/// Bytes read from the inotify descriptor at once.
const EVENT_BUFFER: usize = 16 * 1024;

fn watch_mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MODIFY
        | WatchMask::CLOSE_WRITE
        | WatchMask::ATTRIB
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
        | WatchMask::ONLYDIR
}

/// The filesystem `dir` is on, when it is one where inotify misses changes
/// made by other machines.
fn network_filesystem(dir: &Path) -> Option<&'static str> {
    let kind = nix::sys::statfs::statfs(dir).ok()?.filesystem_type().0 as u32;
    Some(match kind {
        0x6969 => "nfs",
        0x517B => "smb",
        0xFF53_4D42 => "cifs",
        0xFE53_4D42 => "smb2",
        0x6573_5546 => "fuse",
        0x0102_1997 => "9p",
        0x00C3_6400 => "ceph",
        0x5346_414F => "afs",
        0x7375_7245 => "coda",
        0x0BD0_0BD0 => "lustre",
        0x0116_1970 => "gfs2",
        0x7461_636F => "ocfs2",
        _ => return None,
    })
}

/// The next inotify event; never, without inotify.
async fn next_event(
    events: &mut Option<EventStream<Vec<u8>>>,
) -> Option<std::io::Result<EventOwned>> {
    match events {
        Some(events) => events.next().await,
        None => std::future::pending().await,
    }
}

/// How one directory is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Follow {
    Inotify,
    /// Listed every `interval`. `try_inotify`: the directory is missing,
    /// watch it with inotify once it exists.
    Poll {
        try_inotify: bool,
    },
}

/// Follows the watched directories; [`Watcher::changed`] waits for the
/// next change.
struct Watcher {
    dirs: Vec<PathBuf>,
    follow: Vec<Follow>,
    /// `None` when inotify is unavailable (then every directory is polled).
    events: Option<EventStream<Vec<u8>>>,
    /// Watch → the directories it covers (two configured paths can be one
    /// directory, which inotify watches once).
    watches: HashMap<WatchDescriptor, Vec<usize>>,
    interval: Duration,
    poll_tick: Interval,
    /// The last listing of the polled directories.
    polled: DirSignature,
    /// Which directories are polled changed since `polled` was taken.
    polled_stale: bool,
    /// A change was seen but not reported yet (the wait for it was
    /// cancelled while the burst settled): the next wait reports it.
    pending: Option<&'static str>,
}

impl Watcher {
    /// Starts following `dirs`; also says whether they changed since
    /// `baseline` was taken (while the engine loaded them).
    async fn start(
        dirs: Vec<PathBuf>,
        baseline: DirSignature,
        interval: Duration,
    ) -> (Watcher, bool) {
        let events = match Inotify::init()
            .and_then(|i| i.into_event_stream(vec![0u8; EVENT_BUFFER]))
        {
            Ok(events) => Some(events),
            Err(err) => {
                tracing::warn!(
                    error = %err,
                    interval_s = interval.as_secs(),
                    "inotify is unavailable (fs.inotify.max_user_instances?): polling the manifest directories every crawler.watch_interval instead"
                );
                None
            }
        };
        Watcher::start_with(events, dirs, baseline, interval).await
    }

    /// [`Watcher::start`] with inotify's event stream, or `None` to poll.
    async fn start_with(
        events: Option<EventStream<Vec<u8>>>,
        dirs: Vec<PathBuf>,
        baseline: DirSignature,
        interval: Duration,
    ) -> (Watcher, bool) {
        let mut poll_tick = tokio::time::interval_at(Instant::now() + interval, interval);
        poll_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut watcher = Watcher {
            follow: vec![
                Follow::Poll {
                    try_inotify: events.is_some()
                };
                dirs.len()
            ],
            dirs,
            events,
            watches: HashMap::new(),
            interval,
            poll_tick,
            polled: Vec::new(),
            polled_stale: true,
            pending: None,
        };
        for i in 0..watcher.dirs.len() {
            watcher.try_inotify(i);
        }
        let all = watcher.dirs.clone();
        let now = tokio::task::spawn_blocking(move || dir_signature(&all))
            .await
            .unwrap_or_default();
        watcher.refresh_polled().await;
        tracing::info!(
            mode = watcher.state().name(),
            dirs = watcher.dirs.len(),
            missing = watcher
                .follow
                .iter()
                .filter(|f| **f == Follow::Poll { try_inotify: true })
                .count(),
            "watching the manifest directories"
        );
        (watcher, now != baseline)
    }

    /// Watches directory `i` with inotify if it is polled only because it
    /// was missing and now exists; returns whether it is watched now.
    fn try_inotify(&mut self, i: usize) -> bool {
        if self.follow[i] != (Follow::Poll { try_inotify: true }) {
            return false;
        }
        let Some(events) = &self.events else {
            return false;
        };
        let dir = &self.dirs[i];
        if !dir.is_dir() {
            return false;
        }
        if let Some(filesystem) = network_filesystem(dir) {
            tracing::info!(
                dir = %dir.display(),
                filesystem,
                interval_s = self.interval.as_secs(),
                "on a network filesystem, where inotify misses other machines' writes: polled every crawler.watch_interval"
            );
            self.follow[i] = Follow::Poll { try_inotify: false };
            return false;
        }
        match events.watches().add(dir, watch_mask()) {
            Ok(wd) => {
                self.watches.entry(wd).or_default().push(i);
                self.follow[i] = Follow::Inotify;
                self.polled_stale = true;
                true
            }
            Err(err) => {
                let hint = match err.raw_os_error() {
                    Some(code) if code == nix::libc::ENOSPC => {
                        " (the inotify watch limit, fs.inotify.max_user_watches, is reached)"
                    }
                    _ => "",
                };
                tracing::warn!(
                    dir = %dir.display(),
                    error = %format!("{err}{hint}"),
                    interval_s = self.interval.as_secs(),
                    "cannot watch the directory with inotify: polling it every crawler.watch_interval instead"
                );
                self.follow[i] = Follow::Poll { try_inotify: false };
                false
            }
        }
    }

    /// How the directories are followed; a missing directory (looked for
    /// every interval, watched once it exists) does not count as polled.
    fn state(&self) -> WatchState {
        let count = |kind: Follow| self.follow.iter().filter(|f| **f == kind).count();
        let polled = count(Follow::Poll { try_inotify: false });
        match (self.events.is_some(), polled) {
            (false, _) => WatchState::Poll,
            (true, 0) => WatchState::Inotify,
            (true, _) if count(Follow::Inotify) == 0 => WatchState::Poll,
            (true, _) => WatchState::Mixed,
        }
    }

    fn polled_dirs(&self) -> Vec<PathBuf> {
        self.dirs
            .iter()
            .zip(&self.follow)
            .filter(|(_, f)| matches!(f, Follow::Poll { .. }))
            .map(|(d, _)| d.clone())
            .collect()
    }

    async fn scan_polled(&self) -> DirSignature {
        let dirs = self.polled_dirs();
        if dirs.is_empty() {
            return Vec::new();
        }
        tokio::task::spawn_blocking(move || dir_signature(&dirs))
            .await
            .unwrap_or_default()
    }

    /// Takes a new listing of the polled directories when which ones are
    /// polled changed.
    async fn refresh_polled(&mut self) {
        if self.polled_stale {
            self.polled = self.scan_polled().await;
            self.polled_stale = false;
        }
    }

    /// Whether `event` means a rescan; notes directories that went away.
    fn relevant(&mut self, event: &EventOwned) -> bool {
        if event.mask.contains(EventMask::Q_OVERFLOW) {
            return true;
        }
        let gone =
            EventMask::DELETE_SELF | EventMask::MOVE_SELF | EventMask::IGNORED | EventMask::UNMOUNT;
        if event.mask.intersects(gone) {
            // The directory itself was removed, moved away or unmounted:
            // polled until something is at its path again.
            let Some(dirs) = self.watches.remove(&event.wd) else {
                return false;
            };
            if let Some(events) = &self.events {
                let _ = events.watches().remove(event.wd.clone());
            }
            for i in dirs {
                tracing::info!(dir = %self.dirs[i].display(), "watched directory gone; polling for it");
                self.follow[i] = Follow::Poll { try_inotify: true };
            }
            self.polled_stale = true;
            return true;
        }
        !event.mask.contains(EventMask::ISDIR)
            && event
                .name
                .as_deref()
                .is_some_and(|name| Path::new(name).extension() == Some(OsStr::new("json")))
    }

    /// inotify failed while running: every directory is polled from now on.
    fn inotify_lost(&mut self, why: String) {
        tracing::warn!(
            error = %why,
            interval_s = self.interval.as_secs(),
            "inotify stopped: polling the manifest directories every crawler.watch_interval instead"
        );
        self.events = None;
        self.watches.clear();
        self.follow.fill(Follow::Poll { try_inotify: false });
        self.polled_stale = true;
    }

    /// Reads events until the directories have been quiet for [`QUIET`]
    /// (at most [`SETTLE_MAX`]), so a burst is one rescan.
    async fn settle(&mut self) {
        let started = Instant::now();
        loop {
            let left = SETTLE_MAX.saturating_sub(started.elapsed());
            if left.is_zero() {
                return;
            }
            match tokio::time::timeout(QUIET.min(left), next_event(&mut self.events)).await {
                Err(_quiet) => return,
                Ok(Some(Ok(event))) => {
                    self.relevant(&event);
                }
                Ok(Some(Err(err))) => return self.inotify_lost(err.to_string()),
                Ok(None) => return self.inotify_lost("event stream ended".into()),
            }
        }
    }

    /// One look at the polled directories: a missing one that appeared is
    /// watched now, a listing that differs from the last one is a change.
    async fn poll(&mut self) -> bool {
        let mut changed = false;
        for i in 0..self.dirs.len() {
            changed |= self.try_inotify(i);
        }
        if self.polled_dirs().is_empty() {
            self.refresh_polled().await;
            return changed;
        }
        let mut now = self.scan_polled().await;
        if now != self.polled && !self.polled_stale {
            // Let a burst of writes settle before indexing.
            tokio::time::sleep(self.interval.min(Duration::from_millis(500))).await;
            now = self.scan_polled().await;
            changed = true;
        }
        self.polled = now;
        self.polled_stale = false;
        changed
    }

    /// Waits for the next change in the directories. Cancel-safe: a change
    /// seen before the wait was cancelled (the retry timer or the check for
    /// failed rebuilds won the race) is reported by the next wait.
    async fn changed(&mut self) -> &'static str {
        loop {
            if let Some(why) = self.pending {
                self.settle().await;
                self.refresh_polled().await;
                self.pending = None;
                return why;
            }
            let polling = self.follow.iter().any(|f| *f != Follow::Inotify);
            tokio::select! {
                event = next_event(&mut self.events) => match event {
                    Some(Ok(event)) => {
                        if self.relevant(&event) {
                            self.pending = Some("manifest directories changed");
                        }
                    }
                    Some(Err(err)) => {
                        self.inotify_lost(err.to_string());
                        self.refresh_polled().await;
                        return "inotify stopped";
                    }
                    None => {
                        self.inotify_lost("event stream ended".into());
                        self.refresh_polled().await;
                        return "inotify stopped";
                    }
                },
                _ = self.poll_tick.tick(), if polling => {
                    if self.poll().await {
                        return "manifest directories changed";
                    }
                }
            }
        }
    }
}

async fn next_change(watcher: &mut Option<Watcher>) -> &'static str {
    match watcher {
        Some(watcher) => watcher.changed().await,
        None => std::future::pending().await,
    }
}

/// Watches `dirs` (inotify, or polling every `interval`, see the module
/// documentation) and rebuilds the engine (incrementally) when a manifest
/// file is added, changed or removed. A zero `interval` turns the watching
/// off.
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
    let mut watcher = None;
    if !interval.is_zero() {
        let (started, changed) = Watcher::start(dirs, baseline, interval).await;
        rebuilder.set_watch(started.state());
        watcher = Some(started);
        if changed {
            rebuilder
                .rebuild("manifest directories changed while the index loaded")
                .await;
        }
    }
    let mut behind_check = tokio::time::interval_at(Instant::now() + BEHIND_CHECK, BEHIND_CHECK);
    behind_check.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        let retry = rebuilder.retry_due();
        let retry_at = retry.map_or_else(Instant::now, Instant::from_std);
        let why = tokio::select! {
            _ = &mut shutdown => return,
            why = next_change(&mut watcher) => why,
            _ = tokio::time::sleep_until(retry_at), if retry.is_some() => {
                // Planned afresh from now: the rebuild is not awaited here,
                // and a plan left in the past would fire again at once.
                rebuilder.replan_retry();
                "retrying a failed rebuild"
            }
            _ = behind_check.tick(), if retry.is_none() => continue,
        };
        if let Some(watcher) = &watcher {
            rebuilder.set_watch(watcher.state());
        }
        // Not awaited: the next change must be seen (and hand over) while a
        // rebuild still embeds in the background.
        rebuilder.request(why);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inotify() -> Option<EventStream<Vec<u8>>> {
        Some(
            Inotify::init()
                .and_then(|i| i.into_event_stream(vec![0u8; EVENT_BUFFER]))
                .expect("inotify"),
        )
    }

    async fn no_change_within(watcher: &mut Watcher, wait: Duration) -> bool {
        tokio::time::timeout(wait, watcher.changed()).await.is_err()
    }

    #[tokio::test]
    async fn a_burst_of_writes_is_one_change() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = vec![dir.path().to_path_buf()];
        let baseline = dir_signature(&dirs);
        let (mut watcher, changed) =
            Watcher::start_with(inotify(), dirs, baseline, Duration::from_secs(3600)).await;
        assert!(!changed);
        assert_eq!(watcher.state(), WatchState::Inotify);
        for i in 0..200 {
            std::fs::write(dir.path().join(format!("{i}.json")), b"{}").unwrap();
        }
        // Files other than *.json are not news.
        std::fs::write(dir.path().join("notes.txt"), b"x").unwrap();
        tokio::time::timeout(Duration::from_secs(5), watcher.changed())
            .await
            .expect("the burst is seen");
        assert!(no_change_within(&mut watcher, QUIET * 3).await);
        std::fs::write(dir.path().join("other.txt"), b"x").unwrap();
        assert!(no_change_within(&mut watcher, QUIET * 3).await);
    }

    #[tokio::test]
    async fn a_change_seen_by_a_cancelled_wait_is_reported_by_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = vec![dir.path().to_path_buf()];
        let baseline = dir_signature(&dirs);
        let (mut watcher, _) =
            Watcher::start_with(inotify(), dirs, baseline, Duration::from_secs(3600)).await;
        std::fs::write(dir.path().join("a.json"), b"{}").unwrap();
        // Cancelled while the burst settles (the retry timer won, say).
        assert!(no_change_within(&mut watcher, QUIET / 2).await);
        tokio::time::timeout(Duration::from_secs(5), watcher.changed())
            .await
            .expect("the change is not lost");
    }

    #[tokio::test]
    async fn without_inotify_the_directories_are_polled() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = vec![dir.path().to_path_buf()];
        let baseline = dir_signature(&dirs);
        let (mut watcher, _) =
            Watcher::start_with(None, dirs, baseline, Duration::from_millis(100)).await;
        assert_eq!(watcher.state(), WatchState::Poll);
        assert!(no_change_within(&mut watcher, Duration::from_millis(350)).await);
        std::fs::write(dir.path().join("a.json"), b"{}").unwrap();
        tokio::time::timeout(Duration::from_secs(5), watcher.changed())
            .await
            .expect("the poll sees the new file");
        assert!(no_change_within(&mut watcher, Duration::from_millis(350)).await);
    }

    #[tokio::test]
    async fn a_missing_directory_is_watched_once_it_appears_and_again_after_removal() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("later");
        let dirs = vec![dir.clone()];
        let baseline = dir_signature(&dirs);
        let (mut watcher, _) =
            Watcher::start_with(inotify(), dirs, baseline, Duration::from_millis(100)).await;
        // Missing directories are looked for, not polled.
        assert_eq!(watcher.state(), WatchState::Inotify);
        assert_eq!(watcher.follow, [Follow::Poll { try_inotify: true }]);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("a.json"), b"{}").unwrap();
        tokio::time::timeout(Duration::from_secs(5), watcher.changed())
            .await
            .expect("the new directory is seen");
        assert_eq!(watcher.follow, [Follow::Inotify]);
        std::fs::write(dir.join("b.json"), b"{}").unwrap();
        tokio::time::timeout(Duration::from_secs(5), watcher.changed())
            .await
            .expect("a write in it is seen");
        std::fs::remove_dir_all(&dir).unwrap();
        tokio::time::timeout(Duration::from_secs(5), watcher.changed())
            .await
            .expect("its removal is seen");
        // Drain what the removal left, then it is looked for again.
        while !no_change_within(&mut watcher, QUIET * 3).await {}
        assert_eq!(watcher.follow, [Follow::Poll { try_inotify: true }]);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("c.json"), b"{}").unwrap();
        tokio::time::timeout(Duration::from_secs(5), watcher.changed())
            .await
            .expect("it is watched again");
        assert_eq!(watcher.follow, [Follow::Inotify]);
    }
}
