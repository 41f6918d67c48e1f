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
//!
//! # Architecture
//!
//! `oap-embed-candle` is the model: its own
//! BERT encoder on candle's tensors (`encoder.rs`: the network of
//! candle-transformers' `BertModel`, with query/key/value fused into one
//! matmul; `config.rs` reads `config.json` with that crate's fields, so the
//! daemon does not compile candle-transformers, only the x86_64 test that
//! compares the encoder with its `BertModel` does). Every `embed` call, one text or many, runs the *packed* pass: the
//! texts' real token rows back to back in one `[tokens, hidden]` matrix, no
//! padding and no mask; embeddings, layer norms, linear layers and GELU run
//! over all rows at once (one weight stream per batch), attention runs per
//! text over its own rows (`attention.rs`: slice loops under runtime SIMD,
//! (text, head) pairs across the pool), and mean pooling per text. The former
//! padded pass (`embed_padded`, every text padded to the batch's longest, with
//! an attention mask) stays only for side-by-side benchmarks. The linear
//! layers run on `kernel.rs`: weights repacked once at load into
//! panels of two SIMD registers' width (AVX-512 where the CPU has it, else
//! AVX2, NEON on the boards), a small-row kernel on safe
//! runtime-dispatched SIMD (`pulp`) split across the pool's threads, bias and
//! GELU (a vectorised rational `erf`) in the same pass. By default the panels
//! hold `bfloat16` weights, two per 32-bit lane, widened in registers by a
//! mask and a shift (`embedding.weights: bf16`): a query streams every weight
//! once and is bound by that stream, so half the bytes is about a quarter less
//! CPU per query; `f32` keeps the checkpoint bit for bit. The crate takes any
//! sentence-transformers BERT directory (default all-MiniLM-L6-v2) and adds L2
//! normalisation and `embed_background`, which runs
//! rebuild batches of 4 on a pool of its own (cores − 1 threads) whose threads
//! sit in the idle scheduling class, so a query's embedding preempts a rebuild
//! at once. `weights.rs` reads the safetensors file one tensor at a time
//! (positional reads after a checked header), so loading holds about one copy
//! of the model, never the file beside it; the model id's hash reads the file
//! in chunks on a second thread. The word-embedding table (47 of the model's
//! 91 MB) is never loaded: a pass reads the rows of its token ids from the
//! file (`RowsOnDisk`), so the table lives in the kernel's page cache, not in
//! the daemon's heap. `tuning.rs` holds a tool-retrieval tuning of
//! all-MiniLM-L6-v2 (`embedding.tool_tuning`, on by default): a rank-16
//! LoRA of every linear layer, 1.3 MB of f16 factors compiled into the
//! binary (`tuning/`, trained by `bench/train_encoder.py` on public request →
//! tool pairs), added to each weight as `weights.rs` hands it over, so the
//! load still holds one copy of the model. It applies only to the files it
//! was trained from (their digest, checked once the load has hashed them;
//! other weights load again untuned). The loaded model reports what it is
//! (`Embedder::calibration`), and the engine's default thresholds follow
//! that report, not the configuration: the ones refitted for the tuning
//! (`Scoring::tool_tuned`) only when the tuning was merged.
//!
//! **Architecture Invariant.** Only `oap-embed-candle` compiles candle and
//! tokenizers, and only the binary depends on it: the engine, the crawler and
//! the bridge build and test against the trait. `model_id` is derived from the
//! content of config, tokenizer and weights (sha256) and names the precision
//! and the tuning (`all-MiniLM-L6-v2+bf16+tools@<hash>`), so vectors from
//! different weights, precisions or tunings are never mixed in one index. At `f32` the encoder's vectors
//! agree with `BertModel`'s to 1e-5, at `bf16` within a cosine of 0.9999
//! (tests run both against it). A text's result never depends on what it
//! was batched with: in the packed pass no kernel mixes rows of different
//! texts (the linear kernel's per-row sums run in one order whatever the row
//! tiling, layer norm and softmax are per row, attention per text), so a text
//! gets the same bits alone, in any batch, in any order (a test checks bit
//! equality); the padded pass agrees to 1e-5. Background and foreground
//! results are identical.
//! Inputs are clipped before tokenizing, so a huge text costs bounded time.

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
