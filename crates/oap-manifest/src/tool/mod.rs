//! Manifest -> LLM tool conversion (Ollama / OpenAI `tools` entries), tool
//! naming with collision handling, pre-execution argument checking, and the
//! `/v1/tools` registry shape.
//!
//! Everything here is pure and deterministic: the same manifests (in the same
//! order) always give byte-identical tools, so responses are cacheable and
//! tests can pin exact schemas.
//!
//! Compared with the reference converter (`tool_converter.py`) this module
//! deliberately fixes its known bugs:
//! - `enum`, `default`, `items` and the usual JSON-Schema limits from
//!   `input.parameters` are kept (the reference drops them; an `array`
//!   without `items` is rejected by several validators and confuses models);
//! - quoted *values* in an input description no longer become required
//!   fields (mynewscast's `"stories"`, `"all"`, ...), and description-derived
//!   fields are optional unless the text says otherwise;
//! - names are capped at 64 characters (OpenAI's `^[a-zA-Z0-9_-]{1,64}$`),
//!   never empty, never double-prefixed, and never collide with each other
//!   or with the client's own tools ([`assign_tool_names`]).
//!
//! Entry points: [`tool_name`], [`assign_tool_names`], [`to_tool`],
//! [`tool_parameters`], [`parameter_source`], [`check_arguments`] /
//! [`inspect_arguments`], [`registry_entry`], [`tools_and_registry`].

use serde_json::Value;

mod arguments;
mod convert;
mod described;
mod naming;
mod recorded;
mod registry;
pub mod schema_doc;
mod text;

pub use arguments::{check_arguments, inspect_arguments, ArgumentCheck};
pub use convert::{parameter_source, to_tool, tool_parameters, ParameterSource};
pub use naming::{assign_tool_names, tool_name};
pub use registry::{registry_entry, tools_and_registry};
pub use schema_doc::{
    resolve_input_schema, resolve_output_fields, schema_errors, SchemaDocError, RESOLVED_SCHEMA_KEY,
};

/// Longest tool name: OpenAI's function-name pattern is `^[a-zA-Z0-9_-]{1,64}$`
/// and some Ollama front-ends forward tools to OpenAI-compatible backends.
pub const MAX_TOOL_NAME_CHARS: usize = 64;

/// Longest tool description (characters). Descriptions cost context on every
/// round; small models (4k-8k context) cannot afford a 8,000-char essay per
/// tool, and the first paragraph carries the meaning anyway.
pub const MAX_TOOL_DESCRIPTION_CHARS: usize = 1500;

/// Longest description of a single parameter (characters), for the same reason.
pub const MAX_PARAMETER_DESCRIPTION_CHARS: usize = 1000;

/// Every generated name starts with this, so OAP tools are recognisable next
/// to the client's own tools and in logs.
pub const TOOL_NAME_PREFIX: &str = "oap_";

/// Nesting bound when copying schemas from manifests.
const MAX_SCHEMA_DEPTH: usize = 16;

/// `s` cut to at most `max` characters (on a char boundary), ending in `…`
/// when it was cut so the model can tell text is missing.
fn truncate_chars(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    if max == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(max - 1).collect();
    out.push('…');
    out
}

fn compact_json(v: &Value, max: usize) -> String {
    let s = serde_json::to_string(v).unwrap_or_default();
    truncate_chars(&s, max)
}
