//! A trained linear map applied to query embeddings only.
//!
//! all-MiniLM-L6-v2 was trained on sentence pairs, not on "request → tool
//! description" pairs: a spoken request ("could you switch off the porch
//! light") and the description of the tool that serves it ("Turns off a
//! device or entity") are further apart than they should be. A query
//! adapter moves the query vector toward where such descriptions lie:
//! `q' = normalise(q + U (Vᵀ q))`, with `U` and `V` of shape
//! `[dim, rank]` (the identity plus a low-rank correction, so an untrained
//! or zero adapter changes nothing and a small rank cannot wander far).
//!
//! Documents are untouched, so the index does not depend on the adapter
//! and switching it on or off needs no rebuild; the cost is `2 · dim ·
//! rank` multiply-adds per query (24,576 at rank 32), nothing next to the
//! encoder's forward pass.
//!
//! No adapter is shipped or on by default: trained on the tool-retrieval
//! data available (`bench/train_adapter.py`), every one measured so far
//! ranks tools it was not trained on worse (docs/BENCHMARKS.md, "Query
//! adapter"). The engine takes one from a file (`.oqa`, a few tens of KB,
//! written by that script) for experiments:
//!
//! ```text
//! magic      8 bytes  "OAPQADP1"
//! dim        u32 LE
//! rank       u32 LE
//! model_len  u32 LE, then that many bytes: the sha256 prefix of the
//!            model it was trained for (the part of the model id after '@')
//! U          dim * rank f16 LE, row-major [dim][rank]
//! V          dim * rank f16 LE, row-major [dim][rank]
//! ```
//!
//! Architecture Invariant: an adapter is applied only to vectors of the
//! model it was trained for ([`QueryAdapter::fits`]); a vector of another
//! model passes through unchanged, because the map is meaningless in
//! another embedding space.

use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"OAPQADP1";

/// Largest adapter file read: two full-rank f16 matrices of a 1,024-dim
/// model and a header.
pub const MAX_FILE_BYTES: u64 = 2 * 1_024 * 1_024 * 2 + 4_096;

/// Largest rank accepted; a full-rank map of a 1,024-dim model at most.
const MAX_RANK: usize = 1_024;

/// Why an adapter file was refused.
#[derive(Debug, thiserror::Error)]
pub enum AdapterError {
    /// The file could not be read.
    #[error("query adapter {path}: {source}")]
    Read {
        /// The file named in the configuration.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The bytes are not an adapter of this format.
    #[error("query adapter {origin}: {problem}")]
    Format {
        /// Where the bytes came from (the file).
        origin: String,
        /// What is wrong with it.
        problem: String,
    },
}

/// `q' = normalise(q + U (Vᵀ q))`; see the module documentation.
#[derive(Clone)]
pub struct QueryAdapter {
    dim: usize,
    rank: usize,
    /// The sha256 prefix of the model it was trained for.
    model: String,
    /// `[dim][rank]`, row-major.
    u: Vec<f32>,
    /// `[dim][rank]`, row-major.
    v: Vec<f32>,
    /// sha256 of the file, to name the adapter in logs and reports.
    sha256: String,
}

impl std::fmt::Debug for QueryAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryAdapter")
            .field("dim", &self.dim)
            .field("rank", &self.rank)
            .field("model", &self.model)
            .field("sha256", &self.sha256)
            .finish()
    }
}

impl QueryAdapter {
    /// Reads an adapter file (at most [`MAX_FILE_BYTES`]).
    pub fn load(path: &Path) -> Result<QueryAdapter, AdapterError> {
        use std::io::Read;
        let read_error = |source| AdapterError::Read {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read_error)?;
        let mut bytes = Vec::new();
        #[allow(
            clippy::disallowed_methods,
            reason = "capped: the reader is take(MAX_FILE_BYTES + 1) and a larger file is refused"
        )]
        file.take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(read_error)?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(AdapterError::Format {
                origin: path.display().to_string(),
                problem: format!("larger than {MAX_FILE_BYTES} bytes"),
            });
        }
        Self::parse(&bytes, &path.display().to_string())
    }

    /// Parses adapter bytes; `origin` names them in errors.
    pub fn parse(bytes: &[u8], origin: &str) -> Result<QueryAdapter, AdapterError> {
        let bad = |problem: String| AdapterError::Format {
            origin: origin.to_string(),
            problem,
        };
        let mut at = 0usize;
        let mut take = |n: usize, what: &str| -> Result<&[u8], AdapterError> {
            let end = at
                .checked_add(n)
                .filter(|&end| end <= bytes.len())
                .ok_or_else(|| bad(format!("truncated in {what} ({} bytes)", bytes.len())))?;
            let part = &bytes[at..end];
            at = end;
            Ok(part)
        };
        if take(8, "the magic")? != MAGIC {
            return Err(bad("not a query adapter (bad magic)".into()));
        }
        let u32_at = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
        let dim = u32_at(take(4, "the dimension")?);
        let rank = u32_at(take(4, "the rank")?);
        if dim == 0 || rank == 0 || rank > MAX_RANK || rank > dim {
            return Err(bad(format!(
                "dimension {dim} and rank {rank} (rank must be 1..=min(dimension, {MAX_RANK}))"
            )));
        }
        let model_len = u32_at(take(4, "the model length")?);
        if model_len > 256 {
            return Err(bad(format!("model id of {model_len} bytes")));
        }
        let model = std::str::from_utf8(take(model_len, "the model id")?)
            .map_err(|_| bad("model id is not UTF-8".into()))?
            .to_string();
        let n = dim * rank;
        let mut matrix = |what: &str| -> Result<Vec<f32>, AdapterError> {
            let raw = take(n * 2, what)?;
            let values: Vec<f32> = raw
                .chunks_exact(2)
                .map(|b| f16_to_f32(u16::from_le_bytes([b[0], b[1]])))
                .collect();
            if values.iter().any(|x| !x.is_finite()) {
                return Err(bad(format!("{what} holds a non-finite value")));
            }
            Ok(values)
        };
        let u = matrix("U")?;
        let v = matrix("V")?;
        if at != bytes.len() {
            return Err(bad(format!(
                "{} bytes after the matrices (dimension {dim}, rank {rank})",
                bytes.len() - at
            )));
        }
        use sha2::Digest;
        let sha256 = hex::encode(sha2::Sha256::digest(bytes));
        Ok(QueryAdapter {
            dim,
            rank,
            model,
            u,
            v,
            sha256,
        })
    }

    /// Vector length it maps.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Rank of the correction.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// sha256 of the adapter file (hex).
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// The model it was trained for: the sha256 prefix in a model id.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// Whether it belongs to the model with this id (`<dir>@<sha256
    /// prefix>`, see `oap-embed-candle`) and dimension. The directory name
    /// does not matter: the same weights may live anywhere.
    pub fn fits(&self, model_id: &str, dim: usize) -> bool {
        let hash = model_id.rsplit_once('@').map_or(model_id, |(_, h)| h);
        dim == self.dim && !self.model.is_empty() && hash == self.model
    }

    /// `normalise(q + U (Vᵀ q))`. A vector of another length, or one the
    /// map sends to zero, is returned unchanged.
    pub fn apply(&self, q: &[f32]) -> Vec<f32> {
        if q.len() != self.dim {
            return q.to_vec();
        }
        // t = Vᵀ q, accumulated row by row so both matrices are read in
        // storage order.
        let mut t = vec![0f32; self.rank];
        for (x, row) in q.iter().zip(self.v.chunks_exact(self.rank)) {
            for (acc, w) in t.iter_mut().zip(row) {
                *acc += x * w;
            }
        }
        let mut out: Vec<f32> = q
            .iter()
            .zip(self.u.chunks_exact(self.rank))
            .map(|(x, row)| x + row.iter().zip(&t).map(|(w, s)| w * s).sum::<f32>())
            .collect();
        let norm = out.iter().map(|x| x * x).sum::<f32>().sqrt();
        if !norm.is_finite() || norm == 0.0 {
            return q.to_vec();
        }
        for x in &mut out {
            *x /= norm;
        }
        out
    }
}

/// IEEE 754 half to single precision (subnormals, infinities and NaN
/// included), so the adapter needs no extra crate.
fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let frac = u32::from(h & 0x3ff);
    let bits = match (exp, frac) {
        (0, 0) => sign,
        (0, f) => {
            // Subnormal: value = f * 2^-24.
            let value = f as f32 * (1.0 / 16_777_216.0);
            return if sign != 0 { -value } else { value };
        }
        (0x1f, 0) => sign | 0x7f80_0000,
        (0x1f, f) => sign | 0x7f80_0000 | (f << 13),
        (e, f) => sign | ((e + 112) << 23) | (f << 13),
    };
    f32::from_bits(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dim: u32, rank: u32, model: &str, u: &[f32], v: &[f32]) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend(dim.to_le_bytes());
        b.extend(rank.to_le_bytes());
        b.extend((model.len() as u32).to_le_bytes());
        b.extend(model.as_bytes());
        for x in u.iter().chain(v) {
            b.extend(f32_to_f16(*x).to_le_bytes());
        }
        b
    }

    /// Exact for the values the tests use (small integers and halves).
    fn f32_to_f16(x: f32) -> u16 {
        if x == 0.0 {
            return 0;
        }
        let bits = x.to_bits();
        let sign = ((bits >> 16) & 0x8000) as u16;
        let exp = ((bits >> 23) & 0xff) as i32 - 127 + 15;
        let frac = ((bits >> 13) & 0x3ff) as u16;
        sign | ((exp as u16) << 10) | frac
    }

    #[test]
    fn half_precision_decodes() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x3800), 0.5);
        assert_eq!(f16_to_f32(0x0001), 1.0 / 16_777_216.0);
        assert!(f16_to_f32(0x7c00).is_infinite());
        assert!(f16_to_f32(0x7e00).is_nan());
    }

    #[test]
    fn applies_identity_plus_low_rank_and_normalises() {
        // dim 2, rank 1: U = [1, 0]ᵀ, V = [0, 1]ᵀ, so q + U Vᵀ q adds q[1] to q[0].
        let a = QueryAdapter::parse(&file(2, 1, "abc", &[1.0, 0.0], &[0.0, 1.0]), "t").unwrap();
        let out = a.apply(&[0.0, 1.0]);
        let s = 1.0 / 2f32.sqrt();
        assert!(
            (out[0] - s).abs() < 1e-6 && (out[1] - s).abs() < 1e-6,
            "{out:?}"
        );
        // Another length passes through.
        assert_eq!(a.apply(&[1.0, 2.0, 3.0]), vec![1.0, 2.0, 3.0]);
    }

    #[test]
    fn fits_only_its_model() {
        let a = QueryAdapter::parse(&file(2, 1, "abc", &[0.0; 2], &[0.0; 2]), "t").unwrap();
        assert!(a.fits("all-MiniLM-L6-v2@abc", 2));
        assert!(a.fits("/some/other/dir@abc", 2));
        // The same weights kept in bfloat16: the same model.
        assert!(a.fits("all-MiniLM-L6-v2+bf16@abc", 2));
        assert!(!a.fits("all-MiniLM-L6-v2@abd", 2));
        assert!(!a.fits("all-MiniLM-L6-v2@abc", 3));
    }

    #[test]
    fn refuses_malformed_files_naming_the_problem() {
        let good = file(2, 1, "abc", &[1.0, 0.0], &[0.0, 1.0]);
        let err = |bytes: &[u8]| QueryAdapter::parse(bytes, "x.oqa").unwrap_err().to_string();
        assert!(err(b"NOTANADP").contains("bad magic"));
        assert!(err(&good[..good.len() - 1]).contains("truncated in V"));
        let mut long = good.clone();
        long.push(0);
        assert!(err(&long).contains("1 bytes after"));
        assert!(err(&file(2, 3, "abc", &[0.0; 6], &[0.0; 6])).contains("rank 3"));
        let mut nan = file(2, 1, "abc", &[1.0, 0.0], &[0.0, 1.0]);
        let at = nan.len() - 2;
        nan[at..].copy_from_slice(&0x7e00u16.to_le_bytes());
        assert!(err(&nan).contains("V holds a non-finite value"));
        assert!(err(&nan).starts_with("query adapter x.oqa"));
    }
}
