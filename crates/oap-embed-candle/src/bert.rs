//! [`BertEmbedder`]: a sentence-transformers BERT model on candle's CPU backend.
//!
//! Pipeline (the same as sentence-transformers' `Transformer -> Pooling(mean)
//! -> Normalize` for all-MiniLM-L6-v2, so scores match its published numbers):
//! tokenize with truncation, run the BERT encoder (`encoder.rs`, the network of
//! candle-transformers' `BertModel`) over the batch's token rows packed back
//! to back, average each text's own token vectors, divide by the L2 norm.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::config::BertConfig;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use sha2::{Digest, Sha256};
use tokenizers::{Encoding, Tokenizer, TruncationParams};

use oap_embed::{Calibration, EmbedError, Embedder};

use crate::encoder::{weight_prefix, Encoder};
use crate::kernel::WeightPrecision;
use crate::recipe::{Pooling, Recipe};
use crate::tuning::{id_marker, ToolTuning, Tuned, TRAINED_FOR_SHA256};
use crate::weights::WeightsFile;
use candle_nn::var_builder::SimpleBackend as _;

/// File names of a sentence-transformers model directory, in the order they are
/// hashed into the model id.
pub(crate) const CONFIG_FILE: &str = "config.json";
pub(crate) const TOKENIZER_FILE: &str = "tokenizer.json";
pub(crate) const WEIGHTS_FILE: &str = "model.safetensors";

/// Cap on input bytes per token budget before tokenizing. Truncation to
/// `max_tokens` happens after tokenization, so without a cap a multi-megabyte
/// request body would be normalised and word-pieced in full only to be thrown
/// away. 512 bytes per token is far above what real text needs (WordPiece
/// emits at least one token per ~100 characters, even for unknown words), so the
/// cap never changes the result for ordinary input.
const MAX_INPUT_BYTES_PER_TOKEN: usize = 512;

/// Texts per forward pass for background embedding. A forward pass holds
/// activations for the whole batch (the widest, the feed-forward layer's,
/// is tokens × 1536 floats: ~25 MB for 16 texts of 256 tokens), and a
/// rebuild runs beside a serving daemon with a memory limit; smaller batches
/// cost little speed and also let a preempted rebuild resume sooner.
const BACKGROUND_BATCH_SIZE: usize = 4;

/// Tuning knobs for [`BertEmbedder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbedOptions {
    /// Tokens per text, including `[CLS]` and `[SEP]`; longer texts are
    /// truncated. 256 is all-MiniLM-L6-v2's `max_seq_length` (what
    /// sentence-transformers uses), so scores match the reference.
    pub max_tokens: usize,
    /// Texts per forward pass. A pass packs its texts' tokens without
    /// padding, so larger batches only amortise the weight stream and
    /// per-call overhead (the gain flattens past ~8 short texts) while
    /// holding more activations.
    pub batch_size: usize,
    /// Worker threads for inference. `None` uses candle's own pool, sized by
    /// `RAYON_NUM_THREADS` or else the number of physical cores. `Some(n)` runs
    /// inference in a dedicated rayon pool of `n` threads, which keeps the
    /// embedder from starving other work on a small board.
    ///
    /// Caveat: candle also sizes its matmul work split and a small internal
    /// spin pool for element-wise ops from `RAYON_NUM_THREADS` /
    /// `CANDLE_NUM_THREADS`, read from the environment. For a hard cap set
    /// `RAYON_NUM_THREADS=n` in the service environment as well (systemd
    /// `Environment=`); a library cannot set it safely once threads exist.
    pub threads: Option<usize>,
    /// How the linear layers keep their weights: `bfloat16` (the default,
    /// a quarter less CPU per query) or the checkpoint's `f32`. Part of
    /// [`Embedder::model_id`], so an index built at one precision is
    /// re-embedded at the other.
    pub weights: WeightPrecision,
    /// Merge the compiled-in tool-retrieval tuning into the weights
    /// (`tuning.rs`; on by default). It applies only to the
    /// all-MiniLM-L6-v2 files it was trained from; any other model
    /// directory loads as it is. Part of [`Embedder::model_id`]
    /// (`+tools.<digest of the factors>`) when applied.
    pub tool_tuning: bool,
}

impl Default for EmbedOptions {
    fn default() -> Self {
        Self {
            max_tokens: 256,
            batch_size: 16,
            threads: None,
            weights: WeightPrecision::default(),
            tool_tuning: true,
        }
    }
}

/// Sentence embedder: a BERT encoder on candle's CPU backend (F32).
pub struct BertEmbedder {
    model: Encoder,
    tokenizer: Tokenizer,
    device: Device,
    dim: usize,
    pad_id: u32,
    model_id: String,
    content_sha256: String,
    /// The tool tuning was merged into the weights.
    tool_tuned: bool,
    /// Pooling, prompts and normalisation (`recipe.rs`).
    recipe: Recipe,
    dir: PathBuf,
    opts: EmbedOptions,
    pool: Option<rayon::ThreadPool>,
    /// Idle-class threads for [`Embedder::embed_background`], started on
    /// first use (a daemon that never rebuilds never starts them).
    background: std::sync::OnceLock<Result<rayon::ThreadPool, String>>,
}

impl fmt::Debug for BertEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BertEmbedder")
            .field("model_id", &self.model_id)
            .field("dim", &self.dim)
            .field("dir", &self.dir)
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

impl BertEmbedder {
    /// Loads a sentence-transformers BERT directory holding `config.json`,
    /// `tokenizer.json` and `model.safetensors`.
    ///
    /// The weights are read one tensor at a time (`weights.rs`) and the
    /// linear layers' tensors are dropped once packed, so loading peaks at
    /// about one copy of the model; a second thread hashes the files (for
    /// [`Embedder::model_id`]) in chunks meanwhile.
    pub fn load(dir: &Path, opts: EmbedOptions) -> Result<Self, EmbedError> {
        let started = Instant::now();
        if opts.batch_size == 0 {
            return Err(EmbedError::InvalidOptions("batch_size must be >= 1".into()));
        }
        if opts.max_tokens < 2 {
            return Err(EmbedError::InvalidOptions(
                "max_tokens must be >= 2 ([CLS] and [SEP])".into(),
            ));
        }
        if opts.threads == Some(0) {
            return Err(EmbedError::InvalidOptions("threads must be >= 1".into()));
        }
        if !dir.is_dir() {
            return Err(EmbedError::ModelDirNotFound {
                path: dir.to_path_buf(),
            });
        }
        // Canonical path so that `models/x/.` and a symlink give the same name.
        let dir = dir.canonicalize().map_err(|source| EmbedError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let config_path = dir.join(CONFIG_FILE);
        let tokenizer_path = dir.join(TOKENIZER_FILE);
        let weights_path = dir.join(WEIGHTS_FILE);

        let config_bytes = read_file(&config_path)?;
        let cfg: BertConfig =
            serde_json::from_slice(&config_bytes).map_err(|e| EmbedError::BadConfig {
                path: config_path.clone(),
                reason: e.to_string(),
            })?;
        validate_config(&cfg).map_err(|reason| EmbedError::BadConfig {
            path: config_path.clone(),
            reason,
        })?;
        if opts.max_tokens > cfg.max_position_embeddings {
            return Err(EmbedError::InvalidOptions(format!(
                "max_tokens {} exceeds the model's max_position_embeddings {}",
                opts.max_tokens, cfg.max_position_embeddings
            )));
        }
        let pad_id = u32::try_from(cfg.pad_token_id).map_err(|_| EmbedError::BadConfig {
            path: config_path.clone(),
            reason: format!("pad_token_id {} does not fit in u32", cfg.pad_token_id),
        })?;

        let recipe = Recipe::load(&dir)?;
        let tokenizer_bytes = read_file(&tokenizer_path)?;
        let mut tokenizer = Tokenizer::from_bytes(&tokenizer_bytes).map_err(|e| {
            EmbedError::Tokenizer(format!("cannot load {}: {e}", tokenizer_path.display()))
        })?;
        // Upstream tokenizer.json files often carry their own padding (e.g.
        // fixed 128) and truncation settings; replace both so that texts are
        // padded only per batch, by us, and truncated at `max_tokens`.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: opts.max_tokens,
                ..Default::default()
            }))
            .map_err(|e| EmbedError::Tokenizer(format!("cannot set truncation: {e}")))?;
        let vocab = tokenizer.get_vocab_size(true);
        if vocab > cfg.vocab_size {
            // Token ids beyond the embedding table would fail at the first query;
            // catch the mismatched pair of files at load instead.
            return Err(EmbedError::BadConfig {
                path: config_path,
                reason: format!(
                    "vocab_size {} is smaller than the tokenizer's vocabulary ({vocab}) in {}",
                    cfg.vocab_size,
                    tokenizer_path.display()
                ),
            });
        }

        let weights = WeightsFile::new(open_file(&weights_path)?).map_err(|reason| {
            EmbedError::BadWeights {
                path: weights_path.clone(),
                reason,
            }
        })?;
        // The tuning fits one architecture; a model of another shape loads
        // untuned without trying (its digest could not match anyway).
        let tuning = if opts.tool_tuning && fits_tool_tuning(&cfg) {
            Some(
                ToolTuning::compiled_in().map_err(|reason| EmbedError::BadWeights {
                    path: weights_path.clone(),
                    reason,
                })?,
            )
        } else {
            None
        };
        let tuned = tuning.is_some();
        let read_ms = started.elapsed().as_secs_f64() * 1e3;
        let device = Device::Cpu;
        // Hash on a second thread, reading the file in chunks, while the
        // tensors are read and packed one at a time: on a multi-core board
        // the id costs ~nothing in wall time, and neither side holds the
        // whole file in memory.
        let (content_sha256, model, hash_ms) = std::thread::scope(|s| {
            let hasher = s.spawn(|| {
                let t = Instant::now();
                // The recipe files come after the two JSON files so that a
                // directory without them keeps the digest it always had.
                let mut head: Vec<&[u8]> = vec![&config_bytes, &tokenizer_bytes];
                head.extend(recipe.digest_input.iter().map(Vec::as_slice));
                let digest = content_digest(&head, &weights_path);
                (digest, t.elapsed().as_secs_f64() * 1e3)
            });
            // The word-embedding table stays in the file (weights.rs); a
            // handle that cannot be cloned only means it is loaded whole.
            let word_table = format!(
                "{}embeddings.word_embeddings.weight",
                weight_prefix(|name| weights.contains_tensor(name), &cfg)
            );
            let word_rows = weights
                .rows_on_disk(&word_table, cfg.vocab_size, cfg.hidden_size)
                .ok()
                .flatten();
            let backend: Box<dyn candle_nn::var_builder::SimpleBackend> = match tuning {
                Some(tuning) => Box::new(Tuned {
                    inner: weights,
                    tuning,
                }),
                None => Box::new(weights),
            };
            let vb = VarBuilder::from_backend(backend, DType::F32, device.clone());
            let model = Encoder::load(vb, &cfg, word_rows, opts.weights);
            let (digest, hash_ms) = match hasher.join() {
                Ok(r) => r,
                Err(panic) => std::panic::resume_unwind(panic),
            };
            (digest, model, hash_ms)
        });
        let content_sha256 = content_sha256?;
        if tuned && content_sha256 != TRAINED_FOR_SHA256 {
            // Same shape, other weights (another MiniLM, a fine-tune of
            // its own): the update would only damage them. Rare, so the
            // load is simply done again, untuned.
            tracing::info!(
                dir = %dir.display(),
                "tool tuning not applied: it was trained for other weights"
            );
            return Self::load(
                &dir,
                EmbedOptions {
                    tool_tuning: false,
                    ..opts
                },
            );
        }
        let model = model.map_err(|e| EmbedError::BadWeights {
            path: weights_path.clone(),
            reason: e.to_string(),
        })?;

        let pool = match opts.threads {
            Some(n) => Some(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n)
                    .thread_name(|i| format!("oap-embed-{i}"))
                    .build()
                    .map_err(|e| {
                        EmbedError::InvalidOptions(format!("cannot start {n} threads: {e}"))
                    })?,
            ),
            None => None,
        };

        let dir_name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".to_owned());
        // `<dir>[+bf16][+tools.<factors>]@<sha256 prefix>`: the precision
        // and the tuning change the vectors, so they are part of the id an
        // index is built for (the tuning by its factors' digest, so new
        // factors re-embed an index too); what follows the `@` names the
        // weight files alone.
        let precision = match opts.weights {
            WeightPrecision::F32 => "",
            WeightPrecision::Bf16 => "+bf16",
        };
        let tuning_marker = if tuned { id_marker() } else { String::new() };
        let model_id = format!(
            "{dir_name}{precision}{tuning_marker}@{}",
            content_sha256.get(..16).unwrap_or(&content_sha256)
        );
        tracing::info!(
            model_id = %model_id,
            dim = cfg.hidden_size,
            read_ms,
            hash_ms,
            load_ms = started.elapsed().as_secs_f64() * 1e3,
            "embedding model loaded"
        );
        Ok(Self {
            model,
            tokenizer,
            device,
            dim: cfg.hidden_size,
            pad_id,
            model_id,
            content_sha256,
            tool_tuned: tuned,
            recipe,
            dir,
            opts,
            pool,
            background: std::sync::OnceLock::new(),
        })
    }

    /// Full hex sha256 of `config.json || tokenizer.json || model.safetensors`
    /// (plain concatenation, so `cat config.json tokenizer.json
    /// model.safetensors | sha256sum` reproduces it); a model with recipe
    /// files (`recipe.rs`: pooling, prompts, normalisation) has them, in
    /// that order, between the tokenizer and the weights. [`Embedder::model_id`]
    /// carries its first 16 hex digits.
    pub fn content_sha256(&self) -> &str {
        &self.content_sha256
    }

    /// Canonical path of the model directory.
    pub fn model_dir(&self) -> &Path {
        &self.dir
    }

    /// Token ids of `text` as a document is tokenized, without the
    /// document prompt: the model's normalisation, then the tokenizer with
    /// its special tokens. For tests that pin a tokenizer to a reference.
    #[doc(hidden)]
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
        let prepared = self.recipe.prepare("", text);
        let encoding = self
            .tokenizer
            .encode_fast(prepared.as_ref(), true)
            .map_err(|e| EmbedError::Tokenizer(e.to_string()))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The options the model was loaded with.
    pub fn options(&self) -> &EmbedOptions {
        &self.opts
    }

    /// The former batch pass, every text padded to the longest of its
    /// batch, kept so that a benchmark can compare the two passes in one
    /// process (`oap-bench embed-batches --paths packed,padded`). Its
    /// vectors equal [`Embedder::embed`]'s within float rounding.
    #[doc(hidden)]
    pub fn embed_padded(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let run = || self.embed_in_pool(texts, Side::Document, self.opts.batch_size, Pass::Padded);
        match &self.pool {
            Some(pool) => pool.install(run),
            None => self.device.with_context(run),
        }
    }

    fn embed_in_pool(
        &self,
        texts: &[&str],
        side: Side,
        batch_size: usize,
        pass: Pass,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let budget = self
            .opts
            .max_tokens
            .saturating_mul(MAX_INPUT_BYTES_PER_TOKEN);
        let prompt = match side {
            Side::Query => &self.recipe.query_prompt,
            Side::Document => &self.recipe.document_prompt,
        };
        let inputs: Vec<std::borrow::Cow<'_, str>> = texts
            .iter()
            .map(|t| self.recipe.prepare(prompt, clip_utf8(t, budget)))
            .collect();
        let encodings = self
            .tokenizer
            .encode_batch_fast(inputs, true)
            .map_err(|e| EmbedError::Tokenizer(e.to_string()))?;

        // The padded pass sorts by token count so each batch pads to a
        // similar length (speed only: padding is masked out). The packed
        // pass pads nothing, so any grouping costs the same.
        let mut order: Vec<usize> = (0..encodings.len()).collect();
        if pass == Pass::Padded {
            order.sort_by_key(|&i| encodings[i].len());
        }

        let mut out = vec![Vec::new(); encodings.len()];
        for chunk in order.chunks(batch_size.max(1)) {
            let batch: Vec<&Encoding> = chunk.iter().map(|&i| &encodings[i]).collect();
            let vectors = match pass {
                Pass::Packed => self.forward_packed(&batch),
                Pass::Padded => self.forward(&batch),
            }
            .map_err(inference_error)?;
            for (&i, v) in chunk.iter().zip(vectors) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    /// One forward pass over a batch, the texts' token rows back to back
    /// (see `Encoder::forward_packed`), then mean pooling per text.
    fn forward_packed(&self, batch: &[&Encoding]) -> candle_core::Result<Vec<Vec<f32>>> {
        let lens: Vec<usize> = batch.iter().map(|e| e.len()).collect();
        let cls = self.recipe.pooling == Pooling::Cls;
        let ids: Vec<u32> = batch
            .iter()
            .flat_map(|e| e.get_ids().iter().copied())
            .collect();
        let hidden = self.model.forward_packed(&ids, &lens)?; // [N, D]
        let d = self.dim;
        let mut rows = hidden.chunks_exact(d);
        let mut out = Vec::with_capacity(batch.len());
        for &len in &lens {
            // A text without tokens (only with a tokenizer that adds no
            // special tokens) gets a zero vector, as sentence-transformers'
            // clamped mean gives it.
            let mut sum = vec![0.0f32; d];
            // CLS pooling: the first row alone (the rest are skipped).
            let pooled = if cls { len.min(1) } else { len };
            for row in rows.by_ref().take(len).take(pooled) {
                for (s, x) in sum.iter_mut().zip(row) {
                    *s += x;
                }
            }
            // The text's rows after the pooled ones.
            rows.by_ref().take(len - pooled).for_each(drop);
            let count = pooled.max(1) as f32;
            for s in &mut sum {
                *s /= count;
            }
            out.push(l2_normalise(sum));
        }
        Ok(out)
    }

    /// One forward pass over a batch, padded to its longest member.
    fn forward(&self, batch: &[&Encoding]) -> candle_core::Result<Vec<Vec<f32>>> {
        let rows = batch.len();
        let cols = batch.iter().map(|e| e.len()).max().unwrap_or(0);
        if cols == 0 {
            // Only possible with a tokenizer that adds no special tokens: an
            // empty text has no tokens, and sentence-transformers yields a zero
            // vector for it, so do the same instead of running an empty matmul.
            return Ok(vec![vec![0.0; self.dim]; rows]);
        }
        let mut ids = vec![self.pad_id; rows * cols];
        let mut mask = vec![0u32; rows * cols];
        for (r, enc) in batch.iter().enumerate() {
            let len = enc.len();
            ids[r * cols..r * cols + len].copy_from_slice(enc.get_ids());
            mask[r * cols..r * cols + len].fill(1);
        }
        // A batch without padding (a single query, or texts of one length)
        // needs no mask: every token is real.
        let padded = batch.iter().any(|e| e.len() != cols);
        let hidden = self
            .model
            .forward(&ids, rows, cols, padded.then_some(&mask[..]))?
            .reshape((rows, cols, self.dim))?; // [B, T, D]
        let pooled: Vec<Vec<f32>> = if self.recipe.pooling == Pooling::Cls {
            hidden.narrow(1, 0, 1)?.squeeze(1)?.to_vec2()?
        } else if padded {
            let m = Tensor::from_vec(mask, (rows, cols, 1), &self.device)?.to_dtype(DType::F32)?;
            let summed = hidden.broadcast_mul(&m)?.sum(1)?; // [B, D]
                                                            // Same clamp as sentence-transformers' mean pooling: no 0/0 for a
                                                            // row without tokens.
            let counts = m.sum(1)?.clamp(1e-9f32, f32::MAX)?; // [B, 1]
            summed.broadcast_div(&counts)?.to_vec2()?
        } else {
            hidden.mean(1)?.to_vec2()?
        };
        Ok(pooled.into_iter().map(l2_normalise).collect())
    }
}

impl Embedder for BertEmbedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    /// Tool-tuned when the tuning was merged into the weights: asked for,
    /// and the directory holds the weights it was trained from.
    fn calibration(&self) -> Calibration {
        if self.tool_tuned {
            Calibration::ToolTuned
        } else if self.recipe.query_prompt == "query: "
            && self.recipe.document_prompt == "passage: "
        {
            // e5's prompts put its cosines on e5's scale, whichever e5.
            Calibration::MultilingualE5
        } else {
            Calibration::General
        }
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        match &self.pool {
            Some(pool) => pool.install(|| {
                self.embed_in_pool(texts, Side::Document, self.opts.batch_size, Pass::Packed)
            }),
            // candle's own CPU pool keeps its workers warm between the many
            // short parallel sections of a forward pass.
            None => self.device.with_context(|| {
                self.embed_in_pool(texts, Side::Document, self.opts.batch_size, Pass::Packed)
            }),
        }
    }

    fn embed_queries(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let run = || self.embed_in_pool(texts, Side::Query, self.opts.batch_size, Pass::Packed);
        match &self.pool {
            Some(pool) => pool.install(run),
            None => self.device.with_context(run),
        }
    }

    fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.embed_queries(&[text])?
            .pop()
            .ok_or_else(|| EmbedError::Inference("model returned no embedding".into()))
    }

    fn embed_background(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        // Everything candle and the tokenizer parallelise inside `install`
        // runs on the idle-class pool's threads, not on the query pool.
        self.background_pool()?.install(|| {
            self.embed_in_pool(
                texts,
                Side::Document,
                self.opts.batch_size.min(BACKGROUND_BATCH_SIZE),
                Pass::Packed,
            )
        })
    }
}

impl BertEmbedder {
    /// Threads of the background pool: one fewer than the foreground has, so
    /// a core stays free for queries even where idle-class scheduling is
    /// refused; at least one.
    fn background_threads(&self) -> usize {
        let foreground = self.opts.threads.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        });
        foreground.saturating_sub(1).max(1)
    }

    fn background_pool(&self) -> Result<&rayon::ThreadPool, EmbedError> {
        let pool = self.background.get_or_init(|| {
            let threads = self.background_threads();
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .thread_name(|i| format!("oap-embed-bg-{i}"))
                .start_handler(|_| {
                    oap_embed::lower_current_thread_priority();
                })
                .build()
                .map_err(|e| format!("cannot start {threads} background threads: {e}"))
        });
        pool.as_ref()
            .map_err(|reason| EmbedError::InvalidOptions(reason.clone()))
    }
}

/// Which prompt a text gets (`recipe.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// A request: [`Embedder::embed_queries`].
    Query,
    /// Anything else (tool texts): [`Embedder::embed`].
    Document,
}

/// How a batch of texts goes through the encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// The texts' token rows concatenated, attention per text.
    Packed,
    /// Every text padded to the batch's longest, with an attention mask.
    Padded,
}

/// A candle failure at inference time, as the trait's error.
fn inference_error(e: candle_core::Error) -> EmbedError {
    EmbedError::Inference(e.to_string())
}

#[allow(
    clippy::disallowed_methods,
    reason = "the operator's model files, checked against pinned hashes when fetched; their size is the model's"
)]
fn read_file(path: &Path) -> Result<Vec<u8>, EmbedError> {
    std::fs::read(path).map_err(|source| file_error(path, source))
}

fn open_file(path: &Path) -> Result<std::fs::File, EmbedError> {
    std::fs::File::open(path).map_err(|source| file_error(path, source))
}

fn file_error(path: &Path, source: std::io::Error) -> EmbedError {
    if source.kind() == std::io::ErrorKind::NotFound {
        EmbedError::MissingFile {
            path: path.to_path_buf(),
        }
    } else {
        EmbedError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Checks the config fields candle's BERT would otherwise trip over later with
/// a less helpful message (or a panic on a division by zero).
fn validate_config(cfg: &BertConfig) -> Result<(), String> {
    if cfg.hidden_size == 0 || cfg.num_hidden_layers == 0 || cfg.vocab_size == 0 {
        return Err("hidden_size, num_hidden_layers and vocab_size must be > 0".into());
    }
    if cfg.num_attention_heads == 0 || !cfg.hidden_size.is_multiple_of(cfg.num_attention_heads) {
        return Err(format!(
            "hidden_size {} is not a multiple of num_attention_heads {}",
            cfg.hidden_size, cfg.num_attention_heads
        ));
    }
    if cfg.max_position_embeddings < 2 {
        return Err(format!(
            "max_position_embeddings {} leaves no room for [CLS] and [SEP]",
            cfg.max_position_embeddings
        ));
    }
    Ok(())
}

/// sha256 of `head` (in order) followed by the bytes of the file at `tail`,
/// which is read in chunks, never whole.
fn content_digest(head: &[&[u8]], tail: &Path) -> Result<String, EmbedError> {
    use std::io::Read;
    let mut h = Sha256::new();
    for p in head {
        h.update(p);
    }
    let mut file = open_file(tail)?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(source) => {
                return Err(EmbedError::Io {
                    path: tail.to_path_buf(),
                    source,
                })
            }
        };
        h.update(buf.get(..n).unwrap_or_default());
    }
    Ok(hex::encode(h.finalize()))
}

/// The architecture the tool tuning was trained on: all-MiniLM-L6-v2's.
fn fits_tool_tuning(cfg: &BertConfig) -> bool {
    cfg.hidden_size == 384 && cfg.num_hidden_layers == 6 && cfg.intermediate_size == 1536
}

/// Longest prefix of `s` of at most `max` bytes that ends on a char boundary.
fn clip_utf8(s: &str, max: usize) -> &str {
    // The standard library finds the boundary; `get` cannot fail there.
    s.get(..s.floor_char_boundary(max)).unwrap_or(s)
}

/// Divides by the L2 norm, with sentence-transformers' epsilon so a zero vector
/// stays zero instead of becoming NaN.
fn l2_normalise(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v
        .iter()
        .map(|x| f64::from(*x) * f64::from(*x))
        .sum::<f64>()
        .sqrt()
        .max(1e-12);
    for x in &mut v {
        *x = (f64::from(*x) / norm) as f32;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_respects_char_boundaries() {
        assert_eq!(clip_utf8("héllo", 2), "h");
        assert_eq!(clip_utf8("héllo", 3), "hé");
        assert_eq!(clip_utf8("abc", 10), "abc");
        assert_eq!(clip_utf8("", 0), "");
    }

    #[test]
    fn normalise_handles_zero_and_scales_to_unit() {
        assert_eq!(l2_normalise(vec![0.0, 0.0]), vec![0.0, 0.0]);
        let v = l2_normalise(vec![3.0, 4.0]);
        assert!((v[0] - 0.6).abs() < 1e-7 && (v[1] - 0.8).abs() < 1e-7);
    }

    #[test]
    fn digest_is_plain_concatenation() {
        let dir = tempfile::tempdir().unwrap();
        let tail = dir.path().join("w");
        std::fs::write(&tail, b"cd").unwrap();
        let whole = dir.path().join("whole");
        std::fs::write(&whole, b"abcd").unwrap();
        assert_eq!(
            content_digest(&[b"ab"], &tail).unwrap(),
            content_digest(&[], &whole).unwrap(),
            "model_id must be reproducible with `cat ... | sha256sum`"
        );
    }
}
