//! Several asks in one request.
//!
//! "Turn on the kitchen light and set a timer for ten minutes" is two
//! requests. One mean-pooled embedding of the whole lands between the two
//! tools, near neither, and the top three fill up with whichever ask reads
//! louder. So a request is cut where a new ask plainly starts (a new
//! sentence that opens with a connective or an imperative verb, or "and" /
//! "then" / "also" before an imperative verb or a question word), each ask
//! is ranked on its own ([`rank`]), and each ask's best tool gets a slot
//! near the top when it fits its ask ([`merge`]). The whole request is
//! still ranked too and keeps the first slot: a cut in the wrong place
//! costs at most a slot, never the tool the whole request points at.
//!
//! The cut is deliberately plain: it recognises English connectives before
//! a verb from a fixed list, the language the embedding model reads. What
//! it misses ("the lights on, the heating down") is ranked as one request,
//! as before.

use oap_index::Index;

use crate::query::{self, QueryOptions, QueryViews};
use crate::scoring::{self, Mode, ScoreParts, Scoring};

/// At most this many asks are ranked apart; more are ranked as the last
/// one (each adds its words to the encoder's batch and a ranking pass).
pub const MAX_INTENTS: usize = 4;

/// An ask shorter than this many words ("and Paris", "Dr.") is glued to
/// the ask before it (the first ask to the one after it), as is one that
/// names nothing (see [`names_something`]): too little to rank on its own.
const MIN_WORDS: usize = 3;

/// Words that start a new ask after "and", "then" or "also": imperative
/// verbs a request to an assistant begins with, and question words.
/// Sorted, for [`is_ask_starter`].
const ASK_STARTERS: &[&str] = &[
    "activate",
    "add",
    "analyse",
    "analyze",
    "append",
    "apply",
    "arm",
    "bake",
    "begin",
    "book",
    "brighten",
    "buy",
    "calculate",
    "call",
    "cancel",
    "capitalize",
    "change",
    "check",
    "clean",
    "clear",
    "close",
    "combine",
    "compare",
    "compose",
    "compress",
    "compute",
    "connect",
    "convert",
    "cook",
    "copy",
    "count",
    "create",
    "deactivate",
    "decode",
    "decompress",
    "decrease",
    "delete",
    "deposit",
    "describe",
    "determine",
    "differentiate",
    "dim",
    "disable",
    "disarm",
    "disconnect",
    "display",
    "divide",
    "download",
    "draft",
    "draw",
    "edit",
    "email",
    "enable",
    "encode",
    "estimate",
    "evaluate",
    "explain",
    "export",
    "extract",
    "fetch",
    "filter",
    "find",
    "fix",
    "forecast",
    "format",
    "generate",
    "get",
    "give",
    "how",
    "identify",
    "import",
    "increase",
    "insert",
    "integrate",
    "invite",
    "join",
    "list",
    "locate",
    "lock",
    "log",
    "look",
    "lower",
    "lowercase",
    "make",
    "measure",
    "merge",
    "message",
    "move",
    "multiply",
    "mute",
    "navigate",
    "normalize",
    "notify",
    "open",
    "order",
    "parse",
    "pause",
    "pay",
    "plan",
    "play",
    "post",
    "predict",
    "print",
    "provide",
    "raise",
    "read",
    "reboot",
    "recommend",
    "record",
    "refresh",
    "reload",
    "remind",
    "remove",
    "rename",
    "replace",
    "reply",
    "reserve",
    "respond",
    "restart",
    "restore",
    "resume",
    "retrieve",
    "return",
    "reverse",
    "rotate",
    "round",
    "run",
    "save",
    "scan",
    "schedule",
    "search",
    "send",
    "set",
    "share",
    "shorten",
    "show",
    "simplify",
    "skip",
    "solve",
    "sort",
    "split",
    "start",
    "stop",
    "submit",
    "subscribe",
    "subtract",
    "suggest",
    "summarise",
    "summarize",
    "swap",
    "switch",
    "tell",
    "text",
    "track",
    "transcribe",
    "transfer",
    "translate",
    "trim",
    "turn",
    "unlock",
    "unmute",
    "unsubscribe",
    "update",
    "upload",
    "uppercase",
    "validate",
    "verify",
    "what",
    "what's",
    "whats",
    "when",
    "where",
    "which",
    "who",
    "withdraw",
    "wrap",
    "write",
];

fn is_ask_starter(word: &Word<'_>) -> bool {
    ASK_STARTERS.binary_search(&word.core.as_str()).is_ok()
}

/// Words between a connective and the verb that do not change the cut
/// ("and then please tell me").
const SOFTENERS: &[&str] = &["also", "then", "please", "finally", "lastly", "next"];

/// Connectives that may open an ask and say nothing about which tool fits.
const OPENERS: &[&str] = &[
    "additionally",
    "afterwards",
    "also",
    "and",
    "finally",
    "first",
    "furthermore",
    "lastly",
    "moreover",
    "next",
    "plus",
    "second",
    "secondly",
    "then",
    "third",
    "thirdly",
];

/// Abbreviations whose full stop does not end a sentence.
const ABBREVIATIONS: &[&str] = &[
    "dr", "e.g", "etc", "i.e", "jr", "mr", "mrs", "ms", "no", "prof", "sr", "st", "vs",
];

/// A word of the text: its byte span and its lower-case core (without the
/// punctuation around it).
struct Word<'a> {
    start: usize,
    end: usize,
    raw: &'a str,
    core: String,
}

fn words(text: &str) -> Vec<Word<'_>> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        match (c.is_whitespace(), start) {
            (true, Some(s)) => {
                // `s` and `i` come from char_indices: always char boundaries.
                let raw = text.get(s..i).unwrap_or_default();
                let core = raw
                    .trim_matches(|c: char| !c.is_alphanumeric() && c != '\'' && c != '.')
                    .trim_end_matches('.')
                    .to_lowercase();
                out.push(Word {
                    start: s,
                    end: i,
                    raw,
                    core,
                });
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    out
}

/// Whether `word` closes a sentence: it ends in `.`, `?`, `!` or `;`
/// (closing quotes and brackets aside) and is not an abbreviation or an
/// initial ("U.S.", "J.").
fn ends_sentence(word: &Word<'_>) -> bool {
    let trimmed = word.raw.trim_end_matches(['"', '\'', ')', ']', '”', '’']);
    match trimmed.chars().last() {
        Some('?' | '!' | ';') => true,
        Some('.') => {
            let core = word.core.trim_start_matches(|c: char| !c.is_alphanumeric());
            !(ABBREVIATIONS.contains(&core)
                || core.chars().count() <= 1
                || core.contains('.')
                || core.chars().all(|c| c.is_ascii_digit()))
        }
        _ => false,
    }
}

/// Whether the words from `at` on start a new ask after a connective:
/// softeners skipped, the next word is an ask starter.
fn starts_ask(words: &[Word<'_>], mut at: usize) -> bool {
    while let Some(word) = words.get(at) {
        if SOFTENERS.contains(&word.core.as_str()) {
            at += 1;
            continue;
        }
        return is_ask_starter(word);
    }
    false
}

/// Whether an ask has a word that can point at a tool: one that is
/// neither an ask starter nor a stopword. "Find some for me?" does not;
/// ranked alone, it would promote whatever finds things.
fn names_something(ask: &[Word<'_>]) -> bool {
    ask.iter()
        .any(|word| !is_ask_starter(word) && !oap_index::tokenize(&word.core).is_empty())
}

/// The asks of `text` when it has at least two, else nothing. Each ask
/// is a slice of `text` without the connective that opened it.
pub fn split(text: &str) -> Vec<String> {
    let words = words(text);
    // Indices of the words that begin a new ask.
    let mut cuts = Vec::new();
    for i in 1..words.len() {
        let before = &words[i - 1];
        let word = &words[i];
        let after_comma = before.raw.ends_with(',');
        // A new sentence is a new ask only when it says so: it opens with
        // a connective ("Also, ...", "Secondly, ...") or an imperative verb
        // or question word. Other sentences are context for the ask they
        // follow ("... in Santa Rosa? I'd like a cartoon"), and a sentence
        // that only asks ("Can you find some options for me?") names no
        // tool on its own.
        let cut = (ends_sentence(before)
            && (word.core != "first" && OPENERS.contains(&word.core.as_str())
                || is_ask_starter(word)))
            || (word.core == "and" && starts_ask(&words, i + 1))
            || ((word.core == "then" || word.core == "also" || word.core == "plus")
                && (after_comma || before.core == "and")
                && starts_ask(&words, i + 1));
        // "and then": one cut, before "and".
        if cut && !(before.core == "and" && cuts.last() == Some(&(i - 1))) {
            cuts.push(i);
        }
    }
    if cuts.is_empty() {
        return Vec::new();
    }
    // Cuts are increasing and after the first word: every span has words.
    let bounds: Vec<usize> = std::iter::once(0)
        .chain(cuts)
        .chain(std::iter::once(words.len()))
        .collect();
    // Each ask without its opening connectives; too short ones glued to
    // the ask before (or, for the first, to the one after).
    let mut asks: Vec<(usize, usize)> = Vec::new();
    for span in bounds.windows(2) {
        let (from, to) = (span[0], span[1]);
        let mut from_word = from;
        while from_word < to && OPENERS.contains(&words[from_word].core.as_str()) {
            from_word += 1;
        }
        let long_enough = to - from_word >= MIN_WORDS && names_something(&words[from_word..to]);
        match asks.last_mut() {
            Some(last) if !long_enough => last.1 = to,
            _ if from_word >= to => {}
            _ => asks.push((from_word, to)),
        }
    }
    // The first ask is held to the same two rules as the others: "Could
    // you do something for me?" ranked alone would promote whatever does
    // things, so it opens the ask after it instead.
    if let [first, second, ..] = asks.as_slice() {
        if first.1 - first.0 < MIN_WORDS || !names_something(&words[first.0..first.1]) {
            let merged = (first.0, second.1);
            asks.splice(0..2, [merged]);
        }
    }
    if asks.len() > MAX_INTENTS {
        let tail_end = asks[asks.len() - 1].1;
        asks.truncate(MAX_INTENTS);
        if let Some(last) = asks.last_mut() {
            last.1 = tail_end;
        }
    }
    if asks.len() < 2 {
        return Vec::new();
    }
    asks.iter()
        .map(|&(from, to)| {
            let slice = text
                .get(words[from].start..words[to - 1].end)
                .unwrap_or_default();
            slice.trim_end_matches([',', ';', ':']).trim().to_string()
        })
        .collect()
}

/// The views of each ask of a request whose retrieval text is `dense`
/// (none for a request with one ask).
pub fn ask_views(dense: &str, options: &QueryOptions) -> Vec<QueryViews> {
    split(dense)
        .iter()
        .map(|ask| query::views_with(ask, options))
        .collect()
}

/// One ask as a query: its vector (none in lexical mode) and its terms.
#[derive(Debug, Clone, Default)]
pub struct Ask {
    /// The embedding of the ask's dense view.
    pub vector: Option<Vec<f32>>,
    /// The tokens of the ask's lexical view.
    pub terms: Vec<String>,
}

/// [`scoring::rank`] for a request and its asks: the request's own ranking
/// when it has none, else that ranking [`merge`]d with each ask's.
pub fn rank(
    index: &Index,
    scoring: &Scoring,
    mode: Mode,
    vector: Option<&[f32]>,
    terms: &[String],
    asks: &[Ask],
    top_k: usize,
) -> Vec<(u32, ScoreParts)> {
    let whole = scoring::rank(index, scoring, mode, vector, terms, top_k);
    if asks.is_empty() {
        return whole;
    }
    let per_ask: Vec<_> = asks
        .iter()
        .map(|ask| {
            scoring::rank(
                index,
                scoring,
                mode,
                ask.vector.as_deref(),
                &ask.terms,
                top_k,
            )
        })
        .collect();
    merge(
        &whole,
        &per_ask,
        |parts| scoring.accepts(mode, parts),
        top_k,
    )
}

/// The candidate list for a request with several asks: the whole
/// request's best first, then each ask's best that `fits` its ask and is
/// not listed yet, then the rest of the whole request's ranking; at most
/// `top_k`. Among the first slots, candidates that fit come before one
/// that does not, so the match is a tool that fits one of the asks.
pub fn merge(
    whole: &[(u32, ScoreParts)],
    per_ask: &[Vec<(u32, ScoreParts)>],
    fits: impl Fn(&ScoreParts) -> bool,
    top_k: usize,
) -> Vec<(u32, ScoreParts)> {
    let mut out: Vec<(u32, ScoreParts)> = Vec::with_capacity(top_k);
    let listed = |out: &[(u32, ScoreParts)], doc: u32| out.iter().any(|(d, _)| *d == doc);
    out.extend(whole.first().copied());
    for ranked in per_ask {
        let Some(&(doc, parts)) = ranked.first() else {
            continue;
        };
        // An ask whose best tool is already listed is served; its second
        // best is not promoted over the whole request's ranking.
        if !listed(&out, doc) && fits(&parts) {
            out.push((doc, parts));
        }
    }
    // Stable: the whole request's best stays first among those that fit.
    out.sort_by_key(|(_, parts)| !fits(parts));
    for &(doc, parts) in whole {
        if !listed(&out, doc) {
            out.push((doc, parts));
        }
    }
    out.truncate(top_k);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_asks_joined_by_and_before_a_verb() {
        assert_eq!(
            split("turn on the kitchen lights and tell me how many words are in this sentence"),
            [
                "turn on the kitchen lights",
                "tell me how many words are in this sentence"
            ]
        );
        assert_eq!(
            split("Search for open bars in Manhattan, USA and display their reviews"),
            [
                "Search for open bars in Manhattan, USA",
                "display their reviews"
            ]
        );
        assert_eq!(
            split("set a timer for ten minutes, and then please play some jazz in the kitchen"),
            [
                "set a timer for ten minutes",
                "please play some jazz in the kitchen"
            ]
        );
    }

    #[test]
    fn keeps_and_between_things_of_one_ask() {
        for one in [
            "what's the weather in Salt Lake City and New York",
            "find pet groomers near Sydney, Australia and their reviews",
            "compare apples and oranges by price per kilo",
            "add eggs and milk to the shopping list",
            "Michael Jordan's highest scoring game and the total championships he won?",
            "turn on the light",
            "",
        ] {
            assert!(split(one).is_empty(), "{one:?} split into {:?}", split(one));
        }
    }

    #[test]
    fn splits_sentences_but_not_at_abbreviations_initials_or_decimals() {
        assert_eq!(
            split("What is the exchange rate from ETH to USD? Also calculate the value of 5 ETH."),
            [
                "What is the exchange rate from ETH to USD?",
                "calculate the value of 5 ETH."
            ]
        );
        assert!(split("Book an appointment with Dr. Smith at St. Mary's for 3.5 hours").is_empty());
        assert!(split("Find flights from the U.S. to J. F. Kennedy airport today").is_empty());
    }

    #[test]
    fn a_sentence_of_context_or_a_bare_question_stays_with_its_ask() {
        for one in [
            "I'm interested in watching an animation film. Can you find some options for me?",
            "I'd like to see a list of movies featuring Pete Davidson. Find some for me?",
            "Check the weather in Larkspur, CA on March 10th. I'm traveling there and need to pack.",
        ] {
            assert!(split(one).is_empty(), "{one:?} split into {:?}", split(one));
        }
    }

    #[test]
    fn glues_short_pieces_to_their_neighbour_and_caps_the_count() {
        // "Thanks!" is too short to be an ask: glued to the one before.
        assert_eq!(
            split("play some jazz in the kitchen. Thanks! And set the lights to fifty percent"),
            [
                "play some jazz in the kitchen. Thanks!",
                "set the lights to fifty percent"
            ]
        );
        let many = "get the weather. find a hotel. book a table. play some music. \
                    set a timer. lock the door.";
        let asks = split(many);
        assert_eq!(asks.len(), MAX_INTENTS);
        assert_eq!(
            asks[MAX_INTENTS - 1],
            "play some music. set a timer. lock the door."
        );
    }

    #[test]
    fn a_first_ask_that_names_nothing_opens_the_next() {
        assert_eq!(
            split(
                "Could you find some for me? Find a hotel in Paris and set a timer for ten minutes"
            ),
            [
                "Could you find some for me? Find a hotel in Paris",
                "set a timer for ten minutes"
            ]
        );
        // With only one ask left there is nothing to cut.
        assert!(split("Could you find some for me? Find a hotel in Paris").is_empty());
    }

    #[test]
    fn ask_starters_are_sorted_for_binary_search() {
        assert!(ASK_STARTERS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn split_never_panics_on_odd_text() {
        for odd in [
            "and",
            "and and and set",
            ". . . .",
            "¿Qué? ¡Sí! and then 😀 tell me",
            "   \u{a0} ",
            "a. b. c. d. e. f.",
        ] {
            let asks = split(odd);
            assert!(asks.iter().all(|a| !a.is_empty()), "{odd:?}: {asks:?}");
        }
    }

    fn parts(fused: f32, fits: bool) -> ScoreParts {
        ScoreParts {
            dense: Some(if fits { 0.5 } else { 0.1 }),
            lexical: 0.0,
            fused,
            evidence: 0.0,
        }
    }

    #[test]
    fn merge_gives_each_fitting_ask_a_slot_after_the_whole_requests_best() {
        let fits = |p: &ScoreParts| p.dense.is_some_and(|d| d >= 0.3);
        let whole = vec![
            (1, parts(0.9, true)),
            (2, parts(0.8, true)),
            (3, parts(0.7, true)),
        ];
        let asks = vec![
            vec![(1, parts(0.9, true)), (4, parts(0.6, true))], // served by the whole's best
            vec![(5, parts(0.6, true)), (2, parts(0.5, true))],
            vec![(6, parts(0.2, false))], // nothing fits this ask
        ];
        let merged: Vec<u32> = merge(&whole, &asks, fits, 3).iter().map(|m| m.0).collect();
        assert_eq!(merged, [1, 5, 2]);
        let merged: Vec<u32> = merge(&whole, &asks, fits, 1).iter().map(|m| m.0).collect();
        assert_eq!(
            merged,
            [1],
            "one slot: the whole request's best, as without asks"
        );
        // An ask's candidate carries its ask's scores.
        assert_eq!(merge(&whole, &asks, fits, 2)[1].1.fused, 0.6);
    }

    #[test]
    fn merge_puts_a_fitting_ask_before_a_whole_request_best_that_does_not_fit() {
        let fits = |p: &ScoreParts| p.dense.is_some_and(|d| d >= 0.3);
        let whole = vec![(1, parts(0.4, false)), (2, parts(0.3, false))];
        let asks = vec![vec![(7, parts(0.6, true))], vec![(8, parts(0.5, true))]];
        let merged: Vec<u32> = merge(&whole, &asks, fits, 3).iter().map(|m| m.0).collect();
        assert_eq!(merged, [7, 8, 1]);
        assert!(merge(&[], &[], fits, 3).is_empty());
    }
}
