//! Lexical analysis shared by the index writer's callers and by queries.
//!
//! The same function, with the same [`Stemmer`], must run at index time and at query
//! time, otherwise BM25 terms do not meet; it is therefore deterministic (no locale, no
//! hash-order effects).

/// Tokens longer than this many chars are dropped: they are almost always hashes,
/// base64 or URLs glued together, never something a user types.
pub const MAX_TOKEN_CHARS: usize = 64;

/// English stopwords (NLTK-style list, with the contraction stubs that splitting on
/// apostrophes produces, e.g. "doesn" from "doesn't"). Sorted for binary search.
const STOPWORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "am",
    "an",
    "and",
    "any",
    "are",
    "aren",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "could",
    "couldn",
    "did",
    "didn",
    "do",
    "does",
    "doesn",
    "doing",
    "don",
    "down",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "hadn",
    "has",
    "hasn",
    "have",
    "haven",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "isn",
    "it",
    "its",
    "itself",
    "just",
    "ll",
    "me",
    "more",
    "most",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "re",
    "same",
    "she",
    "should",
    "shouldn",
    "so",
    "some",
    "such",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "ve",
    "very",
    "was",
    "wasn",
    "we",
    "were",
    "weren",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "won",
    "would",
    "wouldn",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
];

/// Is `w` (already lowercased) a stopword?
pub fn is_stopword(w: &str) -> bool {
    STOPWORDS.binary_search(&w).is_ok()
}

/// How a word is reduced to its index term.
///
/// The stemmer is part of what an index was built with: terms of one stemmer do not
/// meet queries tokenised with the other, so a change of stemmer must rebuild the index.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Stemmer {
    /// The light suffix stripper of earlier releases ([`stem`]): plurals, `-ing`, `-ed`,
    /// `-ly` and a final `e`. It leaves derivations apart ("remind" and "reminder",
    /// "calculate" and "calculator"), so a request rarely meets a description that
    /// names the same thing with another suffix. Kept to compare against.
    Light,
    /// The Snowball English stemmer (Porter2), which also folds derivational suffixes
    /// (`-er`, `-ation`, `-ment`, `-ness`, ...): "reminder" and "remind" are one term.
    #[default]
    Snowball,
}

impl Stemmer {
    /// The stemmer's name as the command line and logs spell it.
    pub fn name(self) -> &'static str {
        match self {
            Stemmer::Light => "light",
            Stemmer::Snowball => "snowball",
        }
    }

    /// `word` (already lowercased) as an index term. Only words of ASCII letters are
    /// stemmed: both stemmers are English, and other scripts, digits and words such as
    /// `mp3s` or `utf8` are kept as they are.
    pub fn stem(self, word: &str) -> String {
        match self {
            Stemmer::Light => stem(word),
            Stemmer::Snowball => {
                if !word.bytes().all(|b| b.is_ascii_lowercase()) {
                    return word.to_string();
                }
                rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English)
                    .stem(word)
                    .into_owned()
            }
        }
    }
}

impl std::fmt::Display for Stemmer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A stemmer name that is neither `light` nor `snowball`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown stemmer {0:?}: expected \"light\" or \"snowball\"")]
pub struct UnknownStemmer(pub String);

impl std::str::FromStr for Stemmer {
    type Err = UnknownStemmer;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name {
            "light" => Ok(Stemmer::Light),
            "snowball" => Ok(Stemmer::Snowball),
            other => Err(UnknownStemmer(other.to_string())),
        }
    }
}

/// [`tokenize_with`] the default stemmer ([`Stemmer::Snowball`]).
pub fn tokenize(text: &str) -> Vec<String> {
    tokenize_with(text, Stemmer::default())
}

/// Splits `text` into index terms.
///
/// 1. Lowercase (Unicode `char::to_lowercase`), split on every char that is not
///    Unicode alphanumeric.
/// 2. Drop stopwords, 1-char tokens other than digits, and tokens longer than
///    [`MAX_TOKEN_CHARS`]. Stopwords are checked before stemming, on the word as
///    written: a stem can look like a stopword ("being" is one, "bee" is not), the
///    word cannot.
/// 3. Stem with `stemmer` (ASCII words only; other scripts are kept as they are).
pub fn tokenize_with(text: &str, stemmer: Stemmer) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut cur_chars = 0usize;
    let mut flush = |cur: &mut String, cur_chars: &mut usize| {
        if !cur.is_empty() {
            if keep(cur, *cur_chars) {
                out.push(stemmer.stem(cur));
            }
            cur.clear();
            *cur_chars = 0;
        }
    };
    for c in text.chars() {
        if c.is_alphanumeric() {
            for l in c.to_lowercase() {
                cur.push(l);
                cur_chars += 1;
            }
        } else {
            flush(&mut cur, &mut cur_chars);
        }
    }
    flush(&mut cur, &mut cur_chars);
    out
}

fn keep(tok: &str, nchars: usize) -> bool {
    if nchars > MAX_TOKEN_CHARS {
        return false;
    }
    if nchars == 1 {
        return tok.chars().all(|c| c.is_numeric());
    }
    !is_stopword(tok)
}

/// The light suffix stripper ([`Stemmer::Light`]; a small subset of Porter step 1 plus "ly"), applied to
/// all-ASCII-lowercase-letter words longer than 3 bytes:
///
/// * plurals: `ies`→`y` (queries→query), `sses`→`ss`, `xes|ches|shes`→strip `es`,
///   `ss|us|is` kept, otherwise a final `s` is stripped;
/// * then `ing` / `ed` are stripped if at least 3 letters remain, undoubling a final
///   double consonant other than l/s/z (running→run, embedded→embed);
/// * otherwise `ly` is stripped if at least 4 letters remain (quickly→quick);
/// * finally a trailing `e` is dropped if more than 3 letters remain, so that
///   parse/parses/parsed/parsing all become `pars`.
///
/// It over- and under-stems sometimes; what matters is that it is deterministic and
/// identical on both sides of the index.
pub fn stem(word: &str) -> String {
    if word.len() <= 3 || !word.bytes().all(|b| b.is_ascii_lowercase()) {
        return word.to_string();
    }
    let mut w = word.to_string();

    // Step 1: plurals.
    if w.ends_with("ies") && w.len() > 4 {
        w.truncate(w.len() - 3);
        w.push('y');
    } else if w.ends_with("sses")
        || w.ends_with("xes")
        || w.ends_with("ches")
        || w.ends_with("shes")
    {
        w.truncate(w.len() - 2);
    } else if w.ends_with("ss") || w.ends_with("us") || w.ends_with("is") {
        // keep: class, status, analysis
    } else if w.ends_with('s') && w.len() > 3 {
        w.truncate(w.len() - 1);
    }

    // Step 2: -ing / -ed, or else -ly.
    let mut stripped = false;
    for suffix in ["ing", "ed"] {
        if w.ends_with(suffix) && w.len() >= suffix.len() + 3 {
            w.truncate(w.len() - suffix.len());
            undouble(&mut w);
            stripped = true;
            break;
        }
    }
    if !stripped && w.ends_with("ly") && w.len() >= 2 + 4 {
        w.truncate(w.len() - 2);
    }

    // Step 3: trailing e.
    if w.len() > 3 && w.ends_with('e') {
        w.truncate(w.len() - 1);
    }
    w
}

fn undouble(w: &mut String) {
    let b = w.as_bytes();
    if let [.., x, y] = b {
        if x == y && !matches!(x, b'l' | b's' | b'z' | b'a' | b'e' | b'i' | b'o' | b'u') {
            w.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stopwords_sorted_and_unique() {
        assert!(STOPWORDS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn stemmer_names_round_trip_and_unknown_ones_are_named() {
        for stemmer in [Stemmer::Light, Stemmer::Snowball] {
            assert_eq!(stemmer.name().parse::<Stemmer>(), Ok(stemmer));
        }
        let err = "porter".parse::<Stemmer>().unwrap_err();
        assert!(err.to_string().contains("\"porter\""), "{err}");
        assert_eq!(Stemmer::default(), Stemmer::Snowball);
    }
}
