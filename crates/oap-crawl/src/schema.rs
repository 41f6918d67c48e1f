//! The documents behind a fetched manifest's `input.schema` and
//! `output.schema`, fetched when the manifest is and under its rules, and
//! recorded in it (`oap_manifest::tool::schema_doc`), so the schema is
//! stored, cached and refreshed with the manifest: a 304 for the manifest
//! keeps the stored copy with its schema; a new copy fetches the schema
//! again, conditionally when the caller passes the copy it replaces.
//!
//! The rules are the manifest's own: its trust decides which addresses
//! every hop may reach (the executor's resolve-check-connect guard, so a
//! redirect to a private address is refused before any connection), an
//! internet manifest's schema comes over HTTPS only, and the fetch has its
//! own deadline and body cap ([`SchemaLimits`]). A schema may live on
//! another host than the manifest (a documentation site, a CDN), so
//! redirects across hosts are followed, each hop checked. Only `http(s)`
//! URLs are fetched, never `file:`.
//!
//! A manifest from an operator's directory (`manifests.dirs`) gets the same
//! treatment through [`attach_local_schemas`], under local trust (the
//! address rules of the calls it makes), and one more kind of reference: a
//! relative path names a file beside the manifest in that directory, read
//! confined to it (no absolute path, no `..`, no symbolic link out of it)
//! and capped like a fetched document. A crawled manifest's relative path
//! or `file:` URL is never read.
//!
//! A schema that cannot be used leaves the manifest as it was, with the
//! reason recorded (`x-oapd-schema.error`): the tool keeps today's fallback
//! parameters and `/v1/manifests`, `/ui` and `oapd lint` say why.

use std::path::{Component, Path};
use std::time::Duration;

use oap_exec::{Executor, FetchRequest};
use oap_manifest::tool::schema_doc::{
    resolve_input_schema, resolve_output_fields, resolved_record, MAX_SCHEMA_DOCUMENT_BYTES,
    RESOLVED_SCHEMA_KEY,
};
use oap_manifest::{Manifest, MAX_MANIFEST_BYTES};
use oap_store::Trust;
use serde_json::{json, Value};

use crate::request::{exec_trust, Validators};

/// Limits of one schema fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaLimits {
    /// Whole-fetch deadline (resolution, connect, TLS, redirects, body).
    pub timeout: Duration,
    /// Body cap; a longer body is refused without reading past it.
    pub max_bytes: usize,
}

impl Default for SchemaLimits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            max_bytes: MAX_SCHEMA_DOCUMENT_BYTES,
        }
    }
}

/// Which side of the manifest a schema describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Input,
    Output,
}

impl Side {
    fn key(self) -> &'static str {
        match self {
            Side::Input => "input",
            Side::Output => "output",
        }
    }
}

/// Where a manifest came from, which decides what its schema references
/// may name.
#[derive(Debug, Clone, Copy)]
enum Holder<'a> {
    /// Fetched (crawled, LAN): `http(s)` URLs only, under this trust.
    Fetched(Trust),
    /// A file in this operator directory: `http(s)` URLs under local
    /// trust, and relative paths of files in the directory.
    OperatorDir(&'a Path),
}

impl Holder<'_> {
    fn trust(self) -> Trust {
        match self {
            Holder::Fetched(trust) => trust,
            Holder::OperatorDir(_) => Trust::Local,
        }
    }
}

/// `body` (a manifest that passed every check, fetched with `trust`) with
/// its schemas fetched and recorded. `previous` is the stored copy it
/// replaces, whose records make the fetches conditional. Records a
/// publisher wrote under the key are dropped first: only a fetch writes
/// them. A body without a schema URL or such a record is returned as is.
pub async fn attach_schemas(
    executor: &Executor,
    body: String,
    trust: Trust,
    previous: Option<&str>,
    limits: SchemaLimits,
) -> String {
    attach(executor, body, Holder::Fetched(trust), previous, limits).await
}

/// [`attach_schemas`] for a manifest file of the operator directory `dir`:
/// URLs are fetched under local trust (the executor's rules for the calls
/// a local manifest makes), and a relative path names a file in `dir`
/// ([`read_beside`]). `previous` is the result of the last call for the
/// same file, whose records make the fetches conditional.
pub async fn attach_local_schemas(
    executor: &Executor,
    body: String,
    dir: &Path,
    previous: Option<&str>,
    limits: SchemaLimits,
) -> String {
    attach(executor, body, Holder::OperatorDir(dir), previous, limits).await
}

async fn attach(
    executor: &Executor,
    body: String,
    holder: Holder<'_>,
    previous: Option<&str>,
    limits: SchemaLimits,
) -> String {
    let trust = holder.trust();
    let Ok(mut doc) = serde_json::from_str::<Value>(&body) else {
        return body;
    };
    let Ok(manifest) = serde_json::from_value::<Manifest>(doc.clone()) else {
        return body;
    };
    let previous: Option<Value> = previous.and_then(|p| serde_json::from_str(p).ok());
    let mut touched = false;
    for side in [Side::Input, Side::Output] {
        if let Some(io) = doc.get_mut(side.key()).and_then(Value::as_object_mut) {
            touched |= io.remove(RESOLVED_SCHEMA_KEY).is_some();
        }
    }
    // One fetch per URL: an OpenAPI document usually describes both sides.
    let mut fetched: Vec<(String, Result<Fetched, String>)> = Vec::new();
    for side in [Side::Input, Side::Output] {
        let Some(url) = schema_url(&manifest, side) else {
            continue;
        };
        touched = true;
        let old = previous
            .as_ref()
            .and_then(|p| p.get(side.key()))
            .and_then(|io| io.get(RESOLVED_SCHEMA_KEY))
            .filter(|r| r.get("url").and_then(Value::as_str) == Some(url.as_str()))
            .filter(|r| r.get("error").is_none())
            .cloned();
        let result = match fetched.iter().find(|(u, _)| *u == url) {
            Some((_, result)) => result.clone(),
            None => {
                let result = match holder {
                    Holder::OperatorDir(dir) if is_relative_path(&url) => {
                        read_beside(dir, &url, limits.max_bytes).map(|bytes| Fetched::Document {
                            bytes,
                            validators: Validators::default(),
                        })
                    }
                    _ => fetch_document(executor, &url, trust, old.as_ref(), limits).await,
                };
                fetched.push((url.clone(), result.clone()));
                result
            }
        };
        let record = match result {
            Ok(Fetched::NotModified) => match old {
                Some(old) => old,
                None => json!({"url": url, "error": "304 Not Modified without a stored copy"}),
            },
            Ok(Fetched::Document { bytes, validators }) => {
                // A file has no URL to resolve an OpenAPI document's
                // relative `servers` against: the tool's own is the base.
                let base = if is_relative_path(&url) {
                    manifest.invoke.url.trim()
                } else {
                    url.as_str()
                };
                let mut record = convert(&bytes, &url, base, &manifest, side);
                if let Value::Object(r) = &mut record {
                    if r.get("error").is_none() {
                        if let Some(etag) = validators.etag {
                            r.insert("etag".into(), Value::String(etag));
                        }
                        if let Some(date) = validators.last_modified {
                            r.insert("last_modified".into(), Value::String(date));
                        }
                    }
                }
                record
            }
            Err(error) => resolved_record(&url, Err(error), &[]),
        };
        if let Some(error) = record.get("error").and_then(Value::as_str) {
            tracing::info!(manifest = %manifest.name, url = %url, error, "{}.schema not used", side.key());
        }
        if let Some(io) = doc.get_mut(side.key()).and_then(Value::as_object_mut) {
            io.insert(RESOLVED_SCHEMA_KEY.into(), record);
        }
    }
    if !touched {
        return body;
    }
    fit_under_manifest_cap(doc, body)
}

/// The manifest with its records, or, when a converted schema would push
/// it past the manifest cap, with that record replaced by the reason.
fn fit_under_manifest_cap(mut doc: Value, original: String) -> String {
    let fits = |doc: &Value| {
        let text = doc.to_string();
        oap_manifest::parse(text.as_bytes()).is_ok().then_some(text)
    };
    if let Some(text) = fits(&doc) {
        return text;
    }
    for side in [Side::Input, Side::Output] {
        let Some(record) = doc
            .get_mut(side.key())
            .and_then(|io| io.get_mut(RESOLVED_SCHEMA_KEY))
        else {
            continue;
        };
        let size = record.to_string().len();
        let url = record.get("url").cloned().unwrap_or(Value::Null);
        *record = json!({"url": url, "error": format!(
            "the converted schema is {size} bytes; with it the manifest would exceed its \
             {MAX_MANIFEST_BYTES}-byte cap"
        )});
        if let Some(text) = fits(&doc) {
            return text;
        }
    }
    original
}

fn schema_url(manifest: &Manifest, side: Side) -> Option<String> {
    let io = match side {
        Side::Input => manifest.input.as_ref(),
        Side::Output => manifest.output.as_ref(),
    }?;
    let url = io.schema.as_deref()?.trim();
    // An inline JSON schema in the field is the converter's business.
    (!url.is_empty() && !url.starts_with('{')).then(|| url.to_string())
}

/// Whether a schema reference is a path rather than a URL: no scheme
/// (`https:`, `file:`, ...) before its first `/`.
fn is_relative_path(reference: &str) -> bool {
    match reference.split_once(':') {
        Some((before, _)) => before.contains('/'),
        None => true,
    }
}

/// The file `reference` (a relative path) names in the operator directory
/// `dir`, at most `max_bytes`. Refused: an absolute path, a `..` or `.`
/// component, a path that resolves (symbolic links followed) outside
/// `dir`, anything but a regular file. The manifest is the operator's, but
/// a file copied in from elsewhere should not read the rest of the disk.
fn read_beside(dir: &Path, reference: &str, max_bytes: usize) -> Result<Vec<u8>, String> {
    let relative = Path::new(reference);
    if reference.is_empty()
        || !relative
            .components()
            .all(|part| matches!(part, Component::Normal(_)))
    {
        return Err(format!(
            "the schema path {reference:?} is not inside the manifest's directory \
             (a relative path without `..` or `.` is)"
        ));
    }
    let directory = dir
        .canonicalize()
        .map_err(|err| format!("cannot resolve the manifest's directory: {err}"))?;
    let file = directory
        .join(relative)
        .canonicalize()
        .map_err(|err| format!("cannot read the schema file {reference:?}: {err}"))?;
    if !file.starts_with(&directory) {
        return Err(format!(
            "the schema file {reference:?} resolves outside the manifest's directory \
             (a symbolic link out of it is not followed)"
        ));
    }
    oap_store::read_capped(&file, max_bytes as u64)
        .map_err(|err| format!("cannot read the schema file {reference:?}: {err}"))
}

fn convert(bytes: &[u8], url: &str, base: &str, manifest: &Manifest, side: Side) -> Value {
    match side {
        Side::Input => match resolve_input_schema(bytes, base, manifest) {
            Ok(resolved) => resolved_record(url, Ok(resolved.parameters), &resolved.notes),
            Err(err) => resolved_record(url, Err(err.to_string()), &[]),
        },
        Side::Output => match resolve_output_fields(bytes, base, manifest) {
            Ok(fields) => resolved_record(url, Ok(json!(fields)), &[]),
            Err(err) => resolved_record(url, Err(err.to_string()), &[]),
        },
    }
}

#[derive(Debug, Clone)]
enum Fetched {
    NotModified,
    Document {
        bytes: Vec<u8>,
        validators: Validators,
    },
}

async fn fetch_document(
    executor: &Executor,
    url: &str,
    trust: Trust,
    previous: Option<&Value>,
    limits: SchemaLimits,
) -> Result<Fetched, String> {
    let scheme = url.split(':').next().unwrap_or("").to_ascii_lowercase();
    if scheme != "https" && scheme != "http" {
        return Err(format!(
            "only http(s) schema URLs are fetched, not {scheme:?}"
        ));
    }
    let validators = Validators {
        etag: previous
            .and_then(|p| p.get("etag"))
            .and_then(Value::as_str)
            .map(str::to_string),
        last_modified: previous
            .and_then(|p| p.get("last_modified"))
            .and_then(Value::as_str)
            .map(str::to_string),
    };
    let mut headers = validators.headers();
    headers.push((
        "accept".to_string(),
        "application/schema+json, application/json, application/*+json;q=0.9".to_string(),
    ));
    let request = FetchRequest {
        url: url.to_string(),
        trust: exec_trust(trust),
        headers,
        max_body_bytes: limits.max_bytes,
        timeout: limits.timeout,
        // A LAN device rarely has a certificate; an internet manifest's
        // schema must come over HTTPS like the manifest itself.
        https_only: trust == Trust::Internet,
        same_host_only: false,
    };
    let response = executor
        .fetch(&request)
        .await
        .map_err(|err| err.to_string())?;
    if response.status == 304 && !validators.is_empty() {
        return Ok(Fetched::NotModified);
    }
    if response.status != 200 {
        return Err(format!(
            "HTTP {} from {}",
            response.status, response.final_url
        ));
    }
    Ok(Fetched::Document {
        validators: Validators::of(&response),
        bytes: response.body,
    })
}
