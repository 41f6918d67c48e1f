//! The tool bridge's sections, `tool_bridge:` (with its exposure, URL
//! policy and forced-tool rules) and `experience:`. Their types belong to
//! the bridge and live in `oap_bridge::settings`; what is the daemon's is
//! how they are spelled in the environment and in suggestions.

use super::env::EnvValue;
use super::Named;

pub use oap_bridge::{
    ExperienceConfig, ForceRules, ResponseStoreConfig, ToolBridgeConfig, ToolExposure, UrlPolicy,
};

impl EnvValue for ResponseStoreConfig {
    /// A JSON object of the keys to change, e.g. `{"per_client": 8}`; the
    /// others keep their defaults.
    fn parse_env(raw: &str) -> Result<Self, String> {
        if raw.trim().is_empty() {
            return Ok(ResponseStoreConfig::default());
        }
        serde_json::from_str(raw).map_err(|e| {
            format!(
                "expected a JSON object with per_client, per_client_bytes, total_bytes, \
                 clients and max_age: {e}"
            )
        })
    }
}

impl EnvValue for ForceRules {
    fn parse_env(raw: &str) -> Result<Self, String> {
        if raw.trim().is_empty() {
            return Ok(ForceRules::default());
        }
        serde_json::from_str(raw)
            .map_err(|e| format!("expected a JSON array of {{\"pattern\", \"tool\"}} objects: {e}"))
    }
}

impl Named for ToolExposure {
    const ALL: &'static [Self] = &[Self::Direct, Self::Meta];
    fn name(self) -> &'static str {
        self.as_str()
    }
}

impl Named for UrlPolicy {
    const ALL: &'static [Self] = &[Self::Off, Self::Flag, Self::Remove];
    fn name(self) -> &'static str {
        self.as_str()
    }
}
