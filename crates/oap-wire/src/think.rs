//! Thinking a model writes into its content between `<think>` and
//! `</think>`, separated from the answer while it streams.
//!
//! Reasoning models behind a chat template that does not parse their
//! thinking (an Ollama model without the `thinking` capability, a GGUF
//! imported with a plain template, an OpenAI-compatible server) stream it as
//! ordinary content: `<think>I should count…</think>The answer is 4.` Some
//! templates open the tag in the prompt, so the answer has only the closing
//! `</think>`. [`ThinkSplitter`] takes the content piece by piece, as it
//! arrives, and returns what is thinking and what is answer, so every surface
//! can carry the thinking in its own field (`message.thinking`,
//! `reasoning_content`, a Responses reasoning item).
//!
//! The rules, chosen to match what such models print:
//! - `<think>` opens thinking wherever it appears; text before it stays
//!   answer. `</think>` closes it. Whitespace right after either tag is
//!   dropped (models put a newline there), as is whitespace before the
//!   first tag of an answer.
//! - A tag split across pieces (`<th` + `ink>`, `</th` + `ink>`) is
//!   recognised: a piece's end that could still become a tag is held until
//!   the next piece decides it (at most the tag's length).
//! - `</think>` with no `<think>` before it in the answer means everything
//!   before it was thinking ([`Split::closed_unopened`] says so, since
//!   what was already passed on as answer cannot be taken back here); a
//!   splitter made with [`ThinkSplitter::starting_inside`] treats the
//!   answer as opened from its start.
//! - An answer that ends inside thinking (no `</think>`: the model stopped
//!   or ran out of tokens mid-thought) keeps what it wrote as thinking, as
//!   Ollama's own parser does: half a thought is not an answer, and the
//!   empty answer lets the loop look for a call printed in that thinking.
//! - After the first block, tags are read again: a second `<think>` opens
//!   thinking again; a second `</think>` without an opening is text.

/// The tag that opens thinking.
pub const OPEN: &str = "<think>";
/// The tag that closes thinking.
pub const CLOSE: &str = "</think>";

/// What one piece of content turned out to be.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Split {
    /// Text inside `<think>` … `</think>`.
    pub thinking: String,
    /// Text outside the tags: the answer.
    pub content: String,
    /// A `</think>` came with no `<think>` before it: the answer's content
    /// passed on before this piece was thinking too.
    pub closed_unopened: bool,
}

impl Split {
    fn push(&mut self, inside: bool, text: &str) {
        if inside {
            self.thinking.push_str(text);
        } else {
            self.content.push_str(text);
        }
    }

    /// Appends `later`, a split of the text that followed; when `later`
    /// closed unopened thinking, this split's content was thinking too.
    pub fn extend(&mut self, later: Split) {
        if later.closed_unopened {
            let content = std::mem::take(&mut self.content);
            self.thinking.push_str(&content);
        }
        self.thinking.push_str(&later.thinking);
        self.content.push_str(&later.content);
        self.closed_unopened |= later.closed_unopened;
    }
}

/// Splits one answer's streamed content into thinking and answer (the
/// module docs give the rules). One splitter per answer (per round).
#[derive(Debug, Default, Clone)]
pub struct ThinkSplitter {
    /// Inside `<think>` … `</think>`.
    inside: bool,
    /// A tag was seen (or the answer started inside): a lone `</think>`
    /// is no longer read as the end of unopened thinking.
    tagged: bool,
    /// Whitespace at the start of the next text is dropped (after a tag).
    trim_next: bool,
    /// Non-whitespace answer text went out: whitespace is no longer held.
    content_started: bool,
    /// The end of the text so far that may still be a tag, or whitespace
    /// held before the first tag.
    pending: String,
}

impl ThinkSplitter {
    /// A splitter for an answer that starts as answer.
    pub fn new() -> ThinkSplitter {
        ThinkSplitter::default()
    }

    /// A splitter for a model whose template opens `<think>` in the
    /// prompt: its answer starts inside thinking.
    pub fn starting_inside() -> ThinkSplitter {
        ThinkSplitter {
            inside: true,
            tagged: true,
            trim_next: true,
            ..ThinkSplitter::default()
        }
    }

    /// Whether the answer so far ends inside thinking.
    pub fn is_inside(&self) -> bool {
        self.inside
    }

    /// Takes the next piece of content; returns what of it (and of what was
    /// held before it) is decided.
    pub fn push(&mut self, piece: &str) -> Split {
        let mut text = std::mem::take(&mut self.pending);
        text.push_str(piece);
        let mut split = Split::default();
        let mut rest = text.as_str();
        loop {
            let tag = self.next_tag(rest);
            let Some((at, is_open)) = tag else {
                let keep = self.undecided_tail(rest);
                let (decided, held) = rest.split_at(rest.len() - keep);
                self.emit(&mut split, decided);
                self.pending.push_str(held);
                if !self.inside && !self.content_started && !self.tagged {
                    // Whitespace before the first tag waits: an answer
                    // that opens with "\n<think>" has no answer text there.
                    if split.content.trim().is_empty() {
                        self.pending.insert_str(0, &split.content);
                        split.content.clear();
                    }
                }
                return split;
            };
            let (before, after) = rest.split_at(at);
            if is_open {
                // Whitespace before the first tag is no answer.
                if self.content_started || self.tagged || !before.trim().is_empty() {
                    self.emit(&mut split, before);
                }
                self.inside = true;
                rest = after.get(OPEN.len()..).unwrap_or_default();
            } else if self.inside {
                self.emit(&mut split, before);
                self.inside = false;
                rest = after.get(CLOSE.len()..).unwrap_or_default();
            } else {
                // `</think>` before any `<think>`: all of this answer so
                // far was thinking.
                split.closed_unopened = true;
                split.thinking.push_str(&split.content);
                split.content.clear();
                split.thinking.push_str(before);
                rest = after.get(CLOSE.len()..).unwrap_or_default();
            }
            self.tagged = true;
            self.trim_next = true;
        }
    }

    /// The answer is over: what was held is decided as it stands (a partial
    /// tag is text; inside an unclosed block it is thinking).
    pub fn finish(&mut self) -> Split {
        let mut split = Split::default();
        let held = std::mem::take(&mut self.pending);
        let trimmed = if self.trim_next {
            held.trim_start()
        } else {
            held.as_str()
        };
        split.push(self.inside, trimmed);
        self.trim_next = false;
        split
    }

    /// The first tag in `text` that acts now: its offset and whether it
    /// opens. Inside, only `</think>`; outside, `<think>`, or a lone
    /// `</think>` before any tag.
    fn next_tag(&self, text: &str) -> Option<(usize, bool)> {
        if self.inside {
            return text.find(CLOSE).map(|at| (at, false));
        }
        let open = text.find(OPEN).map(|at| (at, true));
        let close = (!self.tagged)
            .then(|| text.find(CLOSE).map(|at| (at, false)))
            .flatten();
        match (open, close) {
            (Some(open), Some(close)) => Some(if open.0 < close.0 { open } else { close }),
            (open, close) => open.or(close),
        }
    }

    /// How many bytes at the end of `text` could still be the start of a
    /// tag that acts in the current state.
    fn undecided_tail(&self, text: &str) -> usize {
        let tags: &[&str] = match (self.inside, self.tagged) {
            (true, _) => &[CLOSE],
            (false, true) => &[OPEN],
            (false, false) => &[OPEN, CLOSE],
        };
        let longest = tags.iter().map(|t| t.len() - 1).max().unwrap_or(0);
        (1..=longest.min(text.len()))
            .rev()
            .find(|&n| {
                let start = text.len() - n;
                text.is_char_boundary(start)
                    && text
                        .get(start..)
                        .is_some_and(|tail| tags.iter().any(|tag| tag.starts_with(tail)))
            })
            .unwrap_or(0)
    }

    /// Text decided to be in the current state, with the whitespace after
    /// a tag dropped.
    fn emit(&mut self, split: &mut Split, text: &str) {
        let text = if self.trim_next {
            let trimmed = text.trim_start();
            if !trimmed.is_empty() {
                self.trim_next = false;
            }
            trimmed
        } else {
            text
        };
        if !self.inside && !text.trim().is_empty() {
            self.content_started = true;
        }
        split.push(self.inside, text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `pieces` to `splitter` and finishes: (thinking, content,
    /// closed_unopened).
    fn run(mut splitter: ThinkSplitter, pieces: &[&str]) -> (String, String, bool) {
        let mut all = Split::default();
        for piece in pieces {
            all.extend(splitter.push(piece));
        }
        all.extend(splitter.finish());
        (all.thinking, all.content, all.closed_unopened)
    }

    fn split(pieces: &[&str]) -> (String, String, bool) {
        run(ThinkSplitter::new(), pieces)
    }

    #[test]
    fn a_tagged_block_is_thinking_and_the_rest_is_the_answer() {
        assert_eq!(
            split(&["<think>\nI should count.\n</think>\n\nThe answer is 4."]),
            ("I should count.\n".into(), "The answer is 4.".into(), false)
        );
        assert_eq!(
            split(&["plain answer"]),
            (String::new(), "plain answer".into(), false)
        );
    }

    #[test]
    fn tags_split_across_pieces_are_recognised() {
        assert_eq!(
            split(&["<th", "in", "k>hmm</th", "ink>Four."]),
            ("hmm".into(), "Four.".into(), false)
        );
        // Byte by byte, with a multi-byte character inside.
        let text = "<think>é?</think>ö";
        let pieces: Vec<String> = text.chars().map(String::from).collect();
        let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
        assert_eq!(split(&pieces), ("é?".into(), "ö".into(), false));
    }

    #[test]
    fn nothing_that_could_be_a_tag_is_passed_on_early() {
        let mut splitter = ThinkSplitter::new();
        let first = splitter.push("Answer <th");
        assert_eq!(first.content, "Answer ");
        let second = splitter.push("ings>");
        assert_eq!(second.content, "<things>", "not a tag after all");
        let mut splitter = ThinkSplitter::new();
        assert_eq!(
            splitter.push("<think>a</"),
            Split {
                thinking: "a".into(),
                ..Split::default()
            }
        );
        assert!(splitter.is_inside());
    }

    #[test]
    fn text_before_the_tag_stays_the_answer() {
        assert_eq!(
            split(&["Sure. ", "<think>check</think>", "Done."]),
            ("check".into(), "Sure. Done.".into(), false)
        );
        assert_eq!(
            split(&["\n\n", "<think>x</think>y"]),
            ("x".into(), "y".into(), false),
            "whitespace before the first tag is not an answer"
        );
    }

    #[test]
    fn an_unclosed_block_stays_thinking() {
        assert_eq!(
            split(&["<think>I will call", " the tool </thi"]),
            ("I will call the tool </thi".into(), String::new(), false)
        );
    }

    #[test]
    fn a_lone_closing_tag_makes_what_came_before_thinking() {
        let mut splitter = ThinkSplitter::new();
        let early = splitter.push("Let me think. ");
        assert_eq!(
            early.content, "Let me think. ",
            "passed on: undecidable yet"
        );
        let later = splitter.push("Ok.</think>Four.");
        assert!(later.closed_unopened);
        assert_eq!(later.thinking, "Ok.");
        assert_eq!(later.content, "Four.");
        assert_eq!(
            split(&["Hmm</th", "ink>\nFour"]),
            ("Hmm".into(), "Four".into(), true)
        );
        assert_eq!(
            run(ThinkSplitter::starting_inside(), &["\nHmm</think>Four"]),
            ("Hmm".into(), "Four".into(), false)
        );
        // After a block, a second closing tag is only text.
        assert_eq!(
            split(&["<think>a</think>b</think>c"]),
            ("a".into(), "b</think>c".into(), false)
        );
    }

    #[test]
    fn a_partial_tag_at_the_end_of_an_answer_is_text() {
        assert_eq!(split(&["1 <"]), (String::new(), "1 <".into(), false));
        assert_eq!(
            split(&["a <thin"]),
            (String::new(), "a <thin".into(), false)
        );
    }
}
