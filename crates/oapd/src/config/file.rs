//! Reading the config file and parsing its YAML, with errors that name the
//! key, the line and what was expected instead of serde's wording.

use std::borrow::Cow;
use std::path::Path;

use super::env::SECTIONS;
use super::text::{closest, one_of, quote};
use super::{Config, ConfigError, Position, MAX_CONFIG_FILE_BYTES};

pub(super) fn read_config_file(path: &Path) -> Result<String, ConfigError> {
    use crate::files::ReadError;
    // Never blocks: a FIFO, device or directory is refused from its stat,
    // and the read stops after the limit.
    let bytes = crate::files::read_regular(path, MAX_CONFIG_FILE_BYTES).map_err(|e| match e {
        ReadError::Io(source) => ConfigError::Read {
            path: path.to_path_buf(),
            source,
        },
        ReadError::NotRegular(kind) => ConfigError::NotRegularFile {
            path: path.to_path_buf(),
            kind,
        },
        ReadError::TooLarge { size, .. } => ConfigError::TooLarge {
            path: path.to_path_buf(),
            size,
            limit: MAX_CONFIG_FILE_BYTES,
        },
    })?;
    let mut text = String::from_utf8(bytes).map_err(|e| ConfigError::NotUtf8 {
        path: path.to_path_buf(),
        offset: e.utf8_error().valid_up_to(),
    })?;
    if text.starts_with('\u{feff}') {
        text.drain(..'\u{feff}'.len_utf8());
    }
    Ok(text)
}

pub(super) fn parse_yaml(source_name: &str, text: &str) -> Result<Config, ConfigError> {
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    let mut error_path: Option<String> = None;
    let parsed = serde_saphyr::with_deserializer_from_str_with_options(text, options, |de| {
        serde_path_to_error::deserialize::<_, Option<Config>>(de).map_err(|e| {
            error_path = Some(e.path().to_string());
            e.into_inner()
        })
    });
    match parsed {
        Ok(config) => Ok(config.unwrap_or_default()),
        Err(err) => Err(yaml_error(source_name, text, error_path, &err)),
    }
}

fn yaml_error(
    source_name: &str,
    text: &str,
    path: Option<String>,
    err: &serde_saphyr::Error,
) -> ConfigError {
    use serde_saphyr::Error as E;

    let inner = unwrap_yaml_error(err);
    let location = inner.location().or_else(|| err.location());
    let position = location.filter(|l| l.line() > 0).map(|l| Position {
        line: l.line(),
        column: l.column(),
    });
    let raw = location.and_then(|l| {
        let span = l.span();
        let start = usize::try_from(span.byte_offset()?).ok()?;
        let len = usize::try_from(span.byte_len()?).ok()?;
        let line = text.get(start..)?.lines().next().unwrap_or("");
        Some(Raw {
            value: text.get(start..start.checked_add(len)?)?,
            line,
        })
    });
    // serde_path_to_error writes `?` for a key it could not capture.
    let path = path
        .map(|p| p.trim_end_matches(".?").trim_end_matches('?').to_owned())
        .filter(|p| !p.is_empty() && p != ".");
    let source_name = source_name.to_owned();

    match inner {
        E::SerdeUnknownField {
            field, expected, ..
        } => ConfigError::UnknownKey {
            source_name,
            key: path.unwrap_or_else(|| field.clone()),
            suggestion: closest(field, expected.iter().copied()).map(str::to_owned),
            position,
        },
        E::DuplicateMappingKey { key, .. } => {
            let name = key.clone().unwrap_or_else(|| "?".to_owned());
            ConfigError::InvalidValue {
                source_name,
                key: match path {
                    Some(full) if full == name || full.ends_with(&format!(".{name}")) => full,
                    Some(parent) => format!("{parent}.{name}"),
                    None => name,
                },
                message: "duplicate key: each key may appear only once".to_owned(),
                position,
            }
        }
        E::ExternalMessage { .. } => ConfigError::Syntax {
            source_name,
            message: format!("YAML syntax error: {}", yaml_message(inner)),
            position,
        },
        _ => match path {
            Some(key) => ConfigError::InvalidValue {
                source_name,
                key,
                message: describe_value_error(inner, raw),
                position,
            },
            None => {
                let message = match inner {
                    E::Unexpected { expected, .. } if expected.contains("mapping") => format!(
                        "the top level must be a mapping of sections ({}), got {}",
                        SECTIONS
                            .iter()
                            .map(|(s, _)| format!("{s}:"))
                            .collect::<Vec<_>>()
                            .join(", "),
                        describe_raw(raw)
                    ),
                    _ => yaml_message(inner).into_owned(),
                };
                ConfigError::Syntax {
                    source_name,
                    message,
                    position,
                }
            }
        },
    }
}

fn unwrap_yaml_error(mut err: &serde_saphyr::Error) -> &serde_saphyr::Error {
    loop {
        match err {
            serde_saphyr::Error::WithSnippet { error, .. }
            | serde_saphyr::Error::AliasError { error, .. } => err = error,
            _ => return err,
        }
    }
}

/// serde-saphyr's own message text, without location, control characters neutralised.
fn yaml_message(err: &serde_saphyr::Error) -> Cow<'static, str> {
    use serde_saphyr::MessageFormatter as _;
    let msg = serde_saphyr::DefaultMessageFormatter.format_message(err);
    Cow::Owned(
        msg.chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect(),
    )
}

/// The source text at an error's location.
#[derive(Clone, Copy)]
struct Raw<'a> {
    /// The text of the offending node as spanned by the parser (may be empty).
    value: &'a str,
    /// The rest of the line from the node's start, to recognise `- item` and `[`/`{`.
    line: &'a str,
}

fn describe_value_error(err: &serde_saphyr::Error, raw: Option<Raw<'_>>) -> String {
    use serde_saphyr::Error as E;
    match err {
        E::InvalidScalar { ty, .. } => describe_scalar_mismatch(ty, raw),
        E::SerdeInvalidType {
            unexpected,
            expected,
            ..
        }
        | E::SerdeInvalidValue {
            unexpected,
            expected,
            ..
        } => format!(
            "expected {}, got {}",
            friendly_expected(expected),
            friendly_unexpected(unexpected)
        ),
        E::SerdeUnknownVariant {
            variant, expected, ..
        } => format!(
            "expected one of {}, got {}",
            one_of(expected.iter().copied()),
            quote(variant)
        ),
        E::Unexpected { expected, .. } => {
            format!(
                "expected {}, got {}",
                friendly_expected(expected),
                describe_raw(raw)
            )
        }
        E::NullIntoString { .. } => "expected a string, got an empty value".to_owned(),
        E::ExternallyTaggedEnumExpectedScalarOrMapping { .. } => {
            format!("expected a single word, got {}", describe_raw(raw))
        }
        _ => yaml_message(err).into_owned(),
    }
}

fn describe_scalar_mismatch(ty: &str, raw: Option<Raw<'_>>) -> String {
    let unsigned_max = match ty {
        "u8" => Some(u64::from(u8::MAX)),
        "u16" => Some(u64::from(u16::MAX)),
        "u32" => Some(u64::from(u32::MAX)),
        "u64" => Some(u64::MAX),
        "usize" => Some(usize::MAX as u64),
        _ => None,
    };
    let got = describe_raw(raw);
    if let Some(max) = unsigned_max {
        let text = raw.map(|r| unquote(r.value.trim())).unwrap_or("");
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if digits(text) {
            return format!("integer out of range (max {max}), got {got}");
        }
        if text.strip_prefix('-').is_some_and(digits) {
            return format!("expected a non-negative integer, got {got}");
        }
        return format!("expected an integer, got {got}");
    }
    match ty {
        "boolean" => format!("expected a boolean (true/false), got {got}"),
        "floating point" | "f32" | "f64" => format!("expected a number, got {got}"),
        other => format!("expected {}, got {got}", friendly_expected(other)),
    }
}

fn friendly_expected(expected: &str) -> Cow<'_, str> {
    let e = expected.trim();
    Cow::Borrowed(match e {
        "u8" | "u16" | "u32" | "u64" | "usize" | "i32" | "i64" => "an integer",
        "f32" | "f64" | "floating point" => "a number",
        "a boolean" | "boolean" => "a boolean (true/false)",
        "mapping start" | "a map" => "a mapping",
        "sequence start" | "a sequence" | "a list of strings" => "a list",
        "string scalar" | "a string" | "path string" => "a string",
        _ if e.starts_with("struct ") => "a mapping",
        _ => return Cow::Borrowed(e),
    })
}

/// How a raw YAML value is shown after "got".
fn describe_raw(raw: Option<Raw<'_>>) -> String {
    let Some(raw) = raw else {
        return "an empty value".to_owned();
    };
    let line = raw.line.trim_start();
    if line.starts_with('[') || line.starts_with("- ") || line == "-" {
        return "a list".to_owned();
    }
    if line.starts_with('{') {
        return "a mapping".to_owned();
    }
    match raw.value.trim() {
        "" | "~" | "null" => "an empty value".to_owned(),
        value => quote(unquote(value)),
    }
}

/// serde's "unexpected" wording (`integer \`8300\``, `map`, `string "x"`) made plain.
fn friendly_unexpected(unexpected: &str) -> String {
    match unexpected {
        "map" => return "a mapping".to_owned(),
        "sequence" => return "a list".to_owned(),
        "unit value" | "null" | "none" | "Option value" => return "an empty value".to_owned(),
        _ => {}
    }
    if let Some((_, rest)) = unexpected.split_once('`') {
        if let Some((inner, _)) = rest.rsplit_once('`') {
            return quote(inner);
        }
    }
    if let Some(s) = unexpected.strip_prefix("string ") {
        return quote(unquote(s));
    }
    unexpected.to_owned()
}

fn unquote(s: &str) -> &str {
    for q in ['"', '\''] {
        if let Some(inner) = s.strip_prefix(q).and_then(|r| r.strip_suffix(q)) {
            return inner;
        }
    }
    s
}
