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
            // CI's entry point checks that research files are *not* used.
            .filter(|p| {
                !p.starts_with("tests/fixtures/") && p != "xtask/src/tidy.rs" && p != ".ci/run"
            })
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
                || ["project brief", "the brief", "team brief", "developers.md"]
                    .iter()
                    .any(|word| l.to_ascii_lowercase().contains(word))
        });
        assert!(
            offenders.is_empty(),
            "process words (issue/seed numbers, the brief) in the product:\n{}",
            offenders.join("\n")
        );
    }

    /// Names of documents (`*.md`) and relative Markdown link targets in
    /// `line`. Absolute paths (installed files such as
    /// `/usr/share/doc/oapd/README.md`) and URLs are not the tree's files.
    fn referenced_files(line: &str, markdown: bool) -> Vec<String> {
        let is_path_char = |c: char| c.is_ascii_alphanumeric() || "_./-".contains(c);
        let mut found = Vec::new();
        for (at, _) in line.match_indices(".md") {
            let after = line.get(at + 3..).and_then(|rest| rest.chars().next());
            if after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            let head = line.get(..at).unwrap_or_default();
            let start = head
                .char_indices()
                .rev()
                .find(|(_, c)| !is_path_char(*c))
                .map_or(0, |(i, c)| i + c.len_utf8());
            let token = line.get(start..at + 3).unwrap_or_default();
            let before = line.get(..start).unwrap_or_default();
            if token.starts_with('/') || token.starts_with("usr/") || before.ends_with(':') {
                continue;
            }
            if token.len() > 3 {
                found.push(token.to_string());
            }
        }
        if markdown {
            for (at, _) in line.match_indices("](") {
                let rest = line.get(at + 2..).unwrap_or_default();
                let target: String = rest
                    .chars()
                    .take_while(|c| *c != ')' && *c != '#')
                    .collect();
                let plain = !target.is_empty()
                    && !target.contains("://")
                    && !target.starts_with("mailto:")
                    && !target.starts_with('/')
                    && !target.contains(' ')
                    && !target.ends_with(".md");
                if plain {
                    found.push(target);
                }
            }
        }
        found
    }

    /// `a/b/../c` → `a/c`, without touching the file system.
    fn normalized(path: &Path) -> std::path::PathBuf {
        let mut out = std::path::PathBuf::new();
        for part in path.components() {
            match part {
                std::path::Component::ParentDir => {
                    out.pop();
                }
                std::path::Component::CurDir => {}
                other => out.push(other),
            }
        }
        out
    }

    #[test]
    fn the_tree_links_only_to_files_it_has() {
        let root = root();
        let tracked = tracked_files(root);
        let exists = |from: &str, target: &str| {
            let target = target.trim_start_matches("./");
            let dir = Path::new(from).parent().unwrap_or(Path::new(""));
            let beside = normalized(&dir.join(target));
            tracked.iter().any(|p| {
                p == target
                    || p.ends_with(&format!("/{target}"))
                    || Path::new(p) == beside
                    || Path::new(p).starts_with(&beside)
            })
        };
        let mut offenders = Vec::new();
        for (path, text) in own_text_files(root) {
            let markdown = path.ends_with(".md");
            for (n, line) in text.lines().enumerate() {
                for target in referenced_files(line, markdown) {
                    if !exists(&path, &target) {
                        offenders.push(format!("{path}:{}: {target}", n + 1));
                    }
                }
            }
        }
        assert!(
            offenders.is_empty(),
            "references to files the repository does not have:\n{}",
            offenders.join("\n")
        );
    }

    #[test]
    fn the_reference_finder_finds_what_it_should() {
        assert_eq!(
            referenced_files("see notes/rust-stack.md §2", false),
            ["notes/rust-stack.md"]
        );
        assert_eq!(
            referenced_files("[arch](ARCHITECTURE.md)", true),
            ["ARCHITECTURE.md"]
        );
        assert_eq!(
            referenced_files("[cfg](docs/config.example.yaml)", true),
            ["docs/config.example.yaml"]
        );
        assert!(referenced_files("installed as /usr/share/doc/oapd/README.md", false).is_empty());
        assert!(referenced_files("<https://example.org/SPEC.md>", true).is_empty());
        assert!(referenced_files("[site](https://example.org/x)", true).is_empty());
        assert!(referenced_files("a .mdx file and x.mdown", false).is_empty());
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
