//! Document vectors recorded on one machine and replayed on another: how
//! the arm64 guest (`cargo xtask cross --test`, emulated, where the real
//! model takes one to eight minutes to embed a test's catalog) runs this
//! suite whole.
//!
//! Every engine of these tests embeds through [`crate::engine`]'s real or
//! plain model, and that model is wrapped here:
//!
//! - With `OAPD_TEST_RECORD_VECTORS=DIR` (set by the xtask on the x86_64
//!   host before the guest boots), each text embedded as a *document*
//!   ([`Embedder::embed`], [`Embedder::embed_background`]) is appended,
//!   with its vector and the model's id, to `DIR/`[`FILE`].
//! - With `OAPD_TEST_REPLAY_VECTORS=DIR` (set in the guest), a document
//!   text recorded for the same model id gets the recorded vector, and only
//!   the others are embedded.
//!
//! Queries ([`Embedder::embed_query`], [`Embedder::embed_queries`]) are
//! never recorded nor replayed: the guest embeds every query with its own
//! model (candle on NEON), then BM25, the similarity kernels, fusion,
//! the decisions, the query cache and the request rows all run on arm64
//! against the x86_64 document vectors. The tests assert rankings and
//! decisions, which hold across the two architectures' float rounding.
//!
//! The wrapper sits *under* the tests' own embedders ([`crate::engine`]'s
//! `Counting` and the others), so what a test counts (texts asked for,
//! rows reused from a previous index) is the same with or without a
//! recording: only where a document's vector comes from changes. That is
//! why this is not the engine's vector donors, which would change those
//! counts. A test-only mechanism: the product never reads these variables.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use oap_embed::{Calibration, EmbedError, Embedder};

/// The recording's file in the directory the variables name.
pub(crate) const FILE: &str = "document-vectors.bin";
/// Where the host records.
pub(crate) const RECORD_VAR: &str = "OAPD_TEST_RECORD_VECTORS";
/// Where the guest replays from.
pub(crate) const REPLAY_VAR: &str = "OAPD_TEST_REPLAY_VECTORS";

/// What the wrapper does with document texts.
enum Mode {
    /// Embeds them, as without the wrapper.
    Off,
    /// Embeds them and appends each new text's vector to the file.
    Record {
        file: Mutex<(BufWriter<fs::File>, HashSet<String>)>,
    },
    /// Answers the recorded texts; embeds the rest.
    Replay { vectors: HashMap<String, Vec<f32>> },
}

/// An embedder whose document vectors may come from a recording.
pub(crate) struct Recorded<E> {
    inner: E,
    mode: Mode,
}

impl<E: Embedder> Recorded<E> {
    /// `inner`, recording or replaying as the environment says.
    pub(crate) fn from_env(inner: E) -> Recorded<E> {
        if let Some(dir) = std::env::var_os(RECORD_VAR) {
            Recorded::recording(inner, &PathBuf::from(dir))
        } else if let Some(dir) = std::env::var_os(REPLAY_VAR) {
            Recorded::replaying(inner, &PathBuf::from(dir))
        } else {
            Recorded {
                inner,
                mode: Mode::Off,
            }
        }
    }

    /// Appends to `dir/FILE` (several models share one file).
    pub(crate) fn recording(inner: E, dir: &Path) -> Recorded<E> {
        fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let path = dir.join(FILE);
        let file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Recorded {
            inner,
            mode: Mode::Record {
                file: Mutex::new((BufWriter::new(file), HashSet::new())),
            },
        }
    }

    /// The vectors `dir/FILE` holds for `inner`'s model id.
    pub(crate) fn replaying(inner: E, dir: &Path) -> Recorded<E> {
        let path = dir.join(FILE);
        let bytes = fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} ({REPLAY_VAR} names a directory without a recording)",
                path.display()
            )
        });
        let vectors = read_records(&bytes, inner.model_id(), inner.dim())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Recorded {
            inner,
            mode: Mode::Replay { vectors },
        }
    }

    /// Document texts through `embed` (the foreground or the background
    /// one), recorded or replayed.
    fn documents(
        &self,
        texts: &[&str],
        embed: impl Fn(&[&str]) -> Result<Vec<Vec<f32>>, EmbedError>,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        match &self.mode {
            Mode::Off => embed(texts),
            Mode::Record { file } => {
                let vectors = embed(texts)?;
                let mut guard = file.lock().unwrap();
                let (writer, written) = &mut *guard;
                for (text, vector) in texts.iter().zip(&vectors) {
                    if written.insert((*text).to_owned()) {
                        write_record(writer, self.inner.model_id(), text, vector);
                    }
                }
                // Flushed per batch: the test binary exits without dropping
                // statics, and a test may abort the process.
                writer.flush().unwrap();
                Ok(vectors)
            }
            Mode::Replay { vectors } => {
                let missing: Vec<&str> = texts
                    .iter()
                    .copied()
                    .filter(|t| !vectors.contains_key(*t))
                    .collect();
                let mut fresh = if missing.is_empty() {
                    Vec::new()
                } else {
                    embed(&missing)?
                }
                .into_iter();
                texts
                    .iter()
                    .map(|text| match vectors.get(*text) {
                        Some(vector) => Ok(vector.clone()),
                        None => fresh.next().ok_or_else(|| {
                            EmbedError::Inference("the model returned too few vectors".into())
                        }),
                    })
                    .collect()
            }
        }
    }
}

impl<E: Embedder> Embedder for Recorded<E> {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.documents(texts, |t| self.inner.embed(t))
    }
    fn embed_background(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.documents(texts, |t| self.inner.embed_background(t))
    }
    fn embed_queries(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.inner.embed_queries(texts)
    }
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.inner.embed_query(text)
    }
    fn calibration(&self) -> Calibration {
        self.inner.calibration()
    }
}

/// One record: model id, text, vector; lengths as u32 and floats little
/// endian.
fn write_record(out: &mut impl Write, model_id: &str, text: &str, vector: &[f32]) {
    let mut bytes = Vec::with_capacity(12 + model_id.len() + text.len() + 4 * vector.len());
    for field in [model_id.as_bytes(), text.as_bytes()] {
        bytes.extend_from_slice(&u32::try_from(field.len()).unwrap().to_le_bytes());
        bytes.extend_from_slice(field);
    }
    bytes.extend_from_slice(&u32::try_from(vector.len()).unwrap().to_le_bytes());
    for value in vector {
        bytes.extend_from_slice(&value.to_le_bytes());
    }
    out.write_all(&bytes).unwrap();
}

/// The records of `model_id` in `bytes`; a record of that model with
/// another dimension, or a cut record, is an error.
fn read_records(
    mut bytes: &[u8],
    model_id: &str,
    dim: usize,
) -> Result<HashMap<String, Vec<f32>>, String> {
    fn take<'a>(bytes: &mut &'a [u8], len: usize) -> Result<&'a [u8], String> {
        if bytes.len() < len {
            return Err(format!(
                "a record is cut short ({} bytes left)",
                bytes.len()
            ));
        }
        let (head, rest) = bytes.split_at(len);
        *bytes = rest;
        Ok(head)
    }
    fn length(bytes: &mut &[u8]) -> Result<usize, String> {
        let raw = take(bytes, 4)?;
        Ok(u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]) as usize)
    }
    let mut vectors = HashMap::new();
    while !bytes.is_empty() {
        let len = length(&mut bytes)?;
        let model = take(&mut bytes, len)?;
        let len = length(&mut bytes)?;
        let text = String::from_utf8(take(&mut bytes, len)?.to_vec())
            .map_err(|e| format!("a text that is not UTF-8: {e}"))?;
        let len = length(&mut bytes)?;
        let raw = take(&mut bytes, 4 * len)?;
        if model != model_id.as_bytes() {
            continue;
        }
        if len != dim {
            return Err(format!(
                "{model_id}: a vector of {len} values, the model has {dim}"
            ));
        }
        let vector = raw
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        vectors.insert(text, vector);
    }
    Ok(vectors)
}

/// A model that makes a vector from the text's length, counting its calls
/// by kind.
struct Fake {
    id: &'static str,
    documents: std::sync::atomic::AtomicUsize,
    queries: std::sync::atomic::AtomicUsize,
    /// Added to every value: another "machine".
    offset: f32,
}

impl Fake {
    fn new(id: &'static str, offset: f32) -> Fake {
        Fake {
            id,
            documents: Default::default(),
            queries: Default::default(),
            offset,
        }
    }
    fn vector(&self, text: &str) -> Vec<f32> {
        vec![text.len() as f32 + self.offset, 1.0 + self.offset]
    }
}

impl Embedder for Fake {
    fn model_id(&self) -> &str {
        self.id
    }
    fn dim(&self) -> usize {
        2
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.documents
            .fetch_add(texts.len(), std::sync::atomic::Ordering::SeqCst);
        Ok(texts.iter().map(|t| self.vector(t)).collect())
    }
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.queries
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(self.vector(text))
    }
}

#[test]
fn recorded_documents_are_replayed_and_queries_always_embedded() {
    use std::sync::atomic::Ordering::SeqCst;
    let dir = tempfile::tempdir().unwrap();
    let host = Recorded::recording(Fake::new("model@1", 0.0), dir.path());
    host.embed(&["grep a file", "count words"]).unwrap();
    host.embed_background(&["count words", "list a directory"])
        .unwrap();
    host.embed_query("find the lines").unwrap();
    // Another model's records in the same file are never taken.
    Recorded::recording(Fake::new("model@2", 0.0), dir.path())
        .embed(&["a text of another model"])
        .unwrap();

    // The guest's model gives other values, so a replayed vector is told
    // from an embedded one.
    let guest = Recorded::replaying(Fake::new("model@1", 0.5), dir.path());
    let vectors = guest
        .embed(&["list a directory", "a new text", "grep a file"])
        .unwrap();
    assert_eq!(
        vectors,
        vec![vec![16.0, 1.0], vec![10.5, 1.5], vec![11.0, 1.0]],
        "recorded texts get the host's vectors, in order; the new one is embedded"
    );
    assert_eq!(guest.inner.documents.load(SeqCst), 1, "only the new text");
    assert_eq!(
        guest.embed_query("find the lines").unwrap(),
        vec![14.5, 1.5],
        "a query is embedded by the guest's model even when the host embedded it"
    );
    assert_eq!(guest.inner.queries.load(SeqCst), 1);
    assert_eq!(
        guest.embed(&["a text of another model"]).unwrap(),
        vec![vec![23.5, 1.5]]
    );
}

#[test]
fn a_cut_or_mismatched_recording_is_a_clear_error() {
    let mut bytes = Vec::new();
    write_record(&mut bytes, "model@1", "text", &[1.0, 2.0, 3.0]);
    let err = read_records(&bytes, "model@1", 2).unwrap_err();
    assert!(err.contains("3 values, the model has 2"), "{err}");
    assert_eq!(read_records(&bytes, "other", 2).unwrap().len(), 0);
    let err = read_records(&bytes[..bytes.len() - 1], "model@1", 3).unwrap_err();
    assert!(err.contains("cut short"), "{err}");
}
