//! OAP manifest model, parser and validator.
//!
//! This crate is pure (no file or network I/O) so the daemon, the indexer and
//! the `oapd manifest lint` command all share one definition of what a valid
//! manifest is. Entry points:
//!
//! - [`parse`]: bytes -> [`Parsed`] (typed [`Manifest`] + warnings) or a
//!   [`ManifestError`] that lists every problem;
//! - [`validate`]: raw JSON -> [`Report`] of located errors and warnings;
//! - [`Manifest::search_fields`], [`slug`], [`content_hash`]: what discovery
//!   indexes and how manifests are identified;
//! - [`tool`]: manifests as Ollama/OpenAI tools ([`to_tool`], unique names
//!   via [`assign_tool_names`]), argument checks before a call
//!   ([`check_arguments`]) and the `/v1/tools` registry shape.
//!
//! The spec baseline is OAP 1.0. Fields real manifests use beyond it are
//! modelled (`usage`, `input.parameters`, `invoke.params`); anything else is
//! kept verbatim in `extra` maps and reported as a warning.
//!
//! ```
//! let bytes = br#"{"oap": "1.0", "name": "grep",
//!   "description": "Searches text for lines matching a pattern.",
//!   "input": {"format": "text/plain", "description": "Text on stdin."},
//!   "output": {"format": "text/plain", "description": "Matching lines."},
//!   "invoke": {"method": "stdio", "url": "grep"}}"#;
//! let parsed = oap_manifest::parse(bytes)?;
//! assert_eq!(parsed.manifest.invoke_kind(), Some(oap_manifest::InvokeKind::Stdio));
//! assert!(parsed.warnings.is_empty());
//! assert_eq!(format!("local/{}", oap_manifest::slug(&parsed.manifest.name)), "local/grep");
//!
//! let err = oap_manifest::parse(br#"{"oap": "1.0"}"#).unwrap_err();
//! assert!(err.to_string().contains("name: required field missing"));
//! # Ok::<(), oap_manifest::ManifestError>(())
//! ```
//!
//! # Architecture
//!
//! The OAP v1.0 manifest model, lenient parsing of the non-spec fields real
//! manifests use (`input.parameters`, `usage`, `invoke.params`), validation
//! with located diagnostics (`invoke.method: expected GET, POST or stdio, got
//! "PUT"`), split into errors and warnings, and the texts a manifest offers for
//! search (`search_fields`). `tool/` turns a manifest into an Ollama/OpenAI
//! tool definition: `naming.rs` (`oap_` + snake-case names, collision
//! suffixes), `convert.rs` (real JSON Schema from `input.parameters`),
//! `described.rs` and `text.rs` (parameters read out of a prose description
//! when there is no schema, without inventing required fields), `arguments.rs`
//! (`check_arguments`: a model's arguments validated and leniently coerced
//! before anything runs), `registry.rs`, and `schema_doc.rs`: the JSON Schema
//! or OpenAPI document behind `input.schema` (fetched by whoever indexes the
//! manifest; this crate does no I/O) turned into the tool's parameters with
//! the same converter, and the record of that fetch kept in the manifest
//! under `input`/`output` `x-oapd-schema`, which rule c of `convert.rs` reads.
//!
//! **Architecture Invariant.** Everything that loads a manifest (the directory
//! and bundled sources, crawled and LAN envelopes, the crawler's fetch, `oapd
//! manifest lint`) goes through `parse`, so lint and load refuse the same
//! documents. `parse` refuses documents over 64 KiB or nested deeper than 32
//! before building a tree. Unknown fields are kept and round-trip. No string
//! field holds a control character (one-line fields refuse all of C0, DEL, C1
//! and the Unicode line separators; prose keeps tab, LF and CR), and the error
//! names the field, the escape and the byte. No URL field carries a user name
//! or password, and that error never repeats the URL. Validation works on the
//! raw JSON value, so a wrong type is reported where it is.
//!
//! **API Boundary.** `parse`, `Manifest`, `Diagnostics`, `tool::*`. A
//! `Manifest` obtained from `parse` has no errors; one deserialised by hand
//! may, which is why `invoke_kind()` returns an `Option`.

#![warn(missing_docs)]

mod diag;
mod model;
mod parse;
mod search;
pub mod tool;
mod validate;

pub use diag::{lint_text, Diagnostic, Report, Severity};
pub use model::{
    AuthIn, AuthKind, Example, Invoke, InvokeKind, IoSpec, Manifest, Parameter, Parameters,
    Publisher, UnknownValue,
};
pub use parse::{parse, parse_value, ManifestError, Parsed, MAX_JSON_DEPTH, MAX_MANIFEST_BYTES};
pub use search::{clip_bytes, content_hash, render_compact, slug, SearchFields};
pub use tool::{
    assign_tool_names, check_arguments, inspect_arguments, parameter_source, registry_entry,
    to_tool, tool_name, tool_parameters, tools_and_registry, ArgumentCheck, ParameterSource,
    MAX_TOOL_DESCRIPTION_CHARS, MAX_TOOL_NAME_CHARS,
};
pub use validate::{
    validate, KNOWN_INVOKE_FIELDS, KNOWN_TOP_LEVEL_FIELDS, MAX_DESCRIPTION_CHARS, MAX_NAME_CHARS,
    PARAMETER_TYPES, SPEC_DESCRIPTION_CHARS, SPEC_USAGE_CHARS,
};
