//! What gets indexed for one manifest: the texts that are embedded (rows)
//! and the weighted lexical terms.
//!
//! One long "enriched" text per manifest dilutes a mean-pooled embedding
//! (bench/BASELINES.md: dense over the enriched document scores below
//! dense over the description alone). So what is embedded is a set of
//! rows, and a document scores as its best row: by default only the
//! description followed by the input parameters; optionally a name/usage
//! line and each example. The lexical side gets the enriched document, with
//! field weights (a name match counts more than a word deep in an input
//! description).

use oap_index::Stemmer;
use oap_manifest::Manifest;
use sha2::{Digest, Sha256};

/// Bumped whenever the row or term recipe changes, so that an index built
/// with an older recipe is rebuilt instead of silently mixing recipes.
/// 4: terms are stemmed by the engine's [`oap_index::Stemmer`] (Snowball by
/// default), no longer always by the light suffix stripper; request rows.
pub const RECIPE_VERSION: u32 = 4;

/// Longest text embedded for one row, in bytes. The model truncates at its
/// token limit anyway; this keeps hostile manifests from costing tokenizer
/// time on megabytes of text.
const MAX_ROW_TEXT: usize = 2_000;

/// At most this many example rows per manifest.
const MAX_EXAMPLE_ROWS: usize = 8;

/// Longest text of an example row, in bytes. An example's description is a
/// phrase ("Financial document summarization"); the cut keeps a manifest's
/// eight example rows from costing the encoder more than about two full
/// description rows.
const MAX_EXAMPLE_TEXT: usize = 300;

/// One text to embed, with its weight in the max-over-rows document score.
#[derive(Debug, Clone, PartialEq)]
pub struct RowText {
    /// Trimmed text, at most 2,000 bytes (cut on a char boundary).
    pub text: String,
    /// Multiplies the row's cosine; the document scores as its best weighted row.
    pub weight: f32,
}

/// Relative weights of the row kinds; a weight of 0 (or less) leaves the
/// row kind out of the index. A document scores as its best weighted row.
///
/// The description row and the examples' own descriptions are on by
/// default. A name/usage row lowered dense recall on both benchmark corpora
/// (short rows like "grep. Usage: grep PATTERN" match loosely). An example's
/// description is the publisher's own word for a request the tool serves
/// ("Financial document summarization"), so a request like it finds the
/// tool first even when the description is about something broader; few
/// manifests carry examples, so the rows cost little, and on the benchmark
/// corpora they change no R@3 or abstention figure (docs/BENCHMARKS.md).
/// Example *inputs* stay out: they are data ("echo 'hello world' | grep
/// hello"), not requests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowWeights {
    /// The description row (with the inputs if `inputs_in_description`).
    pub description: f32,
    /// A row of the humanized name, tags and `usage`.
    pub name_usage: f32,
    /// One row per example description, at most 8 example rows.
    pub example: f32,
    /// One row per request row given from outside the manifest
    /// ([`crate::requests`]), at most 8. Below the description's 1.0: a
    /// request row is worded like requests, so it lies nearer to any
    /// request, a no-fit one too; on the shared task set 0.8 ranked and
    /// separated no-fit requests best of 0.8 to 1.0 (bench/request-rows/README.md).
    pub request: f32,
    /// Weight of the request rows' words among the lexical terms (0: they
    /// are embedded only). Small: the words of a request row are what
    /// people say ("hey", "this", "how many"), not what the tool is; 0.1
    /// lifted R@1 on the shared task set without lowering the AUROC of
    /// the abstention score, 0.25 and up lowered it.
    pub request_terms: f32,
    /// Example inputs get rows too (with the `example` weight).
    pub example_inputs: bool,
    /// Append the input parameters, with their descriptions, to the
    /// description row. Many descriptions are one terse sentence ("Search
    /// for hotels based on specified criteria"); the parameters say which
    /// criteria (location, star rating, number of rooms), which is what a
    /// task mentions.
    pub inputs_in_description: bool,
}

impl Default for RowWeights {
    fn default() -> Self {
        RowWeights {
            description: 1.0,
            name_usage: 0.0,
            example: 0.9,
            request: 0.7,
            request_terms: 0.1,
            example_inputs: false,
            inputs_in_description: true,
        }
    }
}

/// The rows to embed for a manifest and the request rows attached to it
/// (already checked by [`crate::requests::accepted`]).
pub fn rows(manifest: &Manifest, requests: &[String], weights: RowWeights) -> Vec<RowText> {
    let fields = manifest.search_fields();
    let mut rows = Vec::new();
    let mut description = fields.description.trim().to_string();
    if weights.inputs_in_description && !fields.parameters.is_empty() {
        let inputs: Vec<String> = fields
            .parameters
            .iter()
            .map(|(name, text)| match text.trim() {
                "" => humanize_name(name),
                text => format!("{} ({text})", humanize_name(name)),
            })
            .collect();
        description.push_str(" Inputs: ");
        description.push_str(&inputs.join("; "));
        description.push('.');
    }
    push_row(&mut rows, &description, weights.description, MAX_ROW_TEXT);

    let mut name_line = humanize_name(&fields.name);
    if !fields.tags.is_empty() {
        name_line.push_str(": ");
        name_line.push_str(&fields.tags.join(", "));
    }
    if let Some(usage) = &fields.usage {
        name_line.push_str(". Usage: ");
        name_line.push_str(usage);
    }
    push_row(&mut rows, &name_line, weights.name_usage, MAX_ROW_TEXT);

    let inputs: &[String] = if weights.example_inputs {
        &fields.example_inputs
    } else {
        &[]
    };
    let examples = fields
        .example_descriptions
        .iter()
        .chain(inputs)
        .take(MAX_EXAMPLE_ROWS);
    for example in examples {
        push_row(&mut rows, example, weights.example, MAX_EXAMPLE_TEXT);
    }
    for request in requests.iter().take(crate::requests::MAX_REQUEST_ROWS) {
        push_row(
            &mut rows,
            request,
            weights.request,
            crate::requests::MAX_REQUEST_TEXT,
        );
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

/// Adds `text`, trimmed and cut to `max_bytes`, unless its weight leaves
/// the row kind out, it is empty, or an earlier row has the same text.
fn push_row(rows: &mut Vec<RowText>, text: &str, weight: f32, max_bytes: usize) {
    let text = oap_manifest::clip_bytes(text.trim(), max_bytes);
    if weight <= 0.0 || text.is_empty() || rows.iter().any(|row| row.text == text) {
        return;
    }
    rows.push(RowText {
        text: text.to_string(),
        weight,
    });
}

/// Weighted lexical terms of the enriched document and, at
/// `weights.request_terms`, of its request rows, under the default stemmer.
pub fn lexical_terms(
    manifest: &Manifest,
    requests: &[String],
    weights: RowWeights,
) -> Vec<(String, f32)> {
    lexical_terms_with(manifest, requests, weights, Stemmer::default())
}

/// [`lexical_terms`] with `stemmer`; queries must be tokenised with the
/// same one.
pub fn lexical_terms_with(
    manifest: &Manifest,
    requests: &[String],
    weights: RowWeights,
    stemmer: Stemmer,
) -> Vec<(String, f32)> {
    let fields = manifest.search_fields();
    let mut terms = Vec::new();
    let mut add = |text: &str, weight: f32| {
        for token in oap_index::tokenize_with(text, stemmer) {
            terms.push((token, weight));
        }
    };
    add(&humanize_name(&fields.name), 3.0);
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
    if weights.request_terms > 0.0 {
        for request in requests.iter().take(crate::requests::MAX_REQUEST_ROWS) {
            add(request, weights.request_terms);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(json: &str) -> Manifest {
        oap_manifest::parse(json.as_bytes())
            .expect("valid")
            .manifest
    }

    #[test]
    fn by_default_each_example_description_is_a_row_and_its_input_is_not() {
        let long = "word ".repeat(200);
        let examples: Vec<String> = (0..10)
            .map(|i| format!(r#"{{"input":"input {i}","description":"example {i} {long}"}}"#))
            .collect();
        let m = manifest(&format!(
            r#"{{"oap":"1.0","name":"summarize","description":"Summarize text.",
                "invoke":{{"method":"POST","url":"https://example.com/s"}},
                "examples":[{{"input":"The quarterly report...","description":"Financial document summarization"}},
                            {{"input":"no description here"}},{}]}}"#,
            examples.join(",")
        ));
        let rows = rows(&m, &[], RowWeights::default());
        let texts: Vec<&str> = rows.iter().map(|r| r.text.as_str()).collect();
        assert_eq!(texts[0], "Summarize text.");
        assert_eq!(texts[1], "Financial document summarization");
        assert_eq!(rows[1].weight, 0.9);
        assert!(
            !texts
                .iter()
                .any(|t| t.starts_with("input") || t.contains("quarterly")),
            "example inputs are data, not rows: {texts:?}"
        );
        // The description row and at most eight example rows, each cut short.
        assert_eq!(rows.len(), 1 + MAX_EXAMPLE_ROWS, "{texts:?}");
        assert!(rows[2..].iter().all(|r| r.text.len() <= MAX_EXAMPLE_TEXT));
        assert!(texts[2].starts_with("example 0 word"));
    }

    #[test]
    fn rows_cover_description_name_usage_and_examples_without_duplicates() {
        let m = manifest(
            r#"{"oap":"1.0","name":"grep","description":"Search lines.","usage":"grep PATTERN",
                "tags":["search","text"],
                "invoke":{"method":"stdio","url":"grep"},
                "examples":[{"input":"find error","description":"Search lines."}]}"#,
        );
        let all = RowWeights {
            name_usage: 0.9,
            example: 0.9,
            example_inputs: true,
            ..RowWeights::default()
        };
        let rows = rows(&m, &[], all);
        let texts: Vec<&str> = rows.iter().map(|r| r.text.as_str()).collect();
        assert_eq!(texts[0], "Search lines.");
        assert_eq!(texts[1], "grep: search, text. Usage: grep PATTERN");
        assert!(texts.contains(&"find error"));
        // The example description equals the description: not embedded twice.
        assert_eq!(texts.iter().filter(|t| **t == "Search lines.").count(), 1);
        assert_eq!(rows[0].weight, 1.0);
    }

    #[test]
    fn by_default_name_usage_and_example_inputs_get_no_row() {
        let m = manifest(
            r#"{"oap":"1.0","name":"Hotels_2_SearchHotel#3","description":"Search for hotels.",
                "usage":"unused","tags":["travel"],
                "input":{"format":"application/json","description":"JSON object.",
                    "parameters":{"location":{"type":"string","description":"City name."},
                                  "star_rating":{"type":"string"}}},
                "invoke":{"method":"POST","url":"https://example.com/h"},
                "examples":[{"input":"hotels in Rome"}]}"#,
        );
        let rows = rows(&m, &[], RowWeights::default());
        let texts: Vec<&str> = rows.iter().map(|r| r.text.as_str()).collect();
        assert_eq!(
            texts,
            ["Search for hotels. Inputs: location (City name.); star rating."]
        );
        let plain = RowWeights {
            inputs_in_description: false,
            ..RowWeights::default()
        };
        assert_eq!(super::rows(&m, &[], plain)[0].text, "Search for hotels.");
    }

    #[test]
    fn names_become_words() {
        assert_eq!(
            humanize_name("get_current_weather#21"),
            "get current weather"
        );
        assert_eq!(humanize_name("Weather_1_GetWeather"), "Weather Get Weather");
        assert_eq!(humanize_name("math.gcd"), "math gcd");
        assert_eq!(humanize_name("usgs-earthquake"), "usgs earthquake");
        assert_eq!(humanize_name("HTTPServer2"), "HTTPServer2");
        assert_eq!(humanize_name("42"), "");
    }

    #[test]
    fn long_texts_are_truncated_on_a_char_boundary() {
        let long = "é".repeat(MAX_ROW_TEXT);
        let cut = oap_manifest::clip_bytes(&long, MAX_ROW_TEXT);
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
            r#"{"oap":"1.0","name":"usgsQuake_earthquake#2","description":"Recent quakes.",
                "invoke":{"method":"GET","url":"https://example.com/q"}}"#,
        );
        let terms = lexical_terms(&m, &[], RowWeights::default());
        // Compare index terms, as the tokenizer stems them.
        let weight_of = |word: &str| {
            let term = oap_index::tokenize(word).pop().unwrap_or_default();
            terms
                .iter()
                .filter(|(t, _)| *t == term)
                .map(|(_, w)| *w)
                .sum::<f32>()
        };
        assert!(weight_of("usgs") >= 3.0);
        assert!(weight_of("quake") >= 3.0 + 1.0);
        assert!(weight_of("earthquake") >= 3.0);
        // The variant number is not a term: "2" in a task must not match it.
        assert_eq!(weight_of("2"), 0.0);
    }

    #[test]
    fn request_words_reach_the_lexical_terms_only_at_their_weight() {
        let m = manifest(
            r#"{"oap":"1.0","name":"wc","description":"Count lines.",
                "invoke":{"method":"stdio","url":"wc"}}"#,
        );
        let requests = vec!["how many words in this essay".to_string()];
        let has_essay = |weights: RowWeights| {
            let essay = oap_index::tokenize("essay").pop().unwrap_or_default();
            lexical_terms(&m, &requests, weights)
                .iter()
                .filter(|(t, _)| *t == essay)
                .map(|(_, w)| *w)
                .sum::<f32>()
        };
        let none = RowWeights {
            request_terms: 0.0,
            ..RowWeights::default()
        };
        assert_eq!(has_essay(none), 0.0);
        let counted = RowWeights {
            request_terms: 0.25,
            ..RowWeights::default()
        };
        assert_eq!(has_essay(counted), 0.25);
        // And the requests are rows of their own, after the description.
        let texts: Vec<String> = rows(&m, &requests, RowWeights::default())
            .into_iter()
            .map(|r| r.text)
            .collect();
        assert_eq!(texts, vec!["Count lines.", "how many words in this essay"]);
    }
}
