//! Field names read from an input description's prose, for manifests that
//! declare no parameters: quoted names, `name=value` assignments, cue words
//! ("field", "key", "one of"), required/optional wording, and type hints in
//! parentheses. Heuristics, tuned on real manifests; bounded in work by
//! [`MAX_SCANNED_DESCRIPTION_BYTES`] and in output by `MAX_DESCRIBED_FIELDS`.

use std::collections::HashSet;

use super::text::{
    assignment_tokens, collapse_ws, contains_word, ends_with_phrase, group_depth, group_spans,
    has_required_word, normalize, quoted_tokens, sentence_bounds, sentence_index,
    starts_with_phrase, starts_with_word, strip_groups, strip_trailing_separators, Token,
};
use super::truncate_chars;

/// Hints taken from description text ("(natural language description)").
const MAX_HINT_CHARS: usize = 200;

/// Description fields beyond this are junk, not a schema.
const MAX_DESCRIBED_FIELDS: usize = 32;

/// Only this much of an input description is scanned for field names: real
/// ones are < 1 KiB, and the cap bounds work on hostile manifests.
pub(super) const MAX_SCANNED_DESCRIPTION_BYTES: usize = 8 * 1024;

/// A field found in description prose.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct DescribedField {
    pub(super) name: String,
    pub(super) required: bool,
    pub(super) type_name: &'static str,
    pub(super) hint: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    Required,
    Optional,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Value,
    Field,
}

/// How a token is read from the words before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mode {
    kind: Kind,
    /// Something marks it as a field name (not just a quoted word).
    explicit: bool,
    /// Inside a "Required: ..." / "Optional: ..." run or after "optional".
    section: Option<Need>,
}

const NEUTRAL: Mode = Mode {
    kind: Kind::Field,
    explicit: false,
    section: None,
};
const VALUE: Mode = Mode {
    kind: Kind::Value,
    explicit: false,
    section: None,
};

struct Occurrence {
    name: String,
    sentence: usize,
    mode: Mode,
    /// Required/optional said right after the token ("(required)", "is optional").
    own: Option<Need>,
    /// Alternative to another field ("'a' or 'b'"): never required alone.
    alternative: bool,
    hint: Option<String>,
}

/// Nouns that say "the quoted word before me is a field".
const FIELD_NOUNS: &[&str] = &[
    "field",
    "fields",
    "parameter",
    "parameters",
    "param",
    "params",
    "key",
    "keys",
    "property",
    "properties",
    "argument",
    "arguments",
];

/// `<word>:` headers introducing a list of *values*.
const VALUE_HEADERS: &[&str] = &[
    "actions",
    "intents",
    "values",
    "options",
    "categories",
    "modes",
    "types",
    "choices",
    "operations",
    "commands",
    "formats",
    "units",
    "enum",
    "allowed",
    "supported",
    "accepted",
    "valid",
    "possible",
    "example",
    "examples",
];

/// Phrases that, right before a quoted word, make it a value.
const VALUE_CUES: &[&str] = &[
    "e.g.",
    "e.g.,",
    "e.g",
    "eg.",
    "eg",
    "i.e.",
    "i.e.,",
    "i.e",
    "like",
    "such as",
    "default",
    "defaults to",
    "default is",
    "default of",
    "default value",
    "intent",
    "value",
    "values",
    "value of",
    "one of",
    "be",
    "as",
    "set to",
    "equal to",
    "equals",
    "for example",
    "example",
    "examples",
];

/// Heuristic extraction of field names from an input description (rule e).
///
/// Tokens are quoted lower-case identifiers (`[a-z][A-Za-z0-9_]*`: snake
/// case, plus lower camel case because real fields are spelled `geoScope`,
/// `topK`), single quotes first and double quotes only if there are none
/// (reference order), plus `name='value'` / `name="value"` assignments.
///
/// A token is a **value**, not a field, when it is inside `(...)`/`[...]`
/// (`'geoScope' ("primary" or "all")`, `'action' (set, list, ...)`), or the
/// words before it are a value cue: `=`, `e.g.`, `like`, `default`, `intent`,
/// `values`, `one of`, `be`, `as`, or a `<word>:` header such as
/// `Actions:` / `Supported intents:` / `Categories:`. A token separated from
/// the previous one only by a comma-list (`'a' (...), 'b'`, `'x' or 'y'`,
/// `'ask' for questions, 'reply' to ...`) inherits its reading. A name that is
/// a value anywhere is dropped unless some occurrence is explicitly a field
/// (`"intent" field`, `optional 'geo'`, `Required: 'lat'`, `fields: 'title'`).
///
/// Requiredness, because a wrongly required field forces the model to invent
/// a value: everything is **optional** unless the text says `Required: ...`,
/// `required 'x'`, `'x' (required)`, `'x' is required` / `must`; "All
/// optional" makes everything optional; fields offered as alternatives
/// (`at least one of 'a' or 'b'`) are never required. One contrast rule:
/// in a sentence that explicitly marks some fields optional
/// (`..., 'when' (...), and optional 'deliver_via'`), the unmarked fields
/// listed with them are required, provided nothing anywhere is marked
/// required explicitly.
///
/// A parenthesised note right after a field becomes its description hint;
/// if the note starts with a type word (`(number)`, `(boolean)`) the field
/// gets that type, otherwise it is a string.
pub(super) fn described_fields(desc: &str) -> Vec<DescribedField> {
    let text = crate::clip_bytes(desc, MAX_SCANNED_DESCRIPTION_BYTES);
    let depth = group_depth(text);
    let groups = group_spans(text);
    let bounds = sentence_bounds(text, &depth);

    let mut tokens = quoted_tokens(text, b'\'');
    if tokens.is_empty() {
        tokens = quoted_tokens(text, b'"');
    }
    tokens.extend(assignment_tokens(text));
    tokens.sort_by_key(|t| t.start);

    let mut occs: Vec<Occurrence> = Vec::new();
    // (index into occs, token end) of the last token outside any group.
    let mut prev_outside: Option<(usize, usize)> = None;
    for tok in &tokens {
        let sentence = sentence_index(&bounds, tok.start);
        let sentence_start = sentence
            .checked_sub(1)
            .and_then(|i| bounds.get(i).copied())
            .unwrap_or(0);
        if depth.get(tok.start).copied().unwrap_or(0) > 0 {
            occs.push(Occurrence {
                name: tok.name.clone(),
                sentence,
                mode: VALUE,
                own: None,
                alternative: false,
                hint: None,
            });
            continue;
        }
        let prev = prev_outside.filter(|(i, _)| occs[*i].sentence == sentence);
        let gap_start = prev.map_or(sentence_start, |(_, end)| end);
        let gap = normalize(&strip_groups(text, &depth, gap_start, tok.start));
        let mut alternative = false;
        let mut mode = match (read_gap(&gap, prev.is_some()), prev) {
            (GapReading::Inherit { or }, Some((pi, _))) => {
                if or {
                    alternative = true;
                    occs[pi].alternative = true;
                }
                occs[pi].mode
            }
            // Inherit is only returned when there is a previous token.
            (GapReading::Inherit { .. }, None) => NEUTRAL,
            (GapReading::Mode(m, alt), _) => {
                alternative = alt;
                m
            }
        };
        if tok.assignment {
            mode.kind = Kind::Field;
            mode.explicit = true;
        }
        let (own, hint) = read_after(text, &groups, tok, &mut mode);
        occs.push(Occurrence {
            name: tok.name.clone(),
            sentence,
            mode,
            own,
            alternative,
            hint,
        });
        prev_outside = Some((occs.len() - 1, tok.end));
    }

    aggregate(&occs, &normalize(text))
}

/// What follows a token outside any group: a field noun or `:` (which make
/// a field explicit), a note in parentheses (required/optional, a hint), and
/// "is required" / "is optional" wording after either.
fn read_after(
    text: &str,
    groups: &[(usize, usize)],
    tok: &Token,
    mode: &mut Mode,
) -> (Option<Need>, Option<String>) {
    // What follows the token: a field noun, `:`, a note in parentheses.
    let after = text.get(tok.end..).unwrap_or("");
    let after_trim = after.trim_start();
    let after_lower = after_trim
        .chars()
        .take(40)
        .collect::<String>()
        .to_lowercase();
    if mode.kind == Kind::Field
        && (starts_with_word(&after_lower, FIELD_NOUNS) || after_lower.starts_with(':'))
    {
        mode.explicit = true;
    }
    let mut own = None;
    let mut hint = None;
    // The note may follow a noun: `"geoScope" parameter ("primary" or "all")`.
    let mut group_open = tok.end + (after.len() - after_trim.len());
    if let Some(noun) = FIELD_NOUNS
        .iter()
        .find(|n| starts_with_phrase(&after_lower, n))
    {
        let past = after_trim.get(noun.len()..).unwrap_or("");
        group_open += noun.len() + (past.len() - past.trim_start().len());
    }
    let mut rest_start = tok.end;
    if let Some(&(open, close)) = groups.iter().find(|(o, _)| *o == group_open) {
        let content = text.get(open + 1..close).unwrap_or("");
        let content_norm = normalize(content);
        if has_required_word(&content_norm) {
            own = Some(Need::Required);
        } else if contains_word(&content_norm, "optional") {
            own = Some(Need::Optional);
        }
        if !content_norm.is_empty() {
            hint = Some(truncate_chars(&collapse_ws(content), MAX_HINT_CHARS));
        }
        rest_start = close + 1;
    }
    let mut rest: String = text
        .get(rest_start..)
        .unwrap_or("")
        .trim_start()
        .chars()
        .take(40)
        .collect::<String>()
        .to_lowercase();
    // "'lang' field is required": look past the noun.
    if let Some(noun) = FIELD_NOUNS.iter().find(|n| starts_with_phrase(&rest, n)) {
        rest = rest
            .get(noun.len()..)
            .unwrap_or_default()
            .trim_start()
            .to_string();
    }
    if [
        "is required",
        "are required",
        "required",
        "must",
        "is mandatory",
    ]
    .iter()
    .any(|p| starts_with_phrase(&rest, p))
    {
        own = Some(Need::Required);
    } else if ["is optional", "are optional", "optional"]
        .iter()
        .any(|p| starts_with_phrase(&rest, p))
    {
        own = own.or(Some(Need::Optional));
    }
    (own, hint)
}

fn aggregate(occs: &[Occurrence], whole: &str) -> Vec<DescribedField> {
    let all_optional = [
        "all optional",
        "all parameters are optional",
        "all fields are optional",
        "all are optional",
        "everything is optional",
    ]
    .iter()
    .any(|p| whole.contains(p));

    let mut names: Vec<&str> = Vec::new();
    for o in occs {
        if !names.contains(&o.name.as_str()) {
            names.push(&o.name);
        }
    }
    struct Agg<'a> {
        name: &'a str,
        required_ev: bool,
        optional_ev: bool,
        alternative: bool,
        sentences: Vec<usize>,
        hint: Option<String>,
    }
    let mut fields: Vec<Agg> = Vec::new();
    for name in names {
        let mine: Vec<&Occurrence> = occs.iter().filter(|o| o.name == name).collect();
        let has_value = mine.iter().any(|o| o.mode.kind == Kind::Value);
        let field_occs: Vec<&&Occurrence> =
            mine.iter().filter(|o| o.mode.kind == Kind::Field).collect();
        let explicit = field_occs.iter().any(|o| o.mode.explicit);
        if field_occs.is_empty() || (has_value && !explicit) {
            continue;
        }
        let need = |n: Need| {
            field_occs
                .iter()
                .any(|o| o.mode.section == Some(n) || o.own == Some(n))
        };
        fields.push(Agg {
            name,
            required_ev: need(Need::Required),
            optional_ev: need(Need::Optional),
            alternative: mine.iter().any(|o| o.alternative),
            sentences: field_occs.iter().map(|o| o.sentence).collect(),
            hint: field_occs.iter().find_map(|o| o.hint.clone()),
        });
        if fields.len() >= MAX_DESCRIBED_FIELDS {
            break;
        }
    }
    let contrast_allowed = !all_optional && !fields.iter().any(|f| f.required_ev);
    let optional_sentences: HashSet<usize> = fields
        .iter()
        .filter(|f| f.optional_ev && !f.required_ev)
        .flat_map(|f| f.sentences.iter().copied())
        .collect();
    fields
        .into_iter()
        .map(|f| {
            let required = if all_optional || f.alternative {
                false
            } else if f.required_ev {
                true
            } else if f.optional_ev {
                false
            } else {
                contrast_allowed && f.sentences.iter().any(|s| optional_sentences.contains(s))
            };
            let type_name = f.hint.as_deref().map_or("string", hint_type);
            DescribedField {
                name: f.name.to_string(),
                required,
                type_name,
                hint: f.hint,
            }
        })
        .collect()
}

fn strip_leading_noun(s: &str) -> &str {
    let t = s.trim_start();
    for noun in FIELD_NOUNS {
        if let Some(rest) = t.strip_prefix(noun) {
            if rest.is_empty() || !rest.starts_with(|c: char| c.is_alphanumeric()) {
                let (rest, _, _) = strip_trailing_separators(rest.trim());
                return rest.trim();
            }
        }
    }
    t
}

/// A type named by the first word of a hint: `(number)`, `(boolean, ...)`.
fn hint_type(hint: &str) -> &'static str {
    let hint = hint.trim();
    let first: String = hint
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect::<String>()
        .to_ascii_lowercase();
    // "number of results" is prose, not a type: only a bare word, or one
    // followed by punctuation ("number, -90 to 90"), names a type.
    let rest = hint.get(first.len()..).unwrap_or("");
    if !(rest.is_empty() || rest.starts_with([',', ';', ':'])) {
        return "string";
    }
    match first.as_str() {
        "number" | "float" | "double" => "number",
        "integer" | "int" => "integer",
        "boolean" | "bool" => "boolean",
        _ => "string",
    }
}

enum GapReading {
    /// Same reading as the previous token (list continuation); `or` marks
    /// the two as alternatives.
    Inherit { or: bool },
    /// Own reading, and whether it is an alternative (`at least one of`).
    Mode(Mode, bool),
}

/// Read the (group-free, normalised) words between the previous token (or
/// the sentence start) and this one.
fn read_gap(gap: &str, has_prev: bool) -> GapReading {
    let (core, saw_or, saw_comma) = strip_trailing_separators(gap);
    let without_noun = if has_prev {
        strip_leading_noun(core)
    } else {
        core
    };
    if has_prev && without_noun.is_empty() {
        return GapReading::Inherit { or: saw_or };
    }
    if let Some(reading) = read_cue(core) {
        return reading;
    }
    if has_prev && saw_comma {
        return GapReading::Inherit { or: saw_or };
    }
    GapReading::Mode(NEUTRAL, false)
}

fn read_cue(core: &str) -> Option<GapReading> {
    let field = |section| Mode {
        kind: Kind::Field,
        explicit: true,
        section,
    };
    if let Some(head) = core.strip_suffix(':') {
        let words: Vec<&str> = head.split_whitespace().rev().take(3).collect();
        if words.contains(&"optional") {
            return Some(GapReading::Mode(field(Some(Need::Optional)), false));
        }
        if words.contains(&"required") && !head.ends_with("not required") {
            return Some(GapReading::Mode(field(Some(Need::Required)), false));
        }
        let last = words.first().copied().unwrap_or("");
        if FIELD_NOUNS.contains(&last) {
            return Some(GapReading::Mode(field(None), false));
        }
        if VALUE_HEADERS.contains(&last) || head.is_empty() {
            return Some(GapReading::Mode(VALUE, false));
        }
        return Some(GapReading::Mode(NEUTRAL, false));
    }
    if core.ends_with('=') {
        return Some(GapReading::Mode(VALUE, false));
    }
    if ends_with_phrase(core, "at least one of") || ends_with_phrase(core, "any of") {
        return Some(GapReading::Mode(field(None), true));
    }
    if VALUE_CUES.iter().any(|c| ends_with_phrase(core, c)) {
        return Some(GapReading::Mode(VALUE, false));
    }
    let last3: Vec<&str> = core.split_whitespace().rev().take(3).collect();
    if last3.contains(&"optional") || last3.contains(&"optionally") {
        return Some(GapReading::Mode(field(Some(Need::Optional)), false));
    }
    if (last3.contains(&"required") || last3.contains(&"must")) && !last3.contains(&"not") {
        return Some(GapReading::Mode(field(Some(Need::Required)), false));
    }
    if last3.first().is_some_and(|w| FIELD_NOUNS.contains(w)) {
        return Some(GapReading::Mode(field(None), false));
    }
    None
}
