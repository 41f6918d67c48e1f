//! The candle BERT embedder: [`BertEmbedder`] implements
//! [`oap_embed::Embedder`] with a local sentence-transformers model
//! (all-MiniLM-L6-v2 by default) on candle's CPU backend, so that no network
//! and no Python are needed on the edge board.
//!
//! This is the only crate that compiles candle and tokenizers. The engine
//! (`oap-discovery`) and everything else see the [`oap_embed::Embedder`]
//! trait only; the daemon builds a [`BertEmbedder`] where it loads the model
//! and hands it over as that trait, and tests use fake embedders without
//! compiling any of this.

mod attention;
mod bert;
mod config;
mod encoder;
mod kernel;
mod recipe;
mod tuning;
mod weights;

pub use bert::{BertEmbedder, EmbedOptions};
pub use kernel::WeightPrecision;
