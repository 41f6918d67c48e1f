//! Turning a verified staged snapshot into the installed one, and back.
//!
//! Before the swap, the snapshot's catalog (`catalog.jsonl`) becomes
//! envelopes in `staging/tools`, the directory the engine reads as one more
//! remote source: every tool with internet trust, so its calls go through
//! the executor's HTTP rules and a local command (`stdio`) is refused by the
//! catalog as from any network source. The builder's bundled tools (the
//! board ships its own) and MCP tools (the builder's own servers) are left
//! out. Ids stay the builder's (`<host>/<slug>`) where the host is one
//! tool's; a host shared by several (the builder's `local/...`) becomes
//! `snapshot.<slug>`, so two snapshot tools never share an envelope and
//! none takes a board-local id.
//!
//! The swap is two renames: `current` → `previous` (the one before is
//! dropped), `staging` → `current`. A crash between them leaves no
//! `current`; [`recover`] at the next start renames `previous` back.

use std::collections::HashMap;
use std::io::{BufRead, Read};
use std::path::Path;

use oap_store::envelope::{write_envelope, RemoteDocument};
use serde::Deserialize;

use super::{rows::ROWS_BY_ID_FILE, CURRENT, PREVIOUS, TOOLS};
use crate::request_gen::cache;

/// The catalog's file name inside a snapshot.
pub const CATALOG_FILE: &str = oap_snapshot::CATALOG_FILE;

/// Longest catalog line read (a manifest is at most 64 KiB; its JSON
/// record a little more).
const MAX_LINE_BYTES: usize = 1 << 20;

/// One catalog line, as `oapd snapshot build` writes it.
#[derive(Debug, Deserialize)]
struct Record {
    id: String,
    #[serde(default)]
    content_hash: String,
    origin: Origin,
    manifest: serde_json::Value,
    #[serde(default)]
    mcp: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
struct Origin {
    kind: String,
}

/// What the conversion made of the catalog.
#[derive(Debug, Default)]
pub(super) struct Converted {
    pub tools: usize,
    pub skipped: usize,
}

/// Writes `dir/tools` from `dir/catalog.jsonl` (and the rows map
/// `dir/rows-by-id.json` from `dir/generated-requests.json`: beside the
/// envelopes, not among them, where the engine would read it as one). `base_url` is where the snapshot came
/// from, shown as each tool's origin.
pub(super) fn convert_catalog(dir: &Path, base_url: &str) -> Result<Converted, String> {
    let path = dir.join(CATALOG_FILE);
    // Two passes over the file, one record at a time: the first counts
    // the tools per host (only ids are kept), the second writes each
    // envelope. A 10,000-tool catalog is never held parsed in memory, as
    // a swap must cost a board no more than a crawl rebuild does.
    let mut per_host: HashMap<String, usize> = HashMap::new();
    for_each_line::<IdOnly>(&path, false, |record| {
        *per_host.entry(prefix(&record.id).to_owned()).or_default() += 1;
        Ok(())
    })?;
    let rows_path = dir.join(cache::FILE_NAME);
    // Whole, not capped at the daemon's own cache size: the builder's file
    // covers its whole catalog, and its size was verified against the
    // signed listing (under `snapshots.max_bytes`) before this runs.
    let mut rows = match cache::Cache::load_all(&rows_path) {
        Ok(rows) => rows,
        Err(err) => {
            tracing::warn!(error = %err, "snapshot request rows unreadable, left out");
            cache::Cache::default()
        }
    };
    let tools_dir = dir.join(TOOLS);
    std::fs::create_dir_all(&tools_dir).map_err(|e| format!("{}: {e}", tools_dir.display()))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut converted = Converted::default();
    let mut rows_by_id: HashMap<String, Vec<String>> = HashMap::new();
    for_each_line::<Record>(&path, true, |record| {
        if record.origin.kind == "bundled" || record.mcp.is_some() {
            converted.skipped += 1;
            return Ok(());
        }
        let Some(name) = record.manifest.get("name").and_then(|n| n.as_str()) else {
            converted.skipped += 1;
            return Ok(());
        };
        let slug = oap_manifest::slug(name);
        let prefix = prefix(&record.id);
        let host = if prefix != "local" && per_host.get(prefix) == Some(&1) {
            prefix.to_owned()
        } else {
            format!("snapshot.{slug}")
        };
        let body =
            serde_json::to_string(&record.manifest).map_err(|e| format!("{}: {e}", record.id))?;
        let doc = RemoteDocument {
            host: host.clone(),
            url: format!("{base_url}#{}", record.id),
            trust: oap_store::Trust::Internet,
            fetched_at_unix: now,
            body,
            unhealthy: None,
        };
        write_envelope(&tools_dir, &doc).map_err(|e| e.to_string())?;
        converted.tools += 1;
        if let Some(entry) = rows.lookup(&record.content_hash, None, now) {
            rows_by_id.insert(format!("{host}/{slug}"), entry.requests.clone());
        }
        Ok(())
    })?;
    let bytes = serde_json::to_vec(&rows_by_id).map_err(|e| e.to_string())?;
    oap_store::write_atomic(&dir.join(ROWS_BY_ID_FILE), &bytes).map_err(|e| e.to_string())?;
    Ok(converted)
}

/// A catalog line's id alone (the first pass).
#[derive(Debug, Deserialize)]
struct IdOnly {
    id: String,
}

fn prefix(id: &str) -> &str {
    id.split_once('/').map_or(id, |(host, _)| host)
}

/// Hands every catalog line of `path` that parses as `T` to `each`, one at
/// a time; a line that does not parse is skipped (with a warning when
/// `warn`: once per conversion, not per pass), one longer than
/// [`MAX_LINE_BYTES`] ends the conversion.
fn for_each_line<T: serde::de::DeserializeOwned>(
    path: &Path,
    warn: bool,
    mut each: impl FnMut(T) -> Result<(), String>,
) -> Result<(), String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut reader = std::io::BufReader::new(file);
    let mut line = Vec::new();
    let mut number = 0usize;
    loop {
        line.clear();
        number += 1;
        let read = (&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if read == 0 {
            return Ok(());
        }
        if line.len() > MAX_LINE_BYTES {
            return Err(format!(
                "{} line {number}: longer than {MAX_LINE_BYTES} bytes",
                path.display()
            ));
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<T>(&line) {
            Ok(record) => each(record)?,
            Err(err) if warn => {
                tracing::warn!(line = number, error = %err, "snapshot catalog line skipped");
            }
            Err(_) => {}
        }
    }
}

/// `current` → `previous`, `staging` → `current`, then the directory
/// synced.
pub(super) fn swap_in(root: &Path, staging: &Path) -> std::io::Result<()> {
    let current = root.join(CURRENT);
    let previous = root.join(PREVIOUS);
    if current.exists() {
        if previous.exists() {
            std::fs::remove_dir_all(&previous)?;
        }
        std::fs::rename(&current, &previous)?;
    }
    std::fs::rename(staging, &current)?;
    sync_dir(root);
    Ok(())
}

/// `previous` back to `current` (the swapped-in one dropped): the rollback
/// after a rebuild that failed with the new snapshot.
pub(super) fn roll_back(root: &Path) -> std::io::Result<()> {
    let current = root.join(CURRENT);
    let previous = root.join(PREVIOUS);
    if current.exists() {
        std::fs::remove_dir_all(&current)?;
    }
    if previous.exists() {
        std::fs::rename(&previous, &current)?;
    }
    sync_dir(root);
    Ok(())
}

/// A swap cut short (no `current`, a `previous`): `previous` is the
/// installed one again.
pub(super) fn recover(root: &Path) {
    let current = root.join(CURRENT);
    let previous = root.join(PREVIOUS);
    if !current.exists() && previous.exists() {
        match std::fs::rename(&previous, &current) {
            Ok(()) => tracing::warn!(
                "snapshot swap was cut short: the previous snapshot is installed again"
            ),
            Err(err) => {
                tracing::error!(error = %err, "snapshot swap was cut short and the previous snapshot cannot be restored")
            }
        }
    }
}

fn sync_dir(dir: &Path) {
    if let Ok(handle) = std::fs::File::open(dir) {
        let _ = handle.sync_all();
    }
}
