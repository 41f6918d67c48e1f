//! The Ollama tool bridge as a library.

// Product code never panics on what it is given: errors are values.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod settings;

pub use settings::{ExperienceConfig, ForceRule, ForceRules, ToolBridgeConfig, ToolExposure, UrlPolicy};
