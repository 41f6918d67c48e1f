//! The engine with multilingual-e5-small (`cargo xtask fetch-model --model
//! multilingual-e5-small`) over the bundled manifests, which describe their
//! tools in English: requests in German and French (and English) find
//! the tool they ask for first. Without the model these tests FAIL with
//! instructions, like the all-MiniLM-L6-v2 ones.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use oap_discovery::{Engine, EngineConfig, Scoring, Source};
use oap_embed::{Calibration, Embedder};
use oap_embed_candle::{BertEmbedder, EmbedOptions};

fn e5() -> Arc<BertEmbedder> {
    static MODEL: OnceLock<Arc<BertEmbedder>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/multilingual-e5-small");
            assert!(
                dir.join("model.safetensors").is_file(),
                "multilingual-e5-small not found in {}: run `cargo xtask fetch-model --model multilingual-e5-small`",
                dir.display()
            );
            Arc::new(BertEmbedder::load(&dir, EmbedOptions::default()).expect("load e5"))
        })
        .clone()
}

fn bundled() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../manifests/bundled")
}

#[test]
fn german_and_french_requests_find_english_described_bundled_tools() {
    let model = e5();
    assert_eq!(model.calibration(), Calibration::MultilingualE5);
    let data = tempfile::tempdir().unwrap();
    let mut config = EngineConfig::new(data.path());
    config.scoring = Scoring::calibrated(model.calibration());
    let embedder: Arc<dyn Embedder> = model;
    let (engine, report) =
        Engine::open(config, vec![Source::Dir(bundled())], Some(embedder)).expect("engine opens");
    assert!(report.docs >= 13, "{} bundled manifests", report.docs);
    // Ranked first, not necessarily matched: a request in another language
    // than its tool's description scores about 0.80, below the 0.86 at
    // which the engine says a tool fits (fitted on English tuning data).
    // Requests whose tool wins by a clear margin (0.02 and more); closer
    // calls are left out: "Wie viele Wörter hat dieser Satz: der schnelle
    // braune Fuchs" puts `tr` (0.765) a hair above `wc` (0.764). That is
    // the model, not this port: the package's own engine ranks the same
    // way where the two were compared.
    for (request, tool) in [
        ("Wie viele Wörter hat dieser Text?", "wc"),
        ("Quelle est la date d'aujourd'hui ?", "date"),
        ("Extrahiere das Feld name aus diesem JSON", "jq"),
        ("count the words in this paragraph", "wc"),
    ] {
        let found = engine.discover(request, 3).unwrap();
        let ranked: Vec<(&str, f32)> = found
            .candidates
            .iter()
            .map(|c| (c.name.as_str(), c.score))
            .collect();
        assert_eq!(
            found.candidates.first().map(|c| c.name.as_str()),
            Some(tool),
            "{request:?}: {ranked:?}"
        );
    }
}
