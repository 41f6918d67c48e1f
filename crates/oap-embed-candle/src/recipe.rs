//! [`Recipe`]: how a model turns a text into one vector, beyond its
//! weights: the pooling, the prompts put before requests and documents,
//! and a character normalisation applied before the tokenizer.
//!
//! Read from the optional files of a sentence-transformers directory
//! (`1_Pooling/config.json`, `config_sentence_transformers.json`) and from
//! `normalization.json`, which `cargo xtask fetch-model` writes for a
//! SentencePiece model whose normaliser the `tokenizers` crate cannot
//! rebuild (a per-character table). A directory without them, such as
//! all-MiniLM-L6-v2's, gets mean pooling, no prompts, no extra
//! normalisation: what the embedder always did.

use std::collections::HashMap;
use std::path::Path;

use oap_embed::EmbedError;
use serde::Deserialize;

pub(crate) const POOLING_FILE: &str = "1_Pooling/config.json";
pub(crate) const PROMPTS_FILE: &str = "config_sentence_transformers.json";
pub(crate) const NORMALIZATION_FILE: &str = "normalization.json";

/// How token vectors become the sentence vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pooling {
    /// The mean of the text's token vectors.
    Mean,
    /// The first token's vector (`[CLS]` / `<s>`), as BGE models use.
    Cls,
}

/// What [`Recipe::load`] found in a model directory.
#[derive(Debug, Clone)]
pub(crate) struct Recipe {
    pub(crate) pooling: Pooling,
    /// Put before every request (`Embedder::embed_queries`).
    pub(crate) query_prompt: String,
    /// Put before every other text (`Embedder::embed`).
    pub(crate) document_prompt: String,
    /// Character → replacement, applied before tokenizing; runs of spaces
    /// are then collapsed to one, as SentencePiece's normaliser does.
    normalization: Option<HashMap<char, String>>,
    /// The files' bytes, in a fixed order, for the model id: they change
    /// the vectors as much as the weights do.
    pub(crate) digest_input: Vec<Vec<u8>>,
}

#[derive(Deserialize)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
}

#[derive(Deserialize)]
struct PromptsConfig {
    #[serde(default)]
    prompts: HashMap<String, String>,
}

impl Recipe {
    pub(crate) fn load(dir: &Path) -> Result<Self, EmbedError> {
        let mut recipe = Recipe {
            pooling: Pooling::Mean,
            query_prompt: String::new(),
            document_prompt: String::new(),
            normalization: None,
            digest_input: Vec::new(),
        };
        if let Some(bytes) = read_optional(&dir.join(POOLING_FILE))? {
            let path = dir.join(POOLING_FILE);
            let cfg: PoolingConfig = serde_json::from_slice(&bytes).map_err(|e| bad(&path, e))?;
            recipe.pooling = match (
                cfg.pooling_mode_cls_token,
                cfg.pooling_mode_mean_tokens,
                cfg.pooling_mode_max_tokens,
            ) {
                (true, false, false) => Pooling::Cls,
                (false, true, false) => Pooling::Mean,
                _ => {
                    return Err(EmbedError::BadConfig {
                        path,
                        reason: "exactly one of pooling_mode_cls_token and \
                                 pooling_mode_mean_tokens must be true (no other pooling is implemented)"
                            .into(),
                    })
                }
            };
            recipe.digest_input.push(bytes);
        }
        if let Some(bytes) = read_optional(&dir.join(PROMPTS_FILE))? {
            let path = dir.join(PROMPTS_FILE);
            let cfg: PromptsConfig = serde_json::from_slice(&bytes).map_err(|e| bad(&path, e))?;
            recipe.query_prompt = cfg.prompts.get("query").cloned().unwrap_or_default();
            recipe.document_prompt = cfg
                .prompts
                .get("document")
                .or_else(|| cfg.prompts.get("passage"))
                .cloned()
                .unwrap_or_default();
            recipe.digest_input.push(bytes);
        }
        if let Some(bytes) = read_optional(&dir.join(NORMALIZATION_FILE))? {
            let path = dir.join(NORMALIZATION_FILE);
            let table: HashMap<String, String> =
                serde_json::from_slice(&bytes).map_err(|e| bad(&path, e))?;
            let mut map = HashMap::with_capacity(table.len());
            for (from, to) in table {
                let mut chars = from.chars();
                match (chars.next(), chars.next()) {
                    (Some(c), None) => map.insert(c, to),
                    _ => {
                        return Err(EmbedError::BadConfig {
                            path,
                            reason: format!("key {from:?} is not one character"),
                        })
                    }
                };
            }
            recipe.normalization = Some(map);
            recipe.digest_input.push(bytes);
        }
        Ok(recipe)
    }

    /// `prompt` + `text`, normalised when the model has a table. Borrowed
    /// when there is nothing to do (all-MiniLM-L6-v2).
    pub(crate) fn prepare<'a>(&self, prompt: &str, text: &'a str) -> std::borrow::Cow<'a, str> {
        let Some(map) = &self.normalization else {
            return if prompt.is_empty() {
                std::borrow::Cow::Borrowed(text)
            } else {
                std::borrow::Cow::Owned(format!("{prompt}{text}"))
            };
        };
        let mut out = String::with_capacity(prompt.len() + text.len());
        for c in prompt.chars().chain(text.chars()) {
            match map.get(&c) {
                Some(to) => {
                    for t in to.chars() {
                        push_collapsing(&mut out, t);
                    }
                }
                None => push_collapsing(&mut out, c),
            }
        }
        std::borrow::Cow::Owned(out)
    }
}

/// Pushes `c`, except a space right after a space.
fn push_collapsing(out: &mut String, c: char) {
    if c == ' ' && out.ends_with(' ') {
        return;
    }
    out.push(c);
}

#[allow(
    clippy::disallowed_methods,
    reason = "the operator's model files, checked against pinned hashes when fetched; small"
)]
fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, EmbedError> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(EmbedError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn bad(path: &Path, e: serde_json::Error) -> EmbedError {
    EmbedError::BadConfig {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_without_recipe_files_keeps_mean_pooling_and_no_prompts() {
        let dir = tempfile::tempdir().unwrap();
        let r = Recipe::load(dir.path()).unwrap();
        assert_eq!(r.pooling, Pooling::Mean);
        assert!(r.digest_input.is_empty());
        assert!(matches!(
            r.prepare("", "a  b"),
            std::borrow::Cow::Borrowed("a  b")
        ));
    }

    #[test]
    fn reads_cls_pooling_prompts_and_the_character_table() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("1_Pooling")).unwrap();
        std::fs::write(
            dir.path().join(POOLING_FILE),
            r#"{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join(PROMPTS_FILE),
            r#"{"prompts": {"query": "query: ", "document": "passage: "}}"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join(NORMALIZATION_FILE),
            r#"{"\t": " ", "\u0001": "", "ﬁ": "fi"}"#,
        )
        .unwrap();
        let r = Recipe::load(dir.path()).unwrap();
        assert_eq!(r.pooling, Pooling::Cls);
        assert_eq!(r.query_prompt, "query: ");
        assert_eq!(r.document_prompt, "passage: ");
        assert_eq!(r.digest_input.len(), 3);
        assert_eq!(r.prepare(&r.query_prompt, "ﬁnd\t \u{1}x"), "query: find x");
    }

    #[test]
    fn refuses_pooling_it_cannot_run_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("1_Pooling")).unwrap();
        std::fs::write(
            dir.path().join(POOLING_FILE),
            r#"{"pooling_mode_max_tokens": true}"#,
        )
        .unwrap();
        let err = Recipe::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("1_Pooling/config.json"), "{err}");
    }
}
