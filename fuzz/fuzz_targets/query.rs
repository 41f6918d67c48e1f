//! A client's task turned into retrieval text and cut into asks (raw
//! bytes as text: tasks are free text from the LAN). Invariants: neither
//! step panics; the retrieval text stays within its cap; a request is cut
//! into none or 2..=MAX_INTENTS asks, each non-empty, each a piece of the
//! retrieval text, in order and without overlap; cutting is deterministic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oap_discovery::{intents, query};

/// The instruction cap (1,000 bytes) plus the longest shape hint list.
const MAX_DENSE: usize = 1_000 + 128;

fuzz_target!(|data: &[u8]| {
    let task = String::from_utf8_lossy(data);
    let views = query::views(&task);
    assert!(
        views.dense.len() <= MAX_DENSE,
        "dense view of {} bytes",
        views.dense.len()
    );
    let asks = intents::split(&views.dense);
    assert!(asks.is_empty() || (2..=intents::MAX_INTENTS).contains(&asks.len()));
    let mut from = 0;
    for ask in &asks {
        assert!(!ask.is_empty());
        let at = views.dense[from..]
            .find(ask.as_str())
            .unwrap_or_else(|| panic!("{ask:?} is not a piece of {:?} after byte {from}", views.dense));
        from += at + ask.len();
    }
    assert_eq!(intents::split(&views.dense), asks);
});
