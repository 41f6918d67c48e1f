//! Sentence embeddings for OAP manifest discovery: the interface.
//!
//! The daemon ranks manifests by cosine similarity between a task description
//! and each manifest's text. This crate holds what the rest of the workspace
//! needs to talk about an embedding model without compiling one: the
//! [`Embedder`] trait, [`cosine`], the [`EmbedError`] type, and the helpers
//! that let background embedding yield to queries
//! ([`lower_current_thread_priority`], [`return_freed_memory`]), and
//! [`Coalescing`], which embeds concurrent queries in shared forward passes.
//!
//! The real model (a sentence-transformers BERT on candle) lives in
//! `oap-embed-candle`; this crate depends on no tensor library, so the engine
//! and its tests can use a fake embedder and the model can be swapped without
//! touching the index code.
//!
//! # Architecture
//!
//! `oap-embed` is the interface: the `Embedder` trait (with `calibration`:
//! which score scale the loaded weights' cosines are on, so thresholds follow
//! the model, not its configuration), `cosine`, `EmbedError`,
//! and the helpers that let background embedding yield to queries
//! (`lower_current_thread_priority`: `SCHED_IDLE`; `return_freed_memory`:
//! `malloc_trim` after a rebuild), and `Coalescing`, a wrapper generic over
//! any `Embedder` that embeds the `embed_one` calls arriving while a pass runs
//! together in the next pass (leader/follower on a mutex and condvar: no
//! thread, no timer, a lone call runs at once; a pass holds at most 4 KiB of
//! input in all; a failed or panicking batch is
//! redone text by text, so an error reaches only its own caller; off in the
//! daemon unless `discovery.coalesce_queries` is set).

mod coalesce;
mod error;
mod priority;

pub use coalesce::{CoalesceStats, Coalescing, COALESCE_BYTE_BUDGET, DEFAULT_COALESCE_BATCH};
pub use error::EmbedError;
pub use priority::{lower_current_thread_priority, return_freed_memory};

/// A text-to-vector model.
///
/// `Send + Sync` because the daemon shares one loaded model between request
/// handlers; loading it once per request would cost ~100 ms and ~90 MB.
pub trait Embedder: Send + Sync {
    /// Identity of the model weights; stored in the index so vectors from
    /// different models are never mixed.
    fn model_id(&self) -> &str;

    /// Length of every vector returned by [`Embedder::embed`].
    fn dim(&self) -> usize;

    /// L2-normalised sentence embeddings, one per input, in order. Batches
    /// internally, so callers may pass any number of texts.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;

    /// Like [`Embedder::embed`], for work nobody is waiting on (index
    /// rebuilds while serving): implementations run it at a priority that
    /// lets query embeddings go first. Same results as `embed`.
    fn embed_background(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed(texts)
    }

    /// Embeds a single text (a query, typically).
    fn embed_one(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.embed(&[text])?
            .pop()
            .ok_or_else(|| EmbedError::Inference("model returned no embedding".into()))
    }

    /// Embeddings of requests, the side that searches: a model trained
    /// with a query prompt (multilingual-e5's `query: `) adds it here and
    /// its document prompt in [`Embedder::embed`]. Models without such
    /// prompts embed both sides alike, which the default does.
    fn embed_queries(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed(texts)
    }

    /// One request, as [`Embedder::embed_queries`] embeds it. The default
    /// goes through [`Embedder::embed_one`], so a model without prompts
    /// serves a request exactly as before.
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.embed_one(text)
    }

    /// Which calibration of the "nothing fits" thresholds this model's
    /// cosines follow. The weights that actually loaded decide it, not the
    /// configuration that asked for them: a requested tuning that does not
    /// fit the model is not applied, and its thresholds must not be either.
    fn calibration(&self) -> Calibration {
        Calibration::General
    }
}

/// The score scale a model's cosines are on, which the discovery engine's
/// calibrated thresholds follow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Calibration {
    /// A general-purpose sentence encoder (the plain model).
    #[default]
    General,
    /// The encoder with the tool-retrieval tuning merged into its weights:
    /// requests sit nearer their tools, and also nearer tools that do not
    /// fit, so the thresholds are higher.
    ToolTuned,
    /// multilingual-e5-small with its `query: ` / `passage: ` prompts:
    /// its cosines crowd into a narrow high band (unrelated texts still
    /// score about 0.7), so it has thresholds of its own.
    MultilingualE5,
}

/// A shared embedder is an embedder (so a wrapper such as [`Coalescing`]
/// can hold an `Arc<dyn Embedder>`); every method forwards, overrides
/// included.
impl<E: Embedder + ?Sized> Embedder for std::sync::Arc<E> {
    fn model_id(&self) -> &str {
        (**self).model_id()
    }

    fn dim(&self) -> usize {
        (**self).dim()
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        (**self).embed(texts)
    }

    fn embed_background(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        (**self).embed_background(texts)
    }

    fn embed_one(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        (**self).embed_one(text)
    }

    fn embed_queries(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        (**self).embed_queries(texts)
    }

    fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        (**self).embed_query(text)
    }

    fn calibration(&self) -> Calibration {
        (**self).calibration()
    }
}

/// Cosine similarity of two vectors. For the L2-normalised vectors this crate
/// returns it equals the dot product; the division keeps it correct for
/// arbitrary inputs (tests, other embedders). Returns 0 for zero vectors.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let (mut dot, mut na, mut nb) = (0f64, 0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        dot += f64::from(*x) * f64::from(*y);
        na += f64::from(*x) * f64::from(*x);
        nb += f64::from(*y) * f64::from(*y);
    }
    let denom = (na * nb).sqrt();
    if denom == 0.0 {
        0.0
    } else {
        (dot / denom) as f32
    }
}
