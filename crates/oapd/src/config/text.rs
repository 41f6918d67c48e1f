//! Small text helpers for messages: quoting a value, listing choices, and
//! the "did you mean" suggestion.

/// `"value"` with quotes and control characters escaped, truncated to 64 characters.
pub(super) fn quote(s: &str) -> String {
    const MAX: usize = 64;
    if s.chars().count() > MAX {
        let head: String = s.chars().take(MAX).collect();
        format!("\"{}...\"", head.escape_debug())
    } else {
        format!("\"{}\"", s.escape_debug())
    }
}

pub(super) fn one_of<'a>(names: impl Iterator<Item = &'a str>) -> String {
    names
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The candidate closest to `word` by edit distance, if it is close enough to be a typo.
pub(super) fn closest<'a>(
    word: &str,
    candidates: impl Iterator<Item = &'a str>,
) -> Option<&'a str> {
    let word = word.to_ascii_lowercase();
    let limit = (word.chars().count() / 3).max(2);
    candidates
        .map(|c| (levenshtein(&word, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

pub(super) fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levenshtein_and_closest() {
        assert_eq!(levenshtein("max_round", "max_rounds"), 1);
        assert_eq!(levenshtein("", "abc"), 3);
        assert_eq!(
            closest("max_round", ["enabled", "max_rounds"].into_iter()),
            Some("max_rounds")
        );
        assert_eq!(
            closest("zzzzzz", ["enabled", "max_rounds"].into_iter()),
            None
        );
    }

    #[test]
    fn quote_escapes_and_truncates() {
        assert_eq!(quote("x"), "\"x\"");
        assert_eq!(quote("a\nb"), "\"a\\nb\"");
        let long = "y".repeat(100);
        let q = quote(&long);
        assert!(q.starts_with("\"yyy") && q.ends_with("...\""), "{q}");
        assert!(q.len() < 80);
    }
}
