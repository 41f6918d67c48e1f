//! What the daemon tells about the requests it serves: request ids, the
//! observation hook of the tool loop (metrics of rounds and tool calls),
//! and the ring of recent bridged requests behind `GET /v1/requests`.
//!
//! The ring holds no message content, arguments or results: names,
//! outcomes and times only. A request made with a `server.clients` token
//! carries the client's name, never its token. With `server.log_content: true` an entry also
//! carries `messages_preview`, the request's messages cut to 512
//! characters.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::future::BoxFuture;
use hyper::header::HeaderMap;
use oap_bridge::hooks::{CallReport, Hook, RoundOutcome, RoundStart};
use oap_bridge::{Event, RequestCtx};
use serde::Serialize;
use serde_json::{Map, Value};

/// Longest `X-Request-Id` taken from a client.
pub const MAX_REQUEST_ID_BYTES: usize = 128;
/// Most entries `server.recent_requests` may keep.
pub use crate::config::MAX_RECENT_REQUESTS;
/// Characters of `messages_preview` (with `server.log_content`).
pub const PREVIEW_CHARS: usize = 512;

/// The request being served: its id, route and start (a task local of the
/// request's task, set by the server shell).
#[derive(Debug, Clone)]
pub struct RequestInfo {
    /// The request id (`X-Request-Id`).
    pub id: Arc<str>,
    /// The route table's name of its route.
    pub route: &'static str,
    /// When its head was read.
    pub started: Instant,
    /// The same, as milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// The `server.clients` name it was made with, once the router has
    /// told who is calling ([`set_client`]).
    pub client: Arc<OnceLock<Arc<str>>>,
}

tokio::task_local! {
    static REQUEST: RequestInfo;
}

impl RequestInfo {
    /// A request starting now, with the id the client sent when it is
    /// usable (printable ASCII, at most [`MAX_REQUEST_ID_BYTES`]), else a
    /// new one.
    pub fn start(headers: &HeaderMap, route: &'static str) -> RequestInfo {
        let id = headers
            .get("x-request-id")
            .map(|value| value.as_bytes())
            .filter(|id| usable_request_id(id))
            .and_then(|id| std::str::from_utf8(id).ok())
            .map_or_else(new_request_id, Arc::from);
        RequestInfo {
            id,
            route,
            started: Instant::now(),
            started_unix_ms: unix_ms(),
            client: Arc::new(OnceLock::new()),
        }
    }

    /// Runs `future` as this request (its task local).
    pub async fn scope<F: std::future::Future>(self, future: F) -> F::Output {
        REQUEST.scope(self, future).await
    }

    /// The request the current task serves, if any.
    pub fn current() -> Option<RequestInfo> {
        REQUEST.try_with(Clone::clone).ok()
    }
}

/// Notes that the current request comes from the `server.clients` entry
/// `name` (for its record in `/v1/requests`); outside a request, nothing.
pub fn set_client(name: &Arc<str>) {
    let _ = REQUEST.try_with(|info| info.client.set(name.clone()));
}

/// Whether a client's request id can be used as it is.
fn usable_request_id(id: &[u8]) -> bool {
    !id.is_empty()
        && id.len() <= MAX_REQUEST_ID_BYTES
        && id.iter().all(|b| (0x21..=0x7e).contains(b))
}

/// 16 hex characters, unique within the process: a counter mixed with a
/// nonce drawn at start (splitmix64 is a bijection, so distinct counters
/// give distinct ids) — unpredictable enough to tell requests apart in
/// logs, not a secret.
pub(crate) fn new_request_id() -> Arc<str> {
    static NONCE: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nonce = *NONCE.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos(),
        );
        hasher.write_u32(std::process::id());
        hasher.finish()
    });
    let mut z = nonce.wrapping_add(
        COUNTER
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15),
    );
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    Arc::from(format!("{z:016x}"))
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn millis(duration: Duration) -> f64 {
    (duration.as_secs_f64() * 10_000.0).round() / 10.0
}

/// One bridged request, as `GET /v1/requests` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct RequestRecord {
    /// Its request id.
    pub id: String,
    /// Its route (`/api/chat`, `/v1/chat`, `/v1/chat/completions`, `/v1/responses`).
    pub route: &'static str,
    /// The model asked.
    pub model: String,
    /// When it started.
    pub started_unix_ms: u64,
    /// How long it took, milliseconds.
    pub duration_ms: f64,
    /// The HTTP status (499: the client went away before the answer ended).
    pub status: u16,
    /// The `server.clients` name it was made with; absent for the operator
    /// and for callers without a token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// The names of oapd's tools offered.
    pub tools_injected: Vec<String>,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// Its model rounds.
    pub rounds: Vec<RoundRecord>,
    /// The messages, cut short; only with `server.log_content: true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages_preview: Option<String>,
}

/// One model round of a bridged request.
#[derive(Debug, Clone, Serialize)]
pub struct RoundRecord {
    /// 1 for the first.
    pub number: u32,
    /// From the round's request to its last call's end, milliseconds.
    pub duration_ms: f64,
    /// The calls the model made in it.
    pub calls: Vec<CallRecord>,
    #[serde(skip)]
    started: Option<Instant>,
}

/// One call of a round.
#[derive(Debug, Clone, Serialize)]
pub struct CallRecord {
    /// The tool's name.
    pub name: String,
    /// `ok`, `error`, `timeout`, `refused` or `client` (handed back).
    pub outcome: &'static str,
    /// How long it ran, milliseconds (0 for a call handed back).
    pub duration_ms: f64,
}

/// The recent bridged requests, newest first, at most
/// `server.recent_requests` of them (0: none kept).
#[derive(Debug, Default)]
pub struct Recent {
    capacity: AtomicUsize,
    log_content: AtomicBool,
    entries: Mutex<VecDeque<RequestRecord>>,
}

/// The daemon's one ring (it outlives handler generations).
pub fn recent() -> &'static Recent {
    static RECENT: OnceLock<Recent> = OnceLock::new();
    RECENT.get_or_init(Recent::default)
}

impl Recent {
    /// Applies `server.recent_requests` and `server.log_content` (at start
    /// and on reload); a smaller capacity drops the oldest entries.
    pub fn configure(&self, capacity: usize, log_content: bool) {
        let capacity = capacity.min(MAX_RECENT_REQUESTS);
        self.capacity.store(capacity, Ordering::Relaxed);
        self.log_content.store(log_content, Ordering::Relaxed);
        self.lock().truncate(capacity);
    }

    /// Whether requests are kept at all.
    pub fn enabled(&self) -> bool {
        self.capacity.load(Ordering::Relaxed) > 0
    }

    /// Whether `server.log_content` is on.
    pub fn log_content(&self) -> bool {
        self.log_content.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<RequestRecord>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, record: RequestRecord) {
        let capacity = self.capacity.load(Ordering::Relaxed);
        if capacity == 0 {
            return;
        }
        let mut entries = self.lock();
        entries.push_front(record);
        entries.truncate(capacity);
    }

    /// `{"requests": [...]}`, newest first.
    pub fn json(&self) -> Value {
        let entries: Vec<RequestRecord> = self.lock().iter().cloned().collect();
        serde_json::json!({ "requests": entries })
    }
}

/// The observation hook of one bridged request: times its rounds and
/// calls for the metrics, and leaves its record in the ring when the
/// request is over (when the loop drops its hooks).
///
/// Its state is plain fields: the loop builds the hooks per request and
/// lends each one `&mut self` in every phase, so nothing here is shared.
pub struct Observer {
    progress: Progress,
    started: Instant,
}

struct Progress {
    record: RequestRecord,
    /// Names that may be metric labels: the injected tools' and the meta tools'.
    known: HashSet<String>,
    auto_execute: bool,
    /// A chunk went to the client (a later error does not change the status).
    answered: bool,
    done: bool,
    failed: Option<u16>,
}

impl Observer {
    /// The hook of a request for `model` offering `tools` (their names),
    /// with `chat` (for the preview, only with `server.log_content`).
    pub fn new(model: &str, tools: Vec<String>, chat: &Map<String, Value>) -> Observer {
        let request = RequestInfo::current();
        let preview = recent()
            .log_content()
            .then(|| chat.get("messages").map(Value::to_string))
            .flatten()
            .map(|text| text.chars().take(PREVIEW_CHARS).collect());
        let mut known: HashSet<String> = tools.iter().cloned().collect();
        known.insert(oap_bridge::meta::DISCOVER.to_string());
        known.insert(oap_bridge::meta::INVOKE.to_string());
        let started = request
            .as_ref()
            .map_or_else(Instant::now, |info| info.started);
        let record = RequestRecord {
            id: request
                .as_ref()
                .map(|info| info.id.to_string())
                .unwrap_or_default(),
            route: request.as_ref().map_or("other", |info| info.route),
            model: model.to_string(),
            started_unix_ms: request
                .as_ref()
                .map_or_else(unix_ms, |info| info.started_unix_ms),
            duration_ms: 0.0,
            status: 200,
            client: request
                .as_ref()
                .and_then(|info| info.client.get())
                .map(|name| name.to_string()),
            tools_injected: tools,
            error: None,
            rounds: Vec::new(),
            messages_preview: preview,
        };
        Observer {
            progress: Progress {
                record,
                known,
                auto_execute: true,
                answered: false,
                done: false,
                failed: None,
            },
            started,
        }
    }
}

impl Progress {
    /// A metric label for `name`: the name of an indexed tool, else `other`.
    fn label<'a>(&self, name: &'a str) -> &'a str {
        if self.known.contains(name) {
            name
        } else {
            "other"
        }
    }

    fn round(&mut self, number: u32) -> Option<&mut RoundRecord> {
        self.record
            .rounds
            .iter_mut()
            .rev()
            .find(|round| round.number == number)
    }

    fn handed_back(&mut self, number: u32, names: Vec<String>) {
        let metrics = crate::metrics::get();
        for name in &names {
            metrics.tool_call(self.label(name), "client", None);
        }
        if let Some(round) = self.round(number) {
            round.calls.extend(names.into_iter().map(|name| CallRecord {
                name,
                outcome: "client",
                duration_ms: 0.0,
            }));
        }
    }
}

impl Hook for Observer {
    fn tools_withdrawn(&mut self, _cx: &mut RequestCtx) {
        // The model takes no tools: the request goes on as it came.
        self.progress.record.tools_injected.clear();
    }

    fn holds_round(&mut self, _cx: &mut RequestCtx, round: &RoundStart) -> bool {
        let progress = &mut self.progress;
        progress.auto_execute = round.auto_execute;
        // A request started again without oapd's tools counts its
        // rounds from 1 again.
        progress.record.rounds.retain(|r| r.number < round.number);
        progress.record.rounds.push(RoundRecord {
            number: round.number,
            duration_ms: 0.0,
            calls: Vec::new(),
            started: Some(Instant::now()),
        });
        false
    }

    fn after_round<'a>(
        &'a mut self,
        _cx: &'a mut RequestCtx,
        round: &'a mut RoundOutcome,
    ) -> BoxFuture<'a, ()> {
        let progress = &mut self.progress;
        let mut handed: Vec<String> = round.theirs.iter().map(|c| c.name.clone()).collect();
        if !progress.auto_execute {
            handed.extend(round.ours.iter().map(|c| c.name.clone()));
        }
        if let Some(record) = progress.round(round.number) {
            if let Some(started) = record.started {
                record.duration_ms = millis(started.elapsed());
            }
        }
        progress.handed_back(round.number, handed);
        Box::pin(async {})
    }

    fn call_finished(&mut self, _cx: &mut RequestCtx, report: &CallReport<'_>) {
        let outcome = report.result.outcome();
        let progress = &mut self.progress;
        crate::metrics::get().tool_call(progress.label(report.name), outcome, Some(report.elapsed));
        if let Some(round) = progress.round(report.round) {
            round.calls.push(CallRecord {
                name: report.name.to_string(),
                outcome,
                duration_ms: millis(report.elapsed),
            });
            if let Some(started) = round.started {
                round.duration_ms = millis(started.elapsed());
            }
        }
    }

    /// Sees what the client gets: the final chunk, or the error that
    /// ended the request (its status when nothing went out before it).
    fn output(&mut self, _cx: &RequestCtx, event: Event) -> Vec<Event> {
        let progress = &mut self.progress;
        match &event {
            Event::Chunk(chunk) => {
                progress.answered = true;
                if chunk.get("done").and_then(Value::as_bool) == Some(true) {
                    progress.done = true;
                }
            }
            Event::Error { status, message } => {
                if !progress.answered && progress.failed.is_none() {
                    progress.failed = Some(status.as_u16());
                }
                progress.record.error = Some(message.clone());
            }
        }
        vec![event]
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        let progress = &self.progress;
        let mut record = progress.record.clone();
        record.duration_ms = millis(self.started.elapsed());
        record.status = match progress.failed {
            Some(status) => status,
            None if progress.done || progress.answered => 200,
            None => {
                record
                    .error
                    .get_or_insert_with(|| "the client went away before the answer".into());
                499
            }
        };
        let rounds = u32::try_from(record.rounds.len()).unwrap_or(u32::MAX);
        crate::metrics::get().chat(record.tools_injected.len(), rounds);
        recent().push(record);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ids_are_taken_only_when_printable_and_short() {
        assert!(usable_request_id(b"abc-123_XYZ.:/"));
        assert!(usable_request_id(&[b'a'; MAX_REQUEST_ID_BYTES]));
        assert!(!usable_request_id(&[b'a'; MAX_REQUEST_ID_BYTES + 1]));
        assert!(!usable_request_id(b""));
        assert!(!usable_request_id(b"with space"));
        assert!(!usable_request_id(b"tab\there"));
        assert!(!usable_request_id("caf\u{e9}".as_bytes()));
    }

    #[test]
    fn generated_ids_are_16_hex_characters_and_distinct() {
        let ids: HashSet<Arc<str>> = (0..10_000).map(|_| new_request_id()).collect();
        assert_eq!(ids.len(), 10_000);
        assert!(ids
            .iter()
            .all(|id| id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit())));
    }
}
