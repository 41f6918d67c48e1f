//! The labelled task set: one JSON line per task, the manifest names that
//! fit it (none: nothing should), and its half of a held-out corpus.

use std::path::PathBuf;

pub(crate) struct Task {
    pub(crate) id: String,
    pub(crate) query: String,
    pub(crate) expected: Vec<String>,
    /// `tuning` or `evaluation` in the held-out corpora (bench/public_corpus.py).
    pub(crate) split: Option<String>,
}

pub(crate) fn load_tasks(path: &PathBuf) -> Result<Vec<Task>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut tasks = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("line {}: {e}", n + 1))?;
        tasks.push(Task {
            id: v["id"].as_str().unwrap_or_default().to_string(),
            query: v["query"].as_str().unwrap_or_default().to_string(),
            expected: v["expected"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            split: v["split"].as_str().map(str::to_string),
        });
    }
    Ok(tasks)
}

pub(super) fn base_name(name: &str) -> &str {
    match name.rsplit_once('#') {
        Some((base, suffix)) if suffix.chars().all(|c| c.is_ascii_digit()) => base,
        _ => name,
    }
}
