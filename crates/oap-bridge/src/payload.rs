//! Chat request bodies without copies.
//!
//! A chat body is mostly its images: base64 strings of megabytes in
//! `messages[].images`. Parsed the ordinary way, every image exists as the
//! received bytes, a `String` in the parsed tree, every clone of the
//! messages the loop makes, and the serialised upstream request — four or
//! five times its size. Here:
//! - [`parse_chat`] parses the body into the usual JSON map but leaves each
//!   image where it is: the tree gets a short placeholder and the image
//!   stays a slice of the received bytes ([`Images`]);
//! - [`encode_object`] writes an upstream request as a list of byte chunks,
//!   the images being those same slices, so no image is copied again;
//! - [`PartsBody`] sends such a list (with an exact `Content-Length`) and
//!   keeps the request's body-budget share until the upstream has it all.
//!
//! So an image is in memory once, from the first byte read until the last
//! round of the loop is over.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Something a request keeps alive until its body has been sent: the
/// daemon puts its body-budget share here, which the bridge only holds.
pub struct Hold {
    _held: Box<dyn Send + Sync>,
}

impl Hold {
    /// Wraps anything the request must keep alive (a body-budget permit).
    pub fn new(held: impl Send + Sync + 'static) -> Hold {
        Hold {
            _held: Box::new(held),
        }
    }
}

impl fmt::Debug for Hold {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("Hold")
    }
}

/// Placeholders start with a NUL character, which no base64 image has.
const PLACEHOLDER: &str = "\u{0}oapd:image:";

/// The images of one chat request, each the JSON string literal (quotes
/// included) as received.
#[derive(Debug, Default, Clone)]
pub struct Images {
    literals: Vec<Bytes>,
}

impl Images {
    /// Number of images in the request.
    pub fn len(&self) -> usize {
        self.literals.len()
    }

    /// True when the request carried no image.
    pub fn is_empty(&self) -> bool {
        self.literals.is_empty()
    }

    /// Bytes of all images together.
    pub fn bytes(&self) -> usize {
        self.literals.iter().map(Bytes::len).sum()
    }

    /// The literal (JSON string, quotes included) a placeholder stands
    /// for; `None` for any other value.
    pub(crate) fn literal(&self, value: &Value) -> Option<&Bytes> {
        self.lookup(value)
    }

    /// The literal a placeholder stands for.
    fn lookup(&self, value: &Value) -> Option<&Bytes> {
        let index = value.as_str()?.strip_prefix(PLACEHOLDER)?;
        self.literals.get(index.parse::<usize>().ok()?)
    }
}

/// What a chat request keeps alive next to its parsed fields: its images
/// and its share of the body budget. Dropped when the loop ends.
#[derive(Debug, Default)]
pub struct Held {
    /// The image literals the parsed body's placeholders stand for.
    pub images: Images,
    /// The request's share of the daemon's body budget, released on drop.
    pub permit: Option<Hold>,
}

/// Why a chat body was refused.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// The body is valid JSON but not an object; the client gets a 400.
    #[error("request body must be a JSON object")]
    NotObject,
    /// The body is not valid JSON; the client gets a 400 naming the error.
    #[error("invalid JSON: {0}")]
    Invalid(serde_json::Error),
}

/// Parses an Ollama chat body, leaving the strings of `messages[].images`
/// in `body` (see the module docs).
pub fn parse_chat(body: &Bytes) -> Result<(Map<String, Value>, Images), ParseError> {
    let starts_object = body
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'{');
    if !starts_object {
        return match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
            Ok(_) => Err(ParseError::NotObject),
            Err(err) => Err(ParseError::Invalid(err)),
        };
    }
    let mut found: Vec<ImageText<'_>> = Vec::new();
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let chat = TopSeed { images: &mut found }
        .deserialize(&mut deserializer)
        .and_then(|chat| deserializer.end().map(|()| chat))
        .map_err(ParseError::Invalid)?;
    let literals = found
        .into_iter()
        .map(|text| match text {
            ImageText::Borrowed(text) => literal_in(body, text),
            ImageText::Owned(text) => literal_of(&text),
        })
        .collect();
    Ok((chat, Images { literals }))
}

/// The quoted literal around `text`, a string borrowed from `body` that
/// had no escapes: a slice of `body`, not a copy.
fn literal_in(body: &Bytes, text: &str) -> Bytes {
    let base = body.as_ptr() as usize;
    let at = text.as_ptr() as usize;
    if at > base && at + text.len() < base + body.len() {
        let start = at - base - 1;
        let end = at - base + text.len() + 1;
        if body[start] == b'"' && body[end - 1] == b'"' {
            return body.slice(start..end);
        }
    }
    literal_of(text)
}

fn literal_of(text: &str) -> Bytes {
    Bytes::from(serde_json::to_vec(text).unwrap_or_else(|_| b"\"\"".to_vec()))
}

fn placeholder(index: usize) -> Value {
    Value::String(format!("{PLACEHOLDER}{index}"))
}

/// An image string: borrowed from the body when it had no escapes.
enum ImageText<'de> {
    Borrowed(&'de str),
    Owned(String),
}

struct TopSeed<'a, 'de> {
    images: &'a mut Vec<ImageText<'de>>,
}

impl<'de> DeserializeSeed<'de> for TopSeed<'_, 'de> {
    type Value = Map<String, Value>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for TopSeed<'_, 'de> {
    type Value = Map<String, Value>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut chat = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = if key == "messages" {
                map.next_value_seed(MessagesSeed {
                    images: &mut *self.images,
                })?
            } else {
                map.next_value::<Value>()?
            };
            chat.insert(key, value);
        }
        Ok(chat)
    }
}

struct MessagesSeed<'a, 'de> {
    images: &'a mut Vec<ImageText<'de>>,
}

impl<'de> DeserializeSeed<'de> for MessagesSeed<'_, 'de> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for MessagesSeed<'_, 'de> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("messages: an array of message objects")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut messages = Vec::new();
        while let Some(message) = seq.next_element_seed(MessageSeed {
            images: &mut *self.images,
        })? {
            messages.push(message);
        }
        Ok(Value::Array(messages))
    }
}

struct MessageSeed<'a, 'de> {
    images: &'a mut Vec<ImageText<'de>>,
}

impl<'de> DeserializeSeed<'de> for MessageSeed<'_, 'de> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for MessageSeed<'_, 'de> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a message object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut message = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = if key == "images" {
                map.next_value_seed(ImagesSeed {
                    images: &mut *self.images,
                })?
            } else {
                map.next_value::<Value>()?
            };
            message.insert(key, value);
        }
        Ok(Value::Object(message))
    }
}

struct ImagesSeed<'a, 'de> {
    images: &'a mut Vec<ImageText<'de>>,
}

impl<'de> DeserializeSeed<'de> for ImagesSeed<'_, 'de> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ImagesSeed<'_, 'de> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("images: an array of base64 strings")
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut placeholders = Vec::new();
        while let Some(text) = seq.next_element_seed(ImageSeed)? {
            placeholders.push(placeholder(self.images.len()));
            self.images.push(text);
        }
        Ok(Value::Array(placeholders))
    }
}

struct ImageSeed;

impl<'de> DeserializeSeed<'de> for ImageSeed {
    type Value = ImageText<'de>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for ImageSeed {
    type Value = ImageText<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an image as a base64 string")
    }
    fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Self::Value, E> {
        Ok(ImageText::Borrowed(text))
    }
    fn visit_str<E>(self, text: &str) -> Result<Self::Value, E> {
        Ok(ImageText::Owned(text.to_owned()))
    }
    fn visit_string<E>(self, text: String) -> Result<Self::Value, E> {
        Ok(ImageText::Owned(text))
    }
}

/// One field of an object being encoded.
pub enum Field<'v> {
    /// A field encoded as serde_json would.
    Value(&'v Value),
    /// An array given as a slice (the loop's messages or tools).
    Array(&'v [Value]),
}

/// Encodes a JSON object as byte chunks: `entries` in order, the
/// placeholders inside `messages[].images` replaced by the image literals
/// themselves (shared, not copied).
pub fn encode_object<'v>(
    entries: impl IntoIterator<Item = (&'v str, Field<'v>)>,
    images: &Images,
) -> Result<Vec<Bytes>, serde_json::Error> {
    let mut out = Chunks {
        images,
        parts: Vec::new(),
        buffer: Vec::new(),
    };
    out.buffer.push(b'{');
    for (i, (key, field)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.buffer.push(b',');
        }
        serde_json::to_writer(&mut out.buffer, key)?;
        out.buffer.push(b':');
        match (key, field) {
            ("messages", Field::Array(messages)) => out.messages(messages)?,
            ("messages", Field::Value(Value::Array(messages))) => out.messages(messages)?,
            (_, Field::Array(items)) => serde_json::to_writer(&mut out.buffer, items)?,
            (_, Field::Value(value)) => serde_json::to_writer(&mut out.buffer, value)?,
        }
    }
    out.buffer.push(b'}');
    out.flush();
    Ok(out.parts)
}

/// Encodes a whole chat map (the pass-through of a request oapd adds no
/// tools to).
pub fn encode_chat(
    chat: &Map<String, Value>,
    images: &Images,
) -> Result<Vec<Bytes>, serde_json::Error> {
    encode_object(
        chat.iter().map(|(k, v)| (k.as_str(), Field::Value(v))),
        images,
    )
}

struct Chunks<'i> {
    images: &'i Images,
    parts: Vec<Bytes>,
    buffer: Vec<u8>,
}

impl Chunks<'_> {
    fn flush(&mut self) {
        if !self.buffer.is_empty() {
            self.parts
                .push(Bytes::from(std::mem::take(&mut self.buffer)));
        }
    }

    fn messages(&mut self, messages: &[Value]) -> Result<(), serde_json::Error> {
        self.buffer.push(b'[');
        for (i, message) in messages.iter().enumerate() {
            if i > 0 {
                self.buffer.push(b',');
            }
            match message {
                Value::Object(fields) if fields.contains_key("images") => {
                    self.buffer.push(b'{');
                    for (j, (key, value)) in fields.iter().enumerate() {
                        if j > 0 {
                            self.buffer.push(b',');
                        }
                        serde_json::to_writer(&mut self.buffer, key)?;
                        self.buffer.push(b':');
                        match value {
                            Value::Array(items) if key == "images" => self.images(items)?,
                            other => serde_json::to_writer(&mut self.buffer, other)?,
                        }
                    }
                    self.buffer.push(b'}');
                }
                other => serde_json::to_writer(&mut self.buffer, other)?,
            }
        }
        self.buffer.push(b']');
        Ok(())
    }

    fn images(&mut self, items: &[Value]) -> Result<(), serde_json::Error> {
        self.buffer.push(b'[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                self.buffer.push(b',');
            }
            match self.images.lookup(item) {
                Some(literal) => {
                    let literal = literal.clone();
                    self.flush();
                    self.parts.push(literal);
                }
                None => serde_json::to_writer(&mut self.buffer, item)?,
            }
        }
        self.buffer.push(b']');
        Ok(())
    }
}

/// A request body made of chunks, sent in order, with an exact length;
/// holds what must live until the upstream has read it all.
pub struct PartsBody {
    parts: VecDeque<Bytes>,
    remaining: u64,
    _held: Option<Hold>,
}

impl PartsBody {
    /// A body sending `parts` in order, keeping `held` alive until dropped.
    pub fn new(parts: Vec<Bytes>, held: Option<Hold>) -> PartsBody {
        let remaining = parts.iter().map(|p| p.len() as u64).sum();
        PartsBody {
            parts: parts.into(),
            remaining,
            _held: held,
        }
    }
}

impl HttpBody for PartsBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.parts.pop_front() {
            Some(part) => {
                self.remaining -= part.len() as u64;
                Poll::Ready(Some(Ok(Frame::data(part))))
            }
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn joined(parts: &[Bytes]) -> Value {
        let bytes: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[test]
    fn images_stay_in_the_received_bytes_and_come_back_out_unchanged() {
        let image = "iVBORw0KGgo".repeat(1000);
        let original = json!({
            "model": "m",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "what is this?", "images": [image, "AAAA"]},
                {"role": "user", "content": "and this \u{e9}", "images": ["QUJD"]},
            ],
            "options": {"num_ctx": 8192},
        });
        let body = Bytes::from(serde_json::to_vec(&original).unwrap());
        let (chat, images) = parse_chat(&body).unwrap();
        assert_eq!(images.len(), 3);
        // The big image is a slice of the body, not a copy.
        let first = &images.literals[0];
        let base = body.as_ptr() as usize;
        assert!(first.as_ptr() as usize >= base && (first.as_ptr() as usize) < base + body.len());
        assert!(chat["messages"][1]["images"][0]
            .as_str()
            .unwrap()
            .starts_with(PLACEHOLDER));
        let parts = encode_chat(&chat, &images).unwrap();
        assert_eq!(joined(&parts), original);
        // Fields given separately, messages as a slice.
        let messages = chat["messages"].as_array().unwrap();
        let parts = encode_object(
            [
                ("model", Field::Value(&chat["model"])),
                ("messages", Field::Array(messages)),
                ("stream", Field::Value(&Value::Bool(true))),
            ],
            &images,
        )
        .unwrap();
        let decoded = joined(&parts);
        assert_eq!(decoded["messages"], original["messages"]);
        assert_eq!(decoded["stream"], true);
    }

    #[test]
    fn bad_bodies_are_named() {
        for (body, needle) in [
            (&b"[1]"[..], "must be a JSON object"),
            (b"{\"model\": ", "invalid JSON"),
            (b"{\"messages\": {}}", "messages"),
            (b"{\"messages\": [{\"images\": [1]}]}", "base64"),
            (b"{\"a\": 1} x", "invalid JSON"),
        ] {
            let err = parse_chat(&Bytes::from_static(body)).unwrap_err();
            assert!(err.to_string().contains(needle), "{err}");
        }
        // An image with escapes is kept as its own (unescaped) literal.
        let (chat, images) = parse_chat(&Bytes::from_static(
            br#"{"messages": [{"images": ["QUJD\/"]}]}"#,
        ))
        .unwrap();
        assert_eq!(
            joined(&encode_chat(&chat, &images).unwrap()),
            json!({"messages": [{"images": ["QUJD/"]}]})
        );
        let (chat, images) =
            parse_chat(&Bytes::from_static(b"{\"messages\": [{\"images\": null}]}")).unwrap();
        assert!(images.is_empty());
        assert_eq!(chat["messages"][0]["images"], Value::Null);
    }

    #[test]
    fn a_client_string_that_looks_like_a_placeholder_is_not_replaced() {
        let body = Bytes::from_static(b"{\"messages\": [{\"images\": [\"QQ==\"]}]}");
        let (_, images) = parse_chat(&body).unwrap();
        let forged = json!([{"role": "user", "images": [format!("{PLACEHOLDER}7")]}]);
        let parts = encode_object([("messages", Field::Value(&forged))], &images).unwrap();
        assert_eq!(joined(&parts)["messages"], forged);
    }
}
