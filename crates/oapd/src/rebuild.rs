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

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

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

/// The rebuilds [`Rebuilder::request`] runs one after another.
#[derive(Default)]
struct Requests {
    running: bool,
    again: Option<&'static str>,
}

/// How the directory watch follows the manifest directories, for `/health`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchState {
    /// `crawler.watch_interval: 0`.
    Off,
    /// inotify for every directory there is (one that is missing is looked
    /// for every interval and watched once it exists).
    Inotify,
    /// Polling every directory (inotify unavailable, or every directory is
    /// on a network filesystem or past the watch limit).
    Poll,
    /// inotify for some directories, polling for the others (missing, on a
    /// network filesystem, or past the watch limit).
    Mixed,
}

impl WatchState {
    /// The mode as `/health` and the logs name it.
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
/// share: the load problems last logged, the planned retry, the watch mode.
pub struct Rebuilder {
    engine: Arc<Engine>,
    /// Rebuilds asked for with [`Rebuilder::request`]: whether one runs,
    /// and the reason for one more after it.
    requests: Mutex<Requests>,
    problems: Mutex<ProblemLog>,
    /// When the next retry of a failed rebuild is due.
    retry_at: Mutex<Option<Instant>>,
    watch: Mutex<WatchState>,
    /// Resolves the operator manifests' schema references before each
    /// rebuild (the daemon's; none for the one-shot commands).
    local_schemas: Mutex<Option<crate::local_schemas::Refresher>>,
}

impl Rebuilder {
    /// `startup` is what opening the engine found (and logged already).
    pub fn new(engine: Arc<Engine>, startup: &BuildReport) -> Rebuilder {
        Rebuilder {
            engine,
            requests: Mutex::new(Requests::default()),
            problems: Mutex::new(ProblemLog::seeded(startup)),
            retry_at: Mutex::new(None),
            watch: Mutex::new(WatchState::Off),
            local_schemas: Mutex::new(None),
        }
    }

    /// Resolve the operator manifests' schema references with `refresher`
    /// before each rebuild.
    pub fn set_local_schemas(&self, refresher: crate::local_schemas::Refresher) {
        if let Ok(mut slot) = self.local_schemas.lock() {
            *slot = Some(refresher);
        }
    }

    /// Resolves the operator manifests' schema references that are due;
    /// whether a stored copy changed (then the index is behind).
    pub async fn refresh_local_schemas(&self) -> bool {
        let refresher = self.local_schemas.lock().ok().and_then(|slot| slot.clone());
        match refresher {
            Some(refresher) => refresher.refresh().await,
            None => false,
        }
    }

    /// The engine this generation's rebuilds replace the index of.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Asks for a rebuild without waiting for it: one starts now if none of
    /// these runs; otherwise one more runs after it (several requests
    /// meanwhile make one, which reads the newest catalog), and the running
    /// one is told a newer catalog follows, so a background embedding steps
    /// aside instead of holding the change back until every vector is made.
    pub fn request(self: &Arc<Self>, why: &'static str) {
        let Ok(mut requests) = self.requests.lock() else {
            return;
        };
        if requests.running {
            requests.again = Some(why);
            self.engine.note_newer_catalog();
            return;
        }
        requests.running = true;
        drop(requests);
        let this = self.clone();
        tokio::spawn(async move {
            let mut why = why;
            loop {
                this.rebuild(why).await;
                let Ok(mut requests) = this.requests.lock() else {
                    return;
                };
                match requests.again.take() {
                    Some(next) => why = next,
                    None => {
                        requests.running = false;
                        return;
                    }
                }
            }
        });
    }

    /// Rebuilds the engine on a blocking thread (at background priority,
    /// see `Engine::rebuild`) and logs the outcome with `why`: the load
    /// problems that are new or changed, the ones that went away, and one
    /// summary line. A failed rebuild leaves the old index serving and
    /// plans a retry. Returns whether the rebuild succeeded.
    pub async fn rebuild(self: &Arc<Self>, why: &str) -> bool {
        // A changed manifest file loads with its schemas in this rebuild.
        self.refresh_local_schemas().await;
        let engine = self.engine.clone();
        let outcome = tokio::task::spawn_blocking(move || engine.rebuild(false)).await;
        crate::metrics::get().rebuild(match &outcome {
            Ok(Ok(report)) => Some(!report.reused_index),
            _ => None,
        });
        match outcome {
            Ok(Ok(report)) => {
                self.set_retry(None);
                let this = self.clone();
                // Stats every problem file: blocking work, off the workers.
                let changes = tokio::task::spawn_blocking(move || {
                    this.problems
                        .lock()
                        .map(|mut log| log.update(&report))
                        .map_err(|_| ())
                })
                .await;
                match changes {
                    Ok(Ok(c)) => tracing::info!(
                        manifests = c.docs,
                        embedded = c.embedded,
                        problems = c.problems,
                        new_problems = c.new,
                        fixed_problems = c.fixed,
                        collisions = c.collisions,
                        why,
                        "index rebuilt"
                    ),
                    _ => tracing::error!(why, "index rebuilt, but its problems were not logged"),
                }
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

    /// Forgets the planned retry; [`Rebuilder::retry_due`] plans the next
    /// one a backoff from now while the failure stands.
    pub fn replan_retry(&self) {
        self.set_retry(None);
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
            .map(|log| (log.problems.len(), log.collisions.len()))
            .unwrap_or_default()
    }

    /// Records how manifest directories are watched (set once the watcher
    /// starts).
    pub fn set_watch(&self, state: WatchState) {
        if let Ok(mut watch) = self.watch.lock() {
            *watch = state;
        }
    }

    /// How manifest directories are watched, for `/health`.
    pub fn watch(&self) -> WatchState {
        self.watch.lock().map(|w| *w).unwrap_or(WatchState::Off)
    }
}

/// What one rebuild changed, for its summary line.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ProblemChanges {
    /// Manifests indexed by this build.
    pub docs: usize,
    /// Manifests embedded by this build (unchanged ones reuse their vectors).
    pub embedded: usize,
    /// Problems in this build.
    pub problems: usize,
    /// Problems logged now: new, with a new message, or in a file that changed.
    pub new: usize,
    /// Problems of the last build that are gone.
    pub fixed: usize,
    /// Manifest ids claimed by more than one file in this build.
    pub collisions: usize,
}

/// The load problems (and id collisions) last logged, so a rebuild logs
/// only what changed: 50,000 bad files and one touched must not write
/// 50,000 warnings again. Per location: a hash of the message and the
/// file's size and modification time, so a file that was edited but is
/// still bad is reported once more (the operator just touched it).
#[derive(Debug, Default)]
pub struct ProblemLog {
    problems: HashMap<Box<str>, Seen>,
    /// Skipped location → hash of (id, kept location).
    collisions: HashMap<Box<str>, u64>,
}

/// Locations to log (with whether they had a problem before), and the
/// locations whose problem went away.
type Remembered = (Vec<(Box<str>, bool)>, Vec<Box<str>>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    message: u64,
    stamp: Option<(u64, SystemTime)>,
}

fn hash_of(parts: &[&str]) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    parts.hash(&mut hasher);
    hasher.finish()
}

/// Size and modification time of a problem's file (`None` for bundled
/// locations and files that are gone).
fn stamp(location: &str) -> Option<(u64, SystemTime)> {
    let meta = std::fs::metadata(location).ok()?;
    Some((meta.len(), meta.modified().ok()?))
}

impl ProblemLog {
    /// The state after `report` was logged in full (at start-up).
    pub fn seeded(report: &BuildReport) -> ProblemLog {
        let mut log = ProblemLog::default();
        let _ = log.remember(report);
        log.collisions = report
            .collisions
            .iter()
            .map(|c| (c.skipped.as_str().into(), hash_of(&[&c.id, &c.kept])))
            .collect();
        log
    }

    /// Remembers `report`'s problems; returns the ones to log (with
    /// whether the location had a problem before) and the locations whose
    /// problem went away.
    fn remember(&mut self, report: &BuildReport) -> Remembered {
        let mut next = HashMap::with_capacity(report.problems.len());
        let mut fresh = Vec::new();
        for problem in &report.problems {
            let seen = Seen {
                message: hash_of(&[&problem.message]),
                stamp: stamp(&problem.location),
            };
            let location: Box<str> = problem.location.as_str().into();
            let before = self.problems.remove(&location);
            if before != Some(seen) {
                fresh.push((location.clone(), before.is_some()));
            }
            next.insert(location, seen);
        }
        // What is left in the old map went away.
        let gone = std::mem::replace(&mut self.problems, next);
        (fresh, gone.into_keys().collect())
    }

    /// Logs what changed since the last build and remembers `report`.
    pub fn update(&mut self, report: &BuildReport) -> ProblemChanges {
        let (fresh, gone) = self.remember(report);
        if !fresh.is_empty() {
            let messages: HashMap<&str, &str> = report
                .problems
                .iter()
                .map(|p| (p.location.as_str(), p.message.as_str()))
                .collect();
            for (location, before) in &fresh {
                let message = messages.get(&**location).copied().unwrap_or_default();
                if *before {
                    tracing::warn!(
                        location = %location,
                        problem = %message,
                        "manifest skipped (changed, still not loadable)"
                    );
                } else {
                    tracing::warn!(location = %location, problem = %message, "manifest skipped");
                }
            }
        }
        for location in &gone {
            if Path::new(&**location).exists() {
                tracing::info!(location = %location, "manifest problem fixed: it loads now");
            } else {
                tracing::info!(location = %location, "manifest problem gone: the file was removed");
            }
        }
        let mut collisions = HashMap::with_capacity(report.collisions.len());
        for collision in &report.collisions {
            let key: Box<str> = collision.skipped.as_str().into();
            let hash = hash_of(&[&collision.id, &collision.kept]);
            if self.collisions.get(&key) != Some(&hash) {
                tracing::warn!(
                    id = %collision.id,
                    kept = %collision.kept,
                    skipped = %collision.skipped,
                    "manifest id collision: the first source wins"
                );
            }
            collisions.insert(key, hash);
        }
        self.collisions = collisions;
        ProblemChanges {
            docs: report.docs,
            embedded: report.embedded_rows,
            problems: report.problems.len(),
            new: fresh.len(),
            fixed: gone.len(),
            collisions: report.collisions.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oap_discovery::LoadProblem;

    #[test]
    fn backoff_doubles_from_one_second_to_the_cap() {
        let secs: Vec<u64> = (1..=9).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(backoff(0), RETRY_FIRST);
        assert_eq!(backoff(u32::MAX), RETRY_CAP);
    }

    fn report(problems: &[(&str, &str)]) -> BuildReport {
        BuildReport {
            problems: problems
                .iter()
                .map(|(location, message)| LoadProblem {
                    location: location.to_string(),
                    message: message.to_string(),
                })
                .collect(),
            ..BuildReport::default()
        }
    }

    #[test]
    fn only_new_changed_touched_and_fixed_problems_count() {
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name).display().to_string();
        for name in ["a.json", "b.json", "c.json"] {
            std::fs::write(dir.path().join(name), b"{").unwrap();
        }
        let (a, b, c) = (path("a.json"), path("b.json"), path("c.json"));
        let mut log = ProblemLog::seeded(&report(&[(&a, "bad"), (&b, "bad")]));
        // Nothing changed: nothing to log.
        let same = log.update(&report(&[(&a, "bad"), (&b, "bad")]));
        assert_eq!((same.new, same.fixed, same.problems), (0, 0, 2));
        // A new bad file, and another message for an old one.
        let next = log.update(&report(&[(&a, "worse"), (&b, "bad"), (&c, "bad")]));
        assert_eq!((next.new, next.fixed), (2, 0));
        // b is edited but still bad: reported again; a is fixed.
        std::fs::write(dir.path().join("b.json"), b"{ still bad").unwrap();
        let next = log.update(&report(&[(&b, "bad"), (&c, "bad")]));
        assert_eq!((next.new, next.fixed), (1, 1));
        assert_eq!(log.problems.len(), 2);
    }
}
