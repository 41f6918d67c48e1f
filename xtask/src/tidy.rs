//! Tidy checks over the tracked tree, run as tests (`cargo test -p xtask`,
//! part of `cargo xtask test`): the repository stands on its own and speaks
//! of the product, not of how its work was organised.

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::Command;

    /// Tracked files, relative to the repository root.
    fn tracked_files(root: &Path) -> Vec<String> {
        let out = Command::new("git")
            .arg("-C")
            .arg(root)
            .args(["ls-files", "-z"])
            .output()
            .expect("git ls-files");
        assert!(out.status.success(), "git ls-files failed");
        out.stdout
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect()
    }

    /// Text files a person reads as the project's own words. Vendored test
    /// data (its provenance notes name upstream revisions) is not ours.
    fn own_text_files(root: &Path) -> Vec<(String, String)> {
        tracked_files(root)
            .into_iter()
            .filter(|p| !p.starts_with("tests/fixtures/") && p != "xtask/src/tidy.rs")
            .filter_map(|p| {
                let text = std::fs::read_to_string(root.join(&p)).ok()?;
                Some((p, text))
            })
            .collect()
    }

    /// `word` followed by optional `#` and a digit, case-insensitive, at a
    /// word start: "issue 6", "Seed 004", "issue #12".
    fn names_a_numbered(text: &str, word: &str) -> bool {
        let lower = text.to_ascii_lowercase();
        let bytes = lower.as_bytes();
        lower.match_indices(word).any(|(at, _)| {
            let starts_word = at == 0 || !bytes[at - 1].is_ascii_alphanumeric();
            let rest = &bytes[at + word.len()..];
            let rest = rest.strip_prefix(b"#").unwrap_or(rest);
            starts_word && rest.first().is_some_and(u8::is_ascii_digit)
        })
    }

    /// `path:line: text` of every line of our own files that `bad` flags.
    fn offending_lines(bad: impl Fn(&str) -> bool) -> Vec<String> {
        own_text_files(root())
            .into_iter()
            .flat_map(|(path, text)| {
                text.lines()
                    .enumerate()
                    .filter(|(_, l)| bad(l))
                    .map(|(n, l)| format!("{path}:{}: {}", n + 1, l.trim()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    fn root() -> &'static Path {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
    }

    #[test]
    fn the_tree_reads_nothing_from_outside_the_repository() {
        let offenders = offending_lines(|l| l.contains("../shared") || l.contains("/work/shared"));
        assert!(
            offenders.is_empty(),
            "paths outside the repository (vendor the file instead):\n{}",
            offenders.join("\n")
        );
    }

    #[test]
    fn the_product_speaks_of_itself() {
        let offenders = offending_lines(|l| {
            names_a_numbered(l, "issue ")
                || names_a_numbered(l, "seed ")
                || l.to_ascii_lowercase().contains("project brief")
        });
        assert!(
            offenders.is_empty(),
            "process words (issue/seed numbers, the brief) in the product:\n{}",
            offenders.join("\n")
        );
    }

    #[test]
    fn the_matcher_finds_what_it_should() {
        assert!(names_a_numbered("see issue 6 here", "issue "));
        assert!(names_a_numbered("(Issue #12)", "issue "));
        assert!(names_a_numbered("seed 004:", "seed "));
        assert!(!names_a_numbered("tissue 6", "issue "));
        assert!(!names_a_numbered("an issue with it", "issue "));
        assert!(!names_a_numbered("random seed value", "seed "));
    }
}
