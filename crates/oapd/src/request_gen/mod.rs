//! Request rows written by the co-located Ollama, in the background.
//!
//! A capability with no requests of its own (no example descriptions in
//! its manifest, none shipped with it; MCP tools included) is found only
//! by its publisher's wording. Once per version of such a tool, and once
//! per model, the daemon asks Ollama for a few requests a user might say
//! for it ([`ask`]), keeps the accepted ones in the data directory
//! ([`cache`]) and asks the index for a rebuild, which attaches them as
//! request rows and embeds just those texts.
//!
//! The engine learns nothing new here: [`RequestGenerator`] is the
//! engine's [`RequestRows`] provider, so every catalog load both attaches
//! the cached rows and tells the generator which tools still lack some.
//!
//! **Never on a request's path, never before ready.** One background task
//! makes one call at a time, only while no chat or other model request
//! goes through oapd and no embedding runs in the background, with a pause
//! between calls, an hourly cap (`discovery.generate_per_hour`), timeouts,
//! and exponential backoff while Ollama is down or answers badly (a tool
//! whose answers stay unusable is given up after a few tries, until it or
//! the model changes).
//!
//! What the model writes is data: each request goes through
//! [`oap_discovery::requests::accepted`], is logged only at debug, is never
//! shown as the tool's own text, and is never offered to a model.

pub(crate) mod ask;
pub(crate) mod cache;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use oap_bridge::upstream::Upstream;
use oap_discovery::{CatalogEntry, RequestRows};
use serde::Serialize;
use tokio::sync::Notify;

use crate::config::Config;
use crate::rebuild::Rebuilder;
use ask::{AskError, ModelId};
use cache::{Cache, Entry};

/// Pause between two generation calls, and before the first after start.
const PAUSE: Duration = Duration::from_secs(2);

/// First wait after a failed call; each failure in a row doubles it.
const FIRST_BACKOFF: Duration = Duration::from_secs(2);

/// The longest wait between two tries while Ollama is down.
const MAX_BACKOFF: Duration = Duration::from_secs(30 * 60);

/// Unusable answers for one tool (one version, one model) before it is
/// given up: some tools' descriptions make a small model ramble.
const TRIES_PER_TOOL: u32 = 3;

/// How often the idle check looks again while chats run.
const IDLE_POLL: Duration = Duration::from_millis(250);

/// Tools generated before the index is asked to rebuild, when more wait.
const REBUILD_BATCH: usize = 8;

/// The longest a generated tool waits for its rebuild while more are
/// being generated.
const REBUILD_BATCH_WAIT: Duration = Duration::from_secs(5 * 60);

/// How long a chosen model is used before the model list is read again
/// (a model pulled or removed meanwhile).
const MODEL_RECHECK: Duration = Duration::from_secs(10 * 60);

/// Chats and other requests to the model going through oapd right now.
static MODEL_REQUESTS: AtomicUsize = AtomicUsize::new(0);

/// One request to the model going through oapd (a chat, a pass-through
/// generation): generation waits while any is held.
#[derive(Debug)]
pub struct ModelRequest(());

impl ModelRequest {
    /// Counts a request from now until the value is dropped.
    pub fn start() -> ModelRequest {
        MODEL_REQUESTS.fetch_add(1, Ordering::AcqRel);
        ModelRequest(())
    }

    /// Requests to the model in flight.
    pub fn in_flight() -> usize {
        MODEL_REQUESTS.load(Ordering::Acquire)
    }
}

impl Drop for ModelRequest {
    fn drop(&mut self) {
        MODEL_REQUESTS.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The `discovery.generate_*` settings.
#[derive(Debug, Clone, PartialEq)]
pub struct GenSettings {
    /// `discovery.generate_requests`.
    pub enabled: bool,
    /// `discovery.generate_model`.
    pub model: Option<String>,
    /// `discovery.generate_per_hour`.
    pub per_hour: usize,
}

impl GenSettings {
    /// The settings of `config`.
    pub fn of(config: &Config) -> GenSettings {
        GenSettings {
            enabled: config.discovery.generate_requests,
            model: config.discovery.generate_model.clone(),
            per_hour: config.discovery.generate_per_hour.max(1),
        }
    }
}

/// A tool a catalog load saw without requests from the current model.
#[derive(Debug, Clone)]
struct Candidate {
    id: String,
    name: String,
    description: String,
}

/// What the generator has done, for `/health`, `/metrics` and the page.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GenStatus {
    /// `discovery.generate_requests`.
    pub enabled: bool,
    /// The model writing (`name`), once chosen.
    pub model: Option<String>,
    /// Tools with generated requests in the cache.
    pub generated: usize,
    /// Tools waiting for theirs.
    pub pending: usize,
    /// Tools given up after unusable answers.
    pub failed: usize,
    /// Generation calls made since start.
    pub calls: u64,
    /// Of them, the ones that gave nothing.
    pub failed_calls: u64,
    /// Why the last failed call failed.
    pub last_error: Option<String>,
    /// When, seconds since the Unix epoch.
    pub last_error_unix: Option<u64>,
}

struct State {
    cache: Cache,
    /// The model chosen last, and when.
    model: Option<(ModelId, Instant)>,
    /// By content hash.
    candidates: BTreeMap<String, Candidate>,
    /// What the last catalog load attached, by catalog id: content hash
    /// and model key.
    served: HashMap<String, (String, String)>,
    /// Unusable answers so far, by content hash and model key.
    bad_answers: HashMap<(String, String), u32>,
    gave_up: HashSet<(String, String)>,
    /// Tools generated since the last rebuild was asked for.
    unflushed: usize,
    first_unflushed: Option<Instant>,
    status: GenStatus,
}

/// The generated request rows: the cache, the engine's provider, and the
/// background task that fills the cache. One for the daemon's life (a
/// reload keeps it); the engine of each handler generation reads it.
pub struct RequestGenerator {
    settings: GenSettings,
    path: PathBuf,
    state: Mutex<State>,
    /// Woken when a catalog load finds a tool to generate for.
    wake: Notify,
    /// The serving generation's rebuilder: asked to rebuild once new rows
    /// are cached.
    rebuilder: Mutex<Option<Weak<Rebuilder>>>,
}

impl fmt::Debug for RequestGenerator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestGenerator")
            .field("settings", &self.settings)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Whether the manifest of `entry` has requests of its own: example
/// descriptions, which are rows already.
pub(crate) fn has_own_requests(entry: &CatalogEntry) -> Option<bool> {
    let manifest = entry.manifest().ok()?;
    Some(manifest.examples.iter().any(|example| {
        example
            .description
            .as_deref()
            .is_some_and(|d| !d.trim().is_empty())
    }))
}

impl RequestGenerator {
    /// The generator of `config`, with the cache read from the data
    /// directory (an unreadable cache is logged and started afresh: it is
    /// only ever a saving).
    pub fn open(config: &Config) -> Arc<RequestGenerator> {
        RequestGenerator::open_with(config, Cache::load)
    }

    /// [`RequestGenerator::open`] keeping every cached entry, for the
    /// one-shot commands that only read the file (`oapd index`, `oapd
    /// snapshot build`): a builder's rows over a whole crawled catalog
    /// reach the index past the daemon's cap. Only the daemon writes the
    /// cache back, and it opens with the cap.
    pub fn open_all(config: &Config) -> Arc<RequestGenerator> {
        RequestGenerator::open_with(config, Cache::load_all)
    }

    fn open_with(
        config: &Config,
        load: fn(&std::path::Path) -> Result<Cache, cache::CacheError>,
    ) -> Arc<RequestGenerator> {
        let path = Cache::path(&config.index.data_dir);
        let cache = match load(&path) {
            Ok(cache) => cache,
            Err(err) => {
                tracing::warn!(error = %err, "generated requests: cache unreadable, starting afresh");
                Cache::default()
            }
        };
        let settings = GenSettings::of(config);
        if settings.enabled && !cache.is_empty() {
            tracing::info!(tools = cache.len(), "generated requests: cache loaded");
        }
        Arc::new(RequestGenerator {
            state: Mutex::new(State {
                cache,
                model: None,
                candidates: BTreeMap::new(),
                served: HashMap::new(),
                bad_answers: HashMap::new(),
                gave_up: HashSet::new(),
                unflushed: 0,
                first_unflushed: None,
                status: GenStatus {
                    enabled: settings.enabled,
                    ..GenStatus::default()
                },
            }),
            settings,
            path,
            wake: Notify::new(),
            rebuilder: Mutex::new(None),
        })
    }

    /// The settings it was opened with.
    pub fn settings(&self) -> &GenSettings {
        &self.settings
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock left plain data behind: use it.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Rebuilds are asked of `rebuilder` from now on (the serving handler
    /// generation's).
    pub fn attach(&self, rebuilder: &Arc<Rebuilder>) {
        if let Ok(mut slot) = self.rebuilder.lock() {
            *slot = Some(Arc::downgrade(rebuilder));
        }
    }

    /// The engine's provider: rows `given` elsewhere (shipped with the
    /// bundled tools) when there are some, else the generated ones. A tool
    /// with given rows gets none generated.
    pub fn after(self: &Arc<Self>, given: Option<Arc<dyn RequestRows>>) -> Arc<dyn RequestRows> {
        Arc::new(GivenFirst {
            given,
            generated: self.clone(),
        })
    }

    /// What it has done so far.
    pub fn status(&self) -> GenStatus {
        let state = self.state();
        self.status_of(&state)
    }

    /// The requests attached at the last catalog load, by catalog id, with
    /// the model that wrote them (for the status page).
    pub fn listing(&self) -> serde_json::Value {
        let state = self.state();
        let mut tools = serde_json::Map::new();
        let mut served: Vec<(&String, &(String, String))> = state.served.iter().collect();
        served.sort();
        for (id, (hash, model)) in served {
            let Some(entry) = state
                .cache
                .entries()
                .find(|e| &e.content_hash == hash && &e.model == model)
            else {
                continue;
            };
            tools.insert(
                id.clone(),
                serde_json::json!({
                    "model": ModelId::name_of_key(&entry.model),
                    "requests": entry.requests,
                    "generated_unix": entry.generated_unix,
                }),
            );
        }
        serde_json::json!({
            "enabled": self.settings.enabled,
            "status": self.status_of(&state),
            "tools": tools,
        })
    }

    fn status_of(&self, state: &State) -> GenStatus {
        let mut status = state.status.clone();
        status.model = state.model.as_ref().map(|(m, _)| m.name.clone());
        let hashes: HashSet<&str> = state
            .cache
            .entries()
            .map(|e| e.content_hash.as_str())
            .collect();
        status.generated = hashes.len();
        status.pending = state.candidates.len();
        status.failed = state.gave_up.len();
        status
    }

    /// The cached requests for `entry`; notes the tool as a candidate when
    /// the current model has written none for this version of it.
    fn generated_for(&self, entry: &CatalogEntry) -> Vec<String> {
        if !self.settings.enabled || has_own_requests(entry).unwrap_or(true) {
            return Vec::new();
        }
        let mut state = self.state();
        let model = state.model.as_ref().map(|(m, _)| m.key());
        let now = unix_now();
        let found = state
            .cache
            .lookup(&entry.content_hash, model.as_deref(), now)
            .map(|e| (e.requests.clone(), e.model.clone()));
        let wanted = match (&found, &model) {
            (None, _) => true,
            // Until a model is chosen, the cached rows stand.
            (Some(_), None) => false,
            (Some((_, by)), Some(current)) => by != current,
        };
        let given_up = model.as_ref().is_some_and(|m| {
            state
                .gave_up
                .contains(&(entry.content_hash.clone(), m.clone()))
        });
        if wanted && !given_up {
            let is_new = !state.candidates.contains_key(&entry.content_hash);
            if let Ok(manifest) = entry.manifest() {
                state.candidates.insert(
                    entry.content_hash.clone(),
                    Candidate {
                        id: entry.id.clone(),
                        name: manifest.name,
                        description: manifest.description,
                    },
                );
                if is_new {
                    self.wake.notify_one();
                }
            }
        } else {
            state.candidates.remove(&entry.content_hash);
        }
        match found {
            Some((requests, by)) => {
                state
                    .served
                    .insert(entry.id.clone(), (entry.content_hash.clone(), by));
                requests
            }
            None => {
                state.served.remove(&entry.id);
                Vec::new()
            }
        }
    }

    /// Asks the serving generation for a rebuild if tools were generated
    /// since the last one.
    fn flush(&self, why: &'static str) {
        {
            let mut state = self.state();
            if state.unflushed == 0 {
                return;
            }
            state.unflushed = 0;
            state.first_unflushed = None;
        }
        let rebuilder = self
            .rebuilder
            .lock()
            .ok()
            .and_then(|slot| slot.as_ref().and_then(Weak::upgrade));
        if let Some(rebuilder) = rebuilder {
            rebuilder.request(why);
        }
    }

    /// Waits until no request to the model goes through oapd and the
    /// serving index embeds nothing in the background.
    async fn wait_idle(&self) {
        loop {
            let embedding = self
                .rebuilder
                .lock()
                .ok()
                .and_then(|slot| slot.as_ref().and_then(Weak::upgrade))
                .is_some_and(|r| r.engine().pending_texts() > 0);
            if ModelRequest::in_flight() == 0 && !embedding {
                return;
            }
            tokio::time::sleep(IDLE_POLL).await;
        }
    }

    /// The model to write with, read from Ollama's list when none is
    /// chosen or the choice is old. A change asks for a rebuild, whose
    /// catalog load finds the tools the new model has not written for.
    async fn model(&self, upstream: &Upstream) -> Result<ModelId, AskError> {
        let (current, cached_names) = {
            let state = self.state();
            (state.model.clone(), state.cache.model_names())
        };
        if let Some((model, chosen)) = &current {
            if chosen.elapsed() < MODEL_RECHECK {
                return Ok(model.clone());
            }
        }
        let installed = ask::list_models(upstream).await?;
        let model = ask::choose_model(&installed, self.settings.model.as_deref(), &cached_names)?;
        let changed = current.as_ref().map(|(m, _)| m) != Some(&model);
        let rescan = {
            let mut state = self.state();
            state.model = Some((model.clone(), Instant::now()));
            // The rows served were written by another model: the next load
            // lists them as candidates.
            changed && state.served.values().any(|(_, by)| by != &model.key())
        };
        if changed {
            tracing::info!(model = %model.name, "generated requests: model chosen");
        }
        if rescan {
            let rebuilder = self
                .rebuilder
                .lock()
                .ok()
                .and_then(|slot| slot.as_ref().and_then(Weak::upgrade));
            if let Some(rebuilder) = rebuilder {
                rebuilder.request("another model writes the generated requests");
            }
        }
        Ok(model)
    }

    /// The next tool to generate for, still indexed as it was seen;
    /// candidates the model already wrote for, or that left the index, are
    /// dropped on the way.
    fn next_candidate(&self, model: &ModelId) -> Option<(String, Candidate)> {
        let engine = self
            .rebuilder
            .lock()
            .ok()
            .and_then(|slot| slot.as_ref().and_then(Weak::upgrade))
            .map(|r| r.engine().clone());
        let mut state = self.state();
        let key = model.key();
        loop {
            let (hash, candidate) = state
                .candidates
                .iter()
                .next()
                .map(|(h, c)| (h.clone(), c.clone()))?;
            let indexed = engine.as_ref().is_none_or(|engine| {
                engine
                    .get(&candidate.id)
                    .is_some_and(|record| record.content_hash == hash)
            });
            let done = state.cache.has(&hash, &key)
                || state.gave_up.contains(&(hash.clone(), key.clone()));
            if indexed && !done {
                return Some((hash, candidate));
            }
            state.candidates.remove(&hash);
        }
    }

    fn failed_call(&self, err: &AskError) {
        let mut state = self.state();
        state.status.failed_calls += 1;
        state.status.last_error = Some(err.to_string());
        state.status.last_error_unix = Some(unix_now());
        crate::metrics::get().request_generation_call(err.kind());
    }

    /// Records a tool's requests and writes the cache.
    fn record(&self, hash: &str, model: &ModelId, candidate: &Candidate, requests: Vec<String>) {
        let now = unix_now();
        let mut state = self.state();
        state.cache.insert(Entry {
            content_hash: hash.to_string(),
            model: model.key(),
            id: candidate.id.clone(),
            requests,
            generated_unix: now,
            last_seen_unix: now,
        });
        state.candidates.remove(hash);
        state.unflushed += 1;
        state.first_unflushed.get_or_insert_with(Instant::now);
        if let Err(err) = state.cache.save(&self.path, now) {
            // The rows serve until the next restart all the same.
            tracing::warn!(error = %err, "generated requests: cannot write the cache");
        }
        crate::metrics::get().request_generation_call("ok");
    }

    /// An unusable answer for a tool: after [`TRIES_PER_TOOL`] it is given up.
    fn bad_answer(&self, hash: &str, model: &ModelId, id: &str) {
        let mut state = self.state();
        let key = (hash.to_string(), model.key());
        let tries = {
            let tries = state.bad_answers.entry(key.clone()).or_default();
            *tries += 1;
            *tries
        };
        if tries >= TRIES_PER_TOOL {
            tracing::warn!(id, tries, model = %model.name, "generated requests: given up on a tool whose answers were unusable");
            state.candidates.remove(hash);
            state.bad_answers.remove(&key);
            state.gave_up.insert(key);
        }
    }

    /// The background task: until the daemon stops, generates for each
    /// candidate in turn, under the pacing the module describes.
    pub async fn run(self: Arc<Self>, upstream: Upstream) {
        if !self.settings.enabled {
            return;
        }
        let mut calls: VecDeque<Instant> = VecDeque::new();
        let mut failures: u32 = 0;
        tokio::time::sleep(PAUSE).await;
        loop {
            self.wait_idle().await;
            let model = match self.model(&upstream).await {
                Ok(model) => model,
                Err(err) => {
                    failures += 1;
                    self.note_failure(&err, failures);
                    tokio::time::sleep(backoff(failures)).await;
                    continue;
                }
            };
            let Some((hash, candidate)) = self.next_candidate(&model) else {
                self.flush("generated requests are cached");
                // Wake for the next candidate, or look at the model again.
                let _ = tokio::time::timeout(MODEL_RECHECK, self.wake.notified()).await;
                continue;
            };
            // At most `per_hour` calls in any hour.
            while calls
                .front()
                .is_some_and(|t| t.elapsed() >= Duration::from_secs(3600))
            {
                calls.pop_front();
            }
            if calls.len() >= self.settings.per_hour {
                if let Some(oldest) = calls.front() {
                    let wait = Duration::from_secs(3600).saturating_sub(oldest.elapsed());
                    tokio::time::sleep(wait).await;
                }
                continue;
            }
            self.wait_idle().await;
            calls.push_back(Instant::now());
            self.state().status.calls += 1;
            match ask::ask(
                &upstream,
                &model.name,
                &candidate.name,
                &candidate.description,
            )
            .await
            {
                Ok(requests) => {
                    failures = 0;
                    tracing::info!(id = %candidate.id, requests = requests.len(), model = %model.name, "generated requests: written");
                    tracing::debug!(id = %candidate.id, ?requests, "generated requests (model output, data only)");
                    self.record(&hash, &model, &candidate, requests);
                    let (unflushed, since, left) = {
                        let state = self.state();
                        (
                            state.unflushed,
                            state.first_unflushed,
                            state.candidates.len(),
                        )
                    };
                    if left == 0
                        || unflushed >= REBUILD_BATCH
                        || since.is_some_and(|t| t.elapsed() >= REBUILD_BATCH_WAIT)
                    {
                        self.flush("generated requests are cached");
                    }
                    tokio::time::sleep(PAUSE).await;
                }
                Err(err) => {
                    failures += 1;
                    if err.is_bad_answer() {
                        self.bad_answer(&hash, &model, &candidate.id);
                    } else {
                        // Choose the model again: it may be gone.
                        self.state().model = None;
                    }
                    self.note_failure(&err, failures);
                    tokio::time::sleep(backoff(failures)).await;
                }
            }
        }
    }

    fn note_failure(&self, err: &AskError, failures: u32) {
        self.failed_call(err);
        let retry_in = backoff(failures);
        if failures == 1 || failures.is_power_of_two() {
            tracing::warn!(error = %err, failures, retry_in_s = retry_in.as_secs(), "generated requests: call failed");
        } else {
            tracing::debug!(error = %err, failures, "generated requests: call failed");
        }
    }
}

/// Wait after `failures` failed calls in a row: 2 s, 4 s, ... up to
/// [`MAX_BACKOFF`].
fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(20);
    FIRST_BACKOFF
        .saturating_mul(1u32 << doublings)
        .min(MAX_BACKOFF)
}

impl RequestRows for RequestGenerator {
    fn requests(&self, entry: &CatalogEntry) -> Vec<String> {
        self.generated_for(entry)
    }
}

/// Rows given elsewhere first, generated ones for the tools without.
#[derive(Debug)]
struct GivenFirst {
    given: Option<Arc<dyn RequestRows>>,
    generated: Arc<RequestGenerator>,
}

impl RequestRows for GivenFirst {
    fn requests(&self, entry: &CatalogEntry) -> Vec<String> {
        if let Some(given) = &self.given {
            let rows = given.requests(entry);
            if !rows.is_empty() {
                return rows;
            }
        }
        self.generated.requests(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        assert_eq!(backoff(1), Duration::from_secs(2));
        assert_eq!(backoff(2), Duration::from_secs(4));
        assert_eq!(backoff(40), MAX_BACKOFF);
    }

    #[test]
    fn a_model_request_is_counted_while_held() {
        let before = ModelRequest::in_flight();
        let held = ModelRequest::start();
        assert!(ModelRequest::in_flight() > before);
        drop(held);
    }
}
