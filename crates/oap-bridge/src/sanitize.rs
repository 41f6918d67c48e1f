//! URL hygiene for answers (`tool_bridge.url_policy`): an answer may only
//! contain `http(s)://` URLs that a tool result returned in this request or
//! that the user's own messages (or client tool results) contained. Others
//! are flagged ("(unverified link)" after them) or removed ("[link removed]").
//!
//! Streaming: text passes through at once except from a possible URL start
//! (`h`, `ht`, … `https://`) until the URL is complete (the first character
//! that cannot be part of it), so nothing but one URL is ever held back —
//! and that at most [`MAX_URL_BYTES`].

use std::collections::HashSet;

use serde_json::{Map, Value};

use crate::context::{Event, RequestCtx, ToolResult};
use crate::hooks::Hook;
use crate::settings::UrlPolicy;

/// Longest URL held back while streaming; a longer one is decided on its
/// head (it will not be on the allow-list) and the rest streams or drops.
pub const MAX_URL_BYTES: usize = 4096;
/// Most URLs remembered per request (tool results can be large).
const MAX_ALLOWED: usize = 10_000;

/// Appended after an unlisted URL under the `flag` policy.
pub const FLAG: &str = " (unverified link)";
/// Replaces an unlisted URL under the `remove` policy.
pub const REMOVED: &str = "[link removed]";

/// URLs an answer may contain.
#[derive(Debug, Default)]
pub struct UrlAllowList {
    urls: HashSet<String>,
}

impl UrlAllowList {
    /// Seeded with the URLs of the user's messages and of tool results
    /// already in the conversation.
    pub fn from_request(chat: &Map<String, Value>) -> Self {
        let mut list = UrlAllowList::default();
        for message in chat
            .get("messages")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let role = message.get("role").and_then(Value::as_str);
            if matches!(role, Some("user") | Some("tool")) {
                if let Some(text) = message.get("content").and_then(Value::as_str) {
                    list.add_text(text);
                }
            }
        }
        list
    }

    /// Adds every URL in `text` (JSON-escaped slashes included).
    #[allow(
        clippy::string_slice,
        reason = "every index comes from str::find, char_indices or a checked char boundary"
    )]
    pub fn add_text(&mut self, text: &str) {
        let text = text.replace("\\/", "/");
        let mut rest = text.as_str();
        while let Some(start) = find_scheme(rest) {
            let candidate = &rest[start..];
            let end = url_run(candidate);
            let url = trim_url(&candidate[..end]);
            if self.urls.len() < MAX_ALLOWED && !url.is_empty() {
                self.urls.insert(normalise(url));
            }
            rest = &candidate[end.max(1)..];
        }
    }

    /// True when `url` (normalised) came from the user or a tool result.
    pub fn allows(&self, url: &str) -> bool {
        self.urls.contains(&normalise(url))
    }

    /// Number of distinct URLs remembered (at most 10 000).
    pub fn len(&self) -> usize {
        self.urls.len()
    }

    /// True when no URL was seen.
    pub fn is_empty(&self) -> bool {
        self.urls.is_empty()
    }
}

/// Scheme and host compare case-insensitively; a trailing slash is ignored.
#[allow(
    clippy::string_slice,
    reason = "every index comes from str::find, char_indices or a checked char boundary"
)]
fn normalise(url: &str) -> String {
    let url = url.trim_end_matches('/');
    match url.find("://") {
        Some(i) => {
            let after = &url[i + 3..];
            let host_end = after.find(['/', '?', '#']).unwrap_or(after.len());
            format!(
                "{}://{}{}",
                url[..i].to_ascii_lowercase(),
                after[..host_end].to_ascii_lowercase(),
                &after[host_end..]
            )
        }
        None => url.to_string(),
    }
}

fn starts_with_ignore_case(text: &str, prefix: &str) -> bool {
    text.len() >= prefix.len()
        && text.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

/// Byte offset of the next `http://` or `https://`.
#[allow(
    clippy::string_slice,
    reason = "every index comes from str::find, char_indices or a checked char boundary"
)]
fn find_scheme(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    (0..bytes.len()).find(|&i| {
        (bytes[i] == b'h' || bytes[i] == b'H')
            && (starts_with_ignore_case(&text[i..], "http://")
                || starts_with_ignore_case(&text[i..], "https://"))
    })
}

/// Whether `text` (shorter than a scheme) could still become one.
fn could_become_scheme(text: &str) -> bool {
    !text.is_empty()
        && ["http://", "https://"]
            .iter()
            .any(|scheme| text.len() < scheme.len() && starts_with_ignore_case(scheme, text))
}

fn is_url_char(c: char) -> bool {
    !(c.is_whitespace()
        || c.is_control()
        || matches!(
            c,
            '<' | '>' | '"' | '\'' | '`' | '[' | ']' | '{' | '}' | '|' | '\\' | '^'
        ))
}

/// Length in bytes of the URL-character run at the start of `text`; a `)`
/// without a matching `(` ends it (markdown links, prose in parentheses).
fn url_run(text: &str) -> usize {
    let mut depth = 0usize;
    for (i, c) in text.char_indices() {
        if !is_url_char(c) {
            return i;
        }
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => return i,
            ')' => depth -= 1,
            _ => {}
        }
    }
    text.len()
}

/// Drops punctuation that ends a sentence rather than the URL.
fn trim_url(url: &str) -> &str {
    url.trim_end_matches(['.', ',', ';', ':', '!', '?', '*', '_', '~'])
}

/// The streaming filter for one answer.
pub struct UrlSanitizer {
    policy: UrlPolicy,
    pending: String,
    /// Inside a URL longer than [`MAX_URL_BYTES`]: `Some(remove)`.
    overlong: Option<bool>,
    /// The last two characters emitted (to see a markdown `](`).
    tail: String,
}

impl UrlSanitizer {
    /// A sanitizer applying `policy` to URLs not on the allow-list.
    pub fn new(policy: UrlPolicy) -> Self {
        UrlSanitizer {
            policy,
            pending: String::new(),
            overlong: None,
            tail: String::new(),
        }
    }

    /// Takes the next piece of the answer; returns what may be shown now.
    pub fn push(&mut self, text: &str, allow: &UrlAllowList) -> String {
        self.pending.push_str(text);
        self.process(allow, false)
    }

    /// The end of the answer: everything still held, decided.
    pub fn finish(&mut self, allow: &UrlAllowList) -> String {
        self.process(allow, true)
    }

    fn emit(&mut self, out: &mut String, text: &str) {
        out.push_str(text);
        let mut tail: String = self.tail.chars().chain(text.chars()).collect();
        let keep = tail.chars().count().saturating_sub(2);
        tail = tail.chars().skip(keep).collect();
        self.tail = tail;
    }

    #[allow(
        clippy::string_slice,
        reason = "every index comes from str::find, char_indices or a checked char boundary"
    )]
    fn process(&mut self, allow: &UrlAllowList, last: bool) -> String {
        let mut out = String::new();
        if self.policy == UrlPolicy::Off {
            out = std::mem::take(&mut self.pending);
            return out;
        }
        loop {
            if let Some(remove) = self.overlong {
                let end = url_run(&self.pending);
                let run: String = self.pending.drain(..end).collect();
                if !remove {
                    self.emit(&mut out, &run);
                }
                if self.pending.is_empty() && !last {
                    return out;
                }
                self.overlong = None;
                if !remove {
                    self.emit(&mut out, FLAG);
                }
                continue;
            }
            let Some(start) = find_scheme(&self.pending) else {
                // Hold a tail that may still become a scheme.
                let hold = if last {
                    0
                } else {
                    (1..=7)
                        .filter(|&n| n <= self.pending.len())
                        .filter(|&n| self.pending.is_char_boundary(self.pending.len() - n))
                        .filter(|&n| could_become_scheme(&self.pending[self.pending.len() - n..]))
                        .max()
                        .unwrap_or(0)
                };
                let free: String = self.pending.drain(..self.pending.len() - hold).collect();
                self.emit(&mut out, &free);
                return out;
            };
            let before: String = self.pending.drain(..start).collect();
            self.emit(&mut out, &before);
            let end = url_run(&self.pending);
            if end == self.pending.len() && !last {
                if end > MAX_URL_BYTES {
                    let mut cut = MAX_URL_BYTES;
                    while !self.pending.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    let head: String = self.pending.drain(..cut).collect();
                    if allow.allows(&head) {
                        self.emit(&mut out, &head);
                    } else {
                        let remove = self.policy == UrlPolicy::Remove;
                        if remove {
                            self.emit(&mut out, REMOVED);
                        } else {
                            self.emit(&mut out, &head);
                        }
                        self.overlong = Some(remove);
                    }
                    continue;
                }
                return out;
            }
            let candidate: String = self.pending.drain(..end).collect();
            let url = trim_url(&candidate);
            let trailing = &candidate[url.len()..];
            if allow.allows(url) {
                self.emit(&mut out, &candidate);
                continue;
            }
            let in_markdown_link = self.tail == "](" && self.pending.starts_with(')');
            match self.policy {
                UrlPolicy::Off => self.emit(&mut out, &candidate),
                UrlPolicy::Remove => {
                    self.emit(&mut out, REMOVED);
                    self.emit(&mut out, trailing);
                }
                UrlPolicy::Flag if in_markdown_link && trailing.is_empty() => {
                    // The mark goes after the link, not into its target.
                    self.emit(&mut out, url);
                    self.pending.drain(..1);
                    self.emit(&mut out, ")");
                    self.emit(&mut out, FLAG);
                }
                UrlPolicy::Flag => {
                    self.emit(&mut out, url);
                    self.emit(&mut out, FLAG);
                    self.emit(&mut out, trailing);
                }
            }
        }
    }
}

/// The URL policy in one request: tool results feed the allow-list, and
/// the answer passes the sanitizer on its way to the client (the hook's
/// output phase), which flushes held text before the final chunk or an
/// error.
pub struct UrlGuard {
    allow: UrlAllowList,
    /// `None` when the policy is off: events pass untouched.
    sanitizer: Option<UrlSanitizer>,
}

impl UrlGuard {
    /// The allow-list starts with the URLs of the request itself.
    pub fn new(policy: UrlPolicy, chat: &Map<String, Value>) -> UrlGuard {
        UrlGuard {
            allow: UrlAllowList::from_request(chat),
            sanitizer: (policy != UrlPolicy::Off).then(|| UrlSanitizer::new(policy)),
        }
    }
}

impl Hook for UrlGuard {
    /// Remembers the URLs tool results returned, so the answer may cite them.
    fn results_seen(&mut self, _cx: &mut RequestCtx, results: &[ToolResult]) {
        for result in results {
            self.allow.add_text(&result.content);
        }
    }

    fn output(&mut self, _cx: &RequestCtx, event: Event) -> Vec<Event> {
        let allow = &self.allow;
        let Some(sanitizer) = self.sanitizer.as_mut() else {
            return vec![event];
        };
        let mut flushed = None;
        let event = match event {
            Event::Chunk(mut chunk) => {
                let is_done = chunk.get("done").and_then(Value::as_bool) == Some(true);
                if let Some(text) = chunk.pointer("/message/content").and_then(Value::as_str) {
                    let mut shown = sanitizer.push(text, allow);
                    if is_done {
                        shown.push_str(&sanitizer.finish(allow));
                    }
                    chunk["message"]["content"] = Value::from(shown);
                } else if is_done {
                    flushed = Some(sanitizer.finish(allow));
                }
                if is_done {
                    // The final chunk stays empty: held text goes out
                    // on its own chunk before it.
                    let held = match chunk.pointer("/message/content").and_then(Value::as_str) {
                        Some(text) if !text.is_empty() => Some(text.to_string()),
                        _ => flushed.take(),
                    };
                    if let Some(message) = chunk.get_mut("message").and_then(Value::as_object_mut) {
                        message.insert("content".into(), Value::from(""));
                    }
                    flushed = held;
                } else if !has_visible(&chunk) {
                    return Vec::new();
                }
                Event::Chunk(chunk)
            }
            Event::Error { status, message } => {
                flushed = Some(sanitizer.finish(allow));
                Event::Error { status, message }
            }
        };
        let mut events = Vec::with_capacity(2);
        if let Some(text) = flushed.filter(|t| !t.is_empty()) {
            let model = match &event {
                Event::Chunk(chunk) => chunk.get("model").cloned().unwrap_or(Value::Null),
                Event::Error { .. } => Value::Null,
            };
            events.push(Event::Chunk(serde_json::json!({
                "model": model,
                "created_at": crate::tool_loop::now_rfc3339(),
                "message": {"role": "assistant", "content": text},
                "done": false,
            })));
        }
        events.push(event);
        events
    }
}

fn has_visible(chunk: &Value) -> bool {
    chunk
        .pointer("/message/content")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty())
        || chunk
            .pointer("/message/thinking")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
        || chunk.pointer("/message/images").is_some()
        || chunk.pointer("/message/tool_calls").is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow(urls: &str) -> UrlAllowList {
        let mut list = UrlAllowList::default();
        list.add_text(urls);
        list
    }

    fn run(policy: UrlPolicy, pieces: &[&str], list: &UrlAllowList) -> String {
        let mut s = UrlSanitizer::new(policy);
        let mut out: String = pieces.iter().map(|p| s.push(p, list)).collect();
        out.push_str(&s.finish(list));
        out
    }

    #[test]
    fn allowed_urls_pass_and_invented_ones_are_flagged_or_removed() {
        let list = allow(r#"{"url": "https:\/\/example.org\/a?b=1"}"#);
        let text = "See https://example.org/a?b=1. Also https://evil.test/x, bye";
        assert_eq!(
            run(UrlPolicy::Flag, &[text], &list),
            "See https://example.org/a?b=1. Also https://evil.test/x (unverified link), bye"
        );
        assert_eq!(
            run(UrlPolicy::Remove, &[text], &list),
            "See https://example.org/a?b=1. Also [link removed], bye"
        );
        assert_eq!(run(UrlPolicy::Off, &[text], &list), text);
    }

    #[test]
    fn a_url_split_across_pieces_is_held_until_complete() {
        let list = allow("https://ok.example/page");
        let mut s = UrlSanitizer::new(UrlPolicy::Remove);
        assert_eq!(s.push("go to ht", &list), "go to ");
        assert_eq!(s.push("tps://ok.exa", &list), "");
        assert_eq!(
            s.push("mple/page now", &list),
            "https://ok.example/page now"
        );
        assert_eq!(s.push(" and https://bad", &list), " and ");
        assert_eq!(s.push(".example/", &list), "");
        assert_eq!(s.finish(&list), "[link removed]");
    }

    #[test]
    fn plain_text_is_untouched_and_not_held() {
        let list = UrlAllowList::default();
        let mut s = UrlSanitizer::new(UrlPolicy::Remove);
        assert_eq!(
            s.push("the http protocol, hello ", &list),
            "the http protocol, hello "
        );
        assert_eq!(s.push("Ünïcode h", &list), "Ünïcode ");
        assert_eq!(s.finish(&list), "h");
    }

    #[test]
    fn markdown_links() {
        let list = allow("https://good.example");
        assert_eq!(
            run(
                UrlPolicy::Flag,
                &["[docs](https://evil.example/x) and [ok](https://good.example/)"],
                &list
            ),
            "[docs](https://evil.example/x) (unverified link) and [ok](https://good.example/)"
        );
        assert_eq!(
            run(
                UrlPolicy::Remove,
                &["[docs](https://evil.example/x)."],
                &list
            ),
            "[docs]([link removed])."
        );
        // Parentheses inside a URL stay part of it.
        let wiki = allow("https://en.wikipedia.org/wiki/Rust_(language)");
        assert_eq!(
            run(
                UrlPolicy::Remove,
                &["(see https://en.wikipedia.org/wiki/Rust_(language))"],
                &wiki
            ),
            "(see https://en.wikipedia.org/wiki/Rust_(language))"
        );
    }

    #[test]
    fn an_overlong_url_is_not_held_whole() {
        let list = UrlAllowList::default();
        let mut s = UrlSanitizer::new(UrlPolicy::Remove);
        let mut out = s.push("x https://a.example/", &list);
        for _ in 0..100 {
            out.push_str(&s.push(&"a".repeat(100), &list));
        }
        assert!(s.pending.len() <= MAX_URL_BYTES);
        out.push_str(&s.push(" end", &list));
        out.push_str(&s.finish(&list));
        assert_eq!(out, "x [link removed] end");
    }

    #[test]
    fn user_messages_seed_the_allow_list() {
        let chat: Map<String, Value> = serde_json::from_value(serde_json::json!({"messages": [
            {"role": "system", "content": "https://sys.example"},
            {"role": "user", "content": "summarise HTTPS://User.Example/doc please"}]}))
        .unwrap();
        let list = UrlAllowList::from_request(&chat);
        assert!(list.allows("https://user.example/doc"));
        assert!(!list.allows("https://sys.example"));
    }
}
