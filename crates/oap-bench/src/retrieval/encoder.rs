//! The encoder as the daemon loads it, and an embedding cache in front of
//! it so that reruns over a large corpus only embed what changed.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use oap_discovery::document::row_key;
use oap_embed::{Calibration, EmbedError, Embedder};
use oap_embed_candle::{BertEmbedder, EmbedOptions};

/// An embedder that remembers every vector, optionally on disk, so that
/// reruns over a large corpus only embed what changed.
pub(crate) struct Cached {
    inner: Arc<dyn Embedder>,
    vectors: Mutex<HashMap<[u8; 16], Vec<f32>>>,
}

impl Cached {
    pub(crate) fn load(inner: Arc<dyn Embedder>, file: Option<&PathBuf>) -> Cached {
        let mut vectors = HashMap::new();
        let dim = inner.dim();
        if let Some(bytes) = file.and_then(|f| std::fs::read(f).ok()) {
            for entry in bytes.chunks_exact(16 + 4 * dim) {
                let mut key = [0u8; 16];
                key.copy_from_slice(&entry[..16]);
                let vector = entry[16..]
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect();
                vectors.insert(key, vector);
            }
        }
        Cached {
            inner,
            vectors: Mutex::new(vectors),
        }
    }

    pub(crate) fn save(&self, file: &PathBuf) -> std::io::Result<()> {
        let vectors = self.vectors.lock().map_err(|_| std::io::ErrorKind::Other)?;
        let mut out = std::io::BufWriter::new(std::fs::File::create(file)?);
        for (key, vector) in vectors.iter() {
            out.write_all(key)?;
            for x in vector {
                out.write_all(&x.to_le_bytes())?;
            }
        }
        out.flush()
    }
}

impl Embedder for Cached {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }
    fn calibration(&self) -> Calibration {
        self.inner.calibration()
    }
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed_side(texts, false)
    }
    fn embed_queries(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed_side(texts, true)
    }
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.embed_queries(&[text])?
            .pop()
            .ok_or_else(|| EmbedError::Inference("model returned no embedding".into()))
    }
}

impl Cached {
    /// Texts as documents, or as requests (`query`): a model with prompts
    /// embeds the two differently, so they are cached apart.
    fn embed_side(&self, texts: &[&str], query: bool) -> Result<Vec<Vec<f32>>, EmbedError> {
        let id = if query {
            format!("{}\u{0}query", self.inner.model_id())
        } else {
            self.inner.model_id().to_owned()
        };
        let keys: Vec<[u8; 16]> = texts.iter().map(|t| row_key(&id, t)).collect();
        let missing: Vec<&str> = {
            let vectors = self.vectors.lock().map_err(|_| poisoned())?;
            texts
                .iter()
                .zip(&keys)
                .filter(|(_, k)| !vectors.contains_key(*k))
                .map(|(t, _)| *t)
                .collect()
        };
        let fresh = if missing.is_empty() {
            Vec::new()
        } else if query {
            self.inner.embed_queries(&missing)?
        } else {
            self.inner.embed(&missing)?
        };
        let mut vectors = self.vectors.lock().map_err(|_| poisoned())?;
        for (text, vector) in missing.iter().zip(fresh) {
            vectors.insert(row_key(&id, text), vector);
        }
        keys.iter()
            .map(|k| vectors.get(k).cloned().ok_or_else(poisoned))
            .collect()
    }
}

pub(super) fn poisoned() -> EmbedError {
    EmbedError::Inference("embedding cache poisoned".into())
}

/// The encoder as the daemon loads it: the compiled-in tool tuning merged,
/// unless `plain` (`embedding.tool_tuning: false`).
pub(crate) fn load_encoder(dir: &std::path::Path, plain: bool) -> anyhow::Result<BertEmbedder> {
    // A bare model name (`--model multilingual-e5-small`) is the directory
    // `cargo xtask fetch-model --model NAME` installs.
    let named = std::path::Path::new("models").join(dir);
    let dir = if !dir.exists() && dir.components().count() == 1 && named.is_dir() {
        named.as_path()
    } else {
        dir
    };
    BertEmbedder::load(
        dir,
        EmbedOptions {
            tool_tuning: !plain,
            ..EmbedOptions::default()
        },
    )
    .map_err(|e| anyhow::anyhow!("model: {e}"))
}
