//! The discovery engine against the real model and real index files.
//!
//! The embedder is the real all-MiniLM-L6-v2 (`cargo xtask fetch-model`);
//! a thin wrapper only counts calls, so the tests can assert that unchanged
//! manifests are not re-embedded. Without the model these tests FAIL with
//! instructions: a silently skipped model test hides regressions. Under
//! the counting sits [`crate::recorded_vectors`], through which the arm64
//! guest takes document vectors recorded on x86_64.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use oap_discovery::{Engine, EngineConfig, Mode, Scoring, Source, Trust};
use oap_embed::{Calibration, EmbedError, Embedder};
use oap_embed_candle::{BertEmbedder, EmbedOptions};

use crate::recorded_vectors::Recorded;

/// The real model as every test here embeds with it: its document vectors
/// may be replayed from a recording ([`crate::recorded_vectors`]).
pub(crate) type Model = Recorded<BertEmbedder>;

pub(crate) fn model_dir() -> PathBuf {
    match std::env::var_os("OAPD_MODEL_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2"),
    }
}

fn real_model() -> Arc<Model> {
    static MODEL: OnceLock<Arc<Model>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let dir = model_dir();
            assert!(
                dir.join("model.safetensors").is_file(),
                "real model not found in {}: run `cargo xtask fetch-model` (or set OAPD_MODEL_DIR)",
                dir.display()
            );
            let model = BertEmbedder::load(&dir, EmbedOptions::default()).expect("load model");
            Arc::new(Recorded::from_env(model))
        })
        .clone()
}

/// The real model without the tool tuning (`embedding.tool_tuning:
/// false`), for what the plain encoder must still do.
pub(crate) fn plain_model() -> Arc<Model> {
    static MODEL: OnceLock<Arc<Model>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let options = EmbedOptions {
                tool_tuning: false,
                ..EmbedOptions::default()
            };
            let model = BertEmbedder::load(&model_dir(), options).expect("load the plain model");
            Arc::new(Recorded::from_env(model))
        })
        .clone()
}

/// The engine's settings as the daemon makes them for [`plain_model`].
pub(crate) fn plain_config(data: &Path) -> EngineConfig {
    let mut config = EngineConfig::new(data);
    config.scoring = Scoring::calibrated(plain_model().calibration());
    config
}

/// The engine's settings as the daemon makes them for the real model
/// (`oapd::app::engine_config`): the calibrated thresholds follow the
/// encoder's tool tuning.
pub(crate) fn daemon_config(data: &Path) -> EngineConfig {
    let mut config = EngineConfig::new(data);
    config.scoring = Scoring::calibrated(real_model().calibration());
    config
}

/// The real model, counting how many texts it embeds, optionally under
/// another identity (to simulate a model change).
pub(crate) struct Counting {
    inner: Arc<Model>,
    id: String,
    texts: AtomicUsize,
}

impl Counting {
    pub(crate) fn new() -> Arc<Counting> {
        let inner = real_model();
        let id = inner.model_id().to_string();
        Arc::new(Counting {
            inner,
            id,
            texts: AtomicUsize::new(0),
        })
    }

    pub(crate) fn renamed(id: &str) -> Arc<Counting> {
        Arc::new(Counting {
            inner: real_model(),
            id: id.to_string(),
            texts: AtomicUsize::new(0),
        })
    }

    pub(crate) fn embedded(&self) -> usize {
        self.texts.load(Ordering::SeqCst)
    }
}

impl Embedder for Counting {
    fn model_id(&self) -> &str {
        &self.id
    }
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.texts.fetch_add(texts.len(), Ordering::SeqCst);
        self.inner.embed(texts)
    }
    // Queries reach the model as queries, so a recording never answers
    // them (see `crate::recorded_vectors`); they count like any text.
    fn embed_queries(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.texts.fetch_add(texts.len(), Ordering::SeqCst);
        self.inner.embed_queries(texts)
    }
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.texts.fetch_add(1, Ordering::SeqCst);
        self.inner.embed_query(text)
    }
    fn calibration(&self) -> Calibration {
        self.inner.calibration()
    }
}

fn reference_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/reference-manifests/oap-dev");
    assert!(
        dir.is_dir(),
        "reference manifests not found at {} (tests/fixtures in the repository)",
        dir.display()
    );
    dir
}

/// A directory holding copies of some reference manifests.
pub(crate) fn manifest_dir(names: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for name in names {
        fs::copy(
            reference_dir().join(format!("{name}.json")),
            dir.path().join(format!("{name}.json")),
        )
        .expect("copy manifest");
    }
    dir
}

pub(crate) const CLI: &[&str] = &["grep", "wc", "jq", "date", "bc", "sed", "awk"];

fn open(
    data: &Path,
    sources: Vec<Source>,
    embedder: Option<Arc<dyn Embedder>>,
) -> (Engine, oap_discovery::BuildReport) {
    Engine::open(daemon_config(data), sources, embedder).expect("engine opens")
}

#[test]
fn discovers_the_fitting_tool_and_says_when_none_fits() {
    let manifests = manifest_dir(CLI);
    let data = tempfile::tempdir().unwrap();
    let (engine, report) = open(
        data.path(),
        vec![Source::Dir(manifests.path().into())],
        Some(Counting::new()),
    );
    assert_eq!(report.docs, CLI.len());
    assert!(report.problems.is_empty(), "{:?}", report.problems);

    let found = engine
        .discover("count the words in this paragraph", 3)
        .unwrap();
    assert_eq!(found.meta.mode, Mode::Hybrid);
    let best = found.best.expect("a match");
    assert_eq!(best.id, "local/wc");
    assert_eq!(best.trust, Trust::Local);
    assert_eq!(found.candidates.len(), 3);
    assert!(found
        .candidates
        .windows(2)
        .all(|w| w[0].score >= w[1].score));

    let found = engine.discover("what is 17 times 23?", 3).unwrap();
    assert_eq!(found.candidates[0].id, "local/bc");

    // Nothing in a corpus of text tools books flights.
    let found = engine
        .discover("book me a flight to Lisbon next Tuesday", 3)
        .unwrap();
    assert!(
        found.best.is_none(),
        "expected no match, got {:?} (threshold {})",
        found.best.map(|b| (b.id, b.score)),
        found.meta.threshold
    );
    assert!(!found.candidates.is_empty(), "candidates are still listed");
}

/// A publisher's example says what a request for the tool looks like: each
/// example's description, asked as a request, finds its tool first and
/// matches it, among every reference manifest. (mynewscast's "Get current
/// Portland news" ranks a news API first by its description alone.)
#[test]
fn a_tools_own_example_request_finds_it_first() {
    let data = tempfile::tempdir().unwrap();
    let (engine, report) = open(
        data.path(),
        vec![Source::Dir(reference_dir())],
        Some(Counting::new()),
    );
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let mut asked = 0;
    for entry in fs::read_dir(reference_dir()).unwrap() {
        let text = fs::read(entry.unwrap().path()).unwrap();
        let manifest: serde_json::Value = serde_json::from_slice(&text).unwrap();
        let name = manifest["name"].as_str().unwrap();
        let examples = manifest["examples"].as_array().cloned().unwrap_or_default();
        for example in examples.iter().take(8) {
            let Some(request) = example["description"].as_str() else {
                continue;
            };
            asked += 1;
            let found = engine.discover(request, 3).unwrap();
            let best = found.best.as_ref().map(|b| b.name.as_str());
            assert_eq!(
                best,
                Some(name),
                "{request:?}: candidates {:?}",
                found
                    .candidates
                    .iter()
                    .map(|c| (c.name.as_str(), c.score))
                    .collect::<Vec<_>>()
            );
        }
    }
    assert!(
        asked >= 8,
        "the reference set carries examples ({asked} asked)"
    );
}

#[test]
fn unchanged_manifests_are_not_re_embedded() {
    let manifests = manifest_dir(CLI);
    let data = tempfile::tempdir().unwrap();
    let sources = || vec![Source::Dir(manifests.path().into())];

    let first = Counting::new();
    let (_, report) = open(data.path(), sources(), Some(first.clone()));
    assert!(!report.reused_index);
    assert!(first.embedded() >= CLI.len());
    assert_eq!(report.embedded_rows, first.embedded());

    // Same catalog, same model: the file is mapped as it is.
    let second = Counting::new();
    let (engine, report) = open(data.path(), sources(), Some(second.clone()));
    assert!(report.reused_index);
    assert_eq!(second.embedded(), 0);
    assert_eq!(engine.stats().docs, CLI.len());

    // One manifest changes: only its texts are embedded again.
    let wc = manifests.path().join("wc.json");
    let changed = fs::read_to_string(&wc)
        .unwrap()
        .replace("Count lines", "Tally lines");
    fs::write(&wc, changed).unwrap();
    let third = Counting::new();
    let (engine, report) = open(data.path(), sources(), Some(third.clone()));
    assert!(!report.reused_index);
    assert!(third.embedded() >= 1, "the changed description is embedded");
    assert!(
        third.embedded() <= 3,
        "only the changed manifest's rows are embedded, not {}",
        third.embedded()
    );
    assert!(report.reused_rows > 0);
    let wc = engine.get("local/wc").expect("wc indexed");
    assert!(wc.manifest["description"]
        .as_str()
        .unwrap()
        .starts_with("Tally"));

    // Reused vectors are copied from the old file unchanged: a background
    // rebuild after one more edit writes the same rows as re-embedding
    // everything does.
    let rows = |data: &Path| {
        let index = oap_index::Index::open(data.join(oap_discovery::engine::INDEX_FILE)).unwrap();
        let mut rows: Vec<_> = (0..index.len() as u32)
            .map(|doc| {
                let id = index.doc_id(doc).unwrap().to_string();
                (id, index.rows_of(doc).collect::<Vec<_>>())
            })
            .collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        rows
    };
    let grep = manifests.path().join("grep.json");
    let edited = fs::read_to_string(&grep).unwrap().replace("Search", "Scan");
    fs::write(&grep, edited).unwrap();
    let report = engine.rebuild(false).unwrap();
    assert!(
        report.reused_rows > 0 && report.embedded_rows > 0,
        "{report:?}"
    );
    let reused = rows(data.path());
    let report = engine.rebuild(true).unwrap();
    assert_eq!(report.reused_rows, 0);
    let embedded = rows(data.path());
    assert_eq!(embedded.len(), reused.len());
    for ((id, got), (want_id, want)) in reused.iter().zip(&embedded) {
        assert_eq!(id, want_id);
        assert_eq!(got.len(), want.len(), "{id}");
        for (got, want) in got.iter().zip(want) {
            assert_eq!((got.key, got.weight), (want.key, want.weight), "{id}");
            // Batch composition changes the padding, hence the last bits.
            let off = got
                .vector
                .iter()
                .zip(&want.vector)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(off < 1e-4, "{id}: a reused vector differs by {off}");
        }
    }
}

#[test]
fn a_model_change_re_embeds_everything() {
    let manifests = manifest_dir(&["grep", "wc"]);
    let data = tempfile::tempdir().unwrap();
    let sources = || vec![Source::Dir(manifests.path().into())];
    let (_, _) = open(data.path(), sources(), Some(Counting::new()));
    let other = Counting::renamed("another-model@0000");
    let (engine, report) = open(data.path(), sources(), Some(other.clone()));
    assert!(!report.reused_index);
    assert_eq!(
        report.reused_rows, 0,
        "vectors of another model are never reused"
    );
    assert_eq!(other.embedded(), report.rows);
    assert_eq!(engine.stats().model.as_deref(), Some("another-model@0000"));
}

#[test]
fn the_catalog_gives_back_every_manifest_as_it_was_parsed() {
    // The catalog keeps manifests compactly and the build reads them back;
    // the index must get exactly what parsing the file gave.
    let catalog = oap_discovery::Catalog::load(&[
        Source::Dir(reference_dir()),
        Source::Dir(reference_dir().join("../manifest-repo")),
    ]);
    assert!(catalog.entries.len() >= 40, "{}", catalog.entries.len());
    for entry in &catalog.entries {
        let bytes = fs::read(&entry.origin.location).unwrap();
        let parsed = oap_manifest::parse(&bytes).unwrap().manifest;
        assert_eq!(entry.manifest().unwrap(), parsed, "{}", entry.id);
        assert_eq!(
            entry.manifest_value().unwrap(),
            serde_json::to_value(&parsed).unwrap(),
            "{}",
            entry.id
        );
    }
}

#[test]
fn invalid_and_oversized_files_are_reported_and_skipped() {
    let manifests = manifest_dir(&["grep", "wc"]);
    let dir = manifests.path();
    fs::write(dir.join("broken.json"), b"{\"oap\": \"1.0\", \"name\": ").unwrap();
    fs::write(
        dir.join("put.json"),
        br#"{"oap":"1.0","name":"putter","description":"d","invoke":{"method":"PUT","url":"https://example.com"}}"#,
    )
    .unwrap();
    fs::write(dir.join("huge.json"), vec![b' '; 70 * 1024]).unwrap();
    fs::create_dir(dir.join("a-directory.json")).unwrap();
    fs::write(dir.join("notes.txt"), b"not a manifest").unwrap();
    let data = tempfile::tempdir().unwrap();
    let (engine, report) = open(
        data.path(),
        vec![
            Source::Dir(dir.into()),
            Source::Dir(dir.join("does-not-exist")),
        ],
        None,
    );
    assert_eq!(report.docs, 2, "the valid manifests are still indexed");
    let problem = |file: &str| {
        report
            .problems
            .iter()
            .find(|p| p.location.ends_with(file))
            .unwrap_or_else(|| panic!("no problem reported for {file}: {:?}", report.problems))
            .message
            .clone()
    };
    assert!(problem("broken.json").contains("line 1"));
    assert!(problem("put.json").contains("invoke.method"));
    assert!(problem("put.json").contains("\"PUT\""));
    assert!(problem("huge.json").contains("limit"));
    assert!(problem("a-directory.json").contains("not a regular file"));
    assert!(problem("does-not-exist").contains("cannot read directory"));
    assert_eq!(report.problems.len(), 5, "{:?}", report.problems);
    assert!(engine.get("local/grep").is_some());
}

#[test]
fn the_first_source_wins_a_name_collision() {
    let operator = tempfile::tempdir().unwrap();
    fs::write(
        operator.path().join("my-grep.json"),
        br#"{"oap":"1.0","name":"grep","description":"The operator's own grep wrapper.","invoke":{"method":"stdio","url":"/usr/local/bin/mygrep"}}"#,
    )
    .unwrap();
    // Inside one directory, byte order of file names decides.
    fs::write(
        operator.path().join("z-grep.json"),
        br#"{"oap":"1.0","name":"GREP","description":"A second grep.","invoke":{"method":"stdio","url":"grep"}}"#,
    )
    .unwrap();
    let shipped = manifest_dir(&["grep", "wc"]);
    let data = tempfile::tempdir().unwrap();
    let (engine, report) = open(
        data.path(),
        vec![
            Source::Dir(operator.path().into()),
            Source::Dir(shipped.path().into()),
        ],
        None,
    );
    assert_eq!(report.docs, 2);
    let grep = engine.get("local/grep").unwrap();
    assert_eq!(grep.manifest["invoke"]["url"], "/usr/local/bin/mygrep");
    assert_eq!(report.collisions.len(), 2, "{:?}", report.collisions);
    for collision in &report.collisions {
        assert_eq!(collision.id, "local/grep");
        assert!(collision.kept.ends_with("my-grep.json"));
    }
    assert!(report
        .collisions
        .iter()
        .any(|c| c.skipped.ends_with("z-grep.json")));
}

#[test]
fn a_corrupt_index_is_detected_and_rebuilt() {
    let manifests = manifest_dir(CLI);
    let data = tempfile::tempdir().unwrap();
    let sources = || vec![Source::Dir(manifests.path().into())];
    let (_, _) = open(data.path(), sources(), Some(Counting::new()));
    let path = data.path().join("index.oapx");
    let mut bytes = fs::read(&path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x55;
    fs::write(&path, &bytes).unwrap();

    let (engine, report) = open(data.path(), sources(), Some(Counting::new()));
    let problem = report.previous_index_problem.expect("corruption reported");
    assert!(problem.contains("corrupt"), "{problem}");
    assert!(!report.reused_index);
    let found = engine.discover("count the lines in this file", 1).unwrap();
    assert_eq!(found.candidates[0].id, "local/wc");

    // A truncated file too.
    let bytes = fs::read(&path).unwrap();
    fs::write(&path, &bytes[..bytes.len() / 3]).unwrap();
    let (engine, report) = open(data.path(), sources(), Some(Counting::new()));
    assert!(report.previous_index_problem.is_some());
    assert_eq!(engine.stats().docs, CLI.len());
}

#[test]
fn without_a_model_retrieval_is_lexical_and_upgrades_when_the_model_returns() {
    let manifests = manifest_dir(CLI);
    let data = tempfile::tempdir().unwrap();
    let sources = || vec![Source::Dir(manifests.path().into())];
    let (engine, report) = open(data.path(), sources(), None);
    assert_eq!(report.rows, 0);
    assert_eq!(engine.mode(), Mode::Lexical);
    let found = engine
        .discover("count words, lines and characters", 3)
        .unwrap();
    assert_eq!(found.meta.mode, Mode::Lexical);
    assert_eq!(found.meta.model, None);
    assert_eq!(found.candidates[0].id, "local/wc");
    assert!(found.candidates[0].scores.dense.is_none());

    let model = Counting::new();
    let (engine, report) = open(data.path(), sources(), Some(model.clone()));
    assert!(
        !report.reused_index,
        "a lexical-only index is rebuilt with vectors"
    );
    assert!(report.rows >= CLI.len());
    assert_eq!(
        engine.discover("count the words", 1).unwrap().meta.mode,
        Mode::Hybrid
    );
}

#[test]
fn queries_are_served_while_the_index_is_rebuilt() {
    let manifests = manifest_dir(CLI);
    let data = tempfile::tempdir().unwrap();
    let (engine, _) = open(
        data.path(),
        vec![Source::Dir(manifests.path().into())],
        Some(Counting::new()),
    );
    let engine = Arc::new(engine);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let engine = engine.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut served = 0;
            while !stop.load(Ordering::SeqCst) || served == 0 {
                let found = engine.discover("search for lines matching a pattern", 1);
                let found = found.expect("query served during rebuild");
                assert_eq!(found.candidates[0].id, "local/grep");
                served += 1;
            }
            served
        })
    };
    for _ in 0..3 {
        let report = engine.rebuild(true).expect("rebuild");
        assert_eq!(report.docs, CLI.len());
    }
    stop.store(true, Ordering::SeqCst);
    let served = reader.join().expect("reader thread");
    assert!(served > 0);
}

#[test]
fn an_empty_catalog_answers_with_no_candidates() {
    let data = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let (engine, report) = open(
        data.path(),
        vec![Source::Dir(empty.path().into())],
        Some(Counting::new()),
    );
    assert_eq!(report.docs, 0);
    let found = engine.discover("count words", 5).unwrap();
    assert!(found.best.is_none());
    assert!(found.candidates.is_empty());
    assert!(engine.list().is_empty());
    assert!(engine.get("local/wc").is_none());
}

#[test]
fn empty_tasks_are_refused() {
    let data = tempfile::tempdir().unwrap();
    let manifests = manifest_dir(&["wc"]);
    let (engine, _) = open(
        data.path(),
        vec![Source::Dir(manifests.path().into())],
        None,
    );
    assert!(matches!(
        engine.discover("   \n ", 3),
        Err(oap_discovery::DiscoverError::EmptyTask)
    ));
}

#[test]
fn listing_and_lookup_use_stable_ids() {
    let manifests = manifest_dir(&["grep", "wc", "earthquake"]);
    let data = tempfile::tempdir().unwrap();
    let (engine, _) = open(
        data.path(),
        vec![Source::Dir(manifests.path().into())],
        None,
    );
    let ids: Vec<String> = engine.list().into_iter().map(|m| m.id).collect();
    // earthquake.json's name is usgs-earthquake: ids follow names, not files.
    assert_eq!(ids, ["local/grep", "local/usgs-earthquake", "local/wc"]);
    let record = engine.get("local/usgs-earthquake").unwrap();
    assert_eq!(record.origin.kind, "dir");
    assert!(record.origin.location.ends_with("earthquake.json"));
    assert_eq!(record.content_hash.len(), 64);
}

/// Records, in order, when the query embeds and when a rebuild embeds.
struct Observed {
    inner: Arc<Model>,
    events: std::sync::Mutex<Vec<&'static str>>,
}

impl Embedder for Observed {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if std::thread::current().name() == Some("query") {
            let out = self.inner.embed(texts);
            self.events.lock().unwrap().push("query starts");
            // A slow query: long enough for a rebuild started meanwhile to
            // reach its first embedding, well under a rebuild's longest
            // wait (100 ms) even when the sleep overshoots on a busy machine.
            std::thread::sleep(std::time::Duration::from_millis(50));
            self.events.lock().unwrap().push("query ends");
            out
        } else {
            self.events.lock().unwrap().push("rebuild embeds");
            self.inner.embed(texts)
        }
    }
}

#[test]
fn a_background_rebuild_waits_for_a_running_query() {
    let manifests = manifest_dir(CLI);
    let data = tempfile::tempdir().unwrap();
    let observed = Arc::new(Observed {
        inner: real_model(),
        events: std::sync::Mutex::new(Vec::new()),
    });
    let (engine, _) = open(
        data.path(),
        vec![Source::Dir(manifests.path().into())],
        Some(observed.clone()),
    );
    let engine = Arc::new(engine);
    observed.events.lock().unwrap().clear();

    let query = {
        let engine = engine.clone();
        std::thread::Builder::new()
            .name("query".into())
            .spawn(move || {
                engine
                    .discover("count the words in a text", 1)
                    .map(|d| d.best)
            })
            .unwrap()
    };
    while !observed.events.lock().unwrap().contains(&"query starts") {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // Something to embed while the query runs.
    let wc = manifests.path().join("wc.json");
    let changed = fs::read_to_string(&wc)
        .unwrap()
        .replace("Count lines", "Tally lines");
    fs::write(&wc, changed).unwrap();
    let report = engine.rebuild(false).unwrap();
    assert!(report.embedded_rows > 0);
    query.join().unwrap().unwrap();

    let events = observed.events.lock().unwrap().clone();
    let first_rebuild = events.iter().position(|e| *e == "rebuild embeds");
    let query_end = events.iter().position(|e| *e == "query ends");
    assert!(
        first_rebuild.is_some() && query_end < first_rebuild,
        "the rebuild embedded while the query ran: {events:?}"
    );
}

#[test]
fn a_failed_rebuild_is_remembered_until_one_succeeds_and_the_old_index_serves() {
    let manifests = manifest_dir(&["grep", "wc"]);
    let data = tempfile::tempdir().unwrap();
    let (engine, _) = open(
        data.path(),
        vec![Source::Dir(manifests.path().into())],
        None,
    );
    assert_eq!(engine.rebuild_failure(), None);
    fs::copy(
        reference_dir().join("jq.json"),
        manifests.path().join("jq.json"),
    )
    .unwrap();
    // A directory where the new index's temporary file goes: every write fails.
    let blocker = data
        .path()
        .join(format!("{}.tmp", oap_discovery::engine::INDEX_FILE));
    fs::create_dir(&blocker).unwrap();
    for attempt in 1..=2 {
        let err = engine.rebuild(false).expect_err("the write cannot succeed");
        let failure = engine.rebuild_failure().expect("the failure is remembered");
        assert_eq!(failure.consecutive, attempt);
        assert_eq!(failure.error, err.to_string());
        assert!(failure.error.contains(".tmp"), "{}", failure.error);
    }
    // The stream writer's temporary files went with the failed writes.
    let index_file = oap_discovery::engine::INDEX_FILE;
    let mut left: Vec<String> = fs::read_dir(data.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, [index_file.to_string(), format!("{index_file}.tmp")]);
    // Nothing already indexed is lost; the new manifest is not there yet.
    assert_eq!(engine.stats().docs, 2);
    let found = engine
        .discover("count words, lines and characters", 3)
        .unwrap();
    assert_eq!(found.candidates[0].id, "local/wc");
    assert!(engine.get("local/jq").is_none());

    fs::remove_dir(&blocker).unwrap();
    let report = engine.rebuild(false).expect("room again");
    assert_eq!(report.docs, 3);
    assert_eq!(engine.rebuild_failure(), None);
    assert!(engine.get("local/jq").is_some());
}

fn names(found: &oap_discovery::Discovery) -> Vec<(String, f32)> {
    found
        .candidates
        .iter()
        .map(|c| (c.id.clone(), c.score))
        .collect()
}

#[test]
fn a_start_with_too_much_to_embed_serves_lexically_until_a_rebuild_embeds_it() {
    let manifests = manifest_dir(CLI);
    let data = tempfile::tempdir().unwrap();
    // A damaged index file where the engine keeps its index.
    fs::write(
        data.path().join(oap_discovery::engine::INDEX_FILE),
        [0x5a; 4096],
    )
    .unwrap();
    let sources = || vec![Source::Dir(manifests.path().into())];
    let mut config = daemon_config(data.path());
    config.start_embed_limit = Some(3);

    let embedder = Counting::new();
    let (engine, report) =
        Engine::open(config.clone(), sources(), Some(embedder.clone())).expect("opens");
    assert!(report.previous_index_problem.is_some());
    assert_eq!(report.docs, CLI.len());
    assert!(report.pending_texts > 3, "{report:?}");
    assert_eq!(embedder.embedded(), 0, "nothing embedded before serving");
    assert_eq!(engine.pending_texts(), report.pending_texts);
    assert_eq!(engine.mode(), Mode::Lexical);
    assert_eq!(engine.stats().mode, Mode::Lexical);
    let found = engine.discover("count the words in this text", 3).unwrap();
    assert_eq!(found.meta.mode, Mode::Lexical);
    assert_eq!(
        found.meta.threshold,
        engine.config().scoring.min_score_lexical
    );
    assert_eq!(found.candidates[0].id, "local/wc");
    drop(engine);

    // A restart (after a SIGKILL, say) maps the same file and serves it
    // lexically at once; nothing is embedded before it is up.
    let embedder = Counting::new();
    let (engine, again) =
        Engine::open(config.clone(), sources(), Some(embedder.clone())).expect("reopens");
    assert!(again.reused_index);
    assert_eq!(again.pending_texts, report.pending_texts);
    assert_eq!(embedder.embedded(), 0);

    // The rebuild embeds what is pending, and the engine turns hybrid.
    let rebuilt = engine.rebuild(false).expect("rebuilds");
    assert_eq!(rebuilt.pending_texts, 0);
    assert_eq!(embedder.embedded(), report.pending_texts);
    assert_eq!(engine.pending_texts(), 0);
    assert_eq!(engine.mode(), Mode::Hybrid);

    // It answers as an engine that embedded everything at once does.
    let fresh_data = tempfile::tempdir().unwrap();
    let (fresh, fresh_report) = open(fresh_data.path(), sources(), Some(Counting::new()));
    assert_eq!(fresh_report.pending_texts, 0);
    for task in [
        "count the words in this text",
        "what is today's date",
        "evaluate 2+2*3",
    ] {
        let a = engine.discover(task, 5).unwrap();
        let b = fresh.discover(task, 5).unwrap();
        assert_eq!((a.meta.mode, b.meta.mode), (Mode::Hybrid, Mode::Hybrid));
        assert_eq!(
            a.best.as_ref().map(|c| &c.id),
            b.best.as_ref().map(|c| &c.id),
            "{task}"
        );
        let (a, b) = (names(&a), names(&b));
        assert_eq!(a.len(), b.len(), "{task}");
        for ((id_a, score_a), (id_b, score_b)) in a.iter().zip(&b) {
            assert_eq!(id_a, id_b, "{task}");
            assert!(
                (score_a - score_b).abs() < 1e-5,
                "{task}: {score_a} vs {score_b}"
            );
        }
    }

    // The next start finds a complete index: hybrid, nothing to embed.
    drop(engine);
    let (_, complete) = Engine::open(config, sources(), Some(Counting::new())).expect("opens");
    assert!(complete.reused_index);
    assert_eq!(complete.pending_texts, 0);
}

#[test]
fn a_model_change_over_the_limit_keeps_serving_and_a_retired_engine_stops() {
    let manifests = manifest_dir(CLI);
    let data = tempfile::tempdir().unwrap();
    let sources = || vec![Source::Dir(manifests.path().into())];
    let (_, built) = open(data.path(), sources(), Some(Counting::new()));
    assert_eq!(built.pending_texts, 0);

    // Another model: no vector is reusable, more than the limit pending.
    let mut config = daemon_config(data.path());
    config.start_embed_limit = Some(2);
    let other = Counting::renamed("another-model");
    let (engine, report) = Engine::open(config, sources(), Some(other.clone())).expect("opens");
    assert!(report.pending_texts > 2, "{report:?}");
    assert_eq!(other.embedded(), 0);
    assert_eq!(engine.mode(), Mode::Lexical);

    // A reload replaced it: its rebuild does not run.
    engine.retire();
    let err = engine
        .rebuild(false)
        .expect_err("a retired engine does not rebuild");
    assert!(matches!(err, oap_discovery::EngineError::Retired), "{err}");
    assert_eq!(other.embedded(), 0);
    assert_eq!(engine.mode(), Mode::Lexical);
}

#[test]
fn under_the_limit_a_start_embeds_everything_first() {
    let manifests = manifest_dir(CLI);
    let data = tempfile::tempdir().unwrap();
    let mut config = daemon_config(data.path());
    config.start_embed_limit = Some(1000);
    let (engine, report) = Engine::open(
        config,
        vec![Source::Dir(manifests.path().into())],
        Some(Counting::new()),
    )
    .expect("opens");
    assert_eq!(report.pending_texts, 0);
    assert!(report.embedded_rows > 0);
    assert_eq!(engine.mode(), Mode::Hybrid);
}

/// The real model behind a gate: each background batch waits until the test
/// lets one through, so a rebuild can be held in the middle of embedding.
struct Gated {
    inner: Arc<Counting>,
    allowed: std::sync::Mutex<usize>,
    opened: std::sync::Condvar,
    started: AtomicUsize,
    /// Texts of each background batch, in the order they reached the gate.
    batches: std::sync::Mutex<Vec<usize>>,
    finished: AtomicUsize,
}

impl Gated {
    fn new() -> Arc<Gated> {
        Arc::new(Gated {
            inner: Counting::new(),
            allowed: std::sync::Mutex::new(0),
            opened: std::sync::Condvar::new(),
            started: AtomicUsize::new(0),
            batches: std::sync::Mutex::new(Vec::new()),
            finished: AtomicUsize::new(0),
        })
    }

    fn allow(&self, batches: usize) {
        *self.allowed.lock().unwrap() += batches;
        self.opened.notify_all();
    }
}

impl Embedder for Gated {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.inner.embed(texts)
    }
    fn embed_background(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.batches.lock().unwrap().push(texts.len());
        self.started.fetch_add(1, Ordering::SeqCst);
        let mut allowed = self.allowed.lock().unwrap();
        while *allowed == 0 {
            allowed = self.opened.wait(allowed).unwrap();
        }
        *allowed -= 1;
        drop(allowed);
        let vectors = self.inner.embed(texts);
        self.finished.fetch_add(1, Ordering::SeqCst);
        vectors
    }
}

#[test]
fn a_manifest_added_during_a_background_embedding_is_served_before_it_ends() {
    let names: Vec<String> = fs::read_dir(reference_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter_map(|path| Some(path.file_stem()?.to_str()?.to_string()))
        .filter(|name| name != "open-meteo")
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let manifests = manifest_dir(&names);
    let data = tempfile::tempdir().unwrap();
    let sources = || vec![Source::Dir(manifests.path().into())];
    let mut config = daemon_config(data.path());
    config.start_embed_limit = Some(0);
    let gated = Gated::new();
    let (engine, start) =
        Engine::open(config, sources(), Some(gated.clone())).expect("opens lexically");
    let engine = Arc::new(engine);
    assert!(start.pending_texts > 8, "{start:?}");
    assert_eq!(engine.mode(), Mode::Lexical);

    // The background rebuild embeds one batch, then waits at the gate.
    gated.allow(1);
    let first = std::thread::spawn({
        let engine = engine.clone();
        move || engine.rebuild(false)
    });
    let wait_for = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "timed out: {what}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    wait_for("the first rebuild's second batch", &|| {
        gated.started.load(Ordering::SeqCst) >= 2
    });

    // A manifest arrives; the directory watch asks for another rebuild.
    fs::copy(
        reference_dir().join("open-meteo.json"),
        manifests.path().join("open-meteo.json"),
    )
    .unwrap();
    let second = std::thread::spawn({
        let engine = engine.clone();
        move || engine.rebuild(false)
    });
    // The first rebuild's second batch stays at the gate (an idle-class
    // batch on a CPU something else keeps busy): the first steps aside
    // without waiting for it, and the second serves the new catalog
    // lexically before embedding anything.
    wait_for(
        "the new manifest served with a batch still in flight",
        &|| engine.get("local/open-meteo").is_some(),
    );
    assert_eq!(
        gated.finished.load(Ordering::SeqCst),
        1,
        "no batch let through"
    );
    assert!(engine.pending_texts() > 0, "served before the vectors");
    assert_eq!(engine.mode(), Mode::Lexical);
    let found = engine.discover("weather forecast for Berlin", 3).unwrap();
    assert_eq!(found.candidates[0].id, "local/open-meteo", "{found:?}");

    // The first stepped aside with texts still pending; the second embeds
    // the rest, reusing every vector the first made.
    gated.allow(10_000);
    let first = first.join().unwrap().expect("first rebuild");
    let second = second.join().unwrap().expect("second rebuild");
    assert!(first.pending_texts > 0, "{first:?}");
    assert_eq!(second.pending_texts, 0, "{second:?}");
    assert_eq!(engine.pending_texts(), 0);
    assert_eq!(engine.mode(), Mode::Hybrid);
    // Only the batch the first dropped is embedded twice (its vectors
    // thrown away when it finishes).
    wait_for("the dropped batch to finish", &|| {
        gated.finished.load(Ordering::SeqCst) == gated.started.load(Ordering::SeqCst)
    });
    let batches = gated.batches.lock().unwrap().clone();
    assert_eq!(first.embedded_rows, batches[0], "{batches:?}");
    assert_eq!(
        gated.inner.embedded(),
        first.embedded_rows + batches[1] + second.embedded_rows,
        "no text embedded twice but the dropped batch's"
    );
    let found = engine.discover("weather forecast for Berlin", 3).unwrap();
    assert_eq!(found.meta.mode, Mode::Hybrid);
    assert_eq!(found.candidates[0].id, "local/open-meteo");
    assert_eq!(engine.stats().docs, names.len() + 1);
}

/// The directory watch does not wait for a rebuild before it looks for the
/// next change: it announces a newer catalog, and a background embedding
/// in progress steps aside at once (its batch in flight dropped), so the
/// rebuild that follows serves the change. The announcement lasts until a
/// rebuild starts, and not past it: that rebuild embeds to the end.
#[test]
fn an_announced_newer_catalog_makes_a_background_embedding_step_aside() {
    let manifests = manifest_dir(CLI);
    let data = tempfile::tempdir().unwrap();
    let mut config = daemon_config(data.path());
    config.start_embed_limit = Some(0);
    let gated = Gated::new();
    let (engine, start) = Engine::open(
        config,
        vec![Source::Dir(manifests.path().into())],
        Some(gated.clone()),
    )
    .expect("opens lexically");
    let engine = Arc::new(engine);
    assert!(start.pending_texts > 4, "{start:?}");

    gated.allow(1);
    let first = std::thread::spawn({
        let engine = engine.clone();
        move || engine.rebuild(false)
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while gated.started.load(Ordering::SeqCst) < 2 {
        assert!(std::time::Instant::now() < deadline, "no second batch");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // The second batch is held at the gate; nobody waits on the build lock.
    engine.note_newer_catalog();
    let first = first.join().unwrap().expect("first rebuild");
    assert!(first.pending_texts > 0, "stepped aside: {first:?}");
    assert_eq!(gated.finished.load(Ordering::SeqCst), 1);

    gated.allow(10_000);
    let second = engine.rebuild(false).expect("second rebuild");
    assert_eq!(second.pending_texts, 0, "{second:?}");
    assert_eq!(engine.mode(), Mode::Hybrid);
}
