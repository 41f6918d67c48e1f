//! What every fetch of this crate sends: the cache validators of the copy
//! it would replace, and the executor's trust for a manifest's trust. The
//! manifest fetch and the schema fetches both use them, so they live below
//! both.

use oap_exec::FetchResponse;
use oap_store::Trust;
use serde::{Deserialize, Serialize};

/// Cache validators from the last successful fetch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Validators {
    /// The `ETag` header as served (at most 512 bytes), sent back as `If-None-Match`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// The `Last-Modified` header as served (at most 512 bytes), sent back as
    /// `If-Modified-Since`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_modified: Option<String>,
}

/// The longest validator kept: a longer one is not a cache key but a way
/// to make every later request carry a large header.
const MAX_VALIDATOR_BYTES: usize = 512;

impl Validators {
    /// The validators `response` carries (each at most 512 bytes; a longer
    /// or non-text one is dropped, which only costs a full fetch later).
    pub fn of(response: &FetchResponse) -> Validators {
        let header = |name: &str| {
            response
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .filter(|v| v.len() <= MAX_VALIDATOR_BYTES)
                .map(str::to_string)
        };
        Validators {
            etag: header("etag"),
            last_modified: header("last-modified"),
        }
    }

    /// The conditional request headers (`If-None-Match`,
    /// `If-Modified-Since`) these validators make.
    pub fn headers(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if let Some(etag) = &self.etag {
            out.push(("if-none-match".to_string(), etag.clone()));
        }
        if let Some(date) = &self.last_modified {
            out.push(("if-modified-since".to_string(), date.clone()));
        }
        out
    }

    /// Whether there is nothing to send back (a 304 then means nothing).
    pub fn is_empty(&self) -> bool {
        self.etag.is_none() && self.last_modified.is_none()
    }
}

pub(crate) fn exec_trust(trust: Trust) -> oap_exec::Trust {
    match trust {
        Trust::Local => oap_exec::Trust::Local,
        Trust::Lan => oap_exec::Trust::Lan,
        Trust::Internet => oap_exec::Trust::Internet,
    }
}
