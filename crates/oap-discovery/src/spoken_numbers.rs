//! Arithmetic said in words: "what's fifteen percent of eighty", "twelve
//! times thirty four", "the square root of sixty four".
//!
//! A voice request spells its numbers and operators out. Those words say
//! nothing a calculator's description says ("fifteen", "eighty"), and some
//! say something else: "times" is a term of every date and time tool,
//! "square" and "power" of others. Retrieval is better served by the shape
//! ("an arithmetic expression") than by the words, exactly as with inline
//! data ([`crate::query`]). This module finds where such an expression is.
//!
//! Only English, and only what people say to an assistant: cardinal
//! numbers up to the trillions (words or digits, "a hundred and twenty",
//! "three point five", "2 million"), binary operators between two numbers,
//! "squared"/"cubed"/"factorial" after one, "square root of"/"half of"
//! before one. The scan is linear in the words read and reads at most
//! [`MAX_TOKENS`] of them; numbers are values in `f64` (a hostile run of
//! scale words overflows to infinity, it does not panic).

use std::ops::Range;

/// At most this many words and numbers of a text are read. A request's
/// instruction is capped at 1,000 bytes before it gets here; the cap keeps
/// the work bounded for any other caller too.
pub const MAX_TOKENS: usize = 1_000;

/// One word, number or `%` of the text, with its byte range.
#[derive(Debug, Clone, PartialEq)]
struct Token<'a> {
    kind: Kind<'a>,
    span: Range<usize>,
}

#[derive(Debug, Clone, PartialEq)]
enum Kind<'a> {
    /// Letters only, ASCII-lowercased ("Fifteen" → "fifteen").
    Word(String),
    /// Digits, with `.` or `,` between digits ("3.5", "1,000").
    Digits(&'a str),
    /// `%`.
    Percent,
    /// Anything else that is not a separator (`v2`, `*`, `日本`): it stands
    /// between two words, so no expression runs across it.
    Other,
}

impl Kind<'_> {
    fn word(&self) -> Option<&str> {
        match self {
            Kind::Word(w) => Some(w),
            _ => None,
        }
    }
}

/// Splits `text` into tokens: runs of letters, runs of digits (with `.`/`,`
/// between digits), `%`, and other symbols; whitespace and sentence
/// punctuation (including the hyphen of "thirty-four") separate them.
/// Stops after [`MAX_TOKENS`].
fn tokens(text: &str) -> Vec<Token<'_>> {
    let mut out = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        if out.len() >= MAX_TOKENS {
            break;
        }
        if c.is_alphabetic() || c.is_ascii_digit() {
            let mut end = start + c.len_utf8();
            let mut letters = c.is_alphabetic();
            let mut digits = c.is_ascii_digit();
            while let Some(&(i, next)) = chars.peek() {
                let joins_digits = matches!(next, '.' | ',')
                    && digits
                    && !letters
                    && text
                        .get(i + 1..)
                        .and_then(|rest| rest.chars().next())
                        .is_some_and(|after| after.is_ascii_digit());
                if next.is_alphabetic() || next.is_ascii_digit() || joins_digits {
                    letters |= next.is_alphabetic();
                    digits |= next.is_ascii_digit();
                    end = i + next.len_utf8();
                    chars.next();
                } else {
                    break;
                }
            }
            let raw = text.get(start..end).unwrap_or_default();
            let kind = match (letters, digits) {
                (true, false) => Kind::Word(raw.to_ascii_lowercase()),
                (false, true) => Kind::Digits(raw),
                _ => Kind::Other,
            };
            out.push(Token {
                kind,
                span: start..end,
            });
        } else if c == '%' {
            out.push(Token {
                kind: Kind::Percent,
                span: start..start + 1,
            });
        } else if !(c.is_whitespace() || is_separator(c)) {
            out.push(Token {
                kind: Kind::Other,
                span: start..start + c.len_utf8(),
            });
        }
    }
    out
}

/// Punctuation that separates words without standing for anything in a
/// spoken expression.
fn is_separator(c: char) -> bool {
    matches!(
        c,
        ',' | '.' | '?' | '!' | ';' | ':' | '-' | '\'' | '"' | '’' | '(' | ')'
    )
}

fn unit(word: &str) -> Option<f64> {
    let value = match word {
        "zero" => 0,
        "one" => 1,
        "two" => 2,
        "three" => 3,
        "four" => 4,
        "five" => 5,
        "six" => 6,
        "seven" => 7,
        "eight" => 8,
        "nine" => 9,
        _ => return None,
    };
    Some(f64::from(value))
}

fn teen(word: &str) -> Option<f64> {
    let value = match word {
        "ten" => 10,
        "eleven" => 11,
        "twelve" => 12,
        "thirteen" => 13,
        "fourteen" => 14,
        "fifteen" => 15,
        "sixteen" => 16,
        "seventeen" => 17,
        "eighteen" => 18,
        "nineteen" => 19,
        _ => return None,
    };
    Some(f64::from(value))
}

fn tens(word: &str) -> Option<f64> {
    let value = match word {
        "twenty" => 20,
        "thirty" => 30,
        "forty" => 40,
        "fifty" => 50,
        "sixty" => 60,
        "seventy" => 70,
        "eighty" => 80,
        "ninety" => 90,
        _ => return None,
    };
    Some(f64::from(value))
}

fn scale(word: &str) -> Option<f64> {
    match word {
        "thousand" => Some(1e3),
        "million" => Some(1e6),
        "billion" => Some(1e9),
        "trillion" => Some(1e12),
        _ => None,
    }
}

/// Whether `word` can start or go on a number written in words.
fn is_small_number_word(word: &str) -> bool {
    unit(word).is_some() || teen(word).is_some() || tens(word).is_some()
}

/// What the number read so far ended with: decides which word may follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Last {
    Start,
    /// "a" before "hundred"/"thousand"...: one of them.
    A,
    Unit,
    Teen,
    Tens,
    Hundred,
    Scale,
    And,
    Digits,
}

/// The number that starts at `tokens[start]`: its value and the index of
/// the first token after it. "a hundred and twenty" is 120, "thirty four"
/// 34, "two thousand and five" 2005, "three point one four" 3.14, "2
/// million" 2,000,000; "five five" is two numbers, "and" or "a" alone none.
fn number_at(tokens: &[Token<'_>], start: usize) -> Option<(f64, usize)> {
    let word_at = |i: usize| tokens.get(i).and_then(|t| t.kind.word());
    let mut total = 0.0f64;
    let mut current = 0.0f64;
    let mut last = Last::Start;
    // Scales must fall ("two million three thousand"): "thousand thousand"
    // is not one number.
    let mut last_scale = f64::INFINITY;
    let mut i = start;
    while let Some(token) = tokens.get(i) {
        let word = match &token.kind {
            Kind::Digits(raw) if last == Last::Start => {
                current = raw.replace(',', "").parse::<f64>().ok()?;
                last = Last::Digits;
                i += 1;
                continue;
            }
            Kind::Word(word) => word.as_str(),
            _ => break,
        };
        let after_a_group = matches!(last, Last::Start | Last::Hundred | Last::Scale | Last::And);
        if let Some(value) = unit(word) {
            if !(after_a_group || last == Last::Tens) || (value == 0.0 && last != Last::Start) {
                break;
            }
            current += value;
            last = Last::Unit;
        } else if let Some(value) = teen(word).or_else(|| tens(word)) {
            if !after_a_group {
                break;
            }
            current += value;
            last = if value < 20.0 { Last::Teen } else { Last::Tens };
        } else if word == "a" && last == Last::Start {
            if !word_at(i + 1).is_some_and(|next| next == "hundred" || scale(next).is_some()) {
                break;
            }
            current = 1.0;
            last = Last::A;
        } else if word == "hundred" {
            if !matches!(last, Last::A | Last::Unit | Last::Teen | Last::Digits) {
                break;
            }
            current *= 100.0;
            last = Last::Hundred;
        } else if let Some(value) = scale(word) {
            let counts = matches!(
                last,
                Last::A | Last::Unit | Last::Teen | Last::Tens | Last::Hundred | Last::Digits
            );
            if !counts || value >= last_scale {
                break;
            }
            total += current * value;
            current = 0.0;
            last_scale = value;
            last = Last::Scale;
        } else if word == "and" {
            // Only inside a number ("a hundred and twenty"): "five and
            // seven" are two numbers.
            if !matches!(last, Last::Hundred | Last::Scale)
                || !word_at(i + 1).is_some_and(is_small_number_word)
            {
                break;
            }
            last = Last::And;
        } else if word == "point" {
            let whole = !matches!(last, Last::Start | Last::A | Last::And);
            let mut fraction = 0.0;
            let mut place = 0.1;
            let mut j = i + 1;
            while let Some(digit) = word_at(j).and_then(unit) {
                fraction += digit * place;
                place /= 10.0;
                j += 1;
            }
            if !whole || j == i + 1 {
                break;
            }
            return Some((total + current + fraction, j));
        } else {
            break;
        }
        i += 1;
    }
    match last {
        Last::Start | Last::A | Last::And => None,
        _ => Some((total + current, i)),
    }
}

/// The value of the number said in `text` from its first word ("a hundred
/// and twenty" → 120), and how many bytes of `text` it takes; `None` when
/// `text` does not start with a number.
pub fn parse_number(text: &str) -> Option<(f64, usize)> {
    let tokens = tokens(text);
    let (value, end) = number_at(&tokens, 0)?;
    let last = tokens.get(end.checked_sub(1)?)?;
    Some((value, last.span.end))
}

/// Operators between two numbers.
const BINARY: &[&[&str]] = &[
    &["plus"],
    &["minus"],
    &["times"],
    &["multiplied", "by"],
    &["divided", "by"],
    &["mod"],
    &["modulo"],
    &["to", "the", "power", "of"],
    &["raised", "to", "the", "power", "of"],
    &["percent", "of"],
    &["per", "cent", "of"],
    &["%", "of"],
];

/// Operators after a number ("nine squared").
const POSTFIX: &[&[&str]] = &[&["squared"], &["cubed"], &["factorial"]];

/// Operators before a number ("half of eighty").
const PREFIX: &[&[&str]] = &[
    &["square", "root", "of"],
    &["cube", "root", "of"],
    &["half", "of"],
    &["a", "third", "of"],
    &["a", "quarter", "of"],
];

/// The index after `phrase` if the tokens from `at` spell it (`%` matches
/// the percent sign).
fn phrase_at(tokens: &[Token<'_>], at: usize, phrase: &[&str]) -> Option<usize> {
    for (k, want) in phrase.iter().enumerate() {
        let token = tokens.get(at + k)?;
        let matches = match &token.kind {
            Kind::Percent => *want == "%",
            Kind::Word(word) => word == want,
            _ => false,
        };
        if !matches {
            return None;
        }
    }
    Some(at + phrase.len())
}

fn any_phrase_at(tokens: &[Token<'_>], at: usize, phrases: &[&[&str]]) -> Option<usize> {
    phrases.iter().find_map(|p| phrase_at(tokens, at, p))
}

/// The byte ranges of `text` that are arithmetic expressions with at least
/// one word in them ("fifteen percent of eighty", "17 times 23", "15% of
/// 80", "the square root of 144" from "square"), in order. Symbols between
/// digits ("12*34") are not read here: they need no words cut out, and
/// [`crate::query`] recognises them itself.
pub fn arithmetic_spans(text: &str) -> Vec<Range<usize>> {
    let tokens = tokens(text);
    let mut spans = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        // An operator before the first number, or the number itself.
        let (mut end, mut complete) = match any_phrase_at(&tokens, i, PREFIX) {
            Some(after) => match number_at(&tokens, after) {
                Some((_, end)) => (end, true),
                None => {
                    i += 1;
                    continue;
                }
            },
            None => match number_at(&tokens, i) {
                Some((_, end)) => (end, false),
                None => {
                    i += 1;
                    continue;
                }
            },
        };
        // Then any run of operator-number pairs and operators after a number.
        loop {
            if let Some(after) = any_phrase_at(&tokens, end, BINARY) {
                if let Some((_, next)) = number_at(&tokens, after) {
                    end = next;
                    complete = true;
                    continue;
                }
            }
            if let Some(after) = any_phrase_at(&tokens, end, POSTFIX) {
                end = after;
                complete = true;
                continue;
            }
            break;
        }
        if complete {
            if let (Some(first), Some(last)) = (tokens.get(i), tokens.get(end - 1)) {
                spans.push(first.span.start..last.span.end);
            }
        }
        i = end.max(i + 1);
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str) -> Option<f64> {
        parse_number(text).map(|(v, _)| v)
    }

    fn found(text: &str) -> Vec<&str> {
        arithmetic_spans(text)
            .into_iter()
            .map(|r| text.get(r).unwrap_or_default())
            .collect()
    }

    #[test]
    fn numbers_in_words() {
        assert_eq!(value("fifteen"), Some(15.0));
        assert_eq!(value("eighty"), Some(80.0));
        assert_eq!(value("thirty four"), Some(34.0));
        assert_eq!(value("thirty-four"), Some(34.0));
        assert_eq!(value("a hundred and twenty"), Some(120.0));
        assert_eq!(value("one hundred twenty three"), Some(123.0));
        assert_eq!(value("two thousand and five"), Some(2005.0));
        assert_eq!(
            value("three million four hundred thousand and twelve"),
            Some(3_400_012.0)
        );
        assert_eq!(value("nineteen hundred"), Some(1900.0));
        assert_eq!(value("a thousand"), Some(1000.0));
        assert_eq!(value("zero"), Some(0.0));
        assert_eq!(value("2 million"), Some(2e6));
        assert_eq!(value("1,000"), Some(1000.0));
        assert_eq!(value("3.5"), Some(3.5));
        let decimal = value("two point seven one").unwrap();
        assert!((decimal - 2.71).abs() < 1e-9, "{decimal}");
        assert_eq!(value("Twelve"), Some(12.0));
    }

    #[test]
    fn what_is_not_one_number() {
        // "five five" is two numbers: the first ends where the second starts.
        assert_eq!(parse_number("five five"), Some((5.0, 4)));
        assert_eq!(parse_number("five and seven"), Some((5.0, 4)));
        assert_eq!(parse_number("twenty twenty"), Some((20.0, 6)));
        assert_eq!(value("a"), None);
        assert_eq!(value("a day"), None);
        assert_eq!(value("and"), None);
        assert_eq!(value("hundred"), None);
        assert_eq!(value("point five"), None);
        assert_eq!(value("thousand thousand"), None);
        assert_eq!(parse_number("one thousand thousand"), Some((1000.0, 12)));
        assert_eq!(value("times"), None);
        assert_eq!(value(""), None);
        assert_eq!(value("v2"), None);
    }

    #[test]
    fn spoken_expressions_are_found_where_they_are() {
        assert_eq!(
            found("what's fifteen percent of eighty"),
            ["fifteen percent of eighty"]
        );
        assert_eq!(
            found("hey, what's twelve times thirty four?"),
            ["twelve times thirty four"]
        );
        assert_eq!(
            found("what is the square root of sixty-four"),
            ["square root of sixty-four"]
        );
        assert_eq!(
            found("half of a hundred and twenty"),
            ["half of a hundred and twenty"]
        );
        assert_eq!(
            found("what's nine squared plus one"),
            ["nine squared plus one"]
        );
        assert_eq!(found("a hundred divided by 8"), ["a hundred divided by 8"]);
        assert_eq!(found("what is 15% of 80"), ["15% of 80"]);
        assert_eq!(found("2 to the power of 10"), ["2 to the power of 10"]);
        assert_eq!(found("what is 17 times 23?"), ["17 times 23"]);
        assert_eq!(
            found("five plus five, then seven minus two"),
            ["five plus five", "seven minus two"]
        );
    }

    #[test]
    fn numbers_and_operator_words_alone_are_no_expression() {
        for text in [
            "remind me tomorrow at 9 to water the plants",
            "set a timer for five minutes",
            "take the pills three times a day",
            "times 2",
            "play the top ten songs",
            "a 5% markup on 1000 items",
            "what's minus five in fahrenheit",
            "half of them",
            "square the corners",
            "add five and seven",
            "12*34",
            "",
        ] {
            assert!(found(text).is_empty(), "{text:?}: {:?}", found(text));
        }
    }

    #[test]
    fn hostile_input_costs_bounded_work_and_never_panics() {
        // 100k number words: read up to the cap, one number after another.
        let many = "nine ".repeat(100_000);
        assert_eq!(parse_number(&many), Some((9.0, 4)));
        assert!(found(&many).is_empty());
        let many_ops = "nine plus ".repeat(100_000);
        let spans = found(&many_ops);
        assert_eq!(spans.len(), 1);
        assert!(spans[0].len() < 10 * MAX_TOKENS, "{}", spans[0].len());
        // Scales that would overflow any integer: a value, not a panic.
        let huge = format!("a {}", "thousand ".repeat(100_000));
        assert_eq!(value(&huge), Some(1000.0));
        let digits = "9".repeat(100_000);
        assert_eq!(value(&digits), Some(f64::INFINITY));
        assert_eq!(found(&format!("{digits} times {digits}")).len(), 1);
        // Other scripts: read as words or symbols that match nothing, cut
        // on character boundaries.
        for text in [
            "fünf plus ٣ times 二",
            "दो plus तीन",
            "twelve × ٣٤",
            "ｔｗｅｌｖｅ times ｔｈｒｅｅ",
            "fifteen％of eighty",
        ] {
            assert!(found(text).is_empty(), "{text:?}: {:?}", found(text));
        }
        assert_eq!(found("συν twelve times three ΣΥΝ"), ["twelve times three"]);
        assert_eq!(found("日本語 five plus five"), ["five plus five"]);
        // A combining mark ends the word before it.
        assert_eq!(
            found("twelve times thirty\u{0301} four"),
            ["twelve times thirty"]
        );
    }
}
