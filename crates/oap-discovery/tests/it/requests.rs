//! Request rows given from outside the manifests: a [`RequestTable`] read
//! from JSON, attached by the engine to the entries it applies to, embedded
//! as rows, checked and capped, and part of the index fingerprint. Real
//! model, real bundled manifests and the real bundled requests file.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use oap_discovery::requests::{MAX_REQUEST_ROWS, MAX_REQUEST_TEXT};
use oap_discovery::{
    AppliesTo, Catalog, CatalogEntry, Engine, EngineConfig, RequestChain, RequestRows,
    RequestTable, RequestTableError, Source,
};
use oap_embed::{Calibration, EmbedError, Embedder};

use crate::engine::{daemon_config, manifest_dir, Counting};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The bundled manifests as the daemon compiles them in (origin `bundled`).
fn bundled_source() -> Source {
    let dir = repo().join("manifests/bundled");
    let mut files: Vec<(String, Vec<u8>)> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, fs::read(&p).unwrap())
        })
        .collect();
    files.sort();
    assert_eq!(files.len(), 13, "the bundled set in {}", dir.display());
    Source::Bundled(files)
}

/// The bundled requests file, for the bundled origins only (as the daemon
/// reads it).
fn bundled_requests() -> RequestTable {
    RequestTable::load(
        &repo().join("manifests/bundled-requests.json"),
        AppliesTo::OriginKinds(vec!["bundled".into()]),
    )
    .unwrap()
}

fn with_rows(data: &Path, rows: Arc<dyn RequestRows>) -> EngineConfig {
    let mut config = daemon_config(data);
    config.request_rows = Some(rows);
    config
}

fn top(engine: &Engine, task: &str) -> (String, bool) {
    let found = engine.discover(task, 3).unwrap();
    let first = found.candidates.first().map(|c| c.name.clone());
    (first.unwrap_or_default(), found.best.is_some())
}

/// Requests worded like one of a tool's request rows, which its
/// description alone does not rank first.
#[test]
fn a_request_worded_like_a_row_finds_its_tool_first() {
    let cases = [
        ("how do I use rsync", "man"),
        (
            "is there a command for changing file permissions",
            "apropos",
        ),
        ("what does the -r flag do in cp", "man"),
    ];
    let plain_data = tempfile::tempdir().unwrap();
    let (plain, _) = Engine::open(
        daemon_config(plain_data.path()),
        vec![bundled_source()],
        Some(Counting::new()),
    )
    .unwrap();
    let data = tempfile::tempdir().unwrap();
    let (engine, report) = Engine::open(
        with_rows(data.path(), Arc::new(bundled_requests())),
        vec![bundled_source()],
        Some(Counting::new()),
    )
    .unwrap();
    assert!(
        report.rows > 13 * 6,
        "every bundled tool has its request rows: {} rows",
        report.rows
    );
    for (task, tool) in cases {
        let (without, _) = top(&plain, task);
        assert_ne!(without, tool, "{task:?} already finds {tool} without rows");
        let (with, matched) = top(&engine, task);
        assert_eq!(with, tool, "{task:?} with request rows");
        assert!(matched, "{task:?}: {tool} is ranked first but not a match");
    }
}

/// A provider whose table can be swapped, as the daemon's generated rows
/// grow while it runs.
#[derive(Debug)]
struct Swappable(RwLock<RequestTable>);

impl RequestRows for Swappable {
    fn requests(&self, entry: &CatalogEntry) -> Vec<String> {
        self.0.read().unwrap().requests(entry)
    }
}

fn table(json: &str) -> RequestTable {
    RequestTable::parse(json.as_bytes(), "test", AppliesTo::AnyOrigin).unwrap()
}

#[test]
fn changed_rows_change_the_fingerprint_and_only_new_texts_are_embedded() {
    let manifests = manifest_dir(&["grep", "wc", "bc"]);
    let sources = || vec![Source::Dir(manifests.path().into())];
    let data = tempfile::tempdir().unwrap();
    let first = r#"{"wc": ["how many words are in this", "count the lines of this log"]}"#;
    let provider = Arc::new(Swappable(RwLock::new(table(first))));

    let counting = Counting::new();
    let (_, report) = Engine::open(
        with_rows(data.path(), provider.clone()),
        sources(),
        Some(counting.clone()),
    )
    .unwrap();
    assert_eq!(report.embedded_rows, counting.embedded());
    let rows_with_two = report.rows;

    // The same rows: the file is mapped as it is.
    let counting = Counting::new();
    let (engine, report) = Engine::open(
        with_rows(data.path(), provider.clone()),
        sources(),
        Some(counting.clone()),
    )
    .unwrap();
    assert!(report.reused_index);
    assert_eq!(counting.embedded(), 0);

    // One row replaced and one added: a rebuild embeds those two texts only.
    *provider.0.write().unwrap() = table(
        r#"{"wc": ["how many words are in this", "what's the word count of my essay",
                   "how many characters is this tweet"]}"#,
    );
    let report = engine.rebuild(false).unwrap();
    assert!(!report.reused_index);
    assert_eq!(report.embedded_rows, 2, "{report:?}");
    assert_eq!(report.rows, rows_with_two + 1);
    assert_eq!(
        engine
            .discover("what's the word count of my essay", 1)
            .unwrap()
            .candidates[0]
            .name,
        "wc"
    );

    // Without a provider the rows go, and nothing needs embedding.
    drop(engine);
    let counting = Counting::new();
    let (_, report) = Engine::open(
        daemon_config(data.path()),
        sources(),
        Some(counting.clone()),
    )
    .unwrap();
    assert!(
        !report.reused_index,
        "dropping the rows changes the fingerprint"
    );
    assert_eq!(counting.embedded(), 0);
    assert_eq!(report.rows, rows_with_two - 2);
}

/// The real model, remembering every text it embeds.
struct Recording {
    inner: Arc<Counting>,
    texts: Mutex<Vec<String>>,
}

impl Embedder for Recording {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut seen = self.texts.lock().unwrap();
        seen.extend(texts.iter().map(|t| t.to_string()));
        drop(seen);
        self.inner.embed(texts)
    }
    fn calibration(&self) -> Calibration {
        self.inner.calibration()
    }
}

/// Whatever a provider says, unchecked (a generated row can hold anything).
#[derive(Debug)]
struct Raw(Vec<String>);

impl RequestRows for Raw {
    fn requests(&self, entry: &CatalogEntry) -> Vec<String> {
        if entry.id == "local/wc" {
            self.0.clone()
        } else {
            Vec::new()
        }
    }
}

#[test]
fn control_characters_are_refused_and_long_or_surplus_rows_cut() {
    let long = "count the words of this very long request ".repeat(10);
    let mut raw = vec![
        "count\nthe words".to_string(),
        "\u{1b}[31mcount the words".to_string(),
        "tally\u{0}words".to_string(),
        "   ".to_string(),
        long.clone(),
    ];
    raw.extend((1..=10).map(|n| format!("how many words are in text number {n}")));
    let manifests = manifest_dir(&["wc"]);
    let data = tempfile::tempdir().unwrap();
    let recording = Arc::new(Recording {
        inner: Counting::new(),
        texts: Mutex::new(Vec::new()),
    });
    let (_, report) = Engine::open(
        with_rows(data.path(), Arc::new(Raw(raw))),
        vec![Source::Dir(manifests.path().into())],
        Some(recording.clone()),
    )
    .unwrap();
    let texts = recording.texts.lock().unwrap().clone();
    assert!(
        texts.iter().all(|t| !t.chars().any(char::is_control)),
        "a row with a control character was embedded: {texts:?}"
    );
    let cut: Vec<&String> = texts
        .iter()
        .filter(|t| long.starts_with(t.as_str()))
        .collect();
    assert_eq!(cut.len(), 1, "{texts:?}");
    assert!(cut[0].len() <= MAX_REQUEST_TEXT && cut[0].len() > MAX_REQUEST_TEXT - 50);
    let numbered = texts.iter().filter(|t| t.contains("text number")).count();
    assert_eq!(
        numbered,
        MAX_REQUEST_ROWS - 1,
        "the long row and the first seven numbered ones fill the cap"
    );
    assert!(texts.iter().any(|t| t.ends_with("text number 7")));
    assert!(!texts.iter().any(|t| t.ends_with("text number 8")));
    // The description and the eight request rows.
    assert_eq!(report.rows, 1 + MAX_REQUEST_ROWS);
}

#[test]
fn the_bundled_table_attaches_to_bundled_manifests_only() {
    // The operator's wc (same name, another description) overrides the
    // bundled one: it is loaded from a directory and gets no bundled rows.
    let operator = tempfile::tempdir().unwrap();
    let wc = fs::read_to_string(repo().join("manifests/bundled/wc.json")).unwrap();
    fs::write(
        operator.path().join("wc.json"),
        wc.replace("Count lines, words, and characters", "Wipe the clipboard"),
    )
    .unwrap();
    let mut catalog = Catalog::load(&[Source::Dir(operator.path().into()), bundled_source()]);
    assert_eq!(catalog.collisions.len(), 1, "the operator's wc wins");
    let table = bundled_requests();
    catalog.attach_requests(&RequestChain::new().then(Arc::new(table.clone())));
    for entry in &catalog.entries {
        let name = entry.manifest().unwrap().name;
        if entry.origin.kind == "bundled" {
            assert_eq!(
                entry.requests,
                table.get(&name).unwrap(),
                "{name}: the bundled rows, in order"
            );
        } else {
            assert_eq!(entry.id, "local/wc");
            assert!(entry.requests.is_empty(), "{:?}", entry.requests);
        }
    }
    assert_eq!(catalog.entries.len(), 13);

    // The same names from the reference directory (origin `dir`) get none.
    let mut reference = Catalog::load(&[Source::Dir(
        repo().join("tests/fixtures/reference-manifests/oap-dev"),
    )]);
    reference.attach_requests(&table);
    assert!(reference.entries.iter().all(|e| e.requests.is_empty()));
}

#[test]
fn a_chain_puts_earlier_providers_first_and_caps_once() {
    let mut catalog = Catalog::load(&[bundled_source()]);
    let shipped = bundled_requests();
    let extra = RequestTable::parse(
        br#"{"wc": ["words in my essay?", "how many words are in this: the cat sat on the mat",
                    "a", "b", "c", "d", "e", "f"]}"#,
        "generated",
        AppliesTo::AnyOrigin,
    )
    .unwrap();
    catalog.attach_requests(
        &RequestChain::new()
            .then(Arc::new(shipped.clone()))
            .then(Arc::new(extra)),
    );
    let wc = catalog.entries.iter().find(|e| e.id == "local/wc").unwrap();
    let own = shipped.get("wc").unwrap();
    assert_eq!(wc.requests.len(), MAX_REQUEST_ROWS);
    assert_eq!(&wc.requests[..own.len()], own, "shipped rows first");
    assert_eq!(wc.requests[own.len()], "words in my essay?");
}

fn refused(json: &str) -> String {
    match RequestTable::parse(json.as_bytes(), "requests.json", AppliesTo::AnyOrigin) {
        Err(err @ RequestTableError::Format { .. }) => err.to_string(),
        Err(other) => panic!("{json}: unexpected error {other}"),
        Ok(_) => panic!("{json}: accepted"),
    }
}

#[test]
fn a_malformed_requests_file_is_a_clear_error() {
    let long = "x".repeat(MAX_REQUEST_TEXT + 1);
    let many: Vec<String> = (0..=MAX_REQUEST_ROWS)
        .map(|n| format!("\"r{n}\""))
        .collect();
    let cases: Vec<(String, &str)> = vec![
        ("{\"wc\": [\"a\"".into(), "requests.json: not an object"),
        ("[\"wc\"]".into(), "not an object"),
        ("{\"wc\": [\"a\"]} {}".into(), "text after the table"),
        (
            "{\"wc\": \"how many words\"}".into(),
            "\"wc\": expected a list",
        ),
        (
            "{\"wc\": [\"a\", 3]}".into(),
            "\"wc\" request 2: expected a string",
        ),
        (
            "{\"wc\": [\"a\", \"two\\nlines\"]}".into(),
            "\"wc\" request 2: blank or holding a control character",
        ),
        ("{\"wc\": [\" \"]}".into(), "\"wc\" request 1: blank"),
        (
            format!("{{\"wc\": [\"{long}\"]}}"),
            "\"wc\" request 1: 201 bytes, over the 200-byte cap",
        ),
        (
            format!("{{\"wc\": [{}]}}", many.join(",")),
            "\"wc\": 9 requests, at most 8",
        ),
        (
            "{\"wc\": [\"a\", \" a \"]}".into(),
            "\"wc\" request 2: repeats",
        ),
        (
            "{\"wc\": [\"a\"], \"bc\": [], \"wc\": [\"b\"]}".into(),
            "\"wc\" is listed twice",
        ),
        ("{\" \": [\"a\"]}".into(), "a manifest name is empty"),
    ];
    for (json, says) in cases {
        let message = refused(&json);
        assert!(message.contains(says), "{json}: {message:?} lacks {says:?}");
    }
    let missing = repo().join("no-such-requests.json");
    let err = RequestTable::load(&missing, AppliesTo::AnyOrigin).unwrap_err();
    assert!(
        matches!(err, RequestTableError::Read { .. })
            && err.to_string().contains("no-such-requests.json"),
        "{err}"
    );
}

/// The bundled set as the daemon indexes it (with its shipped rows), for
/// the tuned and the plain encoder: every request of a tool's own kind
/// still finds and matches its tool, and every request no bundled tool
/// serves scores below all of them, so a "nothing fits" threshold between
/// them exists. Request rows lift no-fit requests too (they are worded
/// like requests): whether the configured threshold sits in that gap is
/// measured in bench/request-rows/README.md, not pinned here.
#[test]
fn with_the_bundled_rows_no_fit_requests_still_score_below_fitting_ones() {
    use crate::abstention::{NO_FIT, OWN_KIND};
    let tuned_data = tempfile::tempdir().unwrap();
    let plain_data = tempfile::tempdir().unwrap();
    let mut plain_config = crate::engine::plain_config(plain_data.path());
    plain_config.request_rows = Some(Arc::new(bundled_requests()));
    let plain_model: Arc<dyn Embedder> = crate::engine::plain_model();
    for (config, model) in [
        (
            with_rows(tuned_data.path(), Arc::new(bundled_requests())),
            Counting::new() as Arc<dyn Embedder>,
        ),
        (plain_config, plain_model),
    ] {
        let model_id = model.model_id().to_string();
        let (engine, _) = Engine::open(config, vec![bundled_source()], Some(model)).unwrap();
        let scoring = engine.config().scoring.clone();
        let score_of = |task: &str| {
            let found = engine.discover(task, 3).unwrap();
            let best = found.candidates.first().unwrap();
            let score = scoring.decision_score(found.meta.mode, &best.scores);
            (best.name.clone(), found.best.is_some(), score)
        };
        let mut lowest_fitting = f32::MAX;
        for &(task, tool) in OWN_KIND {
            let (name, matched, score) = score_of(task);
            assert_eq!(name, tool, "{model_id}: {task:?}");
            assert!(matched, "{model_id}: {task:?} scores {score}, not a match");
            lowest_fitting = lowest_fitting.min(score);
        }
        for &task in NO_FIT {
            let (name, _, score) = score_of(task);
            assert!(
                score < lowest_fitting,
                "{model_id}: no-fit {task:?} scores {score} ({name}), \
                 a fitting request as low as {lowest_fitting}"
            );
        }
    }
}
