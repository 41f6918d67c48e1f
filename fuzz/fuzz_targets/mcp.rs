//! MCP messages and the `mcpServers` file:
//! - the servers file (a person's JSON, `${VAR}` references): any bytes give
//!   servers and problems, never a panic; at most 64 servers, each with a
//!   valid name, and every refusal says where;
//! - a server's `tools/call` result: the text shown to the model never
//!   exceeds its cap; `canonical` is idempotent and its hash ignores key
//!   order.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oap_mcp::servers_file::{parse, valid_name, MAX_SERVERS};
use oap_mcp::{canonical, content_hash, result_text};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        let file = parse(rest, "mcp.json", |var| {
            (var.len() < 8).then(|| format!("v-{var}"))
        });
        assert!(file.servers.len() <= MAX_SERVERS);
        for spec in &file.servers {
            assert!(valid_name(&spec.name), "{:?}", spec.name);
            let _ = spec.offers("tool");
            let _ = spec.transport.kind();
        }
        for problem in &file.problems {
            assert!(
                !problem.message.is_empty() && !problem.path.is_empty(),
                "{problem:?}"
            );
        }
        return;
    }
    let Ok(value) = serde_json::from_slice::<Value>(rest) else {
        return;
    };
    let cap = usize::from(mode) * 4;
    let text = result_text(&value, cap);
    assert!(
        text.chars().count() <= cap.max(1) + 64,
        "{} chars over a {cap} cap",
        text.chars().count()
    );
    let c = canonical(&value);
    assert_eq!(canonical(&c), c);
    assert_eq!(content_hash(&c), content_hash(&value));
});
