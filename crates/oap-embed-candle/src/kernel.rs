//! The linear layers' matmul, written for few token rows on a small CPU.
//!
//! `y = x Wᵀ + b` (then optionally GELU) where `x` is `[m, k]` with `m` the
//! token rows (about 10 for a query) and `W` the layer's `[n, k]` weight.
//! At such small `m` the work is bound by reading the weights, not by
//! multiplying, so the weight is repacked once at load into *panels*: `n`
//! split into blocks of `width` output columns (two SIMD registers), each
//! block stored `[k][width]` contiguously. A panel is then one sequential
//! stream that the microkernel reads exactly once per block of rows, holding
//! `MR × 2` accumulators in registers, with no packing at call time.
//!
//! SIMD comes from `pulp` (safe, runtime-dispatched: AVX-512 where the CPU
//! has it, else AVX2+FMA on x86-64, NEON on aarch64, scalar elsewhere); the
//! panel width follows the vector width detected at load. AVX-512 halves a
//! query's time on the machines that have it (docs/BENCHMARKS.md, "Query
//! embedding"): the same weights in panels twice as wide, half the loop
//! iterations. Panels are split across the current rayon pool's
//! threads, so one query uses every core of the pool.

use pulp::{Arch, Simd, WithSimd};
use rayon::prelude::*;

/// Token rows per register tile: `MR × 2` accumulators plus two weight
/// vectors and one broadcast fit AVX2's 16 registers.
const MR: usize = 6;

/// Token rows per cache block: the rows of `x` a thread keeps hot while it
/// streams its panels (48 × 1536 floats = 288 KiB, within L2).
const MB: usize = 48;

/// Activation applied to the output in the same pass as the bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Act {
    /// None: `x Wᵀ + b`.
    Identity,
    /// GELU with the exact `erf` (BERT's `gelu`).
    GeluErf,
}

/// A weight `[n, k]` repacked into panels of `width` output columns.
pub(crate) struct Packed {
    k: usize,
    n: usize,
    width: usize,
    /// `ceil(n / width)` panels of `k * width` floats; columns past `n` in the
    /// last panel are zero.
    data: Vec<f32>,
    bias: Vec<f32>,
}

/// Floats per panel row for this machine's vector width (two registers).
pub(crate) fn panel_width(arch: Arch) -> usize {
    struct Lanes;
    impl WithSimd for Lanes {
        type Output = usize;
        #[inline(always)]
        fn with_simd<S: Simd>(self, _simd: S) -> usize {
            S::F32_LANES
        }
    }
    2 * arch.dispatch(Lanes)
}

impl Packed {
    /// Packs `weight` (`[n, k]`, row-major, the layout checkpoints store) and
    /// `bias` (`[n]`). Returns `None` when the lengths do not match.
    pub(crate) fn new(
        weight: &[f32],
        bias: &[f32],
        n: usize,
        k: usize,
        width: usize,
    ) -> Option<Self> {
        if weight.len() != n.checked_mul(k)? || bias.len() != n || width == 0 || k == 0 {
            return None;
        }
        let panels = n.div_ceil(width);
        let mut data = vec![0.0f32; panels * k * width];
        for (p, panel) in data.chunks_exact_mut(k * width).enumerate() {
            for (kk, row) in panel.chunks_exact_mut(width).enumerate() {
                for (j, slot) in row.iter_mut().enumerate() {
                    let col = p * width + j;
                    if col < n {
                        *slot = weight[col * k + kk];
                    }
                }
            }
        }
        Some(Self {
            k,
            n,
            width,
            data,
            bias: bias.to_vec(),
        })
    }

    /// Input features.
    pub(crate) fn k(&self) -> usize {
        self.k
    }

    /// Output features.
    pub(crate) fn n(&self) -> usize {
        self.n
    }

    /// `act(x Wᵀ + b)` for `x` of `m` rows of `k` floats; `[m, n]` row-major.
    /// `None` when `x` is not `m × k` or `arch` packs a different width than
    /// the one this weight was packed with.
    pub(crate) fn forward(&self, arch: Arch, x: &[f32], m: usize, act: Act) -> Option<Vec<f32>> {
        if x.len() != m.checked_mul(self.k)? || panel_width(arch) != self.width {
            return None;
        }
        let (k, w) = (self.k, self.width);
        let panels = self.data.len() / (k * w);
        // Panel-major result: panel p's rows are `[m][w]` at `p * m * w`.
        let mut pm = vec![0.0f32; panels * m * w];
        if m == 0 {
            return Some(Vec::new());
        }
        let threads = rayon::current_num_threads().min(panels).max(1);
        let per_task = panels.div_ceil(threads);
        let run = |(t, out): (usize, &mut [f32])| {
            let first = t * per_task;
            let count = out.len() / (m * w);
            let weights = &self.data[first * k * w..(first + count) * k * w];
            arch.dispatch(Panels {
                x,
                m,
                k,
                w,
                weights,
                out,
            });
        };
        if threads == 1 {
            run((0, &mut pm[..]));
        } else {
            pm.par_chunks_mut(per_task * m * w)
                .enumerate()
                .for_each(run);
        }
        let mut y = vec![0.0f32; m * self.n];
        for (r, row) in y.chunks_exact_mut(self.n).enumerate() {
            for (p, cols) in row.chunks_mut(w).enumerate() {
                let src = &pm[(p * m + r) * w..][..cols.len()];
                cols.copy_from_slice(src);
            }
            for (v, b) in row.iter_mut().zip(&self.bias) {
                *v += b;
            }
        }
        if act == Act::GeluErf {
            arch.dispatch(Gelu { values: &mut y });
        }
        Some(y)
    }
}

/// One thread's share: every row block of `x` against a run of panels.
struct Panels<'a> {
    x: &'a [f32],
    m: usize,
    k: usize,
    w: usize,
    weights: &'a [f32],
    out: &'a mut [f32],
}

impl WithSimd for Panels<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let Self {
            x,
            m,
            k,
            w,
            weights,
            out,
        } = self;
        let mut r0 = 0;
        while r0 < m {
            let rows = MB.min(m - r0);
            for (panel, out) in weights.chunks_exact(k * w).zip(out.chunks_exact_mut(m * w)) {
                let (panel, _) = S::as_simd_f32s(panel);
                let mut r = r0;
                while r < r0 + rows {
                    let tile = MR.min(r0 + rows - r);
                    let xs = &x[r * k..(r + tile) * k];
                    let dst = &mut out[r * w..(r + tile) * w];
                    match tile {
                        6 => tile_kernel::<S, 6>(simd, xs, k, panel, dst),
                        5 => tile_kernel::<S, 5>(simd, xs, k, panel, dst),
                        4 => tile_kernel::<S, 4>(simd, xs, k, panel, dst),
                        3 => tile_kernel::<S, 3>(simd, xs, k, panel, dst),
                        2 => tile_kernel::<S, 2>(simd, xs, k, panel, dst),
                        _ => tile_kernel::<S, 1>(simd, xs, k, panel, dst),
                    }
                    r += tile;
                }
            }
            r0 += rows;
        }
    }
}

/// `R` rows of `x` (`[R, k]`) times one panel (`k` pairs of vectors), into
/// `dst` (`[R][2 vectors]`).
#[inline(always)]
fn tile_kernel<S: Simd, const R: usize>(
    simd: S,
    xs: &[f32],
    k: usize,
    panel: &[S::f32s],
    dst: &mut [f32],
) {
    let zero = simd.splat_f32s(0.0);
    let mut acc = [[zero; 2]; R];
    let rows: [&[f32]; R] = std::array::from_fn(|i| &xs[i * k..(i + 1) * k]);
    for (kk, wv) in panel.chunks_exact(2).enumerate().take(k) {
        let (w0, w1) = (wv[0], wv[1]);
        for i in 0..R {
            let b = simd.splat_f32s(rows[i][kk]);
            acc[i][0] = simd.mul_add_e_f32s(b, w0, acc[i][0]);
            acc[i][1] = simd.mul_add_e_f32s(b, w1, acc[i][1]);
        }
    }
    let (dst, _) = S::as_mut_simd_f32s(dst);
    for (pair, a) in dst.chunks_exact_mut(2).zip(acc) {
        pair[0] = a[0];
        pair[1] = a[1];
    }
}

/// GELU in place, vectorised by the compiler under the dispatched features.
struct Gelu<'a> {
    values: &'a mut [f32],
}

impl WithSimd for Gelu<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        for v in self.values.iter_mut() {
            *v = gelu_erf(*v);
        }
    }
}

/// `x Φ(x) = x (1 + erf(x / √2)) / 2`.
#[inline(always)]
pub(crate) fn gelu_erf(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// `erf` for `f32` as a rational polynomial on `[-4, 4]` (beyond it erf is
/// ±1 in `f32`), within a few ulp of the exact value; branch-free so the
/// compiler vectorises it (libm's scalar `erf` was a tenth of a query).
/// Coefficients: the minimax fit Eigen and XLA use for `float`.
#[inline(always)]
pub(crate) fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = x2 * -2.726_142_3e-10 + 2.770_681_4e-8;
    p = x2 * p + -2.101_024e-6;
    p = x2 * p + -5.692_506_4e-5;
    p = x2 * p + -7.349_906_3e-4;
    p = x2 * p + -2.954_6e-3;
    p = x2 * p + -1.609_603_3e-2;
    p *= x;
    let mut q = x2 * -1.456_607_2e-5 + -2.133_740_6e-4;
    q = x2 * q + -1.682_827e-3;
    q = x2 * q + -7.373_329e-3;
    q = x2 * q + -1.426_474e-2;
    p / q
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Deterministic pseudo-random floats in [-1, 1).
    pub(crate) fn values(n: usize, salt: u32) -> Vec<f32> {
        let mut s = salt.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s as f32 / u32::MAX as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn naive(x: &[f32], w: &[f32], b: &[f32], m: usize, n: usize, k: usize, act: Act) -> Vec<f32> {
        let mut y = vec![0.0f32; m * n];
        for r in 0..m {
            for c in 0..n {
                let mut s = f64::from(b[c]);
                for i in 0..k {
                    s += f64::from(x[r * k + i]) * f64::from(w[c * k + i]);
                }
                let s = s as f32;
                y[r * n + c] = match act {
                    Act::Identity => s,
                    Act::GeluErf => gelu_erf(s),
                };
            }
        }
        y
    }

    /// Every instruction-set level this machine runs, not only the best
    /// one `Arch::new` picks: a board without AVX-512 (or a CI runner
    /// without AVX2) runs another path than the machine the tests ran on.
    fn every_arch() -> Vec<Arch> {
        #[allow(unused_mut, reason = "only x86-64 has levels to add")]
        let mut levels = vec![Arch::Scalar, Arch::new()];
        #[cfg(target_arch = "x86_64")]
        {
            levels.extend(pulp::x86::V3::try_new().map(Arch::V3));
            levels.extend(pulp::x86::V4::try_new().map(Arch::V4));
        }
        levels
    }

    fn check(m: usize, n: usize, k: usize, act: Act) {
        for arch in every_arch() {
            check_on(arch, m, n, k, act);
        }
    }

    fn check_on(arch: Arch, m: usize, n: usize, k: usize, act: Act) {
        let (x, w, b) = (values(m * k, 1), values(n * k, 2), values(n, 3));
        let packed = Packed::new(&w, &b, n, k, panel_width(arch)).unwrap();
        let want = naive(&x, &w, &b, m, n, k, act);
        for threads in [1, 2, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let got = pool.install(|| packed.forward(arch, &x, m, act)).unwrap();
            assert_eq!(got.len(), m * n);
            let worst = got
                .iter()
                .zip(&want)
                .map(|(g, e)| (g - e).abs())
                .fold(0.0f32, f32::max);
            assert!(
                worst <= 1e-5 * (k as f32).sqrt(),
                "m={m} n={n} k={k} threads={threads} {act:?} width={}: off by {worst}",
                panel_width(arch)
            );
        }
    }

    #[test]
    fn matches_naive_on_odd_shapes() {
        for (m, n, k) in [
            (1, 16, 8),
            (1, 384, 384),
            (13, 37, 19),
            (10, 1536, 384),
            (7, 5, 3),
            (6, 17, 1),
            (50, 33, 65),
            (97, 100, 31),
        ] {
            check(m, n, k, Act::Identity);
        }
        check(13, 45, 23, Act::GeluErf);
    }

    #[test]
    fn zero_rows_and_bad_shapes() {
        let arch = Arch::new();
        let width = panel_width(arch);
        let p = Packed::new(&[1.0; 6], &[0.0; 2], 2, 3, width).unwrap();
        assert_eq!(p.forward(arch, &[], 0, Act::Identity), Some(Vec::new()));
        assert_eq!(p.forward(arch, &[1.0; 4], 1, Act::Identity), None);
        assert!(Packed::new(&[1.0; 5], &[0.0; 2], 2, 3, width).is_none());
        assert!(Packed::new(&[1.0; 6], &[0.0; 3], 2, 3, width).is_none());
        assert!(Packed::new(&[1.0; 6], &[0.0; 2], 2, 3, width + 1)
            .unwrap()
            .forward(arch, &[1.0; 3], 1, Act::Identity)
            .is_none());
    }

    #[test]
    fn erf_is_close_to_the_exact_function() {
        // Reference: erf via f64 with the standard series/continued fraction
        // is not in std, so compare against a high-precision numeric integral.
        let exact = |x: f64| -> f64 {
            // erf(x) = 2/sqrt(pi) * integral_0^x exp(-t^2) dt, Simpson's rule.
            let steps = 20_000;
            let h = x / steps as f64;
            let mut s = 1.0 + (-x * x).exp();
            for i in 1..steps {
                let t = i as f64 * h;
                s += if i % 2 == 1 { 4.0 } else { 2.0 } * (-t * t).exp();
            }
            s * h / 3.0 * 2.0 / std::f64::consts::PI.sqrt()
        };
        let mut worst = 0.0f64;
        let mut x = -6.0f64;
        while x <= 6.0 {
            worst = worst.max((f64::from(erf(x as f32)) - exact(x)).abs());
            x += 0.013;
        }
        assert!(worst < 1e-6, "erf off by {worst}");
        assert_eq!(erf(0.0), 0.0);
        assert!((erf(10.0) - 1.0).abs() < 1e-6 && (erf(-10.0) + 1.0).abs() < 1e-6);
    }
}
