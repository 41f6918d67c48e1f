//! The daemon's bundled set carries the bundled tools' shipped request
//! rows (manifests/bundled-requests.json): requests worded the way people
//! say them find their tool, with the configuration `cargo xtask run`
//! serves (the defaults and the bundled manifests).

use crate::support;

#[test]
fn the_bundled_set_answers_spoken_requests_with_their_tools() {
    let daemon = support::daemon().start();
    let health = daemon.get("/health").json();
    assert_eq!(health["retrieval"], "hybrid", "{health}");
    assert_eq!(health["index"]["manifests"], 13, "{health}");
    for (task, tool) in [
        (
            "how many words are in this sentence: the quick brown fox jumps over the lazy dog",
            "local/wc",
        ),
        // Ranked below date, column and jq by the manifests' own texts.
        ("how do I use rsync", "local/man"),
    ] {
        let found = daemon.discover(task, 3);
        assert_eq!(found["match"]["id"], tool, "{task:?}: {found}");
    }
}
