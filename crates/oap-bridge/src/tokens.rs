//! Token accounting: how many prompt tokens oapd's tool definitions cost.
//!
//! Method (documented in docs/BENCHMARKS.md, "Tool tokens per request"):
//! each tool definition is rendered as Ollama's chat templates render tools,
//! one compact JSON object per line (`{{ json . }}`), and that text is counted
//! with a BPE-shaped pre-tokenizer: the text is split the way GPT-style BPE
//! tokenizers (Llama 3, Qwen 2/3, cl100k) split before merging — a word with
//! its leading space, a run of digits, a run of punctuation, a run of
//! whitespace — and each piece costs what BPE typically makes of it: a word
//! one token per started 10 letters, digits one per started 3, punctuation
//! one per started 4 (`":"` and `","` are single tokens in those vocabularies).
//!
//! We ship no BPE vocabulary (the MiniLM tokenizer is WordPiece, which splits
//! every quote and brace on its own and so over-counts JSON), and loading one
//! per model would cost memory on a Pi. The estimate is deterministic, linear
//! in the text and allocation-free; the benchmark prints it next to the
//! MiniLM WordPiece count and `chars / 4` so the calibration is visible.

use serde_json::Value;

/// Letters per token in a word piece (BPE keeps common words whole and
/// splits long identifiers into a few pieces).
const LETTERS_PER_TOKEN: usize = 10;
/// Digits per token (Llama 3 and cl100k group up to three digits).
const DIGITS_PER_TOKEN: usize = 3;
/// Punctuation characters per token (`":"`, `"},`, `":{"` merge).
const PUNCT_PER_TOKEN: usize = 4;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Letter,
    Digit,
    Space,
    Punct,
}

fn class(c: char) -> Class {
    if c.is_alphabetic() {
        Class::Letter
    } else if c.is_numeric() {
        Class::Digit
    } else if c.is_whitespace() {
        Class::Space
    } else {
        Class::Punct
    }
}

fn cost(class: Class, len: usize) -> usize {
    match class {
        Class::Letter => len.div_ceil(LETTERS_PER_TOKEN),
        Class::Digit => len.div_ceil(DIGITS_PER_TOKEN),
        Class::Punct => len.div_ceil(PUNCT_PER_TOKEN),
        Class::Space => 1,
    }
}

/// Estimated BPE tokens of `text`.
pub fn estimate(text: &str) -> usize {
    let mut tokens = 0;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let mut kind = class(c);
        let mut len = 1;
        // A single space joins the word (or number, or punctuation) after
        // it, as in BPE (" weather" is one token).
        if c == ' ' {
            match chars.peek().map(|&n| class(n)) {
                Some(next) if next != Class::Space => {
                    kind = next;
                    chars.next();
                }
                _ => {}
            }
        }
        while let Some(&n) = chars.peek() {
            if class(n) != kind {
                break;
            }
            len += 1;
            chars.next();
        }
        tokens += cost(kind, len);
    }
    tokens
}

/// How Ollama's templates put a tool into the prompt: its compact JSON and
/// a newline.
pub fn render_tool(definition: &Value) -> String {
    let mut text = definition.to_string();
    text.push('\n');
    text
}

/// Estimated prompt tokens of one tool definition.
pub fn tool_tokens(definition: &Value) -> usize {
    estimate(&render_tool(definition))
}

/// Estimated prompt tokens of a set of tool definitions.
pub fn tools_tokens<'a>(definitions: impl IntoIterator<Item = &'a Value>) -> usize {
    definitions.into_iter().map(tool_tokens).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn words_numbers_and_punctuation_are_counted_like_bpe_pieces() {
        assert_eq!(estimate(""), 0);
        assert_eq!(estimate("weather"), 1);
        assert_eq!(estimate("description_parameters"), 4);
        assert_eq!(estimate("the city"), 2);
        assert_eq!(estimate("\":\""), 1);
        assert_eq!(estimate("2026"), 2);
        assert_eq!(estimate("a\n\nb"), 3);
        // Deterministic and additive over lines.
        assert_eq!(estimate("x y\n") * 2, estimate("x y\nx y\n"));
    }

    #[test]
    fn a_typical_tool_costs_what_bpe_would() {
        let tool = json!({"type": "function", "function": {
            "name": "get_weather", "description": "Get the current weather for a city",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "description": "City name"}}, "required": ["city"]}}});
        let rendered = render_tool(&tool);
        let tokens = tool_tokens(&tool);
        // Hand-splitting it the BPE way gives about 46 pieces; chars/4 says 54.
        assert!((38..=54).contains(&tokens), "{tokens} for {rendered}");
        assert_eq!(tools_tokens([&tool, &tool]), 2 * tokens);
    }

    #[test]
    fn non_ascii_text_is_counted_without_panicking() {
        assert!(estimate("Wetter in München, 東京の天気 🌦️") > 5);
    }
}
