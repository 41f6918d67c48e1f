//! Error type shared by every embedder (no tensor library's types in it:
//! an implementation turns its own errors into these variants).
//!
//! Every variant that concerns a file names that file, because the most common
//! operational failure is "the model directory is incomplete or was fetched from
//! somewhere else", and the operator needs to know which file to look at.

use std::path::PathBuf;

/// Errors returned while loading a model or embedding text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmbedError {
    /// The model directory itself does not exist (or is not a directory).
    #[error(
        "model directory {} does not exist or is not a directory (run `cargo xtask fetch-model`)",
        path.display()
    )]
    ModelDirNotFound {
        /// The directory `embedding.model_dir` names.
        path: PathBuf,
    },

    /// A required file (config.json, tokenizer.json, model.safetensors) is absent.
    #[error("model file {} is missing (run `cargo xtask fetch-model`)", path.display())]
    MissingFile {
        /// The file that should be there.
        path: PathBuf,
    },

    /// The file exists but could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file that could not be read.
        path: PathBuf,
        /// Why, as the operating system said.
        #[source]
        source: std::io::Error,
    },

    /// config.json is not valid JSON, is not a BERT config, or is inconsistent
    /// with the tokenizer.
    #[error("bad model config {}: {reason}", path.display())]
    BadConfig {
        /// The config file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// model.safetensors is truncated, corrupt, or lacks tensors the config asks for.
    #[error("bad model weights {}: {reason}", path.display())]
    BadWeights {
        /// The weights file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// tokenizer.json could not be loaded, or encoding a text failed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),

    /// The model failed at inference time (a tensor operation, for the
    /// candle embedder), with the implementation's message.
    #[error("inference: {0}")]
    Inference(String),

    /// `EmbedOptions` has a value the model cannot honour.
    #[error("invalid embed options: {0}")]
    InvalidOptions(String),
}
