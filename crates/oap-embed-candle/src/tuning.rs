//! Tool tuning: a low-rank update of all-MiniLM-L6-v2 trained for tool
//! retrieval, merged into the linear layers' weights as they are loaded.
//!
//! all-MiniLM-L6-v2 was trained on general sentence pairs; on tool
//! retrieval it ranks a request's tool below BM25 on public benchmarks.
//! `bench/train_encoder.py` trains a rank-16 LoRA of every linear layer
//! on public request → tool pairs (none from this project's benchmark
//! corpora); its f16 factors, 1.3 MB, are compiled into the binary, so
//! the tuning reaches every install with the binary itself and needs no
//! download beyond the base model's.
//!
//! The update only fits the weights it was trained from: it is applied
//! when the model directory holds exactly those files (checked by their
//! digest once loaded; `bert.rs` loads again without it otherwise), and
//! the model id carries `+tools.` and the factors' digest, so an index
//! embedded without the tuning, or with other factors, is re-embedded.

use std::collections::HashMap;

use candle_core::{DType, Device, Result, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use sha2::{Digest, Sha256};

/// The LoRA factors: for each tuned linear layer `NAME`, `NAME.lora_A`
/// (`[rank, in]`) and `NAME.lora_B` (`[out, rank]`, already multiplied by
/// the LoRA scale), in f16; the update of `NAME.weight` is `B · A`.
const TOOLS_LORA: &[u8] = include_bytes!("../tuning/all-MiniLM-L6-v2-tools.safetensors");

/// Content digest (`BertEmbedder::content_sha256`: sha256 of `config.json
/// || tokenizer.json || model.safetensors`) of the all-MiniLM-L6-v2 files
/// `cargo xtask fetch-model` installs, which the update was trained from.
pub(crate) const TRAINED_FOR_SHA256: &str =
    "ad404e0d5b244ee2e391705619f5989deee738e156a5a2528f51f079585a0559";

/// The model-id marker of a tuned model: `+tools.` and the first 8 hex
/// digits of the factors' sha256.
pub(crate) fn id_marker() -> String {
    let digest = Sha256::digest(TOOLS_LORA);
    let hex: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("+tools.{hex}")
}

/// The factors of each tuned weight, by the weight's tensor name.
pub(crate) struct ToolTuning {
    factors: HashMap<String, (Tensor, Tensor)>,
}

impl ToolTuning {
    /// Reads the compiled-in factors. An error here is a build defect
    /// (the file is part of the source tree), reported, not panicked on.
    pub(crate) fn compiled_in() -> std::result::Result<Self, String> {
        let tensors = candle_core::safetensors::load_buffer(TOOLS_LORA, &Device::Cpu)
            .map_err(|e| format!("the compiled-in tool tuning cannot be read: {e}"))?;
        let mut factors = HashMap::new();
        for (name, a) in &tensors {
            let Some(layer) = name.strip_suffix(".lora_A") else {
                continue;
            };
            let b = tensors
                .get(&format!("{layer}.lora_B"))
                .ok_or_else(|| format!("the tool tuning has {name} without its lora_B"))?;
            let (a, b) = (
                a.to_dtype(DType::F32).map_err(|e| e.to_string())?,
                b.to_dtype(DType::F32).map_err(|e| e.to_string())?,
            );
            factors.insert(format!("{layer}.weight"), (a, b));
        }
        if factors.is_empty() {
            return Err("the compiled-in tool tuning holds no layer".into());
        }
        Ok(Self { factors })
    }

    /// Number of tuned weight tensors.
    #[cfg(test)]
    pub(crate) fn layers(&self) -> usize {
        self.factors.len()
    }

    /// Whether `shape` of weight `name` is what the factors were trained
    /// for (`[out, in]` = `[B rows, A columns]`); names without factors fit.
    fn fits(&self, name: &str, shape: &[usize]) -> bool {
        match self.factors.get(name) {
            None => true,
            Some((a, b)) => shape == [b.dims()[0], a.dims()[1]],
        }
    }
}

/// A weights backend that adds the tuning's update to the weights it
/// covers, one tensor at a time (the update of the widest layer is 2.4 MB
/// in f32 and dropped at once), so loading still peaks at about one copy
/// of the model.
pub(crate) struct Tuned<B> {
    pub(crate) inner: B,
    pub(crate) tuning: ToolTuning,
}

impl<B: SimpleBackend> Tuned<B> {
    fn apply(&self, name: &str, weight: Tensor) -> Result<Tensor> {
        let Some((a, b)) = self.tuning.factors.get(name) else {
            return Ok(weight);
        };
        if !self.tuning.fits(name, weight.dims()) {
            return Err(candle_core::Error::Msg(format!(
                "tool tuning does not fit {name} of shape {:?}",
                weight.dims()
            )));
        }
        let dtype = weight.dtype();
        let update = b.matmul(a)?;
        weight.to_dtype(DType::F32)?.add(&update)?.to_dtype(dtype)
    }
}

impl<B: SimpleBackend> SimpleBackend for Tuned<B> {
    fn get(
        &self,
        s: Shape,
        name: &str,
        h: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> Result<Tensor> {
        let weight = self.inner.get(s, name, h, dtype, dev)?;
        self.apply(name, weight)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> Result<Tensor> {
        let weight = self.inner.get_unchecked(name, dtype, dev)?;
        self.apply(name, weight)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.inner.contains_tensor(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compiled_in_tuning_covers_every_linear_layer_of_the_six_blocks() {
        let tuning = ToolTuning::compiled_in().expect("compiled-in tuning");
        // query, key, value, attention output, intermediate, output per block
        assert_eq!(tuning.layers(), 36);
        assert!(tuning.fits("encoder.layer.0.attention.self.query.weight", &[384, 384]));
        assert!(tuning.fits("encoder.layer.5.intermediate.dense.weight", &[1536, 384]));
        assert!(!tuning.fits("encoder.layer.5.intermediate.dense.weight", &[384, 1536]));
    }
}
