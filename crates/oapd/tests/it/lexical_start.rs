//! A start that would have to embed many texts (here: a damaged index
//! file) does not wait for them: the daemon is ready with the index
//! serving lexically, embeds the vectors in the background and switches to
//! hybrid without a restart, answering as a fresh hybrid build does. A
//! SIGKILL during the background embedding loses nothing: the next start
//! serves lexically at once again and finishes the job.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{self, Daemon};

/// Generated manifests besides the bundled and reference ones: enough
/// texts that the background embedding takes seconds, not milliseconds,
/// so the lexical phase is there to be seen.
const GENERATED: usize = 240;

/// The test-only threshold: the bundled set alone is under it, the
/// catalog here is far over it (the default, 128, would be too).
const LIMIT: usize = 40;

const TASKS: &[&str] = &[
    "find books about quantum physics",
    "what is the weather forecast in Paris tomorrow",
    "count the words in this text",
    "latest news headlines about technology",
    "look up the stock price of a company",
    "track the shipment of parcel number 42",
];

const SUBJECTS: &[&str] = &[
    "invoices",
    "parcels",
    "recipes",
    "flights",
    "tides",
    "earthquakes",
    "concerts",
    "vaccines",
    "satellites",
    "museums",
    "trains",
    "pollen",
    "patents",
    "elections",
    "glaciers",
    "volcanoes",
];
const VERBS: &[&str] = &[
    "Lists",
    "Tracks",
    "Summarises",
    "Forecasts",
    "Searches",
    "Counts",
    "Compares",
    "Archives",
    "Translates",
    "Validates",
    "Ranks",
    "Maps",
    "Schedules",
    "Audits",
    "Predicts",
];
const PLACES: &[&str] = &[
    "in Norway",
    "across Kenya",
    "for small towns",
    "near the coast",
    "in Lisbon",
    "worldwide",
    "on Mars",
    "for libraries",
    "in mountain regions",
    "for schools",
    "in Osaka",
    "for farmers",
    "along rivers",
    "in deserts",
    "for hospitals",
    "in harbours",
    "for cyclists",
];

fn write_catalog(dir: &Path) {
    for i in 0..GENERATED {
        let subject = SUBJECTS[i % SUBJECTS.len()];
        let verb = VERBS[(i / SUBJECTS.len()) % VERBS.len()];
        let place = PLACES[i % PLACES.len()];
        let manifest = json!({
            "oap": "1.0",
            "name": format!("gen-{subject}-{i}"),
            "description": format!(
                "{verb} {subject} {place}, edition {i}: returns the {subject} records \
                 with dates, sources and a short note for each."
            ),
            "input": {"format": "text/plain", "description": format!("a {subject} question")},
            "output": {"format": "application/json", "description": format!("{subject} records")},
            "invoke": {"method": "GET", "url": format!("https://gen{i}.example.com/api")},
            "tags": [subject, "generated"],
        });
        std::fs::write(dir.join(format!("gen-{i:03}.json")), manifest.to_string()).unwrap();
    }
}

fn reference_dirs() -> [std::path::PathBuf; 2] {
    let root =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/reference-manifests");
    [root.join("oap-dev"), root.join("manifest-repo")]
}

/// Yaml keys must not repeat: the builder writes `index:` with the data
/// directory itself, so the limit goes in through the environment.
fn start(dir: tempfile::TempDir, catalog: &Path, limit: usize) -> (Daemon, Duration) {
    let [a, b] = reference_dirs();
    let started = Instant::now();
    let daemon = support::daemon()
        .in_dir(dir)
        .env("OAP_INDEX_START_EMBED_LIMIT", &limit.to_string())
        .yaml(&format!(
            "manifests:\n  dirs: [{catalog:?}, {a:?}, {b:?}]\n\
             crawler:\n  watch_interval: 0\n"
        ))
        .ready_within(Duration::from_secs(600))
        .start();
    (daemon, started.elapsed())
}

fn pending(daemon: &Daemon) -> u64 {
    daemon.get("/health").json()["index"]["pending_texts"]
        .as_u64()
        .expect("/health reports index.pending_texts")
}

/// What a discovery answered, comparable across daemons: ids and scores
/// of the candidates, the match, the mode.
fn answer(found: &Value) -> (String, Option<String>, Vec<(String, f64)>) {
    let candidates = found["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["id"].as_str().unwrap().to_string(),
                c["score"].as_f64().unwrap(),
            )
        })
        .collect();
    (
        found["meta"]["mode"].as_str().unwrap().to_string(),
        found["match"]["id"].as_str().map(str::to_string),
        candidates,
    )
}

/// The daemon serves lexically at once, says so everywhere, and has every
/// manifest of the catalog.
fn assert_lexical_phase(daemon: &Daemon, manifests: u64) {
    let health = daemon.get("/health").json();
    assert!(
        health["index"]["pending_texts"].as_u64().unwrap() > LIMIT as u64,
        "ready before the vectors: {health}"
    );
    assert_eq!(health["index"]["manifests"], manifests, "{health}");
    assert_eq!(
        health["retrieval"], "lexical while vectors are embedded",
        "{health}"
    );
    assert_eq!(health["status"], "degraded", "{health}");
    let status = daemon.get("/v1/status").json();
    assert_eq!(status["retrieval"]["mode"], "lexical", "{status}");
    let metrics = daemon.get("/metrics");
    let text = String::from_utf8_lossy(&metrics.body);
    let gauge = text
        .lines()
        .find_map(|line| line.strip_prefix("oapd_index_pending_texts "))
        .unwrap_or_else(|| panic!("no pending-texts gauge in {text}"));
    assert!(gauge.trim().parse::<u64>().unwrap() > 0, "{gauge}");
    let found = daemon.discover(TASKS[0], 5);
    assert_eq!(found["meta"]["mode"], "lexical", "{found}");
    // Abstention uses the lexical calibration (its default threshold, 0.20),
    // not the cosine threshold of hybrid mode.
    let threshold = found["meta"]["threshold"].as_f64().unwrap();
    assert!((threshold - 0.20).abs() < 1e-6, "{found}");
    assert_eq!(
        found["candidates"][0]["id"], "local/open-library",
        "{found}"
    );
}

#[test]
fn a_damaged_index_serves_lexically_at_once_then_hybrid_as_a_fresh_build() {
    support::require_model();
    let catalog = tempfile::tempdir().unwrap();
    write_catalog(catalog.path());

    // A damaged index file where the daemon keeps its index.
    let state = tempfile::tempdir().unwrap();
    let data = state.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let damaged = vec![0x5a_u8; 4096];
    std::fs::write(data.join("index.oapx"), &damaged).unwrap();

    let (mut daemon, ready) = start(state, catalog.path(), LIMIT);
    let manifests = daemon.get("/health").json()["index"]["manifests"]
        .as_u64()
        .unwrap();
    assert!(manifests as usize >= GENERATED + 13, "{manifests}");
    assert_lexical_phase(&daemon, manifests);
    eprintln!(
        "ready after {ready:?}, lexical, {} texts pending",
        pending(&daemon)
    );

    // SIGKILL while the vectors are embedded: the next start serves
    // lexically at once again, nothing is lost.
    daemon.child.kill().unwrap();
    daemon.child.wait().unwrap();
    let state = std::mem::replace(&mut daemon.dir, tempfile::tempdir().unwrap());
    drop(daemon);
    let (daemon, ready) = start(state, catalog.path(), LIMIT);
    assert_lexical_phase(&daemon, manifests);
    eprintln!("after SIGKILL: ready after {ready:?}, lexical again");

    // The vectors come in the background; every request meanwhile is
    // answered (the swap included).
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut served = 0;
    loop {
        let found = daemon.discover(TASKS[served % TASKS.len()], 5);
        served += 1;
        if found["meta"]["mode"] == "hybrid" {
            break;
        }
        assert_eq!(found["meta"]["mode"], "lexical", "{found}");
        assert!(Instant::now() < deadline, "still lexical after 600 s");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(pending(&daemon), 0);
    let health = daemon.get("/health").json();
    assert_eq!(health["retrieval"], "hybrid", "{health}");
    assert_eq!(health["index"]["manifests"], manifests, "{health}");
    assert_eq!(
        daemon.get("/v1/status").json()["retrieval"]["mode"],
        "hybrid"
    );
    eprintln!("hybrid after {served} discoveries");

    // A fresh build with every vector embedded before ready answers the same.
    let (fresh, _) = start(tempfile::tempdir().unwrap(), catalog.path(), 1_000_000);
    assert_eq!(pending(&fresh), 0);
    for task in TASKS {
        let (mode, best, candidates) = answer(&daemon.discover(task, 5));
        let (fresh_mode, fresh_best, fresh_candidates) = answer(&fresh.discover(task, 5));
        assert_eq!((mode.as_str(), fresh_mode.as_str()), ("hybrid", "hybrid"));
        assert_eq!(best, fresh_best, "{task}");
        let ids: Vec<&String> = candidates.iter().map(|(id, _)| id).collect();
        let fresh_ids: Vec<&String> = fresh_candidates.iter().map(|(id, _)| id).collect();
        assert_eq!(ids, fresh_ids, "{task}");
        for ((_, a), (_, b)) in candidates.iter().zip(&fresh_candidates) {
            assert!((a - b).abs() < 1e-4, "{task}: {a} vs {b}");
        }
    }
}

#[test]
fn the_bundled_set_starts_hybrid_directly() {
    support::require_model();
    let daemon = support::daemon().start();
    let health = daemon.get("/health").json();
    assert_eq!(health["retrieval"], "hybrid", "{health}");
    assert_eq!(health["index"]["pending_texts"], 0, "{health}");
}
