//! The optional DNS TXT hint `_oap.<domain> TXT "v=oap1"` (spec,
//! "Discovery"). It signals participation; it is checked and recorded, and
//! never required (the manifest fetch decides).

use std::io;

use oap_exec::BoxFuture;
use serde::{Deserialize, Serialize};

/// Looks up TXT records. Tests use a stub; production plugs a DNS client in.
pub trait TxtResolver: Send + Sync {
    /// The TXT strings at `name` (each record's strings joined).
    fn txt<'a>(&'a self, name: &'a str) -> BoxFuture<'a, io::Result<Vec<String>>>;
}

/// What the hint check found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "detail")]
pub enum TxtHint {
    /// `_oap.<domain>` has a `v=oap1` record.
    Present,
    /// No such record (or none with `v=oap1`).
    Absent,
    /// The lookup failed (the text says why).
    Failed(String),
    /// No TXT resolver is configured.
    NotChecked,
}

/// Checks `_oap.<host>` for `v=oap1` (the port, if any, is not part of the name).
pub async fn check(resolver: Option<&dyn TxtResolver>, domain: &str) -> TxtHint {
    let Some(resolver) = resolver else {
        return TxtHint::NotChecked;
    };
    let host = domain.split(':').next().unwrap_or(domain);
    match resolver.txt(&format!("_oap.{host}")).await {
        Ok(records) => {
            let present = records.iter().any(|r| {
                r.split(|c: char| c == ';' || c.is_whitespace())
                    .any(|part| part.trim().eq_ignore_ascii_case("v=oap1"))
            });
            if present {
                TxtHint::Present
            } else {
                TxtHint::Absent
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => TxtHint::Absent,
        // The resolver declines this name (e.g. a static local name).
        Err(e) if e.kind() == io::ErrorKind::Unsupported => TxtHint::NotChecked,
        Err(e) => TxtHint::Failed(e.to_string().chars().take(200).collect()),
    }
}
