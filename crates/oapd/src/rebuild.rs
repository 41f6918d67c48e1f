//! Rebuilding the index while serving: one rebuild off the async workers,
//! what it logs (only what changed since the last one), the retries after
//! a failed rebuild, and what `/health` says while the index is behind its
//! sources.
//!
//! A rebuild that fails (a full disk while the new index is written, say)
//! leaves the old index serving: nothing already indexed is lost, but what
//! was added since is not there. The engine remembers the failure
//! ([`Engine::rebuild_failure`]) until a rebuild succeeds; the directory
//! watch retries with [`backoff`] (and at once when it sees a change), and
//! `/health` says `degraded` with the reason meanwhile.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oap_discovery::{BuildReport, Engine};

/// First retry after a failed rebuild; each failure in a row doubles it.
pub const RETRY_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between two retries.
pub const RETRY_CAP: Duration = Duration::from_secs(60);

/// Delay before retrying after `consecutive` failed rebuilds in a row:
/// 1 s, 2 s, 4 s, ... up to [`RETRY_CAP`].
pub fn backoff(consecutive: u32) -> Duration {
    let doublings = consecutive.saturating_sub(1).min(16);
    RETRY_FIRST.saturating_mul(1u32 << doublings).min(RETRY_CAP)
}

/// How the directory watch follows the manifest directories, for `/health`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchState {
    /// `crawler.watch_interval: 0`.
    Off,
    /// inotify for every directory.
    Inotify,
    /// Polling every directory (inotify unavailable).
    Poll,
    /// inotify for some directories, polling for the others (missing, on a
    /// network filesystem, or past the watch limit).
    Mixed,
}

impl WatchState {
    pub fn name(self) -> &'static str {
        match self {
            WatchState::Off => "off",
            WatchState::Inotify => "inotify",
            WatchState::Poll => "poll",
            WatchState::Mixed => "inotify+poll",
        }
    }
}

/// The engine of one handler generation with what its background rebuilds
/// share: the load problem counts, the planned retry, the watch mode.
pub struct Rebuilder {
    engine: Arc<Engine>,
    /// Load problems and collisions of the last build.
    problems: Mutex<(usize, usize)>,
    /// When the next retry of a failed rebuild is due.
    retry_at: Mutex<Option<Instant>>,
    watch: Mutex<WatchState>,
}

impl Rebuilder {
    /// `startup` is what opening the engine found (and logged already).
    pub fn new(engine: Arc<Engine>, startup: &BuildReport) -> Rebuilder {
        Rebuilder {
            engine,
            problems: Mutex::new((startup.problems.len(), startup.collisions.len())),
            retry_at: Mutex::new(None),
            watch: Mutex::new(WatchState::Off),
        }
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Rebuilds the engine on a blocking thread (at background priority,
    /// see `Engine::rebuild`) and logs the outcome with `why`. A failed
    /// rebuild leaves the old index serving and plans a retry. Returns
    /// whether the rebuild succeeded.
    pub async fn rebuild(self: &Arc<Self>, why: &str) -> bool {
        let engine = self.engine.clone();
        let outcome = tokio::task::spawn_blocking(move || engine.rebuild(false)).await;
        match outcome {
            Ok(Ok(report)) => {
                self.set_retry(None);
                if let Ok(mut counts) = self.problems.lock() {
                    *counts = (report.problems.len(), report.collisions.len());
                }
                tracing::info!(
                    manifests = report.docs,
                    embedded = report.embedded_rows,
                    problems = report.problems.len(),
                    why,
                    "index rebuilt"
                );
                crate::app::log_report(&report);
                true
            }
            Ok(Err(err)) => {
                let consecutive = self
                    .engine
                    .rebuild_failure()
                    .map_or(1, |failure| failure.consecutive);
                let delay = backoff(consecutive);
                self.set_retry(Some(Instant::now() + delay));
                tracing::error!(
                    error = %err,
                    why,
                    failures = consecutive,
                    retry_in_s = delay.as_secs(),
                    "index rebuild failed; the old index keeps serving"
                );
                false
            }
            Err(err) => {
                // A panic inside the rebuild: the engine noted nothing, but
                // the index is behind all the same. Retry like a failure.
                self.set_retry(Some(Instant::now() + RETRY_CAP));
                tracing::error!(error = %err, why, "rebuild task failed");
                false
            }
        }
    }

    /// When the watch should retry a failed rebuild: the planned time, or
    /// (when another rebuilder, e.g. the crawler, failed and nothing is
    /// planned yet) one backoff from now. `None` while the index is current.
    pub fn retry_due(&self) -> Option<Instant> {
        let failure = self.engine.rebuild_failure()?;
        let mut planned = self.retry_at.lock().ok()?;
        Some(*planned.get_or_insert_with(|| Instant::now() + backoff(failure.consecutive)))
    }

    fn set_retry(&self, at: Option<Instant>) {
        if let Ok(mut planned) = self.retry_at.lock() {
            *planned = at;
        }
    }

    /// Why the index is behind its sources, for `/health`; `None` when the
    /// last rebuild succeeded.
    pub fn behind_reason(&self) -> Option<String> {
        let failure = self.engine.rebuild_failure()?;
        let planned = self.retry_at.lock().ok().and_then(|at| *at);
        let when = match planned {
            Some(at) => match at.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => {
                    format!("retrying in {} s", left.as_secs_f64().ceil() as u64)
                }
                _ => "retrying now".to_string(),
            },
            None => "retrying on the next change".to_string(),
        };
        Some(format!("index rebuild failed: {}; {when}", failure.error))
    }

    /// Load problems and collisions of the last build, for `/health`.
    pub fn problem_counts(&self) -> (usize, usize) {
        self.problems
            .lock()
            .map(|counts| *counts)
            .unwrap_or_default()
    }

    pub fn set_watch(&self, state: WatchState) {
        if let Ok(mut watch) = self.watch.lock() {
            *watch = state;
        }
    }

    pub fn watch(&self) -> WatchState {
        self.watch.lock().map(|w| *w).unwrap_or(WatchState::Off)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_one_second_to_the_cap() {
        let secs: Vec<u64> = (1..=9).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(backoff(0), RETRY_FIRST);
        assert_eq!(backoff(u32::MAX), RETRY_CAP);
    }
}
