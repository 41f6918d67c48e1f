//! A model's arguments checked against a tool's schema before anything
//! runs, with lenient coercion of what a model commonly gets wrong
//! (numbers as strings, single values for arrays).

use serde_json::{Map, Number, Value};

use super::{compact_json, MAX_SCHEMA_DEPTH};

/// Outcome of [`inspect_arguments`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ArgumentCheck {
    /// Normalised arguments (coerced values, unknown keys dropped, nulls
    /// removed), in schema order.
    pub arguments: Map<String, Value>,
    /// Problems that must block execution, phrased for the model.
    pub problems: Vec<String>,
    /// Things fixed silently (ignored unknown arguments, renamed keys);
    /// worth logging and worth showing the model alongside problems.
    pub notes: Vec<String>,
}

/// [`inspect_arguments`] as a `Result`: the normalised arguments, or the
/// problems followed by the notes (so a model told "missing required
/// argument 'location'" also learns its `city` was ignored).
pub fn check_arguments(
    schema: &Value,
    args: &Map<String, Value>,
) -> Result<Map<String, Value>, Vec<String>> {
    let check = inspect_arguments(schema, args);
    if check.problems.is_empty() {
        Ok(check.arguments)
    } else {
        let mut all = check.problems;
        all.extend(check.notes);
        Err(all)
    }
}

/// Validate a model's tool-call arguments against a schema from
/// [`tool_parameters`] (or a whole tool from [`to_tool`]) before executing
/// it, so the model gets an actionable message instead of an opaque remote
/// error, and the remote service gets well-typed input.
///
/// Policy (small models are sloppy; be lenient where the intent is clear):
/// - `null` arguments count as absent;
/// - **unknown arguments are dropped**, with a note, not rejected: small
///   models add junk keys, and failing the whole call over them wastes a
///   round; they are kept only if the schema sets `additionalProperties`;
/// - one misnamed key is repaired: if exactly one required property is
///   missing (or, for schemas with at most two properties, exactly one
///   property is missing) and exactly one unknown argument was given, the
///   unknown one is taken as the missing one (`{"text": ..}` for `input`,
///   `{"command": ..}` for stdio `args`), with a note;
/// - coercions: `"5"` -> `5` for integer/number (and `5.0` -> `5` for
///   integer), `"true"`/`"false"` -> booleans, numbers/booleans -> strings
///   for string parameters, a JSON string holding an array (or object) for
///   array (object) parameters, a bare scalar for an array -> `[scalar]`;
///   enum strings match case-insensitively and are replaced by the
///   canonical spelling;
/// - array items and nested object properties are checked the same way;
/// - defaults are **not** injected: the remote service applies its own, and
///   sending a default the model never chose can change behaviour.
pub fn inspect_arguments(schema: &Value, args: &Map<String, Value>) -> ArgumentCheck {
    let params = schema
        .pointer("/function/parameters")
        .or_else(|| {
            schema
                .get("parameters")
                .filter(|_| schema.get("properties").is_none())
        })
        .unwrap_or(schema);
    let mut check = ArgumentCheck::default();
    let Some(props) = params.get("properties").and_then(Value::as_object) else {
        check.arguments = args
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        return check;
    };
    let required: Vec<&str> = params
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .filter(|r| props.contains_key(*r))
                .collect()
        })
        .unwrap_or_default();
    let allow_extra = matches!(
        params.get("additionalProperties"),
        Some(Value::Bool(true)) | Some(Value::Object(_))
    );

    let mut given: Map<String, Value> = args
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let unknown: Vec<String> = given
        .keys()
        .filter(|k| !props.contains_key(*k))
        .cloned()
        .collect();
    if !allow_extra {
        if let [from] = &unknown[..] {
            take_lone_unknown(from, &mut given, props, &required, &mut check.notes);
        }
    }

    for (name, prop_schema) in props {
        match given.get(name) {
            Some(v) => match check_value(name, prop_schema, v.clone(), 0) {
                Ok(v) => {
                    check.arguments.insert(name.clone(), v);
                }
                Err(mut e) => check.problems.append(&mut e),
            },
            None if required.contains(&name.as_str()) => {
                let ty = prop_schema.get("type").and_then(Value::as_str);
                check.problems.push(match ty {
                    Some(t) => format!("missing required argument '{name}' ({t})"),
                    None => format!("missing required argument '{name}'"),
                });
            }
            None => {}
        }
    }
    let known: Vec<&str> = props.keys().map(String::as_str).collect();
    for (k, v) in given.iter().filter(|(k, _)| !props.contains_key(*k)) {
        if allow_extra {
            check.arguments.insert(k.clone(), v.clone());
        } else {
            check.notes.push(format!(
                "unknown argument '{k}' was ignored (known arguments: {})",
                known.join(", ")
            ));
        }
    }
    check
}

/// One argument the schema does not know, when exactly one known argument
/// could be meant (the one missing required argument, or the other of at
/// most two), is taken as that one: models often misname a lone argument.
fn take_lone_unknown(
    from: &str,
    given: &mut Map<String, Value>,
    props: &Map<String, Value>,
    required: &[&str],
    notes: &mut Vec<String>,
) {
    let missing_required: Vec<&str> = required
        .iter()
        .copied()
        .filter(|r| !given.contains_key(*r))
        .collect();
    let candidates: Vec<&str> = if !missing_required.is_empty() {
        missing_required
    } else if props.len() <= 2 {
        props
            .keys()
            .map(String::as_str)
            .filter(|k| !given.contains_key(*k))
            .collect()
    } else {
        Vec::new()
    };
    if let [target] = candidates[..] {
        if let Some(v) = given.remove(from) {
            notes.push(format!("argument '{from}' was taken as '{target}'"));
            given.insert(target.to_string(), v);
        }
    }
}

fn type_phrase(t: &str) -> &'static str {
    match t {
        "integer" => "an integer",
        "number" => "a number",
        "boolean" => "a boolean (true or false)",
        "array" => "an array",
        "object" => "an object",
        "null" => "null",
        _ => "a string",
    }
}

fn got(v: &Value) -> String {
    compact_json(v, 60)
}

fn check_value(path: &str, schema: &Value, v: Value, depth: usize) -> Result<Value, Vec<String>> {
    let Some(s) = schema.as_object() else {
        return Ok(v);
    };
    if depth > MAX_SCHEMA_DEPTH {
        return Ok(v);
    }
    let types: Vec<&str> = match s.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let v = if types.is_empty() {
        v
    } else if let Some(exact) = types.iter().find_map(|t| exact_type(t, &v)) {
        exact
    } else if let Some(c) = types.iter().find_map(|t| coerce(t, &v)) {
        c
    } else {
        let wanted: Vec<&str> = types.iter().map(|t| type_phrase(t)).collect();
        return Err(vec![format!(
            "argument '{path}' must be {}, got {}",
            wanted.join(" or "),
            got(&v)
        )]);
    };

    let mut v = enum_member(path, s, v)?;

    let mut problems = Vec::new();
    match &mut v {
        Value::Array(items) => {
            if let Some(item_schema) = s.get("items").filter(|i| i.is_object()) {
                for (i, item) in items.iter_mut().enumerate() {
                    match check_value(&format!("{path}[{i}]"), item_schema, item.take(), depth + 1)
                    {
                        Ok(x) => *item = x,
                        Err(mut e) => problems.append(&mut e),
                    }
                }
            }
        }
        Value::Object(obj) => {
            if let Some(Value::Object(props)) = s.get("properties") {
                let required: Vec<&str> = s
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                for (name, sub) in props {
                    let sub_path = format!("{path}.{name}");
                    match obj.get_mut(name) {
                        Some(val) if !val.is_null() => {
                            match check_value(&sub_path, sub, val.take(), depth + 1) {
                                Ok(x) => *val = x,
                                Err(mut e) => problems.append(&mut e),
                            }
                        }
                        _ if required.contains(&name.as_str()) => {
                            problems.push(format!("missing required argument '{sub_path}'"));
                        }
                        _ => {}
                    }
                }
            }
        }
        _ => {}
    }
    if problems.is_empty() {
        Ok(v)
    } else {
        Err(problems)
    }
}

/// `v` when the schema has no `enum` or lists it; a string matching a listed
/// one but for case and surrounding spaces becomes that one.
fn enum_member(path: &str, s: &Map<String, Value>, mut v: Value) -> Result<Value, Vec<String>> {
    if let Some(Value::Array(allowed)) = s
        .get("enum")
        .filter(|e| e.as_array().is_some_and(|a| !a.is_empty()))
    {
        if !allowed.contains(&v) {
            let canonical = v.as_str().and_then(|given| {
                allowed.iter().find(|a| {
                    a.as_str()
                        .is_some_and(|a| a.eq_ignore_ascii_case(given.trim()))
                })
            });
            match canonical {
                Some(c) => v = c.clone(),
                None => {
                    let list: Vec<String> = allowed
                        .iter()
                        .map(|a| match a {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        })
                        .collect();
                    return Err(vec![format!(
                        "argument '{path}' must be one of {}, got {}",
                        list.join(", "),
                        got(&v)
                    )]);
                }
            }
        }
    }
    Ok(v)
}

/// `v` already has type `t` (5.0 counts as an integer and becomes 5).
fn exact_type(t: &str, v: &Value) -> Option<Value> {
    let ok = match (t, v) {
        ("string", Value::String(_)) => true,
        ("boolean", Value::Bool(_)) => true,
        ("array", Value::Array(_)) => true,
        ("object", Value::Object(_)) => true,
        ("null", Value::Null) => true,
        ("number", Value::Number(_)) => true,
        ("integer", Value::Number(n)) => {
            return integer_of_number(n).map(Value::from);
        }
        _ => false,
    };
    ok.then(|| v.clone())
}

fn integer_of_number(n: &Number) -> Option<i64> {
    if let Some(i) = n.as_i64() {
        return Some(i);
    }
    if n.is_u64() {
        return None; // > i64::MAX: keep it as is via the u64 branch below
    }
    let f = n.as_f64()?;
    (f.fract() == 0.0 && f.abs() < 9.0e15).then_some(f as i64)
}

/// Lenient conversion of `v` to type `t`, or `None`.
fn coerce(t: &str, v: &Value) -> Option<Value> {
    match (t, v) {
        ("integer", Value::Number(n)) if n.is_u64() => Some(v.clone()),
        ("integer", Value::String(s)) => {
            let s = s.trim();
            if let Ok(i) = s.parse::<i64>() {
                return Some(Value::from(i));
            }
            let f = s.parse::<f64>().ok()?;
            (f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e15).then(|| Value::from(f as i64))
        }
        ("number", Value::String(s)) => {
            let s = s.trim();
            if let Ok(i) = s.parse::<i64>() {
                return Some(Value::from(i));
            }
            let f = s.parse::<f64>().ok().filter(|f| f.is_finite())?;
            Number::from_f64(f).map(Value::Number)
        }
        ("boolean", Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
            "true" => Some(Value::Bool(true)),
            "false" => Some(Value::Bool(false)),
            _ => None,
        },
        ("string", Value::Number(n)) => Some(Value::String(n.to_string())),
        ("string", Value::Bool(b)) => Some(Value::String(b.to_string())),
        ("array", Value::String(s)) => {
            let trimmed = s.trim();
            if trimmed.starts_with('[') {
                if let Ok(Value::Array(a)) = serde_json::from_str::<Value>(trimmed) {
                    return Some(Value::Array(a));
                }
            }
            Some(Value::Array(vec![v.clone()]))
        }
        ("array", Value::Number(_) | Value::Bool(_)) => Some(Value::Array(vec![v.clone()])),
        ("object", Value::String(s)) => match serde_json::from_str::<Value>(s.trim()) {
            Ok(o @ Value::Object(_)) => Some(o),
            _ => None,
        },
        _ => None,
    }
}
