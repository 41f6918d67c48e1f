//! Tests against the real all-MiniLM-L6-v2 weights.
//!
//! They need `<repo>/models/all-MiniLM-L6-v2` (from `cargo xtask fetch-model`)
//! or `OAPD_MODEL_DIR`. Without it they FAIL with instructions rather than
//! skip: a silently skipped model test is how score regressions ship.
//!
//! Broken model directories for the error tests are built in temp dirs from
//! symlinks to the good files, so the fetched model is never modified.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier, OnceLock};

use oap_embed::{cosine, Calibration, Coalescing, EmbedError, Embedder};
use oap_embed_candle::{BertEmbedder, EmbedOptions, WeightPrecision};
use sha2::{Digest, Sha256};

fn model_dir() -> PathBuf {
    match std::env::var_os("OAPD_MODEL_DIR") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2"),
    }
}

/// The model directory, or a test failure that says how to get it.
fn require_model() -> PathBuf {
    let dir = model_dir();
    for f in ["config.json", "tokenizer.json", "model.safetensors"] {
        assert!(
            dir.join(f).is_file(),
            "real model not found: {} is missing. Run `cargo xtask fetch-model` \
             (or set OAPD_MODEL_DIR to a sentence-transformers BERT directory).",
            dir.join(f).display()
        );
    }
    dir
}

/// The checkpoint as published, without the compiled-in tool tuning: what
/// the sentence-transformers reference computes. The tuning has its own
/// tests at the end.
fn base_options() -> EmbedOptions {
    EmbedOptions {
        tool_tuning: false,
        ..EmbedOptions::default()
    }
}

/// One shared model per test binary: loading is ~100 ms and ~90 MB.
fn embedder() -> &'static BertEmbedder {
    static E: OnceLock<BertEmbedder> = OnceLock::new();
    E.get_or_init(|| BertEmbedder::load(&require_model(), base_options()).expect("load real model"))
}

/// The same model with the checkpoint's `f32` weights.
fn f32_embedder() -> &'static BertEmbedder {
    static E: OnceLock<BertEmbedder> = OnceLock::new();
    E.get_or_init(|| {
        let opts = EmbedOptions {
            weights: WeightPrecision::F32,
            ..base_options()
        };
        BertEmbedder::load(&require_model(), opts).expect("load real model")
    })
}

fn norm(v: &[f32]) -> f64 {
    v.iter()
        .map(|x| f64::from(*x) * f64::from(*x))
        .sum::<f64>()
        .sqrt()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn words(n: usize) -> String {
    let vocab = [
        "manifest",
        "discovery",
        "agent",
        "weather",
        "convert",
        "image",
        "to",
        "pdf",
        "the",
        "quickly",
        "edge",
        "board",
        "sensor",
        "reads",
        "temperature",
        "and",
        "reports",
    ];
    (0..n)
        .map(|i| vocab[(i * 7 + i / 3) % vocab.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn reproduces_sentence_transformers_reference_scores() {
    let e = embedder();
    let v = e
        .embed(&[
            "The cat sits outside",
            "The cat plays in the garden",
            "I love pasta",
            "Do you like pizza?",
        ])
        .unwrap();
    let cat = cosine(&v[0], &v[1]);
    let food = cosine(&v[2], &v[3]);
    println!("cat={cat:.4} food={food:.4}");
    assert!((cat - 0.6788).abs() < 5e-4, "cat pair: {cat:.4} != 0.6788");
    assert!(
        (food - 0.5096).abs() < 5e-4,
        "food pair: {food:.4} != 0.5096"
    );
}

#[test]
fn dim_and_model_id() {
    let e = embedder();
    assert_eq!(e.dim(), 384);
    assert_eq!(e.embed_one("hello").unwrap().len(), 384);

    let dir = require_model();
    let mut h = Sha256::new();
    for f in ["config.json", "tokenizer.json", "model.safetensors"] {
        h.update(fs::read(dir.join(f)).unwrap());
    }
    let full = hex::encode(h.finalize());
    assert_eq!(e.content_sha256(), full);
    let name = e.model_dir().file_name().unwrap().to_string_lossy();
    assert_eq!(e.model_id(), format!("{name}+bf16@{}", &full[..16]));
    // The precision is part of the id (an index re-embeds when it changes);
    // the weights' hash is not touched by it.
    let f32_model = f32_embedder();
    assert_eq!(f32_model.model_id(), format!("{name}@{}", &full[..16]));
    assert_eq!(f32_model.content_sha256(), full);
}

#[test]
fn batch_equals_single_and_keeps_input_order() {
    let e = embedder();
    let long = words(400);
    let mut texts: Vec<String> = vec![
        "".into(),
        "weather".into(),
        long.clone(),
        "convert a png image to pdf".into(),
        words(3),
        words(60),
        "Ünïcödé façade — naïve café 東京".into(),
        "  \t\n ".into(),
    ];
    // Enough texts for two batches of 16, in no particular length order.
    for i in 0..20 {
        texts.push(words(1 + (i * 37) % 90));
    }
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let batch = e.embed(&refs).unwrap();
    assert_eq!(batch.len(), texts.len());
    let mut worst = 0f32;
    for (t, b) in refs.iter().zip(&batch) {
        let single = e.embed_one(t).unwrap();
        let d = max_abs_diff(&single, b);
        worst = worst.max(d);
        assert!(d < 1e-5, "batch vs single differ by {d} for {t:?}");
    }
    println!("max |batch - single| = {worst:e}");
    // The loop above proves order (vector i matches text i) only if different
    // texts give different vectors; check that it is not vacuous.
    assert!(max_abs_diff(&batch[1], &batch[3]) > 1e-3);
}

/// Queries as the daemon embeds them: short, of different lengths, so a
/// coalesced pass pads most of them.
fn queries() -> Vec<String> {
    let mut texts: Vec<String> = vec![
        "weather".into(),
        "Will it rain in Paris tomorrow? Get me the weather forecast.".into(),
        "convert a png image to pdf".into(),
        "Ünïcödé façade — naïve café 東京".into(),
    ];
    for n in [2, 5, 9, 14, 23, 40] {
        texts.push(words(n));
    }
    texts
}

#[test]
fn a_padded_batch_of_queries_equals_each_query_alone() {
    let e = embedder();
    let texts = queries();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    // One forward pass over all of them (what a coalesced pass runs).
    let batch = e.embed(&refs).unwrap();
    let mut worst = 0f32;
    for (t, b) in refs.iter().zip(&batch) {
        let d = max_abs_diff(&e.embed_one(t).unwrap(), b);
        worst = worst.max(d);
        assert!(d < 1e-5, "padded batch vs alone differ by {d} for {t:?}");
    }
    println!("max |padded batch - alone| = {worst:e}");
}

/// The packed batch pass (texts' token rows back to back, attention per
/// text) gives every text exactly the vector it gets alone: not just within
/// rounding, bit for bit, since no kernel mixes rows of different texts.
/// The former padded pass agrees within float rounding.
#[test]
fn a_packed_batch_of_uneven_texts_equals_each_text_alone_bit_for_bit() {
    let e = embedder();
    let mut texts = queries();
    texts.push(words(300)); // truncated at 256 tokens
    texts.push(String::new());
    texts.push(words(1));
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let batch = e.embed(&refs).unwrap();
    let padded = e.embed_padded(&refs).unwrap();
    assert_eq!(batch.len(), refs.len());
    for ((t, b), p) in refs.iter().zip(&batch).zip(&padded) {
        let alone = e.embed_one(t).unwrap();
        assert_eq!(&alone, b, "packed batch vs alone differ for {t:?}");
        let d = max_abs_diff(&alone, p);
        assert!(d < 1e-5, "padded batch vs alone differ by {d} for {t:?}");
    }
    // In another order and another company, still the same bits.
    let rev: Vec<&str> = refs.iter().rev().copied().collect();
    for (t, v) in rev.iter().zip(e.embed(&rev).unwrap()) {
        assert_eq!(v, e.embed_one(t).unwrap(), "reordered batch for {t:?}");
    }
}

#[test]
fn concurrent_queries_through_the_coalescing_wrapper_get_their_own_vectors() {
    let alone: Vec<Vec<f32>> = queries()
        .iter()
        .map(|t| embedder().embed_one(t).unwrap())
        .collect();
    let model = BertEmbedder::load(&require_model(), base_options()).unwrap();
    let coalescing = Arc::new(Coalescing::new(model, 16));
    let texts = queries();
    // Several rounds, every thread released at once each round.
    let rounds = 3;
    let barrier = Arc::new(Barrier::new(texts.len()));
    let threads: Vec<_> = texts
        .iter()
        .cloned()
        .map(|text| {
            let (c, barrier) = (Arc::clone(&coalescing), Arc::clone(&barrier));
            std::thread::spawn(move || {
                (0..rounds)
                    .map(|_| {
                        barrier.wait();
                        c.embed_one(&text).unwrap()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for ((text, expected), thread) in texts.iter().zip(&alone).zip(threads) {
        for got in thread.join().unwrap() {
            let d = max_abs_diff(expected, &got);
            assert!(d < 1e-5, "coalesced vs alone differ by {d} for {text:?}");
        }
    }
    let stats = coalescing.stats();
    assert_eq!(stats.texts, (texts.len() * rounds) as u64);
    assert_eq!(stats.retried, 0);
    println!("{stats:?}");
}

#[test]
fn batch_size_does_not_change_results() {
    let e = embedder();
    let texts: Vec<String> = (0..10).map(|i| words(2 + i * 11)).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let a = e.embed(&refs).unwrap();
    let small = BertEmbedder::load(
        &require_model(),
        EmbedOptions {
            batch_size: 3,
            threads: Some(1),
            ..base_options()
        },
    )
    .unwrap();
    let b = small.embed(&refs).unwrap();
    for (x, y) in a.iter().zip(&b) {
        assert!(max_abs_diff(x, y) < 1e-5);
    }
    assert_eq!(small.model_id(), e.model_id());
}

#[test]
fn vectors_are_unit_length() {
    let e = embedder();
    let texts = ["", "a", "find a manifest for booking a flight", &words(300)];
    for (t, v) in texts.iter().zip(e.embed(&texts).unwrap()) {
        let n = norm(&v);
        assert!((n - 1.0).abs() < 1e-5, "norm {n} for {t:?}");
        assert!(v.iter().all(|x| x.is_finite()));
    }
}

#[test]
fn empty_inputs() {
    let e = embedder();
    assert!(e.embed(&[]).unwrap().is_empty());
    let v = e.embed_one("").unwrap();
    assert_eq!(v.len(), 384);
    assert!((norm(&v) - 1.0).abs() < 1e-5);
}

#[test]
fn long_input_is_truncated_not_rejected() {
    let e = embedder();
    let two_thousand = words(2000);
    let longer = format!("{two_thousand} {}", words(1000));
    let a = e.embed_one(&two_thousand).unwrap();
    let b = e.embed_one(&longer).unwrap();
    // Both exceed 256 tokens, so only the common prefix is seen.
    assert!(
        max_abs_diff(&a, &b) < 1e-6,
        "text past max_tokens changed the vector"
    );
    // ...and the prefix that is seen does matter.
    let short = e.embed_one(&words(20)).unwrap();
    assert!(max_abs_diff(&a, &short) > 1e-3);
    // A huge single input (1 MB) is cheap because it is clipped before tokenizing.
    let huge = "x".repeat(1 << 20);
    assert_eq!(e.embed_one(&huge).unwrap().len(), 384);
}

// ---------------------------------------------------------------- errors

/// A temp model dir with symlinks to the good files, minus `skip`.
fn partial_copy(skip: &[&str]) -> tempfile::TempDir {
    let good = require_model().canonicalize().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    for f in ["config.json", "tokenizer.json", "model.safetensors"] {
        if !skip.contains(&f) {
            std::os::unix::fs::symlink(good.join(f), tmp.path().join(f)).unwrap();
        }
    }
    tmp
}

#[test]
fn missing_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("nope");
    match BertEmbedder::load(&dir, base_options()) {
        Err(EmbedError::ModelDirNotFound { path }) => assert_eq!(path, dir),
        other => panic!("expected ModelDirNotFound, got {other:?}"),
    }
}

#[test]
fn missing_files() {
    for f in ["config.json", "tokenizer.json", "model.safetensors"] {
        let tmp = partial_copy(&[f]);
        match BertEmbedder::load(tmp.path(), base_options()) {
            Err(e @ EmbedError::MissingFile { .. }) => {
                let EmbedError::MissingFile { path } = &e else {
                    unreachable!()
                };
                assert!(path.ends_with(f), "{path:?} should name {f}");
                assert!(e.to_string().contains(f), "message names the file: {e}");
            }
            other => panic!("expected MissingFile for {f}, got {other:?}"),
        }
    }
}

#[test]
fn corrupt_config() {
    for (body, why) in [
        ("{ not json", "syntax"),
        (r#"{"hidden_size": 384}"#, "missing fields"),
    ] {
        let tmp = partial_copy(&["config.json"]);
        fs::write(tmp.path().join("config.json"), body).unwrap();
        match BertEmbedder::load(tmp.path(), base_options()) {
            Err(e @ EmbedError::BadConfig { .. }) => {
                assert!(e.to_string().contains("config.json"), "{why}: {e}")
            }
            other => panic!("{why}: expected BadConfig, got {other:?}"),
        }
    }
    // Valid JSON, wrong numbers: 384 is not a multiple of 5 heads.
    let good: serde_json::Value =
        serde_json::from_slice(&fs::read(require_model().join("config.json")).unwrap()).unwrap();
    let mut bad = good.clone();
    bad["num_attention_heads"] = 5.into();
    let tmp = partial_copy(&["config.json"]);
    fs::write(tmp.path().join("config.json"), bad.to_string()).unwrap();
    assert!(matches!(
        BertEmbedder::load(tmp.path(), base_options()),
        Err(EmbedError::BadConfig { .. })
    ));
}

#[test]
fn corrupt_tokenizer() {
    let tmp = partial_copy(&["tokenizer.json"]);
    fs::write(tmp.path().join("tokenizer.json"), "{}").unwrap();
    match BertEmbedder::load(tmp.path(), base_options()) {
        Err(e @ EmbedError::Tokenizer(_)) => assert!(e.to_string().contains("tokenizer.json")),
        other => panic!("expected Tokenizer, got {other:?}"),
    }
}

#[test]
fn truncated_weights() {
    let good = fs::read(require_model().join("model.safetensors")).unwrap();
    // Cut inside the tensor data, and inside the JSON header.
    for cut in [good.len() / 2, 100] {
        let tmp = partial_copy(&["model.safetensors"]);
        fs::write(tmp.path().join("model.safetensors"), &good[..cut]).unwrap();
        match BertEmbedder::load(tmp.path(), base_options()) {
            Err(e @ EmbedError::BadWeights { .. }) => {
                assert!(e.to_string().contains("model.safetensors"), "{e}")
            }
            other => panic!("cut at {cut}: expected BadWeights, got {other:?}"),
        }
    }
}

/// A copy of the model whose weights differ in one byte near the end
/// (inside the last tensor's data): still a valid file that loads, but
/// different weights.
fn changed_weights() -> tempfile::TempDir {
    let mut bytes = fs::read(require_model().join("model.safetensors")).unwrap();
    let i = bytes.len() - 7;
    bytes[i] ^= 0x01;
    let tmp = partial_copy(&["model.safetensors"]);
    fs::write(tmp.path().join("model.safetensors"), &bytes).unwrap();
    tmp
}

#[test]
fn model_id_changes_when_weights_change() {
    let tmp = changed_weights();
    let changed = BertEmbedder::load(tmp.path(), base_options()).unwrap();
    let original = embedder();
    assert_ne!(changed.model_id(), original.model_id());
    assert_ne!(changed.content_sha256(), original.content_sha256());
}

#[test]
fn invalid_options() {
    let dir = require_model();
    for opts in [
        EmbedOptions {
            batch_size: 0,
            ..base_options()
        },
        EmbedOptions {
            max_tokens: 1,
            ..base_options()
        },
        EmbedOptions {
            max_tokens: 100_000,
            ..base_options()
        },
        EmbedOptions {
            threads: Some(0),
            ..base_options()
        },
    ] {
        assert!(
            matches!(
                BertEmbedder::load(&dir, opts.clone()),
                Err(EmbedError::InvalidOptions(_))
            ),
            "{opts:?}"
        );
    }
}

/// Scheduling policy (field 41 of `/proc/self/task/<tid>/stat`) of every
/// thread whose name starts with `prefix`.
#[cfg(target_os = "linux")]
fn policies_of_threads(prefix: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for task in fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.trim_end().starts_with(prefix) {
            continue;
        }
        let stat = fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // Fields after the parenthesised name; policy is field 41 overall,
        // i.e. the 39th after the closing parenthesis (state is field 3).
        let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
        let fields: Vec<&str> = after.split_whitespace().collect();
        out.push(fields[38].parse().unwrap());
    }
    out
}

/// Background embedding (index rebuilds while serving) gives the same
/// vectors as foreground embedding, on idle-class threads of its own.
#[test]
#[cfg(target_os = "linux")]
fn background_embedding_matches_and_runs_in_the_idle_class() {
    let e = embedder();
    let texts: Vec<String> = (0..12).map(|i| words(3 + i * 7)).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let foreground = e.embed(&refs).unwrap();
    let background = e.embed_background(&refs).unwrap();
    for (x, y) in foreground.iter().zip(&background) {
        assert!(max_abs_diff(x, y) < 1e-5);
    }
    let policies = policies_of_threads("oap-embed-bg");
    assert!(!policies.is_empty(), "no background threads were started");
    const SCHED_IDLE: u32 = 5;
    assert!(
        policies.iter().all(|&p| p == SCHED_IDLE),
        "background threads not idle-class: {policies:?}"
    );
    assert!(e.embed_background(&[]).unwrap().is_empty());
}

/// candle-transformers' own `BertModel` over the same files, pooled and
/// normalised like sentence-transformers: the reference the embedder's
/// encoder (fused query/key/value, pre-transposed weights, no mask for an
/// unpadded batch) must reproduce.
///
/// candle-transformers compiles every model it ships, so it is a
/// dev-dependency on x86_64 only: the aarch64 test build (run in an
/// emulated guest) takes the `f32` encoder as its reference instead, which
/// `encoder_matches_candle_bert_model` ties to `BertModel` here and the
/// sentence-transformers reference scores tie to the published model on
/// both architectures.
#[cfg(target_arch = "x86_64")]
fn reference_vectors(texts: &[&str]) -> Vec<Vec<f32>> {
    use candle_core::{DType, Device, Tensor};
    use candle_transformers::models::bert::{BertModel, Config};

    let dir = require_model();
    let cfg: Config = serde_json::from_slice(&fs::read(dir.join("config.json")).unwrap()).unwrap();
    let weights = fs::read(dir.join("model.safetensors")).unwrap();
    let vb =
        candle_nn::VarBuilder::from_slice_safetensors(&weights, DType::F32, &Device::Cpu).unwrap();
    let model = BertModel::load(vb, &cfg).unwrap();
    let mut tokenizer = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    tokenizer.with_padding(None);
    tokenizer
        .with_truncation(Some(tokenizers::TruncationParams {
            max_length: 256,
            ..Default::default()
        }))
        .unwrap();
    texts
        .iter()
        .map(|t| {
            let enc = tokenizer.encode(*t, true).unwrap();
            let ids = Tensor::new(enc.get_ids(), &Device::Cpu)
                .unwrap()
                .unsqueeze(0)
                .unwrap();
            let hidden = model
                .forward(&ids, &ids.zeros_like().unwrap(), None)
                .unwrap();
            let v: Vec<f32> = hidden
                .mean(1)
                .unwrap()
                .squeeze(0)
                .unwrap()
                .to_vec1()
                .unwrap();
            let n = norm(&v).max(1e-12);
            v.iter().map(|x| (f64::from(*x) / n) as f32).collect()
        })
        .collect()
}

/// Off x86_64: the `f32` encoder (see the x86_64 version).
#[cfg(not(target_arch = "x86_64"))]
fn reference_vectors(texts: &[&str]) -> Vec<Vec<f32>> {
    let e = f32_embedder();
    texts.iter().map(|t| e.embed_one(t).unwrap()).collect()
}

fn reference_texts(long: &str) -> [&str; 5] {
    [
        "how many words are in this sentence",
        "convert a png image to pdf",
        "Ünïcödé façade — naïve café 東京",
        "a",
        long,
    ]
}

#[test]
#[cfg(target_arch = "x86_64")]
fn encoder_matches_candle_bert_model() {
    let e = f32_embedder();
    let long = words(300);
    let texts = reference_texts(&long);
    let reference = reference_vectors(&texts);
    // Alone (no padding, no mask) and as one padded batch (with a mask).
    let batch = e.embed(&texts).unwrap();
    let mut worst = 0f32;
    for ((t, r), b) in texts.iter().zip(&reference).zip(&batch) {
        let single = e.embed_one(t).unwrap();
        worst = worst.max(max_abs_diff(&single, r)).max(max_abs_diff(b, r));
        assert!(
            max_abs_diff(&single, r) < 1e-5 && max_abs_diff(b, r) < 1e-5,
            "{t:?} differs from BertModel's vector"
        );
    }
    println!("max |encoder - BertModel| = {worst:e}");
}

/// The default `bfloat16` weights stay within rounding of the reference:
/// every vector points the same way (cosine ≥ 0.999), no coordinate moves
/// by more than 5e-3, and the two precisions really differ (the option is
/// not ignored).
#[test]
fn bf16_weights_stay_within_rounding_of_candle_bert_model() {
    let e = embedder();
    let long = words(300);
    let texts = reference_texts(&long);
    let reference = reference_vectors(&texts);
    let batch = e.embed(&texts).unwrap();
    let (mut lowest, mut worst) = (1f32, 0f32);
    for ((t, r), b) in texts.iter().zip(&reference).zip(&batch) {
        let single = e.embed_one(t).unwrap();
        for v in [&single, b] {
            lowest = lowest.min(cosine(v, r));
            worst = worst.max(max_abs_diff(v, r));
        }
        assert!(
            cosine(&single, r) >= 0.999 && max_abs_diff(&single, r) < 5e-3,
            "{t:?}: cosine {} and max diff {} from BertModel's vector",
            cosine(&single, r),
            max_abs_diff(&single, r)
        );
        assert!(max_abs_diff(&single, b) < 1e-5, "{t:?}: alone vs batch");
    }
    println!("bf16: lowest cosine to BertModel {lowest}, max |diff| {worst:e}");
    assert!(
        worst > 1e-5,
        "bf16 vectors equal the f32 reference: not in effect"
    );
}

/// The compiled-in tool tuning: applied to the weights it was trained from.
fn tuned_embedder() -> &'static BertEmbedder {
    static E: OnceLock<BertEmbedder> = OnceLock::new();
    E.get_or_init(|| {
        let opts = EmbedOptions {
            tool_tuning: true,
            ..EmbedOptions::default()
        };
        BertEmbedder::load(&require_model(), opts).expect("load real model")
    })
}

#[test]
fn tool_tuning_is_named_in_the_model_id_and_moves_the_vectors() {
    let tuned = tuned_embedder();
    let base = embedder();
    assert_eq!(tuned.calibration(), Calibration::ToolTuned);
    assert_eq!(base.calibration(), Calibration::General);
    // Same files, so the same digest; the id tells the two apart, so an
    // index embedded with one is re-embedded with the other.
    assert_eq!(tuned.content_sha256(), base.content_sha256());
    let full = base.content_sha256();
    let name = tuned
        .model_dir()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .to_string();
    // The factors' digest is in the id too: new factors re-embed an index.
    let factors = fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tuning/all-MiniLM-L6-v2-tools.safetensors"),
    )
    .unwrap();
    let factors_hex: String = Sha256::digest(&factors)[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        tuned.model_id(),
        format!("{name}+bf16+tools.{factors_hex}@{}", &full[..16])
    );
    let text = "what's the weather like in Paris tomorrow";
    let (t, b) = (
        tuned.embed_one(text).unwrap(),
        base.embed_one(text).unwrap(),
    );
    assert!((norm(&t) - 1.0).abs() < 1e-3);
    assert!(
        cosine(&t, &b) < 0.999,
        "tuned and base vectors are the same: the tuning was not merged"
    );
    // A low-rank update moves the vectors, it does not replace the model.
    assert!(
        cosine(&t, &b) > 0.7,
        "tuned vector unrelated to the base one"
    );
}

#[test]
fn tool_tuning_brings_a_request_nearer_its_tool_than_the_base_model_does() {
    // Public-API style: a request and the description row the daemon
    // embeds for its tool, against a near miss of the same domain.
    let request = "Tell me the water quality of the lake near the cabin.";
    let tool =
        "Retrieve water quality information. Inputs: location (The location of the water body).";
    let other = "Retrieve weather information. Inputs: location (The city or place).";
    let margin = |e: &BertEmbedder| {
        let v = e.embed(&[request, tool, other]).unwrap();
        cosine(&v[0], &v[1]) - cosine(&v[0], &v[2])
    };
    let (tuned, base) = (margin(tuned_embedder()), margin(embedder()));
    assert!(tuned > 0.0, "tuned model prefers the wrong tool ({tuned})");
    assert!(
        tuned > base,
        "the tuning does not separate the tools better: tuned margin {tuned}, base {base}"
    );
}

#[test]
fn tool_tuning_is_on_by_default() {
    assert!(EmbedOptions::default().tool_tuning);
}

#[test]
fn tool_tuning_does_not_lift_a_request_toward_a_tool_that_does_not_fit_it() {
    // What "nothing fits" is judged by: the tuning was trained to keep
    // unrelated request/tool pairs at the plain model's cosine, where
    // tuning without that constraint lifted them (0.19 -> 0.25 here).
    let request = "book a table for two at an italian restaurant tonight";
    let tool = "Format text into aligned columns or a table. Reads from standard input \
                and arranges text into neatly spaced columns.";
    let similarity = |e: &BertEmbedder| {
        let v = e.embed(&[request, tool]).unwrap();
        cosine(&v[0], &v[1])
    };
    let (tuned, base) = (similarity(tuned_embedder()), similarity(embedder()));
    assert!(
        tuned <= base + 0.02,
        "the tuning lifts an unrelated pair: tuned {tuned}, base {base}"
    );
}

#[test]
fn tool_tuning_leaves_other_weights_untouched() {
    // Weights of the same shape but not the ones it was trained from: the
    // update would only damage them, so they load untuned.
    let tmp = changed_weights();
    let opts = EmbedOptions {
        tool_tuning: true,
        ..EmbedOptions::default()
    };
    let other = BertEmbedder::load(tmp.path(), opts).unwrap();
    assert_eq!(other.calibration(), Calibration::General);
    assert!(!other.model_id().contains("+tools"), "{}", other.model_id());
    let text = "set a timer for ten minutes";
    let (o, b) = (
        other.embed_one(text).unwrap(),
        embedder().embed_one(text).unwrap(),
    );
    assert!(
        max_abs_diff(&o, &b) < 1e-3,
        "untuned load differs from the base model"
    );
}
