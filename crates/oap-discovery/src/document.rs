//! What gets indexed for one manifest: the texts that are embedded (rows)
//! and the weighted lexical terms.
//!
//! One long "enriched" text per manifest dilutes a mean-pooled embedding
//! (shared/bench/BASELINES.md: dense over the enriched document scores below
//! dense over the description alone). So each manifest gets several short
//! rows instead — the description, a name/usage line, and each example — and
//! a document scores as its best row. The lexical side does get the enriched
//! document, with field weights (a name match counts more than a word deep
//! in an input description).

use oap_manifest::Manifest;
use sha2::{Digest, Sha256};

/// Bumped whenever the row or term recipe changes, so that an index built
/// with an older recipe is rebuilt instead of silently mixing recipes.
pub const RECIPE_VERSION: u32 = 1;

/// Longest text embedded for one row, in bytes. The model truncates at its
/// token limit anyway; this keeps hostile manifests from costing tokenizer
/// time on megabytes of text.
const MAX_ROW_TEXT: usize = 2_000;

/// At most this many example rows per manifest.
const MAX_EXAMPLE_ROWS: usize = 8;

/// One text to embed, with its weight in the max-over-rows document score.
#[derive(Debug, Clone, PartialEq)]
pub struct RowText {
    pub text: String,
    pub weight: f32,
}

/// Relative weights of the row kinds; a weight of 0 (or less) leaves the
/// row kind out of the index. Description rows are the reference signal;
/// name/usage and example rows are slightly discounted because they are
/// short and match loosely.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowWeights {
    pub description: f32,
    pub name_usage: f32,
    pub example: f32,
    /// EXPERIMENT: prefix the description row with the humanised name.
    pub name_in_description: bool,
}

impl Default for RowWeights {
    fn default() -> Self {
        RowWeights {
            description: 1.0,
            name_usage: 0.9,
            example: 0.9,
            name_in_description: false,
        }
    }
}

/// The rows to embed for a manifest.
pub fn rows(manifest: &Manifest, weights: RowWeights) -> Vec<RowText> {
    let fields = manifest.search_fields();
    let mut rows = Vec::new();
    let name = humanize_name(&fields.name);
    if weights.name_in_description && !name.is_empty() {
        push_row(
            &mut rows,
            &format!("{name}: {}", fields.description.trim()),
            weights.description,
        );
    } else {
        push_row(&mut rows, &fields.description, weights.description);
    }

    let mut name_line = name;
    if !fields.tags.is_empty() {
        name_line.push_str(": ");
        name_line.push_str(&fields.tags.join(", "));
    }
    if let Some(usage) = &fields.usage {
        name_line.push_str(". Usage: ");
        name_line.push_str(usage);
    }
    push_row(&mut rows, &name_line, weights.name_usage);

    let examples = fields
        .example_descriptions
        .iter()
        .chain(fields.example_inputs.iter())
        .take(MAX_EXAMPLE_ROWS);
    for example in examples {
        push_row(&mut rows, example, weights.example);
    }
    rows
}

/// A manifest name as words: identifiers such as `get_current_weather`,
/// `Weather_1_GetWeather` or `math.gcd` are split at separators and case
/// changes, and tokens that are only digits (variant or version numbers,
/// `name#2`) are dropped; they mean nothing to a sentence model.
pub fn humanize_name(name: &str) -> String {
    let mut words: Vec<String> = Vec::new();
    for part in name.split(|c: char| !c.is_alphanumeric()) {
        let mut word = String::new();
        let mut prev: Option<char> = None;
        for c in part.chars() {
            let boundary = match prev {
                Some(p) => p.is_lowercase() && c.is_uppercase(),
                None => false,
            };
            if boundary && !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
            word.push(c);
            prev = Some(c);
        }
        if !word.is_empty() {
            words.push(word);
        }
    }
    words
        .into_iter()
        .filter(|w| !w.chars().all(|c| c.is_ascii_digit()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn push_row(rows: &mut Vec<RowText>, text: &str, weight: f32) {
    let text = truncate_on_char_boundary(text.trim(), MAX_ROW_TEXT);
    if weight <= 0.0 || text.is_empty() || rows.iter().any(|row| row.text == text) {
        return;
    }
    rows.push(RowText {
        text: text.to_string(),
        weight,
    });
}

/// Weighted lexical terms of the enriched document.
pub fn lexical_terms(manifest: &Manifest) -> Vec<(String, f32)> {
    let fields = manifest.search_fields();
    let mut terms = Vec::new();
    let mut add = |text: &str, weight: f32| {
        for token in oap_index::tokenize(text) {
            terms.push((token, weight));
        }
    };
    add(&fields.name.replace(['-', '_'], " "), 3.0);
    for tag in &fields.tags {
        add(tag, 2.0);
    }
    add(&fields.description, 1.0);
    if let Some(usage) = &fields.usage {
        add(usage, 1.0);
    }
    if let Some(text) = &fields.input_description {
        add(text, 0.5);
    }
    if let Some(text) = &fields.output_description {
        add(text, 0.5);
    }
    for (name, description) in &fields.parameters {
        add(name, 0.5);
        add(description, 0.25);
    }
    for text in fields
        .example_descriptions
        .iter()
        .chain(&fields.example_inputs)
    {
        add(text, 0.5);
    }
    terms
}

/// Cache key of an embedded text: reusing a vector is only sound for the
/// same text under the same model.
pub fn row_key(model_id: &str, text: &str) -> [u8; 16] {
    let mut hasher = Sha256::new();
    hasher.update(model_id.as_bytes());
    hasher.update([0u8]);
    hasher.update(text.as_bytes());
    let digest = hasher.finalize();
    let mut key = [0u8; 16];
    key.copy_from_slice(&digest[..16]);
    key
}

pub(crate) fn truncate_on_char_boundary(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(json: &str) -> Manifest {
        oap_manifest::parse(json.as_bytes())
            .expect("valid")
            .manifest
    }

    #[test]
    fn rows_cover_description_name_usage_and_examples_without_duplicates() {
        let m = manifest(
            r#"{"oap":"1.0","name":"grep","description":"Search lines.","usage":"grep PATTERN",
                "tags":["search","text"],
                "invoke":{"method":"stdio","url":"grep"},
                "examples":[{"input":"find error","description":"Search lines."}]}"#,
        );
        let rows = rows(&m, RowWeights::default());
        let texts: Vec<&str> = rows.iter().map(|r| r.text.as_str()).collect();
        assert_eq!(texts[0], "Search lines.");
        assert_eq!(texts[1], "grep: search, text. Usage: grep PATTERN");
        assert!(texts.contains(&"find error"));
        // The example description equals the description: not embedded twice.
        assert_eq!(texts.iter().filter(|t| **t == "Search lines.").count(), 1);
        assert_eq!(rows[0].weight, 1.0);
    }

    #[test]
    fn long_texts_are_truncated_on_a_char_boundary() {
        let long = "é".repeat(MAX_ROW_TEXT);
        let cut = truncate_on_char_boundary(&long, MAX_ROW_TEXT);
        assert!(cut.len() <= MAX_ROW_TEXT);
        assert!(cut.chars().all(|c| c == 'é'));
    }

    #[test]
    fn row_keys_depend_on_model_and_text() {
        assert_eq!(row_key("m", "a"), row_key("m", "a"));
        assert_ne!(row_key("m", "a"), row_key("m2", "a"));
        assert_ne!(row_key("m", "a"), row_key("m", "b"));
        assert_ne!(row_key("ma", ""), row_key("m", "a"));
    }

    #[test]
    fn name_terms_outweigh_description_terms() {
        let m = manifest(
            r#"{"oap":"1.0","name":"usgs-earthquake","description":"Recent quakes.",
                "invoke":{"method":"GET","url":"https://example.com/q"}}"#,
        );
        let terms = lexical_terms(&m);
        let weight_of = |needle: &str| {
            terms
                .iter()
                .filter(|(t, _)| t.starts_with(needle))
                .map(|(_, w)| *w)
                .sum::<f32>()
        };
        assert!(weight_of("usgs") >= 3.0);
        assert!(weight_of("earthquak") >= 3.0);
    }
}
