//! Turning a user's task into what is embedded and what is matched lexically.
//!
//! Voice and chat tasks often carry their data inline: "count the words in:
//! \<a paragraph>", "extract the name field from {...}". The data's content
//! says nothing about which capability fits, and it drowns the instruction
//! in a mean-pooled embedding and floods BM25 with irrelevant terms. Its
//! *shape*, though, is often the strongest clue there is: "get the first
//! element from: [10, 20, 30]" only names a JSON tool once one knows the data
//! is JSON. So the data is cut out of the retrieval text and replaced by a
//! few plain words describing its shape ("JSON data", "lines of text"), words
//! a sentence-embedding model relates to capability descriptions. The
//! original task is still what the model later sees.

use serde_json::Value;

/// Longest instruction kept, in bytes: retrieval needs the ask, not an essay.
const MAX_INSTRUCTION: usize = 1_000;

/// At most this many `{`/`[` positions are tried as the start of inline
/// JSON; each try parses up to the end of the task, so this bounds the work
/// a hostile task can cause.
const MAX_JSON_TRIES: usize = 16;

/// A data part is "prose" (more instruction, not data) when at least half
/// of its non-empty lines have this many words; data lines (log lines, list
/// items, table rows, code) are short or not made of words.
const PROSE_LINE_WORDS: usize = 6;

/// What retrieval is allowed to add to a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryOptions {
    /// Describe inline data by its shape in the embedded text.
    pub dense_hint: bool,
    /// Add the same words to the lexical text: capabilities that process
    /// a kind of data name it ("Process JSON data", "Count lines ... in
    /// text"). Shape words that many descriptions share get a low idf, so
    /// they add little where they do not discriminate.
    pub lexical_hint: bool,
    /// Drop leading courtesy and address ("hey", "could you please", "I
    /// want you to") from both views: words every request may carry say
    /// nothing about which tool fits, and in a mean-pooled embedding of a
    /// short request they weigh as much as the ask.
    pub strip_filler: bool,
    /// Rank each ask of a request with several on its own too
    /// ([`crate::intents`]).
    pub split_asks: bool,
    /// Words put before the embedded text only (the lexical view is left
    /// alone: a prefix's words would match every description that has
    /// them). Off: "I need a tool to …" helped every tuning corpus but
    /// BFCL and lowered Home Assistant's evaluation half (docs/BENCHMARKS.md,
    /// "A query prefix").
    pub dense_prefix: Option<&'static str>,
}

impl Default for QueryOptions {
    fn default() -> Self {
        QueryOptions {
            dense_hint: true,
            lexical_hint: true,
            strip_filler: false,
            split_asks: true,
            dense_prefix: None,
        }
    }
}

/// The shape of the data a task carries, as far as retrieval cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataShape {
    /// A JSON object or array (inline or on the following lines).
    Json,
    /// Lines with the same number of tabs or commas: a delimited table.
    Table,
    /// Other lines of text.
    Lines,
    /// An arithmetic expression between numbers ("7 * 6", "2^10"), also
    /// said in words ("fifteen percent of eighty", [`crate::spoken_numbers`]).
    Arithmetic,
}

impl DataShape {
    /// The words that stand for the data in the retrieval text.
    pub fn words(self) -> &'static str {
        match self {
            DataShape::Json => "JSON data",
            DataShape::Table => "a table of delimited fields",
            DataShape::Lines => "lines of text",
            // Chosen on the tuning data (the shared task set's arithmetic
            // requests, both encoders): of "an arithmetic expression", "an
            // arithmetic calculation", "a calculation", "arithmetic
            // calculation of numbers" and others, these words gave the
            // calculator the widest lead over the next tool and the highest
            // "fits" score; they are the words calculators describe
            // themselves with.
            DataShape::Arithmetic => "an arithmetic calculation of a mathematical expression",
        }
    }
}

/// The views of a task used for retrieval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryViews {
    /// Text embedded for dense retrieval.
    pub dense: String,
    /// Text tokenised for lexical retrieval.
    pub lexical: String,
    /// The shapes of the inline data found, in order of appearance.
    pub shapes: Vec<DataShape>,
}

/// [`views_with`] under the default options.
pub fn views(task: &str) -> QueryViews {
    views_with(task, &QueryOptions::default())
}

/// Splits a task into its instruction and its inline data, and describes
/// the data by its shape.
pub fn views_with(task: &str, options: &QueryOptions) -> QueryViews {
    let task = task.trim();
    let split = split_task(task);
    let mut shapes = split.shapes;
    if let Some(shape) = split.trailing {
        shapes.push(shape);
    }
    let instruction = cap(&split.instruction);
    // A task that is only data keeps its text: there is no instruction to
    // prefer, and an empty query would match nothing.
    if instruction.trim().is_empty() {
        let whole = cap(task).to_string();
        return QueryViews {
            lexical: strip_quoted_literals(&whole),
            dense: whole,
            shapes,
        };
    }
    let instruction = instruction.trim();
    let instruction = if options.strip_filler {
        strip_filler(instruction)
    } else {
        instruction
    };
    // Arithmetic said in words is data too: its words ("fifteen", "times",
    // "square") name nothing a calculator's description says, and some
    // name other tools ("times"). It is cut out of both views like inline
    // JSON; an expression of digits and symbols only ("12*34") has no such
    // words and stays, described all the same.
    let spoken = crate::spoken_numbers::arithmetic_spans(instruction);
    let instruction = cut_out(instruction, &spoken);
    if (!spoken.is_empty() || has_symbolic_arithmetic(&instruction))
        && !shapes.contains(&DataShape::Arithmetic)
    {
        shapes.push(DataShape::Arithmetic);
    }

    let mut dense = instruction.clone();
    let mut lexical = strip_quoted_literals(&instruction);
    if !shapes.is_empty() {
        let words = shapes
            .iter()
            .map(|s| s.words())
            .collect::<Vec<_>>()
            .join(", ");
        // Nothing but the data ("fifteen percent of eighty"): its shape is
        // the whole query.
        let only_data = !instruction.chars().any(char::is_alphanumeric);
        if options.dense_hint {
            // Appended rather than spliced in where the data was: the
            // instruction reads unchanged and the hint is one clause.
            dense = if only_data {
                words.clone()
            } else {
                format!("{dense} ({words})")
            };
        }
        if options.lexical_hint {
            lexical.push(' ');
            lexical.push_str(&words);
        }
    }
    if let Some(prefix) = options.dense_prefix {
        dense.insert_str(0, prefix);
    }
    QueryViews {
        dense,
        lexical,
        shapes,
    }
}

/// Leading phrases that address the assistant or ask politely, lower case,
/// each followed by a word boundary. Longer phrases come before their
/// prefixes ("could you please" before "could you").
const FILLER: &[&str] = &[
    "hey google",
    "hey siri",
    "hey assistant",
    "ok google",
    "okay google",
    "hey",
    "hi",
    "hello",
    "ok",
    "okay",
    "so",
    "um",
    "uh",
    "assistant",
    "computer",
    "please",
    "kindly",
    "could you please",
    "can you please",
    "would you please",
    "will you please",
    "could you",
    "can you",
    "would you",
    "will you",
    "would you mind",
    "i want you to",
    "i need you to",
    "i would like you to",
    "i'd like you to",
    "i want to",
    "i need to",
    "i would like to",
    "i'd like to",
    "help me",
    "go ahead and",
    "quickly",
];

/// `text` without leading filler phrases and the punctuation after them;
/// `text` itself if nothing would be left.
#[allow(
    clippy::string_slice,
    reason = "every cut is after an ASCII phrase that matched (checked to be a char boundary)"
)]
fn strip_filler(text: &str) -> &str {
    let mut rest = text;
    loop {
        // ASCII lower case keeps every byte length, so a phrase's length
        // is also where it ends in `rest`.
        let lower_head: String = rest
            .chars()
            .take(24)
            .map(|c| c.to_ascii_lowercase())
            .collect();
        let found = FILLER
            .iter()
            .filter(|p| {
                lower_head.starts_with(*p)
                    && lower_head[p.len()..]
                        .chars()
                        .next()
                        .is_none_or(|c| !c.is_alphanumeric() && c != '\'')
            })
            .map(|p| p.len())
            .max();
        let Some(len) = found.filter(|&len| rest.is_char_boundary(len)) else {
            break;
        };
        let next = rest[len..].trim_start_matches(|c: char| {
            c.is_whitespace() || matches!(c, ',' | '!' | '.' | ':' | ';' | '-')
        });
        if !next.chars().any(char::is_alphanumeric) {
            break;
        }
        rest = next;
    }
    rest
}

fn cap(text: &str) -> &str {
    oap_manifest::clip_bytes(text, MAX_INSTRUCTION)
}

/// A task cut into instruction and data.
struct Split {
    /// The instruction with inline JSON cut out.
    instruction: String,
    /// Shapes of data cut out of the first line.
    shapes: Vec<DataShape>,
    /// Shape of the data on the lines after the first, if they are data.
    trailing: Option<DataShape>,
}

/// The instruction is the first line with inline JSON removed; the lines
/// after it are data, unless they read as prose (then the task simply goes
/// on, e.g. a story followed by the questions it sets up).
#[allow(
    clippy::string_slice,
    reason = "every index comes from str::find, char_indices or a checked char boundary"
)]
fn split_task(task: &str) -> Split {
    let mut instruction = String::new();
    let mut shapes = Vec::new();
    let mut tries = 0;
    let mut pos = 0;
    let mut line_end = task.find('\n').unwrap_or(task.len());
    let mut cursor = 0;
    while cursor < line_end {
        let Some(offset) = task[cursor..line_end].find(['{', '[']) else {
            break;
        };
        let start = cursor + offset;
        cursor = start + 1;
        if tries >= MAX_JSON_TRIES {
            break;
        }
        tries += 1;
        if let Some(len) = json_span(&task[start..]) {
            instruction.push_str(&task[pos..start]);
            instruction.push(' ');
            pos = start + len;
            cursor = pos;
            // JSON may run over several lines; the instruction goes on to
            // the end of the line where it closes.
            line_end = line_end.max(pos);
            line_end = task[line_end..]
                .find('\n')
                .map_or(task.len(), |n| line_end + n);
            if !shapes.contains(&DataShape::Json) {
                shapes.push(DataShape::Json);
            }
        }
    }
    instruction.push_str(&task[pos..line_end]);
    let rest = &task[line_end..];

    let trailing = if rest.trim().is_empty() {
        None
    } else if is_prose(rest) {
        instruction.push(' ');
        instruction.push_str(rest);
        None
    } else {
        Some(shape_of_lines(rest))
    };
    Split {
        instruction: squash_spaces(&instruction),
        shapes,
        trailing,
    }
}

/// Length in bytes of the JSON object or array that `text` starts with, if
/// it is a real one: an object with a key or an array with two elements
/// ("see [1]" in prose is not data).
fn json_span(text: &str) -> Option<usize> {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let value = stream.next()?.ok()?;
    let meaningful = match &value {
        Value::Object(map) => !map.is_empty(),
        Value::Array(items) => items.len() >= 2,
        _ => false,
    };
    meaningful.then(|| stream.byte_offset())
}

fn is_prose(rest: &str) -> bool {
    let lines: Vec<&str> = rest.lines().filter(|l| !l.trim().is_empty()).collect();
    let long = lines
        .iter()
        .filter(|l| l.split_whitespace().filter(|w| is_word(w)).count() >= PROSE_LINE_WORDS)
        .count();
    !lines.is_empty() && long * 2 >= lines.len()
}

/// A word of prose: letters, possibly followed by punctuation ("done.",
/// "it's,"); `main()`, `{`, `0;` and `key=value` are not.
fn is_word(token: &str) -> bool {
    let core = token.trim_end_matches(['.', ',', ';', ':', '!', '?', '"', '\'', ')']);
    let core = core.trim_start_matches(['"', '\'', '(']);
    core.chars().any(char::is_alphabetic)
        && core
            .chars()
            .all(|c| c.is_alphabetic() || c == '\'' || c == '-')
}

#[allow(
    clippy::string_slice,
    reason = "every index comes from str::find, char_indices or a checked char boundary"
)]
fn shape_of_lines(rest: &str) -> DataShape {
    let trimmed = rest.trim();
    if (trimmed.starts_with('{') || trimmed.starts_with('['))
        && json_span(trimmed).is_some_and(|len| trimmed[len..].trim().is_empty())
    {
        return DataShape::Json;
    }
    let lines: Vec<&str> = trimmed.lines().filter(|l| !l.trim().is_empty()).collect();
    for delimiter in ['\t', ','] {
        let count = |line: &&str| line.matches(delimiter).count();
        if let Some(first) = lines.first().map(count) {
            if lines.len() >= 2 && first >= 1 && lines.iter().all(|l| count(l) == first) {
                return DataShape::Table;
            }
        }
    }
    DataShape::Lines
}

/// Whether the text holds `number operator number`, with the operator as a
/// symbol or in words ("17 times 23", "fifteen percent of eighty"). `-` and
/// `/` count only with spaces around them, so dates (2024-06-15,
/// 05/10/2023), ranges and version numbers are not taken for arithmetic.
#[cfg(test)]
fn has_arithmetic(text: &str) -> bool {
    has_symbolic_arithmetic(text) || !crate::spoken_numbers::arithmetic_spans(text).is_empty()
}

/// `text` without the byte ranges in `spans` (sorted, apart, on char
/// boundaries), each replaced by a space, spaces squashed.
fn cut_out(text: &str, spans: &[std::ops::Range<usize>]) -> String {
    let mut kept = String::with_capacity(text.len());
    let mut from = 0;
    for span in spans {
        kept.push_str(text.get(from..span.start).unwrap_or_default());
        kept.push(' ');
        from = span.end;
    }
    kept.push_str(text.get(from..).unwrap_or_default());
    squash_spaces(&kept)
}

fn has_symbolic_arithmetic(text: &str) -> bool {
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if !chars[i].is_ascii_digit() || (i > 0 && is_word_char(chars[i - 1])) {
            i += 1;
            continue;
        }
        // A number: digits with an optional decimal part.
        let mut j = i;
        while j < chars.len() && (chars[j].is_ascii_digit() || chars[j] == '.') {
            j += 1;
        }
        let spaced_before = chars.get(j).is_some_and(|c| c.is_whitespace());
        let mut k = j;
        while k < chars.len() && chars[k].is_whitespace() {
            k += 1;
        }
        let Some(&op) = chars.get(k) else {
            break;
        };
        let mut m = k + 1;
        let spaced_after = chars.get(m).is_some_and(|c| c.is_whitespace());
        while m < chars.len() && (chars[m].is_whitespace() || chars[m] == '(') {
            m += 1;
        }
        let operand = chars.get(m).is_some_and(|c| c.is_ascii_digit());
        let operator = match op {
            '+' | '*' | '^' | '×' | '÷' | '%' => true,
            '-' | '/' => spaced_before && spaced_after,
            _ => false,
        };
        if operator && operand {
            return true;
        }
        i = j.max(i + 1);
    }
    false
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '.'
}

fn squash_spaces(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Quoted literals are usually the data to search for ("error", "2024"):
/// they are kept in the embedding (they show the shape of the ask) but would
/// only add noise terms to BM25.
fn strip_quoted_literals(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_quote = false;
    for ch in text.chars() {
        if ch == '"' {
            in_quote = !in_quote;
            out.push(' ');
            continue;
        }
        if !in_quote {
            out.push(ch);
        }
    }
    if in_quote {
        // Unbalanced quote: keeping the text is safer than dropping half the task.
        return text.replace('"', " ");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain() -> QueryOptions {
        QueryOptions {
            dense_hint: false,
            lexical_hint: false,
            strip_filler: false,
            split_asks: false,
            dense_prefix: None,
        }
    }

    #[test]
    fn inline_data_after_the_first_line_is_dropped_and_described() {
        let task = "find lines containing \"error\" in:\nfoo\nerror happened\nbar";
        let v = views(task);
        assert_eq!(
            v.dense,
            "find lines containing \"error\" in: (lines of text)"
        );
        assert_eq!(v.shapes, [DataShape::Lines]);
        assert_eq!(
            v.lexical.split_whitespace().collect::<Vec<_>>(),
            ["find", "lines", "containing", "in:", "lines", "of", "text"]
        );
        let v = views_with(task, &plain());
        assert_eq!(v.dense, "find lines containing \"error\" in:");
        assert_eq!(
            v.lexical.split_whitespace().collect::<Vec<_>>(),
            ["find", "lines", "containing", "in:"]
        );
    }

    #[test]
    fn inline_json_is_cut_out_wherever_it_is() {
        let v = views("extract the name field from {\"name\": \"Ada\", \"age\": 36}");
        assert_eq!(v.dense, "extract the name field from (JSON data)");
        let v = views("transform {\"first\":\"A\",\"last\":\"B\"} to get the full name");
        assert_eq!(v.dense, "transform to get the full name (JSON data)");
        let v = views("get the first element from: [10, 20, 30]");
        assert_eq!(v.dense, "get the first element from: (JSON data)");
    }

    #[test]
    fn json_spanning_lines_is_one_datum() {
        let v = views("pretty-print this: {\n  \"a\": [1,\n 2]\n}");
        assert_eq!(v.dense, "pretty-print this: (JSON data)");
        let v = views("summarise:\n{\"a\": 1,\n \"b\": 2}");
        assert_eq!(v.shapes, [DataShape::Json]);
    }

    #[test]
    fn brackets_that_are_not_json_stay() {
        let v = views("see [1] and {braces} in the text");
        assert_eq!(v.dense, "see [1] and {braces} in the text");
        assert!(v.shapes.is_empty());
    }

    #[test]
    fn delimited_lines_are_a_table() {
        let v = views("sum the second column:\na,1\nb,2\nc,3");
        assert_eq!(v.shapes, [DataShape::Table]);
        let v = views("find admin in:\nuser\tadmin\nuser\tguest");
        assert_eq!(v.shapes, [DataShape::Table]);
        let v = views("find commas in:\na,b\nc");
        assert_eq!(v.shapes, [DataShape::Lines]);
    }

    #[test]
    fn prose_after_the_first_line_is_more_instruction() {
        let v = views(
            "I have a plan for tomorrow.\nPlease book a table for four people at an Italian place.",
        );
        assert!(v.dense.contains("Italian"));
        assert!(v.shapes.is_empty());
    }

    #[test]
    fn code_after_the_first_line_is_data_not_prose() {
        let v = views("compile this program:\nint main() { return 0; }\nvoid f(int a, int b) {}");
        assert_eq!(v.shapes, [DataShape::Lines]);
        assert_eq!(v.dense, "compile this program: (lines of text)");
    }

    #[test]
    fn arithmetic_is_recognised_but_dates_are_not() {
        assert!(has_arithmetic("what is 7 * 6?"));
        assert!(has_arithmetic("evaluate (10 + 5) * 3"));
        assert!(has_arithmetic("compute 2^16"));
        assert!(has_arithmetic("what is 100 - 37?"));
        assert!(has_arithmetic("calculate 1 / 3"));
        assert!(!has_arithmetic("logs from 2024-06-15"));
        assert!(!has_arithmetic("check in on 05/10/2023"));
        assert!(!has_arithmetic("a 5% markup on 1000 items"));
        assert!(!has_arithmetic("version v2.3 of the api"));
        assert!(has_arithmetic("what is 17 times 23?"));
        assert!(has_arithmetic("12.5 divided by 5"));
        assert!(has_arithmetic("2 to the power of 10"));
        assert!(!has_arithmetic("3 times a day"));
        assert!(!has_arithmetic("times 2"));
        assert_eq!(
            views("what is 7 * 6?").dense,
            "what is 7 * 6? (an arithmetic calculation of a mathematical expression)"
        );
        assert!(has_arithmetic("what's fifteen percent of eighty"));
        assert!(has_arithmetic("15% of 80"));
        assert!(has_arithmetic("12*34"));
    }

    #[test]
    fn arithmetic_in_words_is_cut_out_and_described() {
        let v = views("hey, what's twelve times thirty four?");
        assert_eq!(v.shapes, [DataShape::Arithmetic]);
        assert_eq!(
            v.dense,
            "hey, what's ? (an arithmetic calculation of a mathematical expression)"
        );
        assert_eq!(
            v.lexical,
            "hey, what's ? an arithmetic calculation of a mathematical expression"
        );
        // Digits and symbols alone stay: no word of theirs misleads.
        let v = views("what is 12*34");
        assert_eq!(v.shapes, [DataShape::Arithmetic]);
        assert!(v.dense.starts_with("what is 12*34 ("), "{}", v.dense);
        // Only the expression: its shape is the whole query.
        let v = views("fifteen percent of eighty");
        assert_eq!(v.dense, DataShape::Arithmetic.words());
        // Inline data and a spoken expression: both shapes, in order.
        let v = views("multiply the count in {\"count\": 5} by two times three");
        assert_eq!(v.shapes, [DataShape::Json, DataShape::Arithmetic]);
    }

    #[test]
    fn a_task_that_is_only_data_is_kept_whole() {
        let v = views("{\"a\": 1}");
        assert_eq!(v.dense, "{\"a\": 1}");
    }

    #[test]
    fn lexical_hint_is_optional() {
        let options = QueryOptions {
            dense_hint: true,
            lexical_hint: true,
            strip_filler: false,
            split_asks: false,
            dense_prefix: None,
        };
        let v = views_with("count lines in:\na\nb", &options);
        assert!(v.lexical.ends_with("lines of text"));
        let off = QueryOptions {
            lexical_hint: false,
            ..options
        };
        let v = views_with("count lines in:\na\nb", &off);
        assert!(!v.lexical.contains("text"));
    }

    #[test]
    fn a_dense_prefix_goes_before_the_embedded_text_only() {
        let options = QueryOptions {
            dense_prefix: Some("I need a tool to "),
            ..QueryOptions::default()
        };
        let v = views_with("count lines in:\na\nb", &options);
        assert_eq!(v.dense, "I need a tool to count lines in: (lines of text)");
        assert_eq!(v.lexical, "count lines in: lines of text");
        assert_eq!(views("pause the music").dense, "pause the music");
    }

    #[test]
    fn leading_filler_is_dropped_only_when_asked() {
        let on = QueryOptions {
            strip_filler: true,
            ..QueryOptions::default()
        };
        let v = views_with("Hey, could you please turn off the porch light", &on);
        assert_eq!(v.dense, "turn off the porch light");
        assert_eq!(v.lexical, "turn off the porch light");
        assert_eq!(
            views_with("OK Google: I want you to list my timers", &on).dense,
            "list my timers"
        );
        // Whole words only, and nothing left means nothing dropped.
        assert_eq!(
            views_with("history of my lights", &on).dense,
            "history of my lights"
        );
        assert_eq!(views_with("okay", &on).dense, "okay");
        assert_eq!(views_with("Can you?", &on).dense, "Can you?");
        // Non-ASCII text after a phrase is cut at a character boundary.
        assert_eq!(views_with("hey, ünïcode lamp", &on).dense, "ünïcode lamp");
        let off = views_with(
            "Hey, could you please turn off the porch light",
            &QueryOptions::default(),
        );
        assert_eq!(off.dense, "Hey, could you please turn off the porch light");
    }

    #[test]
    fn unbalanced_quotes_keep_the_text() {
        let v = views("search for \"hello");
        assert_eq!(
            v.lexical.split_whitespace().collect::<Vec<_>>(),
            ["search", "for", "hello"]
        );
    }

    #[test]
    fn very_long_instructions_are_capped() {
        let long = "word ".repeat(1_000);
        assert!(views(&long).dense.len() <= MAX_INSTRUCTION);
        let json_heavy = "[".repeat(10_000);
        assert!(views(&json_heavy).dense.len() <= MAX_INSTRUCTION);
    }
}
