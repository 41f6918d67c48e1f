//! Lexical scanning for the description heuristics: quoted and assigned
//! tokens, bracket groups, sentence bounds and word tests.

use super::MAX_TOOL_NAME_CHARS;

pub(super) struct Token {
    pub(super) name: String,
    /// Byte offset of the opening quote (or of the identifier for `x=`).
    pub(super) start: usize,
    /// Byte offset just past the closing quote (or the identifier).
    pub(super) end: usize,
    /// Found as `name='value'`: certainly a field.
    pub(super) assignment: bool,
}

/// Drop trailing whitespace, list punctuation and `and` / `or`; report
/// whether an `or` or a comma was among them.
#[allow(
    clippy::string_slice,
    reason = "every index comes from str::find, char_indices, an ASCII byte scan or a checked char boundary"
)]
pub(super) fn strip_trailing_separators(s: &str) -> (&str, bool, bool) {
    let mut cur = s;
    let mut saw_or = false;
    let mut saw_comma = false;
    loop {
        let before = cur.len();
        let trimmed = cur.trim_end_matches(|c: char| {
            c.is_whitespace() || matches!(c, ',' | '+' | '/' | '&' | '|')
        });
        saw_comma |= cur[trimmed.len()..].contains(',');
        cur = trimmed;
        for (word, is_or) in [("and/or", true), ("and", false), ("or", true)] {
            if ends_with_phrase(cur, word) {
                cur = &cur[..cur.len() - word.len()];
                saw_or |= is_or;
                break;
            }
        }
        if cur.len() == before {
            return (cur, saw_or, saw_comma);
        }
    }
}

/// `s` ends with `phrase` at a word boundary.
pub(super) fn ends_with_phrase(s: &str, phrase: &str) -> bool {
    s.strip_suffix(phrase).is_some_and(|head| {
        head.is_empty()
            || !head.ends_with(|c: char| c.is_alphanumeric())
            || !phrase.starts_with(|c: char| c.is_alphanumeric())
    })
}

/// `s` starts with `phrase` at a word boundary.
pub(super) fn starts_with_phrase(s: &str, phrase: &str) -> bool {
    s.strip_prefix(phrase)
        .is_some_and(|rest| !rest.starts_with(|c: char| c.is_alphanumeric()))
}

pub(super) fn starts_with_word(s: &str, words: &[&str]) -> bool {
    words.iter().any(|w| starts_with_phrase(s, w))
}

pub(super) fn contains_word(s: &str, word: &str) -> bool {
    s.split(|c: char| !c.is_alphanumeric()).any(|w| w == word)
}

pub(super) fn has_required_word(s: &str) -> bool {
    (contains_word(s, "required") && !s.contains("not required")) || contains_word(s, "must")
}

/// Lowercase, whitespace collapsed, trimmed.
pub(super) fn normalize(s: &str) -> String {
    collapse_ws(s).to_lowercase()
}

pub(super) fn collapse_ws(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Matched `(...)` / `[...]` pairs as (open, close) byte offsets; unmatched
/// brackets are ignored so one stray `(` cannot swallow the rest.
pub(super) fn group_spans(text: &str) -> Vec<(usize, usize)> {
    let mut stack: Vec<(u8, usize)> = Vec::new();
    let mut out = Vec::new();
    for (i, b) in text.bytes().enumerate() {
        match b {
            b'(' | b'[' => stack.push((b, i)),
            b')' | b']' => {
                let want = if b == b')' { b'(' } else { b'[' };
                if let Some(pos) = stack.iter().rposition(|(c, _)| *c == want) {
                    let (_, open) = stack[pos];
                    stack.truncate(pos);
                    out.push((open, i));
                }
            }
            _ => {}
        }
    }
    out.sort_unstable();
    out
}

/// Per byte: how many matched groups contain it (brackets included).
pub(super) fn group_depth(text: &str) -> Vec<u32> {
    let mut diff = vec![0i64; text.len() + 1];
    for (open, close) in group_spans(text) {
        diff[open] += 1;
        diff[close + 1] -= 1;
    }
    let mut depth = Vec::with_capacity(text.len());
    let mut cur = 0i64;
    for d in diff.iter().take(text.len()) {
        cur += d;
        depth.push(cur.max(0) as u32);
    }
    depth
}

/// The part of `text[from..to]` outside groups.
pub(super) fn strip_groups(text: &str, depth: &[u32], from: usize, to: usize) -> String {
    let Some(slice) = text.get(from..to) else {
        return String::new();
    };
    slice
        .char_indices()
        .filter(|(i, _)| depth.get(from + i).copied().unwrap_or(0) == 0)
        .map(|(_, c)| c)
        .collect()
}

/// Byte offsets where sentences end (exclusive), ascending. A sentence ends
/// at `.`, `!` or `?` outside brackets, followed by whitespace or the end,
/// unless the word is an abbreviation (`e.g.`, `i.e.`, `etc.`, `U.S.`).
pub(super) fn sentence_bounds(text: &str, depth: &[u32]) -> Vec<usize> {
    const ABBREV: &[&str] = &[
        "e.g", "i.e", "eg", "ie", "etc", "vs", "approx", "incl", "cf", "esp", "min", "max", "no",
    ];
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        if !matches!(b, b'.' | b'!' | b'?') || depth.get(i).copied().unwrap_or(0) > 0 {
            continue;
        }
        let next_ok = bytes.get(i + 1).is_none_or(|n| n.is_ascii_whitespace());
        if !next_ok {
            continue;
        }
        if b == b'.' {
            let word_start = bytes[..i]
                .iter()
                .rposition(|c| !(c.is_ascii_alphabetic() || *c == b'.'))
                .map_or(0, |p| p + 1);
            let word = text.get(word_start..i).unwrap_or("").to_ascii_lowercase();
            if ABBREV.contains(&word.as_str()) || word.contains('.') {
                continue;
            }
        }
        out.push(i + 1);
    }
    out
}

pub(super) fn sentence_index(bounds: &[usize], pos: usize) -> usize {
    bounds.partition_point(|b| *b <= pos)
}

/// Trimmed, non-empty sentences of `text`.
pub(super) fn sentences<'a>(text: &'a str, depth: &[u32]) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut start = 0;
    for end in sentence_bounds(text, depth)
        .into_iter()
        .chain(std::iter::once(text.len()))
    {
        if let Some(s) = text
            .get(start..end)
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            out.push(s);
        }
        start = end;
    }
    out
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_lowercase()
}

fn is_ident_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// `'name'` tokens (non-overlapping, left to right, like a regex findall).
/// The opening quote must not follow a letter or digit, so apostrophes
/// ("what's", "Tokyo'") do not open tokens.
#[allow(
    clippy::string_slice,
    reason = "every index comes from str::find, char_indices, an ASCII byte scan or a checked char boundary"
)]
pub(super) fn quoted_tokens(text: &str, q: u8) -> Vec<Token> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != q || (i > 0 && bytes[i - 1].is_ascii_alphanumeric()) {
            i += 1;
            continue;
        }
        let start = i + 1;
        let mut j = start;
        if j < bytes.len() && is_ident_start(bytes[j]) {
            while j < bytes.len() && is_ident_char(bytes[j]) {
                j += 1;
            }
            let closes = bytes.get(j) == Some(&q);
            let boundary = bytes.get(j + 1).is_none_or(|c| !c.is_ascii_alphanumeric());
            if closes && boundary && j - start <= MAX_TOOL_NAME_CHARS {
                out.push(Token {
                    name: text[start..j].to_string(),
                    start: i,
                    end: j + 1,
                    assignment: false,
                });
                i = j + 1;
                continue;
            }
        }
        i += 1;
    }
    out
}

/// `name='value'` / `name="value"`: the name is a field.
#[allow(
    clippy::string_slice,
    reason = "every index comes from str::find, char_indices, an ASCII byte scan or a checked char boundary"
)]
pub(super) fn assignment_tokens(text: &str) -> Vec<Token> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let at_boundary = i == 0 || !is_ident_char(bytes[i - 1]);
        if !(at_boundary && is_ident_start(bytes[i])) {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < bytes.len() && is_ident_char(bytes[j]) {
            j += 1;
        }
        if bytes.get(j) == Some(&b'=')
            && matches!(bytes.get(j + 1), Some(b'\'') | Some(b'"'))
            && j - i <= MAX_TOOL_NAME_CHARS
        {
            out.push(Token {
                name: text[i..j].to_string(),
                start: i,
                end: j,
                assignment: true,
            });
        }
        i = j.max(i + 1);
    }
    out
}
