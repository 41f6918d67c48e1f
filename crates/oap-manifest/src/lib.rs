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
