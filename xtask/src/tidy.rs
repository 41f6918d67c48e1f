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
    /// data (its provenance notes name upstream revisions) and the vendored
    /// RustSec advisories are not ours.
    fn own_text_files(root: &Path) -> Vec<(String, String)> {
        tracked_files(root)
            .into_iter()
            .filter(|p| {
                !p.starts_with("tests/fixtures/")
                    && !p.starts_with("supply-chain/advisory-db/crates/")
                    && p != "supply-chain/advisory-db/LICENSE.txt"
                    && p != "xtask/src/tidy.rs"
            })
            .filter_map(|p| {
                let text = std::fs::read_to_string(root.join(&p)).ok()?;
                Some((p, text))
            })
            .collect()
    }

    /// `word` followed by optional `#` and a digit, case-insensitive, at a
    /// word start (`word` = "ticket ": "ticket 6", "Ticket #12").
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

    /// The words this file forbids are spelled in pieces, so that a search
    /// of the tree for them finds only what the checks would flag.
    const OUTSIDE_PATHS: [&str; 2] = [concat!("../", "shared"), concat!("/work/", "shared")];
    const NUMBERED_WORDS: [&str; 2] = [concat!("iss", "ue "), concat!("se", "ed ")];
    const PROCESS_WORDS: [&str; 4] = [
        concat!("project ", "brief"),
        concat!("the ", "brief"),
        concat!("team ", "brief"),
        concat!("developers", ".md"),
    ];

    #[test]
    fn the_tree_reads_nothing_from_outside_the_repository() {
        let offenders = offending_lines(|l| OUTSIDE_PATHS.iter().any(|p| l.contains(p)));
        assert!(
            offenders.is_empty(),
            "paths outside the repository (vendor the file instead):\n{}",
            offenders.join("\n")
        );
    }

    #[test]
    fn the_product_speaks_of_itself() {
        let offenders = offending_lines(|l| {
            let lower = l.to_ascii_lowercase();
            NUMBERED_WORDS.iter().any(|word| names_a_numbered(l, word))
                || PROCESS_WORDS.iter().any(|word| lower.contains(word))
        });
        assert!(
            offenders.is_empty(),
            "process words (numbered work items, planning documents) in the product:\n{}",
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

    /// Test-only code stays out of the daemon: `cargo build -p oapd` must
    /// not turn on oap-index's `test-support` (the in-memory `IndexWriter`,
    /// which only tests and benchmarks use).
    #[test]
    fn the_daemon_is_built_without_test_support() {
        let out = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .current_dir(root())
            .args([
                "tree",
                "--locked",
                "-p",
                "oapd",
                "-e",
                "normal,build,features",
                "-i",
                "oap-index",
            ])
            .output()
            .expect("cargo tree");
        let tree = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && tree.contains("oap-index"),
            "cargo tree: {tree}"
        );
        assert!(
            !tree.contains("\"test-support\""),
            "oapd's build enables oap-index's test-support:\n{tree}"
        );
    }

    /// One feature set per build: every package `cargo build -p oapd`
    /// compiles is resolved with the same features by the workspace build
    /// (the benches, the soak, clippy) and by oapd's test build. Otherwise
    /// switching between them recompiles the daemon and everything under
    /// the package whose features differ, both ways, on every edit.
    #[test]
    fn the_daemon_workspace_and_test_builds_resolve_the_same_features() {
        let resolve = |args: &[&str]| -> std::collections::BTreeSet<String> {
            let out = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
                .current_dir(root())
                .args(["tree", "--locked", "--prefix", "none", "-f", "{p} [{f}]"])
                .args(args)
                .output()
                .expect("cargo tree");
            assert!(
                out.status.success(),
                "cargo tree {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|l| l.trim_end_matches(" (*)").to_string())
                .filter(|l| !l.is_empty())
                .collect()
        };
        let daemon = resolve(&["-p", "oapd", "-e", "normal,build"]);
        assert!(
            daemon.iter().any(|l| l.starts_with("oap-index ")),
            "{daemon:?}"
        );
        for (build, args) in [
            (
                "cargo build --workspace",
                &["--workspace", "-e", "normal,build"][..],
            ),
            (
                "cargo test -p oapd",
                &["-p", "oapd", "-e", "normal,build,dev"][..],
            ),
        ] {
            let other = resolve(args);
            let differing: Vec<&String> = daemon.difference(&other).collect();
            assert!(
                differing.is_empty(),
                "`{build}` compiles these packages of `cargo build -p oapd` with other \
                 features (declare the features once, where every build sees them):\n{differing:#?}"
            );
        }
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
        let [first, second] = NUMBERED_WORDS;
        let numbered = |word: &str, tail: &str| format!("{}{tail}", word.trim_end());
        assert!(names_a_numbered(
            &format!("see {} here", numbered(first, " 6")),
            first
        ));
        assert!(names_a_numbered(
            &numbered(first, " #12").to_uppercase(),
            first
        ));
        assert!(names_a_numbered(&numbered(second, " 004:"), second));
        assert!(!names_a_numbered(
            &format!("t{}", numbered(first, " 6")),
            first
        ));
        assert!(!names_a_numbered(&format!("an {}with it", first), first));
        assert!(!names_a_numbered(
            &format!("random {}value", second),
            second
        ));
        assert!(names_a_numbered("see ticket 6", "ticket "));
    }

    /// Repository paths written in backticks in `text`: a token of path
    /// characters whose first segment is one of `top_dirs` (the tree's own
    /// top-level directories), so `cli/`, `tools/call`, `/etc/oapd` or
    /// `mcp/<server>/<tool>` are not taken for files of the repository.
    fn backticked_repository_paths(text: &str, top_dirs: &[String]) -> Vec<String> {
        let is_path_char = |c: char| c.is_ascii_alphanumeric() || "_./-".contains(c);
        text.split('`')
            .skip(1)
            .step_by(2)
            .filter(|token| !token.is_empty() && token.chars().all(is_path_char))
            .filter(|token| {
                token
                    .split_once('/')
                    .is_some_and(|(first, _)| top_dirs.iter().any(|dir| dir == first))
            })
            .map(|token| token.trim_end_matches('/').to_string())
            .collect()
    }

    /// ARCHITECTURE.md names files as repository-relative paths in
    /// backticks (the walk-through of a chat request is nothing else): each
    /// must be a tracked file or directory, so a rename shows here instead of
    /// leaving the map pointing at nothing.
    #[test]
    fn architecture_names_only_paths_the_tree_has() {
        let root = root();
        let tracked = tracked_files(root);
        let top_dirs: Vec<String> = tracked
            .iter()
            .filter_map(|p| p.split_once('/').map(|(first, _)| first.to_string()))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
        let found = backticked_repository_paths(&text, &top_dirs);
        assert!(
            found.len() >= 20,
            "the paths ARCHITECTURE.md names were not found (only {found:?})"
        );
        let missing: Vec<&String> = found
            .iter()
            .filter(|path| {
                !tracked
                    .iter()
                    .any(|p| p == *path || p.starts_with(&format!("{path}/")))
            })
            .collect();
        assert!(
            missing.is_empty(),
            "ARCHITECTURE.md names paths the repository does not have: {missing:?}"
        );
        let dirs = ["crates".to_string(), "xtask".to_string()];
        assert_eq!(
            backticked_repository_paths(
                "`crates/oapd/src/main.rs`, `cli/`, `mcp/<server>/<tool>`, `/etc/x`, `xtask/`",
                &dirs
            ),
            ["crates/oapd/src/main.rs", "xtask"]
        );
    }
}

/// Every workspace crate is layered at every depth: among the modules of
/// one parent (the crate root's `config`, `server`, ...; `server`'s `api`,
/// `crawl`, ...), each may use the ones below it, never one that uses it
/// back. A module's submodules count as the module itself, and a module
/// using its own parent or child is no edge (one contains the other).
/// Edges are the `crate::` and `super::` paths in the code, `use` or not,
/// with `pub use` re-exports followed to the module that defines the name.
///
/// Every source file also opens with a `//!` line saying what it is.
#[cfg(test)]
mod module_graph {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};

    /// Cycles tolerated while they are being broken, each as the edge
    /// `(crate, from, to)` whose removal breaks it. Empty: no crate has
    /// one. The test fails on any cycle not listed, and on an entry that no
    /// longer closes a cycle, so the list can only shrink.
    const KNOWN_CYCLES: &[(&str, &str, &str)] = &[];

    /// Source files (paths from the repository root) allowed to lack a
    /// `//!` line for now. Empty: every file says what it is, and a file
    /// listed here that has gained its line fails the test, so the list
    /// only shrinks.
    const UNDOCUMENTED: &[&str] = &[];

    /// Module path (`["server", "api"]`) → the sibling modules it uses, at
    /// every depth, keyed by the joined path (`server::api`).
    type Graph = BTreeMap<String, BTreeSet<String>>;

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// The `src` directories of the workspace's crates, by crate directory
    /// name (`oapd`, `oap-bridge`, ..., `xtask`).
    fn workspace_sources() -> Vec<(String, PathBuf)> {
        let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
        let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(root.join("crates"))
            .expect("crates/")
            .map(|e| e.expect("directory entry").path())
            .filter(|p| p.join("src").is_dir())
            .map(|p| {
                let name = p
                    .file_name()
                    .expect("crate dir")
                    .to_string_lossy()
                    .into_owned();
                (name, p.join("src"))
            })
            .collect();
        out.push(("xtask".into(), root.join("xtask/src")));
        out.sort();
        out
    }

    /// `server/api.rs` → `["server", "api"]`, `config/mod.rs` → `["config"]`;
    /// the crate roots (`lib.rs`, `main.rs`) are the empty path.
    fn module_path(relative: &Path) -> Vec<String> {
        let mut parts: Vec<String> = relative
            .with_extension("")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if parts.last().is_some_and(|p| p == "mod") || parts == ["lib"] || parts == ["main"] {
            parts.pop();
        }
        parts
    }

    /// The text with comments, string and character literals blanked to
    /// spaces (same length, same lines): docs and messages name modules
    /// they do not use, and a `{` in a string is no block.
    fn code_only(text: &str) -> String {
        let chars: Vec<char> = text.chars().collect();
        let mut out = String::with_capacity(text.len());
        let mut i = 0;
        let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
        let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
        while i < chars.len() {
            let c = chars[i];
            let next = chars.get(i + 1).copied();
            let prev_ident = i > 0 && ident(chars[i - 1]);
            let end = if c == '/' && next == Some('/') {
                chars[i..]
                    .iter()
                    .position(|c| *c == '\n')
                    .map_or(chars.len(), |n| i + n)
            } else if c == '/' && next == Some('*') {
                let mut j = i + 2;
                while j + 1 < chars.len() && !(chars[j] == '*' && chars[j + 1] == '/') {
                    j += 1;
                }
                (j + 2).min(chars.len())
            } else if c == '"' {
                let mut j = i + 1;
                while j < chars.len() && chars[j] != '"' {
                    j += if chars[j] == '\\' { 2 } else { 1 };
                }
                (j + 1).min(chars.len())
            } else if c == 'r' && !prev_ident && matches!(next, Some('#' | '"')) {
                let hashes = chars[i + 1..].iter().take_while(|c| **c == '#').count();
                if chars.get(i + 1 + hashes) == Some(&'"') {
                    let closing: Vec<char> = std::iter::once('"')
                        .chain(std::iter::repeat_n('#', hashes))
                        .collect();
                    let body = i + 2 + hashes;
                    (body..chars.len())
                        .find(|j| chars[*j..].starts_with(&closing))
                        .map_or(chars.len(), |j| j + closing.len())
                } else {
                    i
                }
            } else if c == '\'' && next == Some('\\') {
                let close = chars[i + 2..].iter().position(|c| *c == '\'');
                close.map_or(i, |n| i + 2 + n + 1)
            } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
                i + 3
            } else {
                i
            };
            if end > i {
                out.extend(chars[i..end].iter().map(|c| blank(*c)));
                i = end;
            } else {
                out.push(c);
                i += 1;
            }
        }
        out
    }

    fn ident_at(chars: &[char], at: usize) -> String {
        chars[at.min(chars.len())..]
            .iter()
            .take_while(|c| c.is_ascii_alphanumeric() || **c == '_')
            .collect()
    }

    fn skip_space(chars: &[char], mut at: usize) -> usize {
        while chars.get(at).is_some_and(|c| c.is_whitespace()) {
            at += 1;
        }
        at
    }

    /// The paths a use tree at `at` names: `a::b::C` → `[a, b, C]`,
    /// `a::{b::C, d, self}` → `[a, b, C]`, `[a, d]`, `[a]`. Returns them and
    /// where the tree ends.
    fn use_tree(chars: &[char], at: usize) -> (Vec<Vec<String>>, usize) {
        let mut prefix = Vec::new();
        let mut at = skip_space(chars, at);
        loop {
            if chars.get(at) == Some(&'{') {
                let mut paths = Vec::new();
                at += 1;
                loop {
                    at = skip_space(chars, at);
                    match chars.get(at) {
                        None => return (paths, at),
                        Some('}') => return (paths, at + 1),
                        Some(',') => at += 1,
                        Some(_) => {
                            let (inner, end) = use_tree(chars, at);
                            for path in inner {
                                let mut full = prefix.clone();
                                full.extend(path.into_iter().filter(|s| s != "self"));
                                paths.push(full);
                            }
                            // Skip what the tree grammar does not read (`as x`).
                            at = end.max(at + 1);
                            while chars.get(at).is_some_and(|c| !matches!(c, ',' | '}')) {
                                at += 1;
                            }
                        }
                    }
                }
            }
            let name = ident_at(chars, at);
            if name.is_empty() {
                return (vec![prefix], at);
            }
            at += name.chars().count();
            prefix.push(name);
            let after = skip_space(chars, at);
            if chars.get(after) == Some(&':') && chars.get(after + 1) == Some(&':') {
                at = skip_space(chars, after + 2);
            } else {
                return (vec![prefix], at);
            }
        }
    }

    /// One module file read for the graph.
    struct Source {
        module: Vec<String>,
        relative: String,
        /// Absolute paths the code names (`crate::`, `super::`), each with
        /// the module (file path plus inline `mod x { }` blocks) it is in.
        references: Vec<Vec<String>>,
        /// `pub use` re-exports: name → the absolute path it stands for.
        aliases: BTreeMap<String, Vec<String>>,
    }

    /// Reads a file: the paths it names, resolved against its own module
    /// (and the inline modules around each one), and its re-exports.
    fn read_source(module: Vec<String>, relative: String, text: &str) -> Source {
        let code = code_only(text);
        let chars: Vec<char> = code.chars().collect();
        let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
        let [mod_word, pub_use, pub_crate_use, crate_path, super_path] =
            ["mod ", "pub use ", "pub(crate) use ", "crate::", "super::"]
                .map(|w| w.chars().collect::<Vec<char>>());
        let starts = |at: usize, word: &[char]| {
            chars[at..].starts_with(word)
                && (at == 0 || !(ident(chars[at - 1]) || matches!(chars[at - 1], ':' | '$')))
        };
        let mut inline: Vec<(String, usize)> = Vec::new();
        let mut depth = 0usize;
        let mut references = Vec::new();
        let mut aliases = BTreeMap::new();
        let mut at = 0;
        while at < chars.len() {
            let here = || -> Vec<String> {
                module
                    .iter()
                    .cloned()
                    .chain(inline.iter().map(|(m, _)| m.clone()))
                    .collect()
            };
            if chars[at] == '{' {
                depth += 1;
            } else if chars[at] == '}' {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
            } else if starts(at, &mod_word) {
                let name_at = skip_space(&chars, at + 4);
                let name = ident_at(&chars, name_at);
                let after = skip_space(&chars, name_at + name.chars().count());
                if !name.is_empty() && chars.get(after) == Some(&'{') {
                    inline.push((name, depth));
                    depth += 1;
                    at = after + 1;
                    continue;
                }
            } else if starts(at, &pub_use) || starts(at, &pub_crate_use) {
                let tree_at = at + if chars[at + 3] == '(' { 15 } else { 8 };
                let (paths, _) = use_tree(&chars, tree_at);
                for path in paths {
                    if let (Some(name), Some(target)) =
                        (path.last(), absolute(&here(), &path, &module))
                    {
                        aliases.insert(name.clone(), target);
                    }
                }
            } else if starts(at, &crate_path) || starts(at, &super_path) {
                let (paths, end) = use_tree(&chars, at);
                for path in paths {
                    if let Some(target) = absolute(&here(), &path, &module) {
                        references.push(target);
                    }
                }
                at = end.max(at + 1);
                continue;
            }
            at += 1;
        }
        Source {
            module,
            relative,
            references,
            aliases,
        }
    }

    /// `crate::a::b` → `[a, b]`; `super::b` inside `a::c` → `[a, b]`.
    /// Paths that start elsewhere (another crate, a child) give `None`:
    /// they cannot reach a sibling. A re-export's path that names a child
    /// module (`pub use api::Api` in `server`) is taken as the file's own.
    fn absolute(here: &[String], path: &[String], file_module: &[String]) -> Option<Vec<String>> {
        let mut base = here.to_vec();
        let mut rest = path;
        match rest.first().map(String::as_str) {
            Some("crate") => {
                base.clear();
                rest = &rest[1..];
            }
            Some("super") => {
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
            }
            Some("self") => rest = &rest[1..],
            _ if here == file_module => {}
            _ => return None,
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The module a path lands in: its longest prefix that is a module
    /// file, following re-exports (`crate::Index` → `reader`).
    fn resolve(
        mut path: Vec<String>,
        modules: &BTreeSet<Vec<String>>,
        aliases: &BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>>,
    ) -> Vec<String> {
        for _ in 0..8 {
            let known = (0..=path.len())
                .rev()
                .find(|n| modules.contains(&path[..*n]))
                .unwrap_or(0);
            let Some(next) = path.get(known) else {
                return path;
            };
            match aliases.get(&path[..known]).and_then(|a| a.get(next)) {
                Some(target) if *target != path[..=known] => {
                    let mut followed = target.clone();
                    followed.extend(path[known + 1..].iter().cloned());
                    path = followed;
                }
                _ => return path[..known].to_vec(),
            }
        }
        path
    }

    /// The sibling modules an edge between `from` and `to` joins, or `None`
    /// when one contains the other.
    fn sibling_edge(from: &[String], to: &[String]) -> Option<(String, String)> {
        let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
        if common == from.len() || common == to.len() {
            return None;
        }
        Some((from[..=common].join("::"), to[..=common].join("::")))
    }

    /// The module graph of the crate whose sources are at `src`, and for
    /// each edge a file that makes it.
    fn crate_graph(src: &Path) -> (Graph, BTreeMap<(String, String), String>) {
        let mut files = Vec::new();
        rust_files(src, &mut files);
        files.sort();
        let sources: Vec<Source> = files
            .iter()
            .map(|file| {
                let relative = file.strip_prefix(src).expect("under src");
                let text = std::fs::read_to_string(file).expect("source file");
                read_source(module_path(relative), relative.display().to_string(), &text)
            })
            .collect();
        let modules: BTreeSet<Vec<String>> = sources.iter().map(|s| s.module.clone()).collect();
        let mut aliases: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>> = BTreeMap::new();
        for source in &sources {
            aliases
                .entry(source.module.clone())
                .or_default()
                .extend(source.aliases.clone());
        }
        let mut graph = Graph::new();
        let mut witness = BTreeMap::new();
        for source in &sources {
            if !source.module.is_empty() {
                graph.entry(source.module.join("::")).or_default();
            }
            for reference in &source.references {
                let to = resolve(reference.clone(), &modules, &aliases);
                let Some((from, to)) = sibling_edge(&source.module, &to) else {
                    continue;
                };
                witness
                    .entry((from.clone(), to.clone()))
                    .or_insert_with(|| source.relative.clone());
                graph.entry(from).or_default().insert(to);
            }
        }
        (graph, witness)
    }

    /// A cycle as `[a, b, ..., a]`, or `None` for a DAG.
    fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            Open,
            Done,
        }
        fn visit(
            node: &str,
            graph: &Graph,
            marks: &mut BTreeMap<String, Mark>,
            path: &mut Vec<String>,
        ) -> Option<Vec<String>> {
            match marks.get(node) {
                Some(Mark::Done) => return None,
                Some(Mark::Open) => {
                    let start = path
                        .iter()
                        .position(|n| n == node)
                        .expect("open node is on the path");
                    let mut cycle = path[start..].to_vec();
                    cycle.push(node.to_owned());
                    return Some(cycle);
                }
                None => {}
            }
            marks.insert(node.to_owned(), Mark::Open);
            path.push(node.to_owned());
            for next in graph.get(node).into_iter().flatten() {
                if let Some(cycle) = visit(next, graph, marks, path) {
                    return Some(cycle);
                }
            }
            path.pop();
            marks.insert(node.to_owned(), Mark::Done);
            None
        }
        let mut marks = BTreeMap::new();
        graph
            .keys()
            .find_map(|node| visit(node, graph, &mut marks, &mut Vec::new()))
    }

    /// Whether `to` is reachable from `from`.
    fn reaches(graph: &Graph, from: &str, to: &str) -> bool {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_owned()];
        while let Some(node) = stack.pop() {
            if node == to {
                return true;
            }
            if seen.insert(node.clone()) {
                stack.extend(graph.get(&node).into_iter().flatten().cloned());
            }
        }
        false
    }

    fn graph_of(edges: &[(&str, &str)]) -> Graph {
        let mut graph = Graph::new();
        for (from, to) in edges {
            graph
                .entry((*from).to_owned())
                .or_default()
                .insert((*to).to_owned());
            graph.entry((*to).to_owned()).or_default();
        }
        graph
    }

    #[test]
    fn every_crates_modules_form_no_cycle_at_any_depth() {
        let mut failures = Vec::new();
        let crates = workspace_sources();
        assert!(
            crates.iter().any(|(name, _)| name == "oapd"),
            "no crates found"
        );
        for (name, src) in &crates {
            let (mut graph, witness) = crate_graph(src);
            for (_, from, to) in KNOWN_CYCLES.iter().filter(|(c, _, _)| c == name) {
                let closes =
                    graph.get(*from).is_some_and(|e| e.contains(*to)) && reaches(&graph, to, from);
                if !closes {
                    failures.push(format!(
                        "{name}: {from} -> {to} closes no cycle any more: remove it from KNOWN_CYCLES"
                    ));
                }
                if let Some(edges) = graph.get_mut(*from) {
                    edges.remove(*to);
                }
            }
            // Every cycle, not only the first: each one found is reported
            // and broken at its closing edge before looking again.
            while let Some(cycle) = find_cycle(&graph) {
                let steps: Vec<String> = cycle
                    .windows(2)
                    .map(|w| {
                        let file = &witness[&(w[0].clone(), w[1].clone())];
                        format!("  {} -> {} (in {file})", w[0], w[1])
                    })
                    .collect();
                failures.push(format!(
                    "{name}'s modules form a cycle: {}\n{}",
                    cycle.join(" -> "),
                    steps.join("\n")
                ));
                let [.., from, to] = cycle.as_slice() else {
                    break;
                };
                if let Some(edges) = graph.get_mut(from) {
                    edges.remove(to);
                }
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn every_source_file_says_what_it_is() {
        let mut missing = Vec::new();
        let mut stale = Vec::new();
        let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
        for (_, src) in workspace_sources() {
            let mut files = Vec::new();
            rust_files(&src, &mut files);
            for file in files {
                let text = std::fs::read_to_string(&file).expect("source file");
                let relative = file
                    .strip_prefix(root)
                    .unwrap_or(&file)
                    .display()
                    .to_string();
                let documented = text.lines().any(|l| l.trim_start().starts_with("//!"));
                match (documented, UNDOCUMENTED.contains(&relative.as_str())) {
                    (false, false) => missing.push(relative),
                    (true, true) => stale.push(relative),
                    _ => {}
                }
            }
        }
        assert!(
            missing.is_empty(),
            "module files without a `//!` line saying what they are:\n{}",
            missing.join("\n")
        );
        assert!(
            stale.is_empty(),
            "documented now: remove from UNDOCUMENTED:\n{}",
            stale.join("\n")
        );
    }

    #[test]
    fn the_cycle_finder_finds_cycles_and_passes_layers() {
        let dag = graph_of(&[("cli", "server"), ("server", "config"), ("cli", "config")]);
        assert_eq!(find_cycle(&dag), None);
        let looped = graph_of(&[("cli", "server"), ("server", "crawl"), ("crawl", "server")]);
        assert_eq!(
            find_cycle(&looped),
            Some(vec!["server".into(), "crawl".into(), "server".into()])
        );
        let triangle = graph_of(&[("a", "b"), ("b", "c"), ("c", "a")]);
        assert_eq!(find_cycle(&triangle).map(|c| c.len()), Some(4));
    }

    /// A crate at `dir` made of `(path under src, text)` files.
    fn write_crate(dir: &Path, files: &[(&str, &str)]) -> PathBuf {
        let src = dir.join("src");
        for (path, text) in files {
            let file = src.join(path);
            std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
            std::fs::write(file, text).expect("write");
        }
        src
    }

    #[test]
    fn a_cycle_between_nested_modules_is_found() {
        let dir = tempfile::tempdir().expect("tempdir");
        let src = write_crate(
            dir.path(),
            &[
                ("lib.rs", "pub mod top;\npub mod other;\n"),
                ("other.rs", "use crate::top::a::Thing;\n"),
                ("top/mod.rs", "mod a;\nmod b;\npub use a::Thing;\n"),
                ("top/a.rs", "pub struct Thing;\nfn f() { super::b::g() }\n"),
                // Through the parent's re-export, at the end of a group.
                ("top/b.rs", "use crate::{top::{Thing}};\n"),
            ],
        );
        let (graph, witness) = crate_graph(&src);
        assert_eq!(
            find_cycle(&graph),
            Some(vec!["top::a".into(), "top::b".into(), "top::a".into()])
        );
        assert_eq!(witness[&("top::b".into(), "top::a".into())], "top/b.rs");
        // `other` uses a child of `top`: an edge between the root's modules.
        assert!(graph["other"].contains("top"));
        assert!(!graph.contains_key("top") || graph["top"].is_empty());
    }

    #[test]
    fn tests_modules_and_strings_make_no_edges() {
        let dir = tempfile::tempdir().expect("tempdir");
        let src = write_crate(
            dir.path(),
            &[
                ("lib.rs", "mod a;\nmod b;\n"),
                ("a.rs", "use crate::b::X;\n"),
                (
                    "b.rs",
                    "pub struct X;\n// crate::a::nothing\n\
                     const S: &str = \"crate::a::y {\";\nconst C: char = '{';\n\
                     #[cfg(test)]\nmod tests {\n    use super::X;\n    fn f<'a>(_: &'a str) {}\n}\n\
                     fn g() { super::b::X; }\n",
                ),
            ],
        );
        let (graph, _) = crate_graph(&src);
        assert_eq!(find_cycle(&graph), None, "{graph:?}");
        assert!(graph["a"].contains("b"));
    }

    #[test]
    fn paths_map_to_their_modules() {
        let code: Vec<char> = "{config::{Config, LogConfig}, files, self as me, watch::*}"
            .chars()
            .collect();
        let (paths, end) = use_tree(&code, 0);
        let joined: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
        assert_eq!(
            joined,
            ["config::Config", "config::LogConfig", "files", "", "watch"]
        );
        assert_eq!(end, code.len());
        assert_eq!(
            code_only("//! crate::x\nuse crate::y;"),
            "            \nuse crate::y;"
        );
        assert_eq!(module_path(Path::new("config/env.rs")), ["config", "env"]);
        assert_eq!(module_path(Path::new("config/mod.rs")), ["config"]);
        assert_eq!(module_path(Path::new("watch.rs")), ["watch"]);
        assert!(module_path(Path::new("lib.rs")).is_empty());
        let here = vec!["server".to_owned(), "api".to_owned()];
        let path = |s: &str| s.split("::").map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(
            absolute(&here, &path("super::crawl::run"), &here),
            Some(path("server::crawl::run"))
        );
        assert_eq!(
            absolute(&here, &path("crate::config::Config"), &here),
            Some(path("config::Config"))
        );
        assert_eq!(
            absolute(&here, &path("super::super::super::x"), &here),
            None
        );
        assert_eq!(
            sibling_edge(&path("server::api"), &path("server::crawl")),
            Some(("server::api".into(), "server::crawl".into()))
        );
        assert_eq!(sibling_edge(&path("server::api"), &path("server")), None);
        assert_eq!(
            sibling_edge(&path("cli::serve"), &path("server::api")),
            Some(("cli".into(), "server".into()))
        );
    }
}
