//! The crawler: fetches due domains, stores accepted manifests as envelopes,
//! keeps the schedule, and asks the engine for an incremental rebuild when
//! something changed.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use oap_exec::Executor;
use oap_store::envelope::{self, RemoteDocument};
use oap_store::{StoreError, Trust};
use serde::Serialize;

use crate::domain::{normalize_domain, DomainError};
use crate::fetch::{fetch_manifest_replacing, manifest_url, FetchLimits, FetchOutcome, Validators};
use crate::lan_refusals::LanRefusals;
use crate::now_ms;
use crate::schedule::{backoff, jittered, AddedBy, DomainState, Schedule, ScheduleSettings};
use crate::sink::CatalogSink;
use crate::txt::{self, TxtResolver};

/// Bytes of a health response read at most.
const HEALTH_BODY_BYTES: usize = 64 * 1024;

fn health_text(doc: &RemoteDocument) -> String {
    match &doc.unhealthy {
        Some(reason) => format!("unhealthy: {reason}"),
        None => "ok (or no health URL)".into(),
    }
}

/// Everything the crawler needs besides the executor.
#[derive(Debug, Clone)]
pub struct CrawlerSettings {
    /// Where envelopes live (the engine's `Source::Remote`).
    pub remote_dir: PathBuf,
    /// The schedule file.
    pub state_path: PathBuf,
    /// Refresh interval, retry backoff and the failure count that removes a manifest.
    pub schedule: ScheduleSettings,
    /// Deadline and body cap of each manifest fetch.
    pub fetch: FetchLimits,
    /// Deadline of one crawl pass; domains not reached stay due.
    pub round_timeout: Duration,
    /// Fetches in flight at once.
    pub concurrency: usize,
    /// Most domains tracked (seeds + registered); more are refused.
    pub max_domains: usize,
    /// Domains fetched between index rebuilds within one pass, at least;
    /// see [`slice_len`].
    pub rebuild_every: usize,
    /// Crawl internet domains (`crawler.enabled`). When false only LAN
    /// targets are crawled and `add_domain` is refused; stored internet
    /// manifests stay indexed but are not refreshed.
    pub internet: bool,
    /// LAN discovery is on (`crawler.mdns`); LAN targets are crawled only then.
    pub lan: bool,
}

impl CrawlerSettings {
    /// Defaults rooted at `state_dir`: envelopes in `crawled/`, the schedule in
    /// `crawl-state.json`; 4 fetches at once, 5-minute passes, at most 10,000 domains,
    /// internet crawling on and LAN discovery off.
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        let state_dir = state_dir.into();
        Self {
            remote_dir: state_dir.join("crawled"),
            state_path: state_dir.join("crawl-state.json"),
            schedule: ScheduleSettings::default(),
            fetch: FetchLimits::default(),
            round_timeout: Duration::from_secs(300),
            concurrency: 4,
            max_domains: 10_000,
            rebuild_every: 256,
            internet: true,
            lan: false,
        }
    }
}

/// Domains to fetch before the next rebuild, with `indexed` manifests in
/// the index: `rebuild_every`, or a quarter of the index once that is more.
/// Every rebuild rewrites the whole index file, so fixed slices would make a
/// big first crawl write quadratically much (40 rewrites of a file growing
/// to ~35 MB for 10k manifests); slices growing with the index keep the
/// total a small multiple of the final size, while the first manifests of a
/// crawl still become discoverable after `rebuild_every` domains.
pub fn slice_len(rebuild_every: usize, indexed: usize) -> usize {
    rebuild_every.max(indexed / 4).max(1)
}

/// What one pass did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CrawlReport {
    /// Domains fetched in this pass (not counting deferred ones).
    pub attempted: usize,
    /// Domains whose manifest was new or changed and was stored.
    pub updated: usize,
    /// Domains that answered 304 or served the stored bytes again.
    pub unchanged: usize,
    /// Domains whose fetch or checks failed (see `errors`).
    pub failed: usize,
    /// Manifests deleted because their domain reached `max_failures` failures in a row.
    pub removed: usize,
    /// Domains left for the next pass because the round deadline passed.
    pub deferred: usize,
    /// `(domain, error)` of every failure.
    pub errors: Vec<(String, String)>,
    /// The index rebuild's report ([`CatalogSink::rebuild`]), when the
    /// index changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rebuild: Option<serde_json::Value>,
    /// Why the index rebuild failed, when it did; the old index keeps serving.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rebuild_error: Option<String>,
}

/// Why a domain could not be added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddError {
    /// The name is not a crawlable domain (IP literal, URL, `.local`, bad syntax).
    #[error(transparent)]
    Domain(#[from] DomainError),
    /// The crawler tracks `crawler.max_domains` domains (the value carried) already.
    #[error("the crawler already tracks {0} domains (crawler.max_domains)")]
    Full(usize),
    /// `crawler.enabled` is false: only LAN targets are crawled.
    #[error("the internet crawler is disabled (crawler.enabled: false); only LAN discovery runs")]
    InternetDisabled,
    /// The LAN target cap (the value carried) is reached.
    #[error("already tracking {0} LAN services (the cap)")]
    LanFull(usize),
    /// Another LAN service already holds this key (the value carried).
    #[error("LAN key {0} is taken by another service")]
    LanKeyTaken(String),
}

enum DomainOutcome {
    Updated(RemoteDocument, Validators),
    /// 304; carries the stored envelope when its health verdict changed.
    NotModified(Option<RemoteDocument>),
    Failed(String),
}

/// The crawler. Share it behind an `Arc`.
pub struct Crawler {
    pub(crate) settings: CrawlerSettings,
    executor: Arc<Executor>,
    txt: Option<Arc<dyn TxtResolver>>,
    schedule: Mutex<Schedule>,
    /// Recent LAN advertisements refused, with why (bounded).
    pub(crate) lan_refusals: LanRefusals,
    /// One pass at a time (the schedule loop, `register`, the CLI).
    pass: tokio::sync::Mutex<()>,
    /// Told the outcome of every fetch (metrics).
    on_fetch: Option<FetchObserver>,
}

/// Told the outcome of every fetch, as one of `not_modified`, `unchanged`,
/// `updated`, `store_failed`, `failed` ([`Crawler::with_fetch_observer`]).
pub type FetchObserver = Arc<dyn Fn(&'static str) + Send + Sync>;

impl Crawler {
    /// A crawler over the schedule stored in `settings.state_path` (a damaged
    /// file is logged and replaced; stored manifests are kept).
    pub fn new(
        settings: CrawlerSettings,
        executor: Arc<Executor>,
        txt: Option<Arc<dyn TxtResolver>>,
    ) -> Self {
        let (schedule, problem) = Schedule::load(&settings.state_path);
        if let Some(problem) = problem {
            tracing::error!(path = %settings.state_path.display(), problem = %problem, "crawl state unreadable, starting afresh");
        }
        Self {
            settings,
            executor,
            txt,
            schedule: Mutex::new(schedule),
            lan_refusals: LanRefusals::default(),
            pass: tokio::sync::Mutex::new(()),
            on_fetch: None,
        }
    }

    /// This crawler, telling `observer` the outcome of every fetch.
    pub fn with_fetch_observer(mut self, observer: FetchObserver) -> Self {
        self.on_fetch = Some(observer);
        self
    }

    fn fetched(&self, outcome: &'static str) {
        if let Some(observer) = &self.on_fetch {
            observer(outcome);
        }
    }

    /// The settings the crawler was built with.
    pub fn settings(&self) -> &CrawlerSettings {
        &self.settings
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Schedule> {
        // A panic while holding the lock leaves plain data behind; keep going.
        self.schedule.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds (or re-activates) a domain; it is due at once. Returns its
    /// normalised name.
    pub fn add_domain(&self, raw: &str, added_by: AddedBy) -> Result<String, AddError> {
        if !self.settings.internet {
            return Err(AddError::InternetDisabled);
        }
        let domain = normalize_domain(raw)?;
        let mut schedule = self.lock();
        let now = now_ms();
        if let Some(state) = schedule.domains.get_mut(&domain) {
            // Registering again asks for a fresh look now; a seed entry keeps
            // its provenance.
            if added_by != AddedBy::Seed {
                state.next_due_ms = state.next_due_ms.min(now);
            }
            return Ok(domain);
        }
        if schedule.domains.len() >= self.settings.max_domains {
            return Err(AddError::Full(self.settings.max_domains));
        }
        let url = manifest_url(&domain);
        schedule.domains.insert(
            domain.clone(),
            DomainState::new(domain.clone(), url, added_by, Trust::Internet, now),
        );
        Ok(domain)
    }

    /// Forgets the seed domains that are no longer in `seeds` (normalised
    /// names, as [`Crawler::add_domain`] returns them) and removes their
    /// stored manifests: an operator who deletes a seed expects its tools to
    /// go. Registered and command-line domains are kept. Returns the
    /// domains dropped; the caller rebuilds the index when any manifest went.
    pub fn retain_seeds(&self, seeds: &[String]) -> Vec<String> {
        let keep: std::collections::HashSet<&str> = seeds.iter().map(String::as_str).collect();
        let mut dropped = Vec::new();
        {
            let mut schedule = self.lock();
            schedule.domains.retain(|domain, state| {
                let stale = state.added_by == AddedBy::Seed && !keep.contains(domain.as_str());
                if stale {
                    dropped.push(domain.clone());
                }
                !stale
            });
        }
        for domain in &dropped {
            match envelope::remove_envelope(&self.settings.remote_dir, domain) {
                Ok(_) => {
                    tracing::info!(%domain, "seed removed from the config; its manifest is gone")
                }
                Err(err) => {
                    tracing::error!(%domain, error = %err, "cannot remove the manifest of a dropped seed")
                }
            }
        }
        if !dropped.is_empty() {
            if let Err(err) = self.save() {
                tracing::error!(error = %err, "cannot save the crawl state");
            }
        }
        dropped
    }

    /// Per-domain state, by name.
    pub fn status(&self) -> Vec<DomainState> {
        self.lock().domains.values().cloned().collect()
    }

    /// Whether the background schedule crawls `state` (internet targets
    /// only with `internet`, LAN targets only with `lan`).
    fn scheduled(&self, state: &DomainState) -> bool {
        match state.trust {
            Trust::Lan => self.settings.lan,
            _ => self.settings.internet,
        }
    }

    /// When the next scheduled domain is due (ms since the epoch).
    pub fn next_due_ms(&self) -> Option<u64> {
        self.lock()
            .domains
            .values()
            .filter(|s| self.scheduled(s))
            .map(|s| s.next_due_ms)
            .min()
    }

    /// Saves the schedule (atomically).
    pub fn save(&self) -> Result<(), StoreError> {
        let snapshot = self.lock().clone();
        snapshot.save(&self.settings.state_path)
    }

    /// Crawls every due domain (or exactly `only`, due or not), stores what
    /// was accepted, rebuilds `catalog` if anything changed, saves the state.
    pub async fn crawl_pass(
        &self,
        only: Option<&[String]>,
        catalog: Option<&Arc<dyn CatalogSink>>,
    ) -> CrawlReport {
        let _pass = self.pass.lock().await;
        let now = now_ms();
        let targets: Vec<DomainState> = {
            let schedule = self.lock();
            let names = match only {
                Some(names) => names.to_vec(),
                None => schedule
                    .due(now)
                    .into_iter()
                    .filter(|n| schedule.domains.get(n).is_some_and(|s| self.scheduled(s)))
                    .collect(),
            };
            names
                .iter()
                .filter_map(|n| schedule.domains.get(n).cloned())
                .collect()
        };
        let mut report = CrawlReport::default();
        let deadline = tokio::time::Instant::now() + self.settings.round_timeout;
        // In slices: each slice's manifests are embedded and become
        // discoverable before the next slice is fetched, instead of after the
        // whole pass (10k new domains would otherwise wait ~25 min on a
        // 2-core board), and a rebuild never holds a whole pass's new
        // vectors in memory.
        let mut rest: &[DomainState] = &targets;
        while !rest.is_empty() {
            let indexed = catalog.map_or(0, |catalog| catalog.indexed());
            let (slice, tail) =
                rest.split_at(slice_len(self.settings.rebuild_every, indexed).min(rest.len()));
            rest = tail;
            let results = stream::iter(slice.iter().cloned())
                .map(|state| async move {
                    let outcome = if tokio::time::Instant::now() >= deadline {
                        None
                    } else {
                        tokio::time::timeout_at(deadline, self.crawl_one(&state))
                            .await
                            .ok()
                    };
                    (state, outcome)
                })
                .buffer_unordered(self.settings.concurrency.max(1))
                .collect::<Vec<_>>()
                .await;
            let mut changed = false;
            for (state, outcome) in results {
                let Some((outcome, hint)) = outcome else {
                    report.deferred += 1;
                    continue;
                };
                report.attempted += 1;
                changed |= self.apply(&state.domain, outcome, hint, &mut report);
            }
            if let Err(err) = self.save() {
                tracing::error!(error = %err, "cannot save the crawl state");
            }
            if changed {
                if let Some(catalog) = catalog {
                    let catalog = Arc::clone(catalog);
                    // Embedding is CPU work: off the async workers, at
                    // background priority (CatalogSink::rebuild). Readers keep
                    // the old snapshot until the new one is swapped in.
                    match tokio::task::spawn_blocking(move || catalog.rebuild()).await {
                        Ok(Ok(build)) => {
                            report.rebuild = Some(build);
                            report.rebuild_error = None;
                        }
                        Ok(Err(err)) => report.rebuild_error = Some(err),
                        Err(err) => report.rebuild_error = Some(err.to_string()),
                    }
                    if let Some(err) = &report.rebuild_error {
                        tracing::error!(error = %err, "index rebuild after crawl failed; the old index keeps serving");
                    }
                }
            }
        }
        tracing::info!(
            attempted = report.attempted,
            updated = report.updated,
            unchanged = report.unchanged,
            failed = report.failed,
            removed = report.removed,
            deferred = report.deferred,
            "crawl pass done"
        );
        report
    }

    async fn crawl_one(&self, state: &DomainState) -> (DomainOutcome, txt::TxtHint) {
        // The TXT hint is a DNS record of an internet domain; a LAN key
        // (`<instance>.local`) is not a DNS name to look up.
        let hint = if state.trust == Trust::Lan {
            txt::TxtHint::NotChecked
        } else {
            txt::check(self.txt.as_deref(), &state.domain).await
        };
        // Validators only while the stored copy exists: a 304 must never
        // stand in for a manifest that is gone.
        let stored = envelope::read_envelope(&self.settings.remote_dir, &state.domain);
        let validators = if stored.is_some() {
            state.validators.clone()
        } else {
            Validators::default()
        };
        // HTTPS is mandatory for internet domains; LAN devices rarely have
        // a certificate, so their targets may be plain HTTP (the address was
        // checked when the advertisement was accepted and is checked again by
        // the executor's lan trust rules).
        let https_only = state.trust != Trust::Lan;
        // The stored copy's schema records make a changed manifest's schema
        // fetches conditional: an unchanged schema costs a 304.
        let result = fetch_manifest_replacing(
            &self.executor,
            &state.url,
            state.trust,
            https_only,
            &validators,
            self.settings.fetch,
            stored.as_ref().map(|doc| doc.body.as_str()),
        )
        .await;
        let outcome = match (result, stored) {
            (Ok(FetchOutcome::NotModified), Some(mut stored)) => {
                let verdict = self.probe_health(&stored).await;
                if verdict == stored.unhealthy {
                    DomainOutcome::NotModified(None)
                } else {
                    stored.unhealthy = verdict;
                    DomainOutcome::NotModified(Some(stored))
                }
            }
            (Ok(FetchOutcome::NotModified), None) => {
                DomainOutcome::Failed("304 Not Modified without a stored copy".into())
            }
            (
                Ok(FetchOutcome::Fetched {
                    body,
                    url,
                    validators,
                }),
                _,
            ) => {
                let mut doc = RemoteDocument {
                    host: state.domain.clone(),
                    url,
                    trust: state.trust,
                    fetched_at_unix: now_ms() / 1000,
                    body,
                    unhealthy: None,
                };
                doc.unhealthy = self.probe_health(&doc).await;
                DomainOutcome::Updated(doc, validators)
            }
            (Err(err), _) => DomainOutcome::Failed(err.to_string()),
        };
        (outcome, hint)
    }

    /// Probes the manifest's `health` URL (same SSRF rules as its tools):
    /// `None` when healthy or when it declares none, else why it is not.
    async fn probe_health(&self, doc: &RemoteDocument) -> Option<String> {
        let manifest = oap_manifest::parse(doc.body.as_bytes()).ok()?.manifest;
        let url = manifest.health.filter(|u| !u.trim().is_empty())?;
        let request = oap_exec::FetchRequest {
            url: url.clone(),
            trust: match doc.trust {
                Trust::Local => oap_exec::Trust::Local,
                Trust::Lan => oap_exec::Trust::Lan,
                Trust::Internet => oap_exec::Trust::Internet,
            },
            headers: Vec::new(),
            max_body_bytes: HEALTH_BODY_BYTES,
            timeout: self.settings.fetch.timeout,
            https_only: false,
            same_host_only: false,
        };
        match self.executor.fetch(&request).await {
            Ok(response) if (200..300).contains(&response.status) => None,
            Ok(response) => Some(format!(
                "health check {url} answered HTTP {}",
                response.status
            )),
            Err(err) => Some(format!("health check failed: {err}")),
        }
    }

    /// Records one outcome; returns whether the stored manifests changed.
    fn apply(
        &self,
        domain: &str,
        outcome: DomainOutcome,
        hint: txt::TxtHint,
        report: &mut CrawlReport,
    ) -> bool {
        let now = now_ms();
        let settings = self.settings.schedule;
        let dir = &self.settings.remote_dir;
        let mut schedule = self.lock();
        let Some(state) = schedule.domains.get_mut(domain) else {
            return false;
        };
        state.last_fetch_ms = Some(now);
        state.txt_hint = hint;
        let mut changed = false;
        let mut forget_lan: Option<(String, String)> = None;
        match outcome {
            DomainOutcome::NotModified(rewrite) => {
                report.unchanged += 1;
                self.fetched("not_modified");
                state.last_result = Some("not modified".into());
                if let Some(doc) = rewrite {
                    state.health = Some(health_text(&doc));
                    match envelope::write_envelope(dir, &doc) {
                        Ok(_) => changed = true,
                        Err(err) => {
                            tracing::error!(%domain, error = %err, "cannot store the health verdict")
                        }
                    }
                }
                state.last_success_ms = Some(now);
                state.consecutive_failures = 0;
                state.removed_reason = None;
                state.next_due_ms =
                    now + jittered(settings.interval, settings.jitter).as_millis() as u64;
            }
            DomainOutcome::Updated(doc, validators) => {
                let hash = oap_manifest::content_hash(doc.body.as_bytes());
                state.health = Some(health_text(&doc));
                let same = state.content_hash.as_deref() == Some(hash.as_str())
                    && envelope::read_envelope(dir, domain)
                        .is_some_and(|d| d.body == doc.body && d.unhealthy == doc.unhealthy);
                if same {
                    report.unchanged += 1;
                    self.fetched("unchanged");
                    state.last_result = Some("unchanged".into());
                } else {
                    match envelope::write_envelope(dir, &doc) {
                        Ok(_) => {
                            changed = true;
                            report.updated += 1;
                            self.fetched("updated");
                            state.last_result = Some("updated".into());
                            state.content_hash = Some(hash);
                            state.manifest_id =
                                oap_manifest::parse(doc.body.as_bytes()).ok().map(|p| {
                                    format!("{domain}/{}", oap_manifest::slug(&p.manifest.name))
                                });
                        }
                        Err(err) => {
                            // Nothing stored changed; try again soon.
                            report.failed += 1;
                            self.fetched("store_failed");
                            let message = format!("cannot store the manifest: {err}");
                            report.errors.push((domain.to_string(), message.clone()));
                            state.last_result = Some(format!("error: {message}"));
                            state.next_due_ms = now + backoff(&settings, 1).as_millis() as u64;
                            return false;
                        }
                    }
                }
                state.validators = validators;
                state.last_success_ms = Some(now);
                state.consecutive_failures = 0;
                state.removed_reason = None;
                state.next_due_ms =
                    now + jittered(settings.interval, settings.jitter).as_millis() as u64;
            }
            DomainOutcome::Failed(message) => {
                report.failed += 1;
                self.fetched("failed");
                report.errors.push((domain.to_string(), message.clone()));
                state.consecutive_failures = state.consecutive_failures.saturating_add(1);
                state.last_result = Some(format!("error: {message}"));
                let delay = jittered(
                    backoff(&settings, state.consecutive_failures),
                    settings.jitter,
                );
                state.next_due_ms = now + delay.as_millis() as u64;
                tracing::warn!(%domain, failures = state.consecutive_failures, error = %message, "crawl failed");
                if state.consecutive_failures >= settings.max_failures
                    && state.removed_reason.is_none()
                {
                    match envelope::remove_envelope(dir, domain) {
                        Ok(existed) => {
                            changed = existed;
                            report.removed += usize::from(existed);
                            state.removed_reason = Some(format!(
                                "removed after {} consecutive failures; last: {message}",
                                state.consecutive_failures
                            ));
                            state.manifest_id = None;
                            state.content_hash = None;
                            state.validators = Validators::default();
                            if state.trust == Trust::Lan {
                                forget_lan = state.mdns_name.clone().map(|name| {
                                    (name, state.removed_reason.clone().unwrap_or_default())
                                });
                            }
                        }
                        Err(err) => {
                            tracing::error!(%domain, error = %err, "cannot remove the manifest");
                        }
                    }
                }
            }
        }
        // A LAN target is tracked only while advertised: once it has failed
        // too often it is dropped (a device that comes back announces
        // itself again), so dead devices never hold one of the capped LAN
        // slots; why stays visible among the LAN refusals.
        if let Some((name, reason)) = forget_lan {
            schedule.domains.remove(domain);
            self.note_lan_refusal(&name, &reason);
        }
        changed
    }

    /// Runs passes whenever a domain is due, until `shutdown` resolves.
    /// `poll` bounds how long a newly registered domain waits.
    pub async fn run(
        self: Arc<Self>,
        catalog: Arc<dyn CatalogSink>,
        poll: Duration,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        loop {
            let now = now_ms();
            let wait = match self.next_due_ms() {
                Some(due) if due <= now => Duration::ZERO,
                Some(due) => Duration::from_millis(due - now).min(poll),
                None => poll,
            };
            tokio::select! {
                _ = &mut shutdown => break,
                _ = tokio::time::sleep(wait) => {}
            }
            if self.next_due_ms().is_some_and(|d| d <= now_ms()) {
                self.crawl_pass(None, Some(&catalog)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::slice_len;

    #[test]
    fn slices_grow_with_the_index_so_rewrites_stay_linear() {
        assert_eq!(slice_len(256, 0), 256);
        assert_eq!(slice_len(256, 1024), 256);
        assert_eq!(slice_len(256, 4000), 1000);
        assert_eq!(slice_len(0, 0), 1);

        // A first crawl of 10k domains: how often the index is rewritten and
        // how many manifests those rewrites write in total.
        let (mut indexed, mut rebuilds, mut written) = (0usize, 0usize, 0usize);
        while indexed < 10_000 {
            indexed = (indexed + slice_len(256, indexed)).min(10_000);
            rebuilds += 1;
            written += indexed;
        }
        assert!(rebuilds <= 20, "{rebuilds} rebuilds");
        assert!(written <= 6 * 10_000, "{written} manifests written");
    }
}
