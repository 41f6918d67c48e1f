//! The last responses of each client, kept so that a Responses API client
//! can continue a conversation with `previous_response_id` instead of
//! sending it whole again.
//!
//! What is kept per response is the conversation up to and including it,
//! in Ollama's message format: the stored conversation it continued, the
//! request's input (its `instructions` excluded: OpenAI does not carry them
//! over to the next response), and the answer the client received. A
//! request naming the id gets that conversation prepended to its input.
//!
//! Memory on a small board is the constraint, so everything is bounded and
//! in memory only (a restart forgets), by `tool_bridge.response_store`: per client at most
//! [`Limits::per_client`] responses and [`Limits::per_client_bytes`], in
//! all [`Limits::total_bytes`] over at most [`Limits::clients`] clients,
//! and nothing older than [`Limits::max_age`]. The oldest go first. A
//! client is its credential (a keyed digest of the `Authorization` header,
//! never the token itself) or else its address, so one client can neither read
//! nor push out another's responses by guessing ids. `store: false` keeps
//! nothing.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::{HeaderMap, Response, StatusCode};
use oap_wire::responses::ResponseStream;
use serde_json::{Map, Value};

use crate::server::bridge::streaming::WireEncoder;
use crate::server::transport::http::{self, Body};

/// The bounds of the store.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Responses kept per client.
    pub per_client: usize,
    /// Bytes (of JSON) kept per client.
    pub per_client_bytes: usize,
    /// Bytes kept in all.
    pub total_bytes: usize,
    /// Clients with responses kept at once.
    pub clients: usize,
    /// Age after which a response is forgotten.
    pub max_age: Duration,
}

impl From<&oap_bridge::ResponseStoreConfig> for Limits {
    fn from(config: &oap_bridge::ResponseStoreConfig) -> Limits {
        Limits {
            per_client: config.per_client,
            per_client_bytes: config.per_client_bytes,
            total_bytes: config.total_bytes,
            clients: config.clients,
            max_age: Duration::from_secs(config.max_age),
        }
    }
}

impl Default for Limits {
    /// `tool_bridge.response_store`'s defaults.
    fn default() -> Limits {
        Limits::from(&oap_bridge::ResponseStoreConfig::default())
    }
}

/// Who a stored response belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ClientKey {
    /// A keyed digest of the request's `Authorization` header.
    Credential(u128),
    /// The peer address, when the request carries no credential.
    Address(IpAddr),
    /// Neither is known (not on a real listener).
    Unknown,
}

impl ClientKey {
    /// The key of a request, from its headers and peer address.
    pub fn of(headers: &HeaderMap, peer: Option<IpAddr>) -> ClientKey {
        if let Some(credential) = headers.get(hyper::header::AUTHORIZATION) {
            return ClientKey::Credential(credential_digest(credential.as_bytes()));
        }
        match peer {
            Some(ip) => ClientKey::Address(ip.to_canonical()),
            None => ClientKey::Unknown,
        }
    }
}

/// 128 bits of two SipHash digests under keys drawn at process start: the
/// token itself is not kept, and without the keys nobody can make another
/// credential land on the same client.
fn credential_digest(credential: &[u8]) -> u128 {
    use std::hash::BuildHasher;
    static KEYS: OnceLock<(std::hash::RandomState, std::hash::RandomState)> = OnceLock::new();
    let (first, second) =
        KEYS.get_or_init(|| (std::hash::RandomState::new(), std::hash::RandomState::new()));
    (u128::from(first.hash_one(credential)) << 64) | u128::from(second.hash_one(credential))
}

struct Stored {
    id: String,
    conversation: Vec<Value>,
    bytes: usize,
    at: Instant,
}

#[derive(Default)]
struct Inner {
    by_client: HashMap<ClientKey, VecDeque<Stored>>,
    bytes: usize,
    /// Here rather than beside the lock: a reload changes them.
    limits: Limits,
}

/// The store (one per process: [`ResponseStore::shared`]).
pub struct ResponseStore {
    inner: Mutex<Inner>,
}

impl ResponseStore {
    /// An empty store with `limits`.
    pub fn new(limits: Limits) -> ResponseStore {
        ResponseStore {
            inner: Mutex::new(Inner {
                limits,
                ..Inner::default()
            }),
        }
    }

    /// Sets the limits (`tool_bridge.response_store`, at start and on each
    /// reload). What is kept stays; the next response stored or looked up
    /// is held to the new ones.
    pub fn set_limits(&self, limits: Limits) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.limits = limits;
        }
    }

    /// The process's store. Process-wide rather than per handler, so a
    /// config reload does not forget the conversations in progress.
    pub fn shared() -> &'static ResponseStore {
        static STORE: OnceLock<ResponseStore> = OnceLock::new();
        STORE.get_or_init(|| ResponseStore::new(Limits::default()))
    }

    /// The conversation up to response `id` of `client`, if it is kept
    /// and not older than the age limit.
    pub fn get(&self, client: &ClientKey, id: &str, now: Instant) -> Option<Vec<Value>> {
        let mut inner = self.inner.lock().ok()?;
        self.expire(&mut inner, now);
        inner
            .by_client
            .get(client)?
            .iter()
            .find(|stored| stored.id == id)
            .map(|stored| stored.conversation.clone())
    }

    /// Keeps `conversation` (up to and including response `id`) for
    /// `client`, pushing out the oldest responses beyond the limits. A
    /// conversation larger than a client's share is not kept.
    pub fn put(&self, client: ClientKey, id: String, conversation: Vec<Value>, now: Instant) {
        let bytes = serde_json::to_vec(&conversation).map_or(usize::MAX, |json| json.len());
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let limits = inner.limits;
        if bytes > limits.per_client_bytes.min(limits.total_bytes) {
            tracing::debug!(
                bytes,
                "a response's conversation is larger than the store keeps per client"
            );
            return;
        }
        self.expire(&mut inner, now);
        if !inner.by_client.contains_key(&client) && inner.by_client.len() >= limits.clients {
            // Make room: the client whose newest response is oldest goes.
            let stalest = inner
                .by_client
                .iter()
                .min_by_key(|(_, kept)| kept.back().map(|s| s.at))
                .map(|(key, _)| key.clone());
            if let Some(key) = stalest {
                if let Some(kept) = inner.by_client.remove(&key) {
                    inner.bytes -= kept.iter().map(|s| s.bytes).sum::<usize>();
                }
            }
        }
        let mut freed = 0;
        let kept = inner.by_client.entry(client).or_default();
        kept.push_back(Stored {
            id,
            conversation,
            bytes,
            at: now,
        });
        let mut client_bytes: usize = kept.iter().map(|s| s.bytes).sum();
        while kept.len() > limits.per_client || client_bytes > limits.per_client_bytes {
            let Some(oldest) = kept.pop_front() else {
                break;
            };
            client_bytes -= oldest.bytes;
            freed += oldest.bytes;
        }
        inner.bytes = inner.bytes + bytes - freed;
        while inner.bytes > limits.total_bytes {
            let oldest = inner
                .by_client
                .iter()
                .filter_map(|(key, kept)| kept.front().map(|s| (s.at, key.clone())))
                .min_by_key(|(at, _)| *at)
                .map(|(_, key)| key);
            let Some(key) = oldest else { break };
            let removed = inner
                .by_client
                .get_mut(&key)
                .and_then(VecDeque::pop_front)
                .map_or(0, |s| s.bytes);
            inner.bytes -= removed;
            inner.by_client.retain(|_, kept| !kept.is_empty());
        }
    }

    /// Forgets what is older than the age limit.
    fn expire(&self, inner: &mut Inner, now: Instant) {
        let mut freed = 0;
        let max_age = inner.limits.max_age;
        for kept in inner.by_client.values_mut() {
            while kept
                .front()
                .is_some_and(|s| now.saturating_duration_since(s.at) > max_age)
            {
                freed += kept.pop_front().map_or(0, |s| s.bytes);
            }
        }
        inner.bytes -= freed;
        inner.by_client.retain(|_, kept| !kept.is_empty());
    }
}

/// Where one `/v1/responses` request stands with the store: the client,
/// whether to keep the response, and the conversation up to its answer.
pub struct Record {
    client: ClientKey,
    store: bool,
    conversation: Vec<Value>,
}

fn refused(status: StatusCode, field: &str, code: &str, message: &str) -> Box<Response<Body>> {
    let mut body = oap_wire::openai::openai_error(status.as_u16(), message);
    body["error"]["type"] = Value::from("invalid_request_error");
    body["error"]["param"] = Value::from(field);
    body["error"]["code"] = Value::from(code);
    Box::new(http::json(status, &body))
}

impl Record {
    /// Reads the request's `previous_response_id` and `store`: the
    /// conversation it continues (404 in OpenAI's shape when the id is not
    /// kept for this client: unknown, expired or pushed out), or 400 for a
    /// field of the wrong type.
    pub fn read(original: &Value, client: ClientKey) -> Result<Record, Box<Response<Body>>> {
        let store = match original.get("store") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(store)) => *store,
            Some(other) => {
                return Err(refused(
                    StatusCode::BAD_REQUEST,
                    "store",
                    "invalid_type",
                    &format!("store: expected true or false, got {other}"),
                ))
            }
        };
        let field = "previous_response_id";
        let conversation = match original.get(field) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(id)) => ResponseStore::shared()
                .get(&client, id, Instant::now())
                .ok_or_else(|| {
                    refused(
                        StatusCode::NOT_FOUND,
                        field,
                        "previous_response_not_found",
                        &format!(
                            "Previous response with id '{id}' not found: oapd keeps a client's \
                             last responses in memory for a limited time; send the whole \
                             conversation in input instead"
                        ),
                    )
                })?,
            Some(other) => {
                return Err(refused(
                    StatusCode::BAD_REQUEST,
                    field,
                    "invalid_type",
                    &format!("{field}: expected a response id string, got {other}"),
                ))
            }
        };
        Ok(Record {
            client,
            store,
            conversation,
        })
    }

    /// Puts the continued conversation into the translated request, after
    /// the request's own `instructions` (the continued response's are not
    /// carried over) and before its input; remembers the input.
    pub fn continue_in(&mut self, original: &Value, request: &mut Map<String, Value>) {
        let Some(Value::Array(messages)) = request.get_mut("messages") else {
            return;
        };
        let has_instructions = original.get("instructions").is_some_and(|v| !v.is_null());
        let at = usize::from(has_instructions).min(messages.len());
        let input: Vec<Value> = messages.get(at..).unwrap_or_default().to_vec();
        messages.splice(at..at, self.conversation.iter().cloned());
        if self.store {
            self.conversation.extend(input);
        }
    }

    /// Keeps response `id`'s conversation, its answer (an Ollama message)
    /// appended, unless the request said `store: false`.
    pub fn finish(mut self, id: &str, answer: Value) {
        if !self.store {
            return;
        }
        self.conversation.push(answer);
        ResponseStore::shared().put(
            self.client,
            id.to_string(),
            self.conversation,
            Instant::now(),
        );
    }
}

/// The assistant message a client received, from the loop's aggregated
/// answer: its text, thinking and the calls handed back.
fn answer_message(answer: &Value) -> Value {
    let message = answer.get("message").unwrap_or(&Value::Null);
    let mut out = Map::new();
    out.insert("role".into(), Value::from("assistant"));
    for key in ["content", "thinking", "tool_calls"] {
        if let Some(value) = message.get(key).filter(|v| !v.is_null()) {
            out.insert(key.into(), value.clone());
        }
    }
    out.entry("content").or_insert_with(|| Value::from(""));
    Value::Object(out)
}

/// [`Record::finish`] for a whole answer.
pub fn keep_answer(record: Record, id: &str, answer: &Value) {
    record.finish(id, answer_message(answer));
}

/// A streamed response that keeps what it streamed: the Responses events
/// as [`ResponseStream`] writes them, and at the final chunk the answer
/// into the store.
pub struct Recording {
    stream: ResponseStream,
    id: String,
    record: Option<Record>,
    chunks: Vec<Value>,
}

impl Recording {
    /// Wraps `stream` of response `id`, keeping its answer as `record` says.
    pub fn new(stream: ResponseStream, id: String, record: Record) -> Recording {
        Recording {
            stream,
            id,
            record: Some(record),
            chunks: Vec::new(),
        }
    }

    fn remember(&mut self, chunk: &Value) {
        if self.record.as_ref().is_none_or(|record| !record.store) {
            return;
        }
        // Only what the answer message is made of; metrics are dropped.
        let done = chunk.get("done").and_then(Value::as_bool) == Some(true);
        let message = chunk.get("message").cloned().unwrap_or(Value::Null);
        self.chunks
            .push(serde_json::json!({"message": message, "done": done}));
        if done {
            let chunks = std::mem::take(&mut self.chunks);
            if let (Some(record), Ok(answer)) = (
                self.record.take(),
                oap_bridge::tool_loop::aggregate(&chunks),
            ) {
                keep_answer(record, &self.id, &answer);
            }
        }
    }
}

impl WireEncoder for Recording {
    const CONTENT_TYPE: &'static str = "text/event-stream";
    fn chunk(&mut self, chunk: &Value) -> Bytes {
        self.remember(chunk);
        WireEncoder::chunk(&mut self.stream, chunk)
    }
    fn error(&mut self, message: &str) -> Bytes {
        // A failed response is not kept.
        self.record = None;
        WireEncoder::error(&mut self.stream, message)
    }
    fn finish(&mut self) -> Bytes {
        WireEncoder::finish(&mut self.stream)
    }
    fn is_finished(&self) -> bool {
        WireEncoder::is_finished(&self.stream)
    }
    fn keepalive(&self) -> Bytes {
        WireEncoder::keepalive(&self.stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn client(n: u8) -> ClientKey {
        ClientKey::Address(IpAddr::from([127, 0, 0, n]))
    }

    fn turn(text: &str) -> Vec<Value> {
        vec![json!({"role": "user", "content": text})]
    }

    #[test]
    fn a_response_is_found_by_its_client_only_until_it_expires() {
        let store = ResponseStore::new(Limits::default());
        let start = Instant::now();
        store.put(client(1), "resp_a".into(), turn("hi"), start);
        assert_eq!(store.get(&client(1), "resp_a", start), Some(turn("hi")));
        assert_eq!(
            store.get(&client(2), "resp_a", start),
            None,
            "another client's"
        );
        assert_eq!(store.get(&client(1), "resp_b", start), None);
        let later = start + Duration::from_secs(3599);
        assert!(store.get(&client(1), "resp_a", later).is_some());
        let expired = start + Duration::from_secs(3601);
        assert_eq!(store.get(&client(1), "resp_a", expired), None);
        assert_eq!(store.inner.lock().unwrap().bytes, 0, "its bytes are freed");
    }

    #[test]
    fn the_oldest_go_when_a_client_keeps_too_many_or_too_much() {
        let limits = Limits {
            per_client: 2,
            per_client_bytes: 100,
            ..Limits::default()
        };
        let store = ResponseStore::new(limits);
        let now = Instant::now();
        for id in ["r1", "r2", "r3"] {
            store.put(client(1), id.into(), turn(id), now);
        }
        assert!(store.get(&client(1), "r1", now).is_none());
        assert!(store.get(&client(1), "r3", now).is_some());
        // 60 bytes of text: two do not fit in 100.
        store.put(client(1), "big".into(), turn(&"x".repeat(60)), now);
        assert!(store.get(&client(1), "r3", now).is_none());
        assert!(store.get(&client(1), "big", now).is_some());
        // Larger than a client's share: not kept at all.
        store.put(client(1), "huge".into(), turn(&"x".repeat(200)), now);
        assert!(store.get(&client(1), "huge", now).is_none());
        assert!(store.get(&client(1), "big", now).is_some());
    }

    #[test]
    fn the_total_and_the_number_of_clients_are_bounded() {
        let limits = Limits {
            total_bytes: 150,
            clients: 2,
            ..Limits::default()
        };
        let store = ResponseStore::new(limits);
        let now = Instant::now();
        store.put(client(1), "a".into(), turn(&"x".repeat(60)), now);
        store.put(
            client(2),
            "b".into(),
            turn(&"y".repeat(60)),
            now + Duration::from_secs(1),
        );
        // Over the total: the oldest response of any client goes.
        assert!(store.get(&client(1), "a", now).is_none());
        assert!(store.get(&client(2), "b", now).is_some());
        store.put(
            client(3),
            "c".into(),
            turn("z"),
            now + Duration::from_secs(2),
        );
        store.put(
            client(4),
            "d".into(),
            turn("w"),
            now + Duration::from_secs(3),
        );
        let inner = store.inner.lock().unwrap();
        assert!(inner.by_client.len() <= 2);
        assert!(inner.bytes <= 150);
    }

    #[test]
    fn clients_are_their_credential_or_their_address() {
        let mut headers = HeaderMap::new();
        let peer = Some(IpAddr::from([127, 0, 0, 1]));
        assert_eq!(ClientKey::of(&headers, peer), client(1));
        headers.insert(hyper::header::AUTHORIZATION, "Bearer one".parse().unwrap());
        let one = ClientKey::of(&headers, peer);
        headers.insert(hyper::header::AUTHORIZATION, "Bearer two".parse().unwrap());
        assert_ne!(one, ClientKey::of(&headers, peer));
        assert!(matches!(one, ClientKey::Credential(_)));
    }
}
