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

/// `crates/oapd/src` is layered: each top-level module (`config`, `server`,
/// `crawl`, `watch`, `cli`, ...) may use the ones below it, never one that
/// uses it back. Edges are the `crate::<module>` paths in the code.
#[cfg(test)]
mod module_graph {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};

    /// Modules whose edges are not checked (none: every module counts).
    const MOVING_OUT: &[&str] = &[];

    /// Module name → the modules it uses.
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

    /// `config/env.rs` → `config`, `watch.rs` → `watch`; the crate root
    /// (`lib.rs`) and the binary (`main.rs`) are no module.
    fn top_module(relative: &Path) -> Option<String> {
        let first = relative.components().next()?.as_os_str().to_str()?;
        let name = first.strip_suffix(".rs").unwrap_or(first);
        (!matches!(name, "lib" | "main")).then(|| name.to_owned())
    }

    /// The text without comment lines (docs name modules they do not use).
    fn code_lines(text: &str) -> String {
        text.lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[allow(
        clippy::string_slice,
        reason = "every index comes from str::find, char_indices or a checked char boundary"
    )]
    fn ident_at(s: &str) -> &str {
        let end = s
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        &s[..end]
    }

    /// First segments after `prefix`: `crate::a::X` → `a`, and
    /// `crate::{a::X, b, c::{D}}` → `a`, `b`, `c`.
    #[allow(
        clippy::string_slice,
        reason = "every index comes from str::find, char_indices or a checked char boundary"
    )]
    fn first_segments(code: &str, prefix: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for (at, _) in code.match_indices(prefix) {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '$')) {
                continue; // `foo_crate::`, `$crate::`-like or a longer path.
            }
            let rest = &code[at + prefix.len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let mut depth = 1;
                let mut item_start = true;
                for (i, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        ',' if depth == 1 => item_start = true,
                        c if depth == 1 && item_start && !c.is_whitespace() => {
                            let name = ident_at(&group[i..]);
                            if !name.is_empty() && name != "self" {
                                out.insert(name.to_owned());
                            }
                            item_start = false;
                        }
                        _ => {}
                    }
                    if depth == 0 {
                        break;
                    }
                }
            } else {
                let name = ident_at(rest);
                if !name.is_empty() {
                    out.insert(name.to_owned());
                }
            }
        }
        out
    }

    /// `pub use server::{api, http};` in the crate root: `api` and `http`
    /// are `server`.
    #[allow(
        clippy::string_slice,
        reason = "every index comes from str::find, char_indices or a checked char boundary"
    )]
    fn root_aliases(lib: &str) -> BTreeMap<String, String> {
        let mut aliases = BTreeMap::new();
        for statement in code_lines(lib).split(';') {
            let Some(path) = statement.trim().strip_prefix("pub use ") else {
                continue;
            };
            let path = path.strip_prefix("crate::").unwrap_or(path);
            let module = ident_at(path);
            let Some(tail) = path[module.len()..].strip_prefix("::") else {
                continue;
            };
            let names = match tail.strip_prefix('{') {
                Some(group) => group.trim_end_matches('}').split(',').collect(),
                None => vec![tail],
            };
            for name in names {
                let name = name.trim();
                let name = name.rsplit(" as ").next().unwrap_or(name).trim();
                let name = name.rsplit("::").next().unwrap_or(name);
                if !name.is_empty() {
                    aliases.insert(name.to_owned(), module.to_owned());
                }
            }
        }
        aliases
    }

    /// The module graph of oapd's sources, and for each edge a file that
    /// makes it.
    fn oapd_graph(src: &Path) -> (Graph, BTreeMap<(String, String), String>) {
        let mut files = Vec::new();
        rust_files(src, &mut files);
        files.sort();
        let lib = std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
        let aliases = root_aliases(&lib);
        let modules: BTreeSet<String> = files
            .iter()
            .filter_map(|f| top_module(f.strip_prefix(src).ok()?))
            .collect();
        let ignored = |m: &str| MOVING_OUT.contains(&m);
        let mut graph = Graph::new();
        let mut witness = BTreeMap::new();
        for file in &files {
            let relative = file.strip_prefix(src).expect("under src");
            let Some(from) = top_module(relative) else {
                continue;
            };
            if ignored(&from) {
                continue;
            }
            graph.entry(from.clone()).or_default();
            let text = std::fs::read_to_string(file).expect("source file");
            for name in first_segments(&code_lines(&text), "crate::") {
                let to = aliases.get(&name).cloned().unwrap_or(name);
                if to == from || ignored(&to) || !modules.contains(&to) {
                    continue;
                }
                witness
                    .entry((from.clone(), to.clone()))
                    .or_insert_with(|| relative.display().to_string());
                graph.entry(from.clone()).or_default().insert(to);
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
    fn oapd_modules_form_no_cycle() {
        let src = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../crates/oapd/src"));
        let (graph, witness) = oapd_graph(src);
        assert!(
            graph.contains_key("config"),
            "no modules found in {}",
            src.display()
        );
        if let Some(cycle) = find_cycle(&graph) {
            let steps: Vec<String> = cycle
                .windows(2)
                .map(|w| {
                    let file = &witness[&(w[0].clone(), w[1].clone())];
                    format!("  {} -> {} (in {file})", w[0], w[1])
                })
                .collect();
            panic!(
                "oapd's modules form a cycle: {}\n{}",
                cycle.join(" -> "),
                steps.join("\n")
            );
        }
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

    #[test]
    fn paths_map_to_their_top_level_module() {
        let code = "use crate::{config::{Config, LogConfig}, files, self};\n\
                    let x = crate::watch::dirs(); a_crate::nope(); $crate::nope2();";
        let found: Vec<String> = first_segments(code, "crate::").into_iter().collect();
        assert_eq!(found, ["config", "files", "watch"]);
        assert_eq!(code_lines("//! crate::x\nuse crate::y;"), "use crate::y;");
        assert_eq!(
            top_module(Path::new("config/env.rs")).as_deref(),
            Some("config")
        );
        assert_eq!(top_module(Path::new("watch.rs")).as_deref(), Some("watch"));
        assert_eq!(top_module(Path::new("lib.rs")), None);
        let aliases =
            root_aliases("pub mod server;\npub use server::{api, http};\npub use crawl::mdns;");
        assert_eq!(aliases["api"], "server");
        assert_eq!(aliases["http"], "server");
        assert_eq!(aliases["mdns"], "crawl");
    }
}
