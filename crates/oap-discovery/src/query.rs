//! Turning a user's task into what is embedded and what is matched lexically.
//!
//! Voice and chat tasks often carry their data inline: "count the words in:
//! <a paragraph>", "extract the name field from {...}". That data says
//! nothing about which capability fits, and it drowns the instruction in a
//! mean-pooled embedding and floods BM25 with irrelevant terms. So the
//! instruction is separated from inline data before retrieval; the original
//! task is still what the model later sees.

/// Longest instruction kept, in bytes: retrieval needs the ask, not an essay.
const MAX_INSTRUCTION: usize = 1_000;

/// The views of a task used for retrieval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryViews {
    /// Text embedded for dense retrieval.
    pub dense: String,
    /// Text tokenised for lexical retrieval.
    pub lexical: String,
}

/// Splits a task into its instruction and drops inline data.
pub fn views(task: &str) -> QueryViews {
    let task = task.trim();
    let instruction = instruction_part(task);
    let instruction = crate::document::truncate_on_char_boundary(instruction, MAX_INSTRUCTION);
    let instruction = if instruction.trim().is_empty() {
        crate::document::truncate_on_char_boundary(task, MAX_INSTRUCTION)
    } else {
        instruction.trim()
    };
    let exp = std::env::var("OAPD_EXP").unwrap_or_default();
    let dense = if exp.contains("full") {
        crate::document::truncate_on_char_boundary(task, MAX_INSTRUCTION).to_string()
    } else if exp.contains("hint") {
        let rest = &task[instruction.len().min(task.len())..];
        let rest_trim = rest.trim_start();
        let hint =
            if rest_trim.starts_with('{') || rest_trim.starts_with('[') || task.contains("{\"") {
                " (JSON data)"
            } else if task.lines().count() > 1 {
                " (lines of text)"
            } else {
                ""
            };
        format!("{instruction}{hint}")
    } else {
        instruction.to_string()
    };
    QueryViews {
        dense,
        lexical: strip_quoted_literals(instruction),
    }
}

/// The instruction is the first line, cut before an inline JSON/array
/// payload that starts on the same line.
fn instruction_part(task: &str) -> &str {
    let first_line = task.lines().next().unwrap_or(task);
    let mut cut = first_line.len();
    for marker in ["{\"", "[{", "{'", "[\""] {
        if let Some(pos) = first_line.find(marker) {
            cut = cut.min(pos);
        }
    }
    &first_line[..cut]
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

    #[test]
    fn inline_data_after_the_first_line_is_dropped() {
        let v = views("find lines containing \"error\" in:\nfoo\nerror happened\nbar");
        assert_eq!(v.dense, "find lines containing \"error\" in:");
        assert_eq!(
            v.lexical.split_whitespace().collect::<Vec<_>>(),
            ["find", "lines", "containing", "in:"]
        );
    }

    #[test]
    fn inline_json_on_the_first_line_is_dropped() {
        let v = views("extract the name field from {\"name\": \"Ada\", \"age\": 36}");
        assert_eq!(v.dense, "extract the name field from");
    }

    #[test]
    fn a_task_that_is_only_data_is_kept_whole() {
        let v = views("{\"a\": 1}");
        assert_eq!(v.dense, "{\"a\": 1}");
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
    }
}
