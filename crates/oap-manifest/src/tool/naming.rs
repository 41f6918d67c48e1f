//! Tool names: `oap_` + a snake_case slug of the manifest's name, unique
//! among the tools of one request.

use std::collections::HashSet;

use super::{MAX_TOOL_NAME_CHARS, TOOL_NAME_PREFIX};
use crate::model::Manifest;

/// Tool name for a manifest name: `oap_` + a snake_case slug.
///
/// Rules (deterministic, so a manifest keeps its name across requests):
/// - ASCII letters are lowercased, digits kept; no camel-case splitting
///   (`"myNewscast"` -> `oap_mynewscast`, as the seed specifies);
/// - Latin letters with diacritics are folded (`"Ünïcode"` -> `unicode`),
///   because a model reading "Ünïcode Tool" is more likely to call
///   `oap_unicode_tool` than the reference's `oap_n_code_tool`; other
///   non-ASCII letters and digits (CJK, Cyrillic, ...) are dropped;
/// - every run of other characters becomes one `_`, trimmed at both ends;
/// - a slug already starting with `oap_` loses it, so `"oap-email"` gives
///   `oap_email`, not the reference's `oap_oap_email` (a doubled prefix reads
///   like a typo to models); a bare `"oap"` stays `oap_oap`;
/// - the whole name is capped at [`MAX_TOOL_NAME_CHARS`] (no trailing `_`);
/// - an empty slug (`"!!!"`) becomes `oap_tool`.
///
/// The result always matches `^[a-z0-9_]{1,64}$`.
pub fn tool_name(name: &str) -> String {
    let mut slug = String::with_capacity(name.len().min(MAX_TOOL_NAME_CHARS));
    let mut pending_sep = false;
    fn emit(s: &str, slug: &mut String, pending: &mut bool) {
        if *pending && !slug.is_empty() {
            slug.push('_');
        }
        *pending = false;
        slug.push_str(s);
    }
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            let mut buf = [0u8; 4];
            emit(
                c.to_ascii_lowercase().encode_utf8(&mut buf),
                &mut slug,
                &mut pending_sep,
            );
        } else if let Some(folded) = fold_latin(c) {
            emit(folded, &mut slug, &mut pending_sep);
        } else if c.is_alphanumeric() {
            // Non-Latin letter or digit: dropped, not a word boundary.
        } else {
            pending_sep = true;
        }
        if slug.len() > MAX_TOOL_NAME_CHARS * 2 {
            break; // long enough to decide; the rest would be cut anyway
        }
    }
    if let Some(rest) = slug.strip_prefix(TOOL_NAME_PREFIX) {
        if !rest.is_empty() {
            slug = rest.to_string();
        }
    }
    let max_slug = MAX_TOOL_NAME_CHARS - TOOL_NAME_PREFIX.len();
    slug.truncate(max_slug); // ASCII only, so any byte index is a boundary
    let slug = slug.trim_end_matches('_');
    if slug.is_empty() {
        format!("{TOOL_NAME_PREFIX}tool")
    } else {
        format!("{TOOL_NAME_PREFIX}{slug}")
    }
}

/// ASCII spelling of common Latin letters with diacritics (Latin-1 and
/// Latin Extended-A), lowercased. `None` for anything else.
fn fold_latin(c: char) -> Option<&'static str> {
    const ASCII_LOWER: &str = "abcdefghijklmnopqrstuvwxyz";
    let l = c.to_lowercase().next().unwrap_or(c);
    if l.is_ascii_lowercase() {
        // e.g. 'İ' lowercases to "i̇": keep the ASCII base letter.
        let i = (l as u8 - b'a') as usize;
        return ASCII_LOWER.get(i..i + 1);
    }
    Some(match l {
        'à'..='å' | 'ā' | 'ă' | 'ą' => "a",
        'æ' => "ae",
        'ç' | 'ć' | 'ĉ' | 'ċ' | 'č' => "c",
        'ď' | 'đ' | 'ð' => "d",
        'è'..='ë' | 'ē' | 'ĕ' | 'ė' | 'ę' | 'ě' => "e",
        'ĝ' | 'ğ' | 'ġ' | 'ģ' => "g",
        'ĥ' | 'ħ' => "h",
        'ì'..='ï' | 'ĩ' | 'ī' | 'ĭ' | 'į' | 'ı' => "i",
        'ĵ' => "j",
        'ķ' => "k",
        'ĺ' | 'ļ' | 'ľ' | 'ŀ' | 'ł' => "l",
        'ñ' | 'ń' | 'ņ' | 'ň' => "n",
        'ò'..='ö' | 'ø' | 'ō' | 'ŏ' | 'ő' => "o",
        'œ' => "oe",
        'ŕ' | 'ŗ' | 'ř' => "r",
        'ś' | 'ŝ' | 'ş' | 'š' => "s",
        'ß' => "ss",
        'ţ' | 'ť' | 'ŧ' => "t",
        'þ' => "th",
        'ù'..='ü' | 'ũ' | 'ū' | 'ŭ' | 'ů' | 'ű' | 'ų' => "u",
        'ŵ' => "w",
        'ý' | 'ÿ' | 'ŷ' => "y",
        'ź' | 'ż' | 'ž' => "z",
        _ => return None,
    })
}

/// `base` + `_n`, with `base` shortened (and trailing `_` trimmed) so the
/// result still fits [`MAX_TOOL_NAME_CHARS`].
fn with_suffix(base: &str, n: usize) -> String {
    let suffix = format!("_{n}");
    let keep = MAX_TOOL_NAME_CHARS.saturating_sub(suffix.len());
    let cut: String = base.chars().take(keep).collect();
    format!("{}{suffix}", cut.trim_end_matches('_'))
}

/// Unique tool names for a list of `(id, manifest)` pairs, one per entry, in
/// input order.
///
/// The first manifest with a given [`tool_name`] keeps it; later ones get
/// `_2`, `_3`, ... in input order (the caller sorts by score, then id, so the
/// best match keeps the plain name and the outcome is deterministic). A name
/// is never one of `reserved` (the client's own tool names, compared
/// case-insensitively, because a model that sees `Oap_email` and `oap_email`
/// will mix them up) nor one already assigned, and stays within
/// [`MAX_TOOL_NAME_CHARS`]. The reference has no collision handling: its
/// registry silently kept only the last of two same-named manifests.
///
/// The ids do not influence the names (input order alone decides); they are
/// part of the signature so call sites keep names paired with the ids they
/// came from.
pub fn assign_tool_names(manifests: &[(&str, &Manifest)], reserved: &[&str]) -> Vec<String> {
    let mut taken: HashSet<String> = reserved.iter().map(|r| r.to_ascii_lowercase()).collect();
    let mut out = Vec::with_capacity(manifests.len());
    for (_id, manifest) in manifests {
        let base = tool_name(&manifest.name);
        let mut candidate = base.clone();
        let mut n = 2usize;
        while taken.contains(&candidate) {
            candidate = with_suffix(&base, n);
            n += 1;
        }
        taken.insert(candidate.clone());
        out.push(candidate);
    }
    out
}
