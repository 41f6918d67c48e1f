//! [`BertConfig`]: a BERT model's `config.json`, as Hugging Face
//! transformers writes it for `BertModel`.
//!
//! The same fields, required and optional alike, as candle-transformers'
//! `bert::Config`, so the same files are accepted and refused. It is
//! written out here because the embedder needs only this struct from that
//! crate, whose build compiles every model it ships (minutes on a
//! two-core machine, in every build of the daemon); the crate stays a
//! dev-dependency for the test that compares the encoder with its
//! `BertModel`.

use serde::Deserialize;

/// The feed-forward activation (`hidden_act`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum HiddenAct {
    /// GELU with the exact `erf` (transformers' `gelu`).
    Gelu,
    /// GELU's tanh approximation (`geluapproximate`).
    GeluApproximate,
    /// ReLU.
    Relu,
}

/// `position_embedding_type`: only absolute positions are implemented, so
/// any other value is refused when the file is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub(crate) enum PositionEmbeddingType {
    #[default]
    Absolute,
}

/// The fields of `config.json`. Those the encoder does not read are
/// required all the same (a file without them is not a BERT config the
/// reference implementation would load).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[allow(dead_code)] // fields kept for the format's sake, not read
pub(crate) struct BertConfig {
    pub(crate) vocab_size: usize,
    pub(crate) hidden_size: usize,
    pub(crate) num_hidden_layers: usize,
    pub(crate) num_attention_heads: usize,
    pub(crate) intermediate_size: usize,
    pub(crate) hidden_act: HiddenAct,
    pub(crate) hidden_dropout_prob: f64,
    pub(crate) max_position_embeddings: usize,
    pub(crate) type_vocab_size: usize,
    pub(crate) initializer_range: f64,
    pub(crate) layer_norm_eps: f64,
    pub(crate) pad_token_id: usize,
    #[serde(default)]
    pub(crate) position_embedding_type: PositionEmbeddingType,
    #[serde(default)]
    pub(crate) use_cache: bool,
    pub(crate) classifier_dropout: Option<f64>,
    pub(crate) model_type: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINILM: &str = r#"{"_name_or_path": "nreimers/MiniLM-L6-H384-uncased",
        "architectures": ["BertModel"], "attention_probs_dropout_prob": 0.1,
        "gradient_checkpointing": false, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
        "hidden_size": 384, "initializer_range": 0.02, "intermediate_size": 1536,
        "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "model_type": "bert",
        "num_attention_heads": 12, "num_hidden_layers": 6, "pad_token_id": 0,
        "position_embedding_type": "absolute", "transformers_version": "4.8.2",
        "type_vocab_size": 2, "use_cache": true, "vocab_size": 30522}"#;

    #[test]
    fn reads_minilm_and_refuses_what_the_encoder_cannot_run() {
        let cfg: BertConfig = serde_json::from_str(MINILM).unwrap();
        assert_eq!(
            (cfg.hidden_size, cfg.num_hidden_layers, cfg.hidden_act),
            (384, 6, HiddenAct::Gelu)
        );
        let relative = MINILM.replace("\"absolute\"", "\"relative_key\"");
        let err = serde_json::from_str::<BertConfig>(&relative).unwrap_err();
        assert!(err.to_string().contains("relative_key"), "{err}");
        let swish = MINILM.replace("\"gelu\"", "\"swish\"");
        assert!(serde_json::from_str::<BertConfig>(&swish).is_err());
        let no_eps = MINILM.replace("\"layer_norm_eps\": 1e-12,", "");
        let err = serde_json::from_str::<BertConfig>(&no_eps).unwrap_err();
        assert!(err.to_string().contains("layer_norm_eps"), "{err}");
    }
}
