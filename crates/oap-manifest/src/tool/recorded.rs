//! Reading what a schema fetch recorded in a manifest (under
//! [`RESOLVED_SCHEMA_KEY`] of `input` / `output`): the converted
//! parameters, the output's field names, or why the schema could not be
//! used. Writing the record is `schema_doc`'s; the tool conversion only
//! reads it, so the readers sit below both.

use serde_json::Value;

use crate::model::{IoSpec, Manifest};

/// Key under `input` / `output` where the fetched schema's result is kept.
pub const RESOLVED_SCHEMA_KEY: &str = "x-oapd-schema";

/// Most output field names listed in the tool description.
pub(crate) const MAX_OUTPUT_FIELDS: usize = 12;

/// The parameters recorded in `input` by a schema fetch, if it succeeded.
pub(crate) fn recorded_parameters(input: &IoSpec) -> Option<Value> {
    let text = input
        .extra
        .get(RESOLVED_SCHEMA_KEY)?
        .get("parameters")?
        .as_str()?;
    serde_json::from_str(text).ok()
}

/// The output field names recorded by a schema fetch, if it succeeded.
pub(crate) fn recorded_output_fields(output: &IoSpec) -> Vec<String> {
    output
        .extra
        .get(RESOLVED_SCHEMA_KEY)
        .and_then(|r| r.get("fields"))
        .and_then(Value::as_array)
        .map(|fields| {
            fields
                .iter()
                .filter_map(Value::as_str)
                .take(MAX_OUTPUT_FIELDS)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Why a manifest's `input.schema` / `output.schema` could not be used, as
/// `"input.schema: <reason>"` lines (empty when both worked or none was fetched).
pub fn schema_errors(manifest: &Manifest) -> Vec<String> {
    [("input", &manifest.input), ("output", &manifest.output)]
        .into_iter()
        .filter_map(|(key, io)| {
            let error = io
                .as_ref()?
                .extra
                .get(RESOLVED_SCHEMA_KEY)?
                .get("error")?
                .as_str()?;
            Some(format!("{key}.schema: {error}"))
        })
        .collect()
}
