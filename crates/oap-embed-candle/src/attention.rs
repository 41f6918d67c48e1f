//! Self-attention over packed token rows: each text attends to its own
//! tokens only, so a batch needs no padding and no mask.
//!
//! The input is the fused query/key/value projection of every text's rows
//! back to back (`[N, 3 × hidden]`, a row being `q | k | v`, each split into
//! heads of `head_dim`); text `i` owns the `lens[i]` rows after the texts
//! before it. For every (text, head): scores `q kᵀ × scale` over the text's
//! own rows, a softmax per query row, and the weighted sum of `v`. The
//! (text, head) pairs are independent and split across the current rayon
//! pool; each pair's arithmetic is fixed by its own rows alone, so a text
//! gets the same bits alone or in any batch.
//!
//! Plain loops over slices, compiled under the SIMD features `pulp` detects
//! (AVX-512 or AVX2+FMA, NEON): the dot products keep 8 independent partial
//! sums so the compiler can vectorise them without reordering a single sum.

use pulp::{Arch, Simd, WithSimd};
use rayon::prelude::*;

/// Multiply-adds (of the scores) below which the heads run on the calling
/// thread alone.
const PARALLEL_WORK: usize = 200_000;

/// Context vectors `[N, heads × head_dim]` row-major, or `None` when the
/// shapes do not fit (`qkv` is not `[sum(lens), 3 × heads × head_dim]`).
pub(crate) fn packed(
    arch: Arch,
    qkv: &[f32],
    lens: &[usize],
    heads: usize,
    head_dim: usize,
    scale: f32,
) -> Option<Vec<f32>> {
    let d = heads.checked_mul(head_dim)?;
    let total: usize = lens.iter().sum();
    if qkv.len() != total.checked_mul(3)?.checked_mul(d)? || head_dim == 0 {
        return None;
    }
    let mut starts = Vec::with_capacity(lens.len());
    let mut at = 0usize;
    for &len in lens {
        starts.push(at);
        at += len;
    }
    // One job per (text, head) with tokens; each returns its `[len, head_dim]`
    // block, scattered into the rows afterwards.
    let jobs: Vec<(usize, usize)> = (0..lens.len())
        .filter(|&t| lens[t] > 0)
        .flat_map(|t| (0..heads).map(move |h| (t, h)))
        .collect();
    let run = |&(t, h): &(usize, usize)| -> Vec<f32> {
        let mut out = vec![0.0f32; lens[t] * head_dim];
        arch.dispatch(Head {
            qkv,
            start: starts[t],
            len: lens[t],
            d,
            offset: h * head_dim,
            head_dim,
            scale,
            out: &mut out,
        });
        out
    };
    // A single short query is ~40 k multiply-adds in all: not worth waking
    // the pool's other threads.
    let work: usize = lens.iter().map(|&l| l * l).sum::<usize>() * d;
    let blocks: Vec<Vec<f32>> = if work < PARALLEL_WORK {
        jobs.iter().map(run).collect()
    } else {
        jobs.par_iter().map(run).collect()
    };
    let mut ctx = vec![0.0f32; total * d];
    for (&(t, h), block) in jobs.iter().zip(&blocks) {
        for (i, src) in block.chunks_exact(head_dim).enumerate() {
            let row = (starts[t] + i) * d + h * head_dim;
            ctx[row..row + head_dim].copy_from_slice(src);
        }
    }
    Some(ctx)
}

/// One head of one text.
struct Head<'a> {
    qkv: &'a [f32],
    /// First row of the text.
    start: usize,
    /// Rows of the text.
    len: usize,
    /// Hidden size (a third of a `qkv` row).
    d: usize,
    /// The head's first feature within q, k and v.
    offset: usize,
    head_dim: usize,
    scale: f32,
    /// `[len, head_dim]`.
    out: &'a mut [f32],
}

impl WithSimd for Head<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        let Self {
            qkv,
            start,
            len,
            d,
            offset,
            head_dim,
            scale,
            out,
        } = self;
        let row = |r: usize, part: usize| {
            let at = (start + r) * 3 * d + part * d + offset;
            &qkv[at..at + head_dim]
        };
        let mut probs = vec![0.0f32; len];
        for (i, dst) in out.chunks_exact_mut(head_dim).enumerate() {
            let q = row(i, 0);
            let mut max = f32::NEG_INFINITY;
            for (j, p) in probs.iter_mut().enumerate() {
                *p = dot(q, row(j, 1)) * scale;
                max = max.max(*p);
            }
            let mut sum = 0.0f32;
            for p in probs.iter_mut() {
                *p = (*p - max).exp();
                sum += *p;
            }
            let inv = 1.0 / sum;
            for (j, p) in probs.iter().enumerate() {
                let w = p * inv;
                for (o, v) in dst.iter_mut().zip(row(j, 2)) {
                    *o += w * v;
                }
            }
        }
    }
}

/// `a · b` with 8 independent partial sums (vectorisable as written).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (a8, a_rest) = a.split_at(a.len() - a.len() % 8);
    let (b8, b_rest) = b.split_at(a8.len().min(b.len()));
    for (x, y) in a8.chunks_exact(8).zip(b8.chunks_exact(8)) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (x, y) in a_rest.iter().zip(b_rest) {
        s += x * y;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::tests::values;

    /// Textbook attention for one text in f64.
    fn naive(qkv: &[f32], len: usize, heads: usize, hd: usize, scale: f32) -> Vec<f32> {
        let d = heads * hd;
        let at = |r: usize, part: usize, h: usize, c: usize| {
            f64::from(qkv[r * 3 * d + part * d + h * hd + c])
        };
        let mut out = vec![0.0f32; len * d];
        for h in 0..heads {
            for i in 0..len {
                let scores: Vec<f64> = (0..len)
                    .map(|j| {
                        (0..hd)
                            .map(|c| at(i, 0, h, c) * at(j, 1, h, c))
                            .sum::<f64>()
                            * f64::from(scale)
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = exps.iter().sum();
                for c in 0..hd {
                    let v: f64 = (0..len).map(|j| exps[j] / sum * at(j, 2, h, c)).sum();
                    out[i * d + h * hd + c] = v as f32;
                }
            }
        }
        out
    }

    #[test]
    fn each_text_attends_to_its_own_rows_only() {
        let arch = Arch::new();
        let (heads, hd) = (3, 12);
        let d = heads * hd;
        let lens = [5usize, 0, 1, 9, 70];
        let total: usize = lens.iter().sum();
        let qkv = values(total * 3 * d, 7);
        let got = packed(arch, &qkv, &lens, heads, hd, 0.3).unwrap();
        let mut start = 0;
        for &len in &lens {
            let own = &qkv[start * 3 * d..(start + len) * 3 * d];
            let want = naive(own, len, heads, hd, 0.3);
            let alone = packed(arch, own, &[len], heads, hd, 0.3).unwrap();
            let mine = &got[start * d..(start + len) * d];
            assert_eq!(mine, &alone[..], "a text's rows depend on its batch");
            let worst = mine
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            assert!(worst < 1e-5, "len {len}: off by {worst}");
            start += len;
        }
    }

    #[test]
    fn bad_shapes_are_refused() {
        let arch = Arch::new();
        assert!(packed(arch, &[0.0; 10], &[1], 2, 2, 1.0).is_none());
        assert_eq!(packed(arch, &[], &[0, 0], 2, 2, 1.0), Some(Vec::new()));
    }
}
