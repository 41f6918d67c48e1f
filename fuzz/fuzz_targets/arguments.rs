//! A model's tool-call arguments checked and coerced against a tool schema
//! (both structure-aware JSON). Invariants: checking never panics; when it
//! accepts, the normalised arguments are accepted again unchanged
//! (coercion is idempotent) and hold only keys the schema names (unless it
//! allows additional properties).
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use oap_fuzz::{json, object};
use serde_json::{json, Map, Value};

#[derive(Debug)]
struct Input {
    schema: Value,
    args: Map<String, Value>,
}

const TYPES: &[&str] = &[
    "string", "integer", "number", "boolean", "array", "object", "null", "weird",
];
const NAMES: &[&str] = &[
    "q", "x", "city", "count", "text", "input", "args", "command", "units",
];

fn schema(u: &mut Unstructured<'_>, depth: u32) -> arbitrary::Result<Value> {
    if u.ratio(1, 16)? {
        return json(u, 2);
    }
    let ty = *u.choose(TYPES)?;
    let mut s = Map::new();
    if !u.ratio(1, 10)? {
        s.insert("type".into(), Value::from(ty));
    }
    if u.ratio(1, 4)? {
        let n = u.int_in_range(0..=4)?;
        let mut values = Vec::new();
        for _ in 0..n {
            values.push(if u.ratio(3, 4)? {
                Value::from(*u.choose(NAMES)?)
            } else {
                json(u, 0)?
            });
        }
        s.insert("enum".into(), Value::Array(values));
    }
    if depth > 0 && (ty == "array" || u.ratio(1, 10)?) {
        s.insert("items".into(), schema(u, depth - 1)?);
    }
    if depth > 0 && (ty == "object" || u.ratio(1, 10)?) {
        let n = u.int_in_range(0..=4)?;
        let mut props = Map::new();
        let mut required = Vec::new();
        for _ in 0..n {
            let name = if u.ratio(7, 8)? {
                (*u.choose(NAMES)?).to_string()
            } else {
                u.arbitrary()?
            };
            if u.arbitrary()? {
                required.push(Value::from(name.clone()));
            }
            props.insert(name, schema(u, depth - 1)?);
        }
        s.insert("properties".into(), Value::Object(props));
        if !required.is_empty() {
            s.insert("required".into(), Value::Array(required));
        }
        if u.ratio(1, 6)? {
            s.insert("additionalProperties".into(), json(u, 1)?);
        }
    }
    Ok(Value::Object(s))
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let params = schema(u, 4)?;
        let schema = match u.int_in_range(0..=2)? {
            0 => params,
            1 => json!({"type": "function", "function": {"name": "f", "parameters": params}}),
            _ => json!({"parameters": params}),
        };
        let mut args = object(u, 3)?;
        for _ in 0..u.int_in_range(0..=3)? {
            args.insert((*u.choose(NAMES)?).to_string(), json(u, 3)?);
        }
        Ok(Input { schema, args })
    }
}

fuzz_target!(|input: Input| {
    let first = oap_manifest::inspect_arguments(&input.schema, &input.args);
    if !first.problems.is_empty() {
        assert!(first.problems.iter().all(|p| !p.is_empty()));
        return;
    }
    let second = oap_manifest::inspect_arguments(&input.schema, &first.arguments);
    assert!(
        second.problems.is_empty(),
        "accepted arguments refused on a second check: {:?}\nschema {}\nfirst {:?}",
        second.problems,
        input.schema,
        first.arguments
    );
    assert_eq!(
        second.arguments, first.arguments,
        "coercion is not idempotent\nschema {}",
        input.schema
    );
    assert_eq!(
        oap_manifest::check_arguments(&input.schema, &input.args),
        Ok(first.arguments)
    );
});
