//! The upstream error path: one error event, with the status the client
//! should see, and nothing after it.

use std::time::Duration;

use fake_ollama::{FakeOllama, Script, Turn};
use hyper::StatusCode;
use oap_bridge::hooks::Hooks;
use oap_bridge::upstream::Upstream;
use oap_bridge::Event;

use crate::{options, request, tool, Bench};

fn the_error(events: &[Event]) -> (StatusCode, String) {
    match events.last() {
        Some(Event::Error { status, message }) => (*status, message.clone()),
        other => panic!("expected an error last, got {other:?}"),
    }
}

#[tokio::test]
async fn an_error_answer_from_ollama_is_the_one_error_event() {
    let bench = Bench::start(Script::new().turn(Turn::http_error(500, "model exploded"))).await;
    let events = bench
        .run(
            request("go"),
            vec![tool("echo")],
            options(3),
            Hooks::default(),
        )
        .await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        the_error(&events),
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "model exploded".to_string()
        )
    );
    bench.fake.shutdown().await;
}

#[tokio::test]
async fn an_error_mid_stream_ends_the_answer_after_what_was_sent() {
    let bench = Bench::start(
        Script::new().turn(Turn::reply("partial words here").error_after(1, "out of memory")),
    )
    .await;
    let events = bench
        .run(
            request("go"),
            vec![tool("echo")],
            options(3),
            Hooks::default(),
        )
        .await;
    assert!(matches!(events[0], Event::Chunk(_)), "{events:?}");
    assert_eq!(
        the_error(&events),
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "out of memory".to_string()
        )
    );
    assert!(events
        .iter()
        .all(|e| !matches!(e, Event::Chunk(c) if c["done"] == true)));
    assert!(bench.runner.calls().is_empty());
    bench.fake.shutdown().await;
}

#[tokio::test]
async fn an_unreachable_ollama_is_a_bad_gateway() {
    // A loopback port with nobody listening.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let fake = FakeOllama::start(Script::new()).await.unwrap();
    let upstream =
        Upstream::new(&format!("http://127.0.0.1:{port}"), Duration::from_secs(5)).unwrap();
    let bench = Bench::with_upstream(fake, upstream);
    let events = bench
        .run(
            request("go"),
            vec![tool("echo")],
            options(3),
            Hooks::default(),
        )
        .await;
    assert_eq!(events.len(), 1, "{events:?}");
    let (status, message) = the_error(&events);
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert!(message.contains("cannot reach Ollama"), "{message}");
    bench.fake.shutdown().await;
}
