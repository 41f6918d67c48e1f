//! Typed view of an OAP manifest.
//!
//! Every struct keeps unknown keys in an `extra` map (`#[serde(flatten)]`), so a
//! manifest that uses fields newer than (or outside) OAP 1.0 round-trips without
//! losing data. Optional fields are skipped when absent, so serialising a parsed
//! manifest never invents `null`s the publisher did not write.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// A whole OAP manifest (`/.well-known/oap.json` or a local file).
///
/// Obtain one through [`crate::parse`] so it has been validated: the helper
/// methods here assume the invariants that validation enforces, but never panic
/// when handed an unvalidated value (they return `None` instead).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Protocol version; validation accepts `"1.x"`.
    pub oap: String,
    /// Capability name; the daemon derives ids from it with [`crate::slug`].
    pub name: String,
    /// The text an LLM reads to decide fit; the main search document.
    pub description: String,
    /// Human-facing URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// What the capability consumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<IoSpec>,
    /// What the capability produces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<IoSpec>,
    /// How to call it.
    pub invoke: Invoke,
    /// Who publishes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publisher: Option<Publisher>,
    /// Sample calls; also fed to search.
    #[serde(
        default,
        deserialize_with = "null_as_empty",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub examples: Vec<Example>,
    /// Freeform indexing hints.
    #[serde(
        default,
        deserialize_with = "null_as_empty",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub tags: Vec<String>,
    /// URL returning HTTP 200 when the capability is up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<String>,
    /// Documentation URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docs: Option<String>,
    /// Capability version (free text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// ISO-8601 date of the last manifest update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated: Option<String>,
    /// One-line synopsis (a later addition to the OAP specification, not in its 1.0 text).
    /// The reference converter appends it to the tool description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<String>,
    /// Unknown top-level fields (e.g. `registration_url`, `geos`), kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Validation treats `null` as "absent" for every optional field; for the
/// list fields that means an empty list rather than a decoding failure.
fn null_as_empty<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(deserializer)?.unwrap_or_default())
}

/// `input` / `output` block.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IoSpec {
    /// MIME type, e.g. `text/plain` or `application/json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// Prose description of the shape and meaning of the data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// URL of a JSON Schema / OpenAPI document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// Non-spec but used by almost every real HTTP manifest: named
    /// parameters, in document order (the order the tool schema shows them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Parameters>,
    /// Unknown keys, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One entry of `input.parameters` (a JSON-Schema-like subset).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Parameter {
    /// `string | number | integer | boolean | array | object`; absent means string.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub r#type: Option<String>,
    /// What the parameter means.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Absent means required, matching the reference converter; see [`Parameter::is_required`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<bool>,
    /// Allowed values.
    #[serde(rename = "enum", default, skip_serializing_if = "Option::is_none")]
    pub r#enum: Option<Vec<Value>>,
    /// Default value (the reference drops it; we keep it for the tool schema).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    /// Item schema for `type: array`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<Value>,
    /// Other JSON-Schema keywords (`minimum`, `pattern`, ...), kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Parameter {
    /// Whether the parameter is required. An absent `required` counts as
    /// `true`, as in the reference implementation (`schema.get("required", True)`).
    pub fn is_required(&self) -> bool {
        self.required.unwrap_or(true)
    }

    /// The declared type, defaulting to `"string"` like the reference converter.
    pub fn type_or_string(&self) -> &str {
        self.r#type.as_deref().unwrap_or("string")
    }
}

/// Ordered `name -> Parameter` map.
///
/// `serde_json::Map` only holds `Value`s, and pulling in `indexmap` for one
/// field is not worth a dependency, so this is a small insertion-ordered list
/// with map-like accessors. It (de)serialises as a JSON object. Duplicate keys
/// cannot occur when built through [`crate::parse`] (the JSON layer keeps the
/// last one); [`Parameters::insert`] replaces in place.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parameters(Vec<(String, Parameter)>);

impl Parameters {
    /// Empty list.
    pub fn new() -> Self {
        Self::default()
    }
    /// Number of parameters.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// True when there are no parameters.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Look a parameter up by name.
    pub fn get(&self, name: &str) -> Option<&Parameter> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, p)| p)
    }
    /// True when a parameter of that name exists.
    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }
    /// Insert or replace (keeping the original position); returns the old value.
    pub fn insert(&mut self, name: impl Into<String>, param: Parameter) -> Option<Parameter> {
        let name = name.into();
        if let Some(slot) = self.0.iter_mut().find(|(k, _)| *k == name) {
            return Some(std::mem::replace(&mut slot.1, param));
        }
        self.0.push((name, param));
        None
    }
    /// Iterate in document order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Parameter)> {
        self.0.iter().map(|(k, p)| (k.as_str(), p))
    }
    /// Parameter names in document order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_str())
    }
}

impl FromIterator<(String, Parameter)> for Parameters {
    fn from_iter<I: IntoIterator<Item = (String, Parameter)>>(iter: I) -> Self {
        let mut out = Parameters::new();
        for (k, v) in iter {
            out.insert(k, v);
        }
        out
    }
}

impl Serialize for Parameters {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Parameters {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ParamsVisitor;
        impl<'de> Visitor<'de> for ParamsVisitor {
            type Value = Parameters;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of parameter objects")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parameters, A::Error> {
                let mut out = Parameters::new();
                while let Some((k, v)) = map.next_entry::<String, Parameter>()? {
                    out.insert(k, v);
                }
                Ok(out)
            }
        }
        deserializer.deserialize_map(ParamsVisitor)
    }
}

/// `invoke` block: how to call the capability.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Invoke {
    /// `GET`, `POST` or `stdio` (any case); see [`Manifest::invoke_kind`].
    pub method: String,
    /// Endpoint URL, or the command (bare name or absolute path) for stdio.
    pub url: String,
    /// `none | api_key | oauth2 | bearer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<String>,
    /// Where a human obtains credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_url: Option<String>,
    /// `header | query`; default header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_in: Option<String>,
    /// Header / query parameter carrying the credential.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_name: Option<String>,
    /// Static, non-secret extra headers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
    /// Whether the endpoint streams its response. Accepted (and checked to
    /// be a boolean) but not used: oapd reads a tool's whole response, up
    /// to `tools.max_response_bytes`, before the model sees it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streaming: Option<bool>,
    /// Non-spec static query parameters merged into every call (used by the
    /// manifest-repo `open-library` and `serp-shopping`). Values are scalars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Map<String, Value>>,
    /// Unknown keys, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `publisher` block.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Publisher {
    /// Person or organisation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Contact e-mail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contact: Option<String>,
    /// Publisher website.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Unknown keys, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One entry of `examples`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Example {
    /// A string or an object (validation rejects other JSON types).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// A string or an object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// What the example demonstrates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Unknown keys, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The three invocation styles OAP 1.0 defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InvokeKind {
    /// HTTP GET: input goes into the query string (or the URL path).
    Get,
    /// HTTP POST: input goes into the body.
    Post,
    /// Local command: input on stdin, arguments on the command line.
    Stdio,
}

impl InvokeKind {
    /// Parse a method name case-insensitively (`get`, `Post`, `STDIO`, ...).
    pub fn parse(method: &str) -> Option<Self> {
        if method.eq_ignore_ascii_case("get") {
            Some(Self::Get)
        } else if method.eq_ignore_ascii_case("post") {
            Some(Self::Post)
        } else if method.eq_ignore_ascii_case("stdio") {
            Some(Self::Stdio)
        } else {
            None
        }
    }

    /// Canonical spelling: `GET`, `POST`, `stdio`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::Post => "POST",
            Self::Stdio => "stdio",
        }
    }

    /// True for GET and POST.
    pub fn is_http(self) -> bool {
        matches!(self, Self::Get | Self::Post)
    }
}

impl fmt::Display for InvokeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for InvokeKind {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s).ok_or_else(|| UnknownValue(s.to_string()))
    }
}

/// Error for [`FromStr`] impls of the small enums here: the rejected text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown value {0:?}")]
pub struct UnknownValue(pub String);

/// `invoke.auth` values defined by OAP 1.0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuthKind {
    /// No credential (also the meaning of an absent `auth`).
    None,
    /// Raw key in a header or query parameter (default name `X-API-Key`).
    ApiKey,
    /// OAuth2 access token, sent as `Authorization: Bearer`.
    OAuth2,
    /// Bearer token, sent as `Authorization: Bearer`.
    Bearer,
}

impl AuthKind {
    /// Exact (case-sensitive, as written in the spec) parse.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "none" => Some(Self::None),
            "api_key" => Some(Self::ApiKey),
            "oauth2" => Some(Self::OAuth2),
            "bearer" => Some(Self::Bearer),
            _ => None,
        }
    }

    /// Spec spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::ApiKey => "api_key",
            Self::OAuth2 => "oauth2",
            Self::Bearer => "bearer",
        }
    }
}

impl fmt::Display for AuthKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a credential goes (`invoke.auth_in`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuthIn {
    /// Request header (the spec default).
    Header,
    /// Query-string parameter.
    Query,
}

impl Invoke {
    /// Parsed `auth`: absent means [`AuthKind::None`]; `None` only for a value
    /// validation would have rejected.
    pub fn auth_kind(&self) -> Option<AuthKind> {
        match &self.auth {
            None => Some(AuthKind::None),
            Some(s) => AuthKind::parse(s),
        }
    }

    /// Parsed `auth_in` with the spec default (header); `None` only for a value
    /// validation would have rejected.
    pub fn auth_location(&self) -> Option<AuthIn> {
        match self.auth_in.as_deref() {
            None | Some("header") => Some(AuthIn::Header),
            Some("query") => Some(AuthIn::Query),
            Some(_) => None,
        }
    }

    /// Credential header/parameter name with the spec defaults applied:
    /// `Authorization` for bearer/oauth2, `X-API-Key` for api_key, `None`
    /// when no credential is sent.
    pub fn auth_param_name(&self) -> Option<&str> {
        if let Some(name) = self.auth_name.as_deref() {
            if self.auth_kind() != Some(AuthKind::None) {
                return Some(name);
            }
        }
        match self.auth_kind()? {
            AuthKind::None => None,
            AuthKind::ApiKey => Some("X-API-Key"),
            AuthKind::OAuth2 | AuthKind::Bearer => Some("Authorization"),
        }
    }
}

impl Manifest {
    /// Parse `invoke.method` case-insensitively. Always `Some` for a manifest
    /// that came out of [`crate::parse`]; `None` for a hand-built or directly
    /// deserialised one with a bad method.
    pub fn invoke_kind(&self) -> Option<InvokeKind> {
        InvokeKind::parse(&self.invoke.method)
    }

    /// `input.parameters`, if any, in document order.
    pub fn input_parameters(&self) -> Option<&Parameters> {
        self.input.as_ref().and_then(|i| i.parameters.as_ref())
    }
}
