//! The daemon's configuration: YAML text plus `OAP_*` environment
//! overrides. Any input loads or is refused with an error naming the
//! problem; a loaded configuration shown as YAML (`oapd config show`) loads
//! back to the same configuration, and showing it again gives the same text.
//! Builds the whole daemon, so it is behind the `daemon` feature.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oapd::harness::Config;

const KEYS: &[&str] = &[
    "OAP_SERVER_LISTEN",
    "OAP_SERVER_AUTH_TOKEN",
    "OAP_OLLAMA_URL",
    "OAP_BRIDGE_TOP_K",
    "OAP_CRAWLER_ENABLED",
    "OAP_CRAWLER_INTERVAL",
    "OAP_LOG_LEVEL",
    "OAP_INDEX_PATH",
    "OAP_NOPE",
];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Lines after a line of three NULs are environment overrides.
    let (yaml, env) = text.split_once("\0\0\0\n").unwrap_or((text, ""));
    let env: Vec<(String, String)> = env
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            let k = k
                .parse::<usize>()
                .ok()
                .and_then(|i| KEYS.get(i % KEYS.len()))
                .map_or(k, |k| k);
            (k.to_string(), v.to_string())
        })
        .collect();
    let loaded = match Config::from_yaml_str(yaml, env) {
        Ok(loaded) => loaded,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    let shown = loaded.config.effective_yaml();
    let again = Config::from_yaml_str(&shown, Vec::new())
        .unwrap_or_else(|e| panic!("the shown configuration does not load: {e}\n{shown}"));
    assert_eq!(
        again.config.effective_yaml(),
        shown,
        "showing is not stable"
    );
});
