//! Quote-aware splitting of an argument string into argv, with no expansion.
//!
//! The rules are the quoting rules of a POSIX shell and nothing else:
//! - blanks (space, tab, newline) separate words outside quotes;
//! - `'...'` keeps everything literally;
//! - `"..."` keeps everything literally except `\"`, `\\`, `` \` ``, `\$`
//!   (the backslash is dropped) and backslash-newline (removed);
//! - outside quotes a backslash makes the next character literal
//!   (backslash-newline is removed);
//! - `''` and `""` give an empty word.
//!
//! There is no expansion of any kind: `$VAR`, `$(...)`, backticks, `~`,
//! globs, `;`, `|`, `&`, `>`, `#` and braces are ordinary characters, and a
//! `;` or `|` is not a separator (`a;b` is one word). The result is handed to
//! `execve` directly, never to a shell.

/// Why an argument string could not be split.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WordsError {
    /// A `'` or `"` without its closing partner.
    #[error("unterminated {0} quote in arguments")]
    UnterminatedQuote(char),
    /// A backslash as the very last character.
    #[error("arguments end with a lone backslash")]
    TrailingBackslash,
}

/// Split `input` into words; see the module docs for the rules.
pub fn split_words(input: &str) -> Result<Vec<String>, WordsError> {
    let mut words = Vec::new();
    let mut word = String::new();
    // Whether a word has started (so `''` yields an empty word).
    let mut in_word = false;
    let mut chars = input.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' | '\r' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err(WordsError::UnterminatedQuote('\'')),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '`' | '$')) => word.push(c),
                            Some('\n') => {}
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err(WordsError::UnterminatedQuote('"')),
                        },
                        Some(c) => word.push(c),
                        None => return Err(WordsError::UnterminatedQuote('"')),
                    }
                }
            }
            '\\' => match chars.next() {
                Some('\n') => {}
                Some(c) => {
                    in_word = true;
                    word.push(c);
                }
                None => return Err(WordsError::TrailingBackslash),
            },
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Vec<String> {
        split_words(s).unwrap()
    }

    #[test]
    fn plain_and_quoted() {
        assert_eq!(w(""), Vec::<String>::new());
        assert_eq!(w("   \t\n "), Vec::<String>::new());
        assert_eq!(w("-c  'a b'  c"), ["-c", "a b", "c"]);
        assert_eq!(
            w(r#""connection refused" log"#),
            ["connection refused", "log"]
        );
        assert_eq!(w(r#"-d"," -f2"#), ["-d,", "-f2"]);
        assert_eq!(w("a'b'\"c\"d"), ["abcd"]);
        assert_eq!(w("'' \"\""), ["", ""]);
        assert_eq!(w(r"a\ b"), ["a b"]);
        assert_eq!(w(r#""a\"b\\c\d""#), [r#"a"b\c\d"#]);
        assert_eq!(w("'it'\\''s'"), ["it's"]);
        assert_eq!(w("a\\\nb"), ["ab"]);
        assert_eq!(w(".[] | {name: .a}"), [".[]", "|", "{name:", ".a}"]);
        assert_eq!(w("'.[] | {name: .a}'"), [".[] | {name: .a}"]);
    }

    #[test]
    fn nothing_is_expanded() {
        assert_eq!(w("$(rm -rf /)"), ["$(rm", "-rf", "/)"]);
        assert_eq!(w("'$(rm -rf /)'"), ["$(rm -rf /)"]);
        assert_eq!(w("\"$HOME\" ~ *.txt `id`"), ["$HOME", "~", "*.txt", "`id`"]);
        assert_eq!(
            w("a;b | c && d > e # f"),
            ["a;b", "|", "c", "&&", "d", ">", "e", "#", "f"]
        );
        assert_eq!(w(r#""\$x""#), ["$x"]);
    }

    #[test]
    fn errors() {
        assert_eq!(
            split_words("'abc"),
            Err(WordsError::UnterminatedQuote('\''))
        );
        assert_eq!(
            split_words("\"abc"),
            Err(WordsError::UnterminatedQuote('"'))
        );
        assert_eq!(
            split_words("\"abc\\"),
            Err(WordsError::UnterminatedQuote('"'))
        );
        assert_eq!(split_words("abc\\"), Err(WordsError::TrailingBackslash));
    }
}
