//! The BERT encoder, written for sentence embedding on a small CPU.
//!
//! The same network as candle-transformers' `BertModel` (absolute position
//! embeddings, post-norm layers, the activation the config names), with three
//! differences that matter on a small CPU:
//!
//! - query, key and value are one fused linear layer (one matmul instead of
//!   three per layer);
//! - every linear layer works on a 2-D `[tokens, features]` tensor with its
//!   weight stored pre-transposed (`[in, out]`, contiguous), so no matmul
//!   transposes or broadcasts a weight per call;
//! - a batch runs *packed* (`forward_packed`): its texts' token rows back
//!   to back, no padding and so no attention mask, attention per text
//!   (`attention.rs`); the padded, masked `forward` stays for benchmarks.

use crate::config::{BertConfig, HiddenAct};
use candle_core::{DType, Device, Module, Result, Tensor};
use candle_nn::{Embedding, LayerNorm, VarBuilder};
use pulp::Arch;

use crate::kernel::{panel_width, Act, Packed, WeightPrecision};
use crate::weights::RowsOnDisk;

/// A linear layer `y = act(x W^T + b)` on a 2-D input, on the panel-packed
/// weights of `kernel.rs`.
struct Linear {
    packed: Packed,
}

impl Linear {
    /// Loads `weight` (`[out, in]`) and `bias` (`[out]`) from one or more
    /// prefixes; several prefixes are stacked along the output dimension
    /// (the fused query/key/value layer).
    fn load(
        vbs: &[VarBuilder],
        in_dim: usize,
        out_dim: usize,
        width: usize,
        precision: WeightPrecision,
    ) -> Result<Self> {
        let mut weights = Vec::with_capacity(vbs.len());
        let mut biases = Vec::with_capacity(vbs.len());
        for vb in vbs {
            weights.push(vb.get((out_dim, in_dim), "weight")?);
            biases.push(vb.get(out_dim, "bias")?);
        }
        let w = Tensor::cat(&weights, 0)?.flatten_all()?.to_vec1::<f32>()?; // [out * n, in]
        let bias = Tensor::cat(&biases, 0)?.to_vec1::<f32>()?;
        let packed =
            Packed::new(&w, &bias, bias.len(), in_dim, width, precision).ok_or_else(|| {
                candle_core::Error::msg("linear layer: weight and bias sizes disagree")
            })?;
        Ok(Self { packed })
    }

    fn forward(&self, arch: Arch, x: &Tensor, act: Act) -> Result<Tensor> {
        let (m, k) = x.dims2()?;
        if k != self.packed.k() {
            candle_core::bail!(
                "linear layer: input has {k} features, weight takes {}",
                self.packed.k()
            );
        }
        let xs = x.flatten_all()?.to_vec1::<f32>()?;
        let y = self.forward_rows(arch, &xs, m, act)?;
        Tensor::from_vec(y, (m, self.packed.n()), x.device())
    }

    /// The same on `m` row-major rows of a slice; `[m, out]` row-major.
    fn forward_rows(&self, arch: Arch, xs: &[f32], m: usize, act: Act) -> Result<Vec<f32>> {
        self.packed
            .forward(arch, xs, m, act)
            .ok_or_else(|| candle_core::Error::msg("linear layer: shape mismatch"))
    }
}

struct Layer {
    qkv: Linear,
    attn_out: Linear,
    attn_norm: LayerNorm,
    up: Linear,
    down: Linear,
    out_norm: LayerNorm,
}

/// The word-embedding table: read a row at a time from the weights file
/// (`weights.rs`), or in memory where the file's table cannot be read so.
enum WordTable {
    OnDisk(RowsOnDisk),
    InMemory(Embedding),
}

impl WordTable {
    /// Rows `ids`, `[ids.len(), hidden]`.
    fn rows(&self, ids: &[u32], hidden: usize, device: &Device) -> Result<Tensor> {
        match self {
            WordTable::OnDisk(table) => {
                Tensor::from_vec(table.gather(ids)?, (ids.len(), hidden), device)
            }
            WordTable::InMemory(table) => {
                table.forward(&Tensor::from_slice(ids, ids.len(), device)?)
            }
        }
    }
}

/// The tensor-name prefix of a BERT checkpoint: `bert.`, `<model_type>.`
/// or none, whichever holds the word embeddings (`has` says whether the
/// file holds a tensor).
pub(crate) fn weight_prefix(has: impl Fn(&str) -> bool, cfg: &BertConfig) -> String {
    if has("bert.embeddings.word_embeddings.weight") {
        return "bert.".into();
    }
    match cfg.model_type.as_deref() {
        Some(p) if has(&format!("{p}.embeddings.word_embeddings.weight")) => format!("{p}."),
        _ => String::new(),
    }
}

/// The encoder: token ids in, last hidden states out.
pub(crate) struct Encoder {
    word: WordTable,
    position: Tensor,
    token_type0: Tensor,
    emb_norm: LayerNorm,
    layers: Vec<Layer>,
    heads: usize,
    head_dim: usize,
    hidden: usize,
    act: HiddenAct,
    device: Device,
    /// The SIMD level detected at load; the weights are packed for it.
    arch: Arch,
}

fn layer_norm(vb: VarBuilder, dim: usize, eps: f64) -> Result<LayerNorm> {
    Ok(LayerNorm::new(
        vb.get(dim, "weight")?,
        vb.get(dim, "bias")?,
        eps,
    ))
}

impl Encoder {
    /// Loads the weights candle-transformers' `BertModel` would load (with
    /// or without a `bert.` / `<model_type>.` prefix, [`weight_prefix`]).
    /// `word_rows`, the word-embedding table as rows on disk, stands in for
    /// loading that table when it has the config's shape. The linear layers
    /// keep their weights at `precision`.
    pub(crate) fn load(
        vb: VarBuilder,
        cfg: &BertConfig,
        word_rows: Option<RowsOnDisk>,
        precision: WeightPrecision,
    ) -> Result<Self> {
        let prefix = weight_prefix(|name| vb.contains_tensor(name), cfg);
        let vb = match prefix.strip_suffix('.') {
            Some(p) => vb.pp(p),
            None => vb,
        };
        let d = cfg.hidden_size;
        let eps = cfg.layer_norm_eps;
        let emb = vb.pp("embeddings");
        let word = match word_rows {
            Some(rows) if rows.rows() == cfg.vocab_size && rows.cols() == d => {
                WordTable::OnDisk(rows)
            }
            _ => WordTable::InMemory(Embedding::new(
                emb.pp("word_embeddings")
                    .get((cfg.vocab_size, d), "weight")?,
                d,
            )),
        };
        let position = emb
            .pp("position_embeddings")
            .get((cfg.max_position_embeddings, d), "weight")?;
        let token_type0 = emb
            .pp("token_type_embeddings")
            .get((cfg.type_vocab_size, d), "weight")?
            .narrow(0, 0, 1)?
            .contiguous()?;
        let emb_norm = layer_norm(emb.pp("LayerNorm"), d, eps)?;
        let arch = Arch::new();
        let width = panel_width(arch);
        let linear = |vbs: &[VarBuilder], in_dim, out_dim| {
            Linear::load(vbs, in_dim, out_dim, width, precision)
        };
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let l = vb.pp(format!("encoder.layer.{i}"));
            let att = l.pp("attention");
            let s = att.pp("self");
            layers.push(Layer {
                qkv: linear(&[s.pp("query"), s.pp("key"), s.pp("value")], d, d)?,
                attn_out: linear(&[att.pp("output").pp("dense")], d, d)?,
                attn_norm: layer_norm(att.pp("output").pp("LayerNorm"), d, eps)?,
                up: linear(
                    &[l.pp("intermediate").pp("dense")],
                    d,
                    cfg.intermediate_size,
                )?,
                down: linear(&[l.pp("output").pp("dense")], cfg.intermediate_size, d)?,
                out_norm: layer_norm(l.pp("output").pp("LayerNorm"), d, eps)?,
            });
        }
        Ok(Self {
            word,
            position,
            token_type0,
            emb_norm,
            layers,
            heads: cfg.num_attention_heads,
            head_dim: d / cfg.num_attention_heads,
            hidden: d,
            act: cfg.hidden_act,
            device: vb.device().clone(),
            arch,
        })
    }

    /// Hidden states `[rows * cols, hidden]` for `rows` sequences of `cols`
    /// token ids each (row-major). `mask` (same shape as `ids`, 1 for a real
    /// token, 0 for padding) is needed only when some row is padded.
    pub(crate) fn forward(
        &self,
        ids: &[u32],
        rows: usize,
        cols: usize,
        mask: Option<&[u32]>,
    ) -> Result<Tensor> {
        if ids.len() != rows * cols {
            candle_core::bail!("forward: {} token ids for {rows} x {cols}", ids.len());
        }
        // Embeddings: word + position + token type 0, then LayerNorm.
        let x =
            self.word
                .rows(ids, self.hidden, &self.device)?
                .reshape((rows, cols, self.hidden))?;
        let pos = self.position.narrow(0, 0, cols)?;
        let x = x
            .broadcast_add(&pos)?
            .broadcast_add(&self.token_type0)?
            .reshape((rows * cols, self.hidden))?;
        let mut x = self.emb_norm.forward(&x)?;

        // Padded keys get the same large negative bias BertModel adds, so a
        // real token never attends to padding.
        let bias = match mask {
            Some(mask) => {
                let m = Tensor::from_slice(mask, (rows, 1, 1, cols), &self.device)?
                    .to_dtype(DType::F32)?;
                Some(((1.0 - m)? * f64::from(f32::MIN))?)
            }
            None => None,
        };
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        for layer in &self.layers {
            x = self.layer(layer, &x, rows, cols, bias.as_ref(), scale)?;
        }
        Ok(x)
    }

    /// Hidden states, `[sum(lens), hidden]` row-major, of several texts at
    /// once: `ids` holds every text's token ids back to back, `lens[i]` of
    /// them for text `i`. No text is padded: the embeddings, layer norms,
    /// linear layers and GELU run over all token rows together (one weight
    /// stream for the whole batch), and only attention runs per text, over
    /// that text's own rows. Every row's arithmetic is the same whatever
    /// else is in the batch (the kernels never mix rows), so a text's
    /// result does not depend on its batch.
    pub(crate) fn forward_packed(&self, ids: &[u32], lens: &[usize]) -> Result<Vec<f32>> {
        let total: usize = lens.iter().sum();
        if total != ids.len() {
            candle_core::bail!(
                "packed forward: {} token ids for texts of {total} tokens",
                ids.len()
            );
        }
        let d = self.hidden;
        if total == 0 {
            return Ok(Vec::new());
        }
        // Each text's positions restart at 0.
        let positions: Vec<u32> = lens.iter().flat_map(|&len| 0..len as u32).collect();
        let positions = Tensor::from_vec(positions, total, &self.device)?;
        // Word + position + token type 0 (in that order, as in `forward`),
        // then LayerNorm.
        let x = self
            .word
            .rows(ids, d, &self.device)?
            .add(&self.position.index_select(&positions, 0)?)?
            .broadcast_add(&self.token_type0)?;
        let mut x = self.emb_norm.forward(&x)?;
        let scale = (1.0 / (self.head_dim as f64).sqrt()) as f32;
        for layer in &self.layers {
            x = self.layer_packed(layer, &x, lens, scale)?;
        }
        x.flatten_all()?.to_vec1::<f32>().and_then(|v| {
            if v.len() == total * d {
                Ok(v)
            } else {
                Err(candle_core::Error::msg("packed forward: wrong output size"))
            }
        })
    }

    /// One encoder layer over packed rows (see [`Self::forward_packed`]).
    fn layer_packed(
        &self,
        layer: &Layer,
        x: &Tensor,
        lens: &[usize],
        scale: f32,
    ) -> Result<Tensor> {
        let arch = self.arch;
        let (total, d) = x.dims2()?;
        let xs = x.flatten_all()?.to_vec1::<f32>()?;
        let qkv = layer.qkv.forward_rows(arch, &xs, total, Act::Identity)?; // [N, 3D]
        let ctx = crate::attention::packed(arch, &qkv, lens, self.heads, self.head_dim, scale)
            .ok_or_else(|| candle_core::Error::msg("attention: shape mismatch"))?; // [N, D]
        let attn = layer
            .attn_out
            .forward_rows(arch, &ctx, total, Act::Identity)?;
        let attn = Tensor::from_vec(attn, (total, d), &self.device)?;
        self.after_attention(layer, &attn, x)
    }

    /// The rest of a layer once attention is done, the same for packed and
    /// padded rows: residual and norm, the feed-forward pair, residual and
    /// norm.
    fn after_attention(&self, layer: &Layer, attn: &Tensor, x: &Tensor) -> Result<Tensor> {
        let arch = self.arch;
        let x = layer.attn_norm.forward(&(attn + x)?)?;
        // The exact GELU runs inside the matmul's output pass; the others
        // are rare in sentence-transformers models and stay candle ops.
        let up = match self.act {
            HiddenAct::Gelu => layer.up.forward(arch, &x, Act::GeluErf)?,
            HiddenAct::GeluApproximate => layer.up.forward(arch, &x, Act::Identity)?.gelu()?,
            HiddenAct::Relu => layer.up.forward(arch, &x, Act::Identity)?.relu()?,
        };
        let down = layer.down.forward(arch, &up, Act::Identity)?;
        layer.out_norm.forward(&(down + x)?)
    }

    fn layer(
        &self,
        layer: &Layer,
        x: &Tensor,
        rows: usize,
        cols: usize,
        bias: Option<&Tensor>,
        scale: f64,
    ) -> Result<Tensor> {
        let (h, hd, d) = (self.heads, self.head_dim, self.hidden);
        let arch = self.arch;
        let qkv = layer.qkv.forward(arch, x, Act::Identity)?; // [R*C, 3D]
        let qkv = qkv.reshape((rows, cols, 3, h, hd))?;
        let split = |i: usize| -> Result<Tensor> {
            // [R, C, H, hd] -> [R, H, C, hd]
            qkv.narrow(2, i, 1)?
                .squeeze(2)?
                .transpose(1, 2)?
                .contiguous()
        };
        let q = split(0)?;
        let k = split(1)?;
        let v = split(2)?;
        let scores = (q.matmul(&k.t()?)? * scale)?; // [R, H, C, C]
        let scores = match bias {
            Some(b) => scores.broadcast_add(b)?,
            None => scores,
        };
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        let ctx = probs
            .matmul(&v)? // [R, H, C, hd]
            .transpose(1, 2)?
            .contiguous()?
            .reshape((rows * cols, d))?;
        let attn = layer.attn_out.forward(arch, &ctx, Act::Identity)?;
        self.after_attention(layer, &attn, x)
    }
}
