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

/// How the linear layers keep their weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightPrecision {
    /// The checkpoint's `f32`, bit for bit: vectors equal candle's
    /// `BertModel`'s to float rounding.
    F32,
    /// `bfloat16` (rounded to nearest even), two per 32-bit lane: half the
    /// bytes a query streams from memory, widened back to `f32` in
    /// registers (a mask and a shift) with products and sums still in
    /// `f32`. A short query is bound by that stream, not by the
    /// arithmetic, so it costs about a quarter less CPU; the vectors move
    /// by about 1e-3 and the rankings of the task sets not at all or by a
    /// task (docs/BENCHMARKS.md, "Query embedding").
    #[default]
    Bf16,
}

/// The panels' storage: a panel row is two vectors of `f32`, or one vector
/// of `u32` lanes each holding the two columns' `bfloat16` values (the
/// first vector's in the high half, the second's in the low half).
enum PanelData {
    F32(Vec<f32>),
    Bf16Pairs(Vec<u32>),
}

impl PanelData {
    /// The panels in `range`, each `floats` (`k × width`) weights long.
    fn panels(&self, range: std::ops::Range<usize>, floats: usize) -> PanelSlice<'_> {
        match self {
            PanelData::F32(data) => {
                PanelSlice::F32(&data[range.start * floats..range.end * floats])
            }
            // Two weights per `u32`.
            PanelData::Bf16Pairs(data) => {
                let words = floats / 2;
                PanelSlice::Bf16Pairs(&data[range.start * words..range.end * words])
            }
        }
    }
}

/// A weight `[n, k]` repacked into panels of `width` output columns.
pub(crate) struct Packed {
    k: usize,
    n: usize,
    width: usize,
    /// `ceil(n / width)` panels of `k` rows of `width` columns; columns past
    /// `n` in the last panel are zero.
    data: PanelData,
    bias: Vec<f32>,
}

/// `v` rounded to the nearest `bfloat16` (ties to even), as its 16 bits.
pub(crate) fn bf16_bits(v: f32) -> u32 {
    let bits = v.to_bits();
    if v.is_nan() {
        // Keep it a (quiet) NaN: rounding could carry into the exponent.
        return (bits >> 16) | 0x40;
    }
    let round = 0x7fff + ((bits >> 16) & 1);
    bits.wrapping_add(round) >> 16
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
        precision: WeightPrecision,
    ) -> Option<Self> {
        if weight.len() != n.checked_mul(k)?
            || bias.len() != n
            || width == 0
            || !width.is_multiple_of(2)
            || k == 0
        {
            return None;
        }
        let panels = n.div_ceil(width);
        let at = |col: usize, kk: usize| if col < n { weight[col * k + kk] } else { 0.0 };
        let data = match precision {
            WeightPrecision::F32 => {
                let mut data = vec![0.0f32; panels * k * width];
                for (p, panel) in data.chunks_exact_mut(k * width).enumerate() {
                    for (kk, row) in panel.chunks_exact_mut(width).enumerate() {
                        for (j, slot) in row.iter_mut().enumerate() {
                            *slot = at(p * width + j, kk);
                        }
                    }
                }
                PanelData::F32(data)
            }
            WeightPrecision::Bf16 => {
                let lanes = width / 2;
                let mut data = vec![0u32; panels * k * lanes];
                for (p, panel) in data.chunks_exact_mut(k * lanes).enumerate() {
                    for (kk, row) in panel.chunks_exact_mut(lanes).enumerate() {
                        for (j, slot) in row.iter_mut().enumerate() {
                            let first = bf16_bits(at(p * width + j, kk));
                            let second = bf16_bits(at(p * width + lanes + j, kk));
                            *slot = (first << 16) | second;
                        }
                    }
                }
                PanelData::Bf16Pairs(data)
            }
        };
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
        let panels = self.n.div_ceil(w);
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
            let weights = self.data.panels(first..first + count, k * w);
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

/// A run of panels in either storage.
#[derive(Clone, Copy)]
enum PanelSlice<'a> {
    F32(&'a [f32]),
    Bf16Pairs(&'a [u32]),
}

/// One thread's share: every row block of `x` against a run of panels.
struct Panels<'a> {
    x: &'a [f32],
    m: usize,
    k: usize,
    w: usize,
    weights: PanelSlice<'a>,
    out: &'a mut [f32],
}

/// A panel's rows, each widened to its two vectors of `f32` weights.
trait PanelRows<S: Simd>: Copy {
    /// One panel row as stored.
    type Row: Copy;
    /// The panel's rows in order.
    fn rows(self) -> impl Iterator<Item = Self::Row>;
    /// A row's two weight vectors.
    fn widen(self, simd: S, row: Self::Row) -> (S::f32s, S::f32s);
}

/// A panel of `f32`: two vectors per row.
#[derive(Clone, Copy)]
struct F32Rows<'a, S: Simd>(&'a [S::f32s]);

impl<'a, S: Simd> PanelRows<S> for F32Rows<'a, S> {
    type Row = &'a [S::f32s];

    #[inline(always)]
    fn rows(self) -> impl Iterator<Item = Self::Row> {
        self.0.chunks_exact(2)
    }

    #[inline(always)]
    fn widen(self, _simd: S, row: Self::Row) -> (S::f32s, S::f32s) {
        (row[0], row[1])
    }
}

/// A panel of `bfloat16` pairs: one vector of `u32` per row.
#[derive(Clone, Copy)]
struct Bf16Rows<'a, S: Simd> {
    rows: &'a [S::u32s],
    high: S::u32s,
    shift: S::u32s,
}

impl<S: Simd> PanelRows<S> for Bf16Rows<'_, S> {
    type Row = S::u32s;

    #[inline(always)]
    fn rows(self) -> impl Iterator<Item = Self::Row> {
        self.rows.iter().copied()
    }

    #[inline(always)]
    fn widen(self, simd: S, pair: Self::Row) -> (S::f32s, S::f32s) {
        (
            simd.transmute_f32s_u32s(simd.and_u32s(pair, self.high)),
            simd.transmute_f32s_u32s(simd.wrapping_dyn_shl_u32s(pair, self.shift)),
        )
    }
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
        match weights {
            PanelSlice::F32(weights) => {
                let panels = weights.chunks_exact(k * w).map(|panel| {
                    let (panel, _) = S::as_simd_f32s(panel);
                    F32Rows::<S>(panel)
                });
                row_blocks(simd, x, m, k, w, panels, out);
            }
            PanelSlice::Bf16Pairs(weights) => {
                let (high, shift) = (simd.splat_u32s(0xffff_0000), simd.splat_u32s(16));
                let panels = weights.chunks_exact(k * w / 2).map(|panel| {
                    let (rows, _) = S::as_simd_u32s(panel);
                    Bf16Rows::<S> { rows, high, shift }
                });
                row_blocks(simd, x, m, k, w, panels, out);
            }
        }
    }
}

/// Every row block of `x` against each panel in turn.
#[inline(always)]
fn row_blocks<S: Simd, P: PanelRows<S>>(
    simd: S,
    x: &[f32],
    m: usize,
    k: usize,
    w: usize,
    panels: impl Iterator<Item = P> + Clone,
    out: &mut [f32],
) {
    let mut r0 = 0;
    while r0 < m {
        let rows = MB.min(m - r0);
        for (panel, out) in panels.clone().zip(out.chunks_exact_mut(m * w)) {
            let mut r = r0;
            while r < r0 + rows {
                let tile = MR.min(r0 + rows - r);
                let xs = &x[r * k..(r + tile) * k];
                let dst = &mut out[r * w..(r + tile) * w];
                match tile {
                    6 => tile_kernel::<S, P, 6>(simd, xs, k, panel, dst),
                    5 => tile_kernel::<S, P, 5>(simd, xs, k, panel, dst),
                    4 => tile_kernel::<S, P, 4>(simd, xs, k, panel, dst),
                    3 => tile_kernel::<S, P, 3>(simd, xs, k, panel, dst),
                    2 => tile_kernel::<S, P, 2>(simd, xs, k, panel, dst),
                    _ => tile_kernel::<S, P, 1>(simd, xs, k, panel, dst),
                }
                r += tile;
            }
        }
        r0 += rows;
    }
}

/// `R` rows of `x` (`[R, k]`) times one panel (`k` rows of two vectors),
/// into `dst` (`[R][2 vectors]`).
#[inline(always)]
fn tile_kernel<S: Simd, P: PanelRows<S>, const R: usize>(
    simd: S,
    xs: &[f32],
    k: usize,
    panel: P,
    dst: &mut [f32],
) {
    let zero = simd.splat_f32s(0.0);
    let mut acc = [[zero; 2]; R];
    let rows: [&[f32]; R] = std::array::from_fn(|i| &xs[i * k..(i + 1) * k]);
    for (kk, row) in panel.rows().enumerate().take(k) {
        let (w0, w1) = panel.widen(simd, row);
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
            for precision in [WeightPrecision::F32, WeightPrecision::Bf16] {
                check_on(arch, m, n, k, act, precision);
            }
        }
    }

    /// The packed product against the naive one on the weights the packing
    /// keeps (rounded to `bfloat16` for that precision).
    fn check_on(arch: Arch, m: usize, n: usize, k: usize, act: Act, precision: WeightPrecision) {
        let (x, w, b) = (values(m * k, 1), values(n * k, 2), values(n, 3));
        let packed = Packed::new(&w, &b, n, k, panel_width(arch), precision).unwrap();
        let kept: Vec<f32> = match precision {
            WeightPrecision::F32 => w.clone(),
            WeightPrecision::Bf16 => w
                .iter()
                .map(|v| f32::from_bits(bf16_bits(*v) << 16))
                .collect(),
        };
        let want = naive(&x, &kept, &b, m, n, k, act);
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
                "m={m} n={n} k={k} threads={threads} {act:?} {precision:?} width={}: off by {worst}",
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
        let p = Packed::new(&[1.0; 6], &[0.0; 2], 2, 3, width, WeightPrecision::F32).unwrap();
        assert_eq!(p.forward(arch, &[], 0, Act::Identity), Some(Vec::new()));
        assert_eq!(p.forward(arch, &[1.0; 4], 1, Act::Identity), None);
        assert!(Packed::new(&[1.0; 5], &[0.0; 2], 2, 3, width, WeightPrecision::F32).is_none());
        assert!(Packed::new(&[1.0; 6], &[0.0; 3], 2, 3, width, WeightPrecision::F32).is_none());
        // A panel row is two vectors: an odd width cannot be split.
        assert!(Packed::new(&[1.0; 6], &[0.0; 2], 2, 3, 3, WeightPrecision::Bf16).is_none());
        assert!(
            Packed::new(&[1.0; 6], &[0.0; 2], 2, 3, width + 2, WeightPrecision::F32)
                .unwrap()
                .forward(arch, &[1.0; 3], 1, Act::Identity)
                .is_none()
        );
    }

    #[test]
    fn bf16_rounds_to_nearest_even_and_keeps_specials() {
        let bits = |v: u32| bf16_bits(f32::from_bits(v));
        assert_eq!(bf16_bits(1.0), 0x3f80);
        assert_eq!(bf16_bits(-2.0), 0xc000);
        assert_eq!(bf16_bits(-0.0), 0x8000);
        // Below half, above half, and both ties (to the even neighbour).
        assert_eq!(bits(0x3f80_7fff), 0x3f80);
        assert_eq!(bits(0x3f80_8001), 0x3f81);
        assert_eq!(bits(0x3f80_8000), 0x3f80);
        assert_eq!(bits(0x3f81_8000), 0x3f82);
        // Rounding carries into the exponent; past the largest bf16 it is ∞.
        assert_eq!(bits(0x3fff_ffff), 0x4000);
        assert_eq!(bf16_bits(f32::MAX), 0x7f80);
        assert_eq!(bf16_bits(f32::INFINITY), 0x7f80);
        assert_eq!(bf16_bits(f32::NEG_INFINITY), 0xff80);
        for nan in [
            f32::NAN,
            f32::from_bits(0x7f80_0001),
            f32::from_bits(0xffff_ffff),
        ] {
            assert!(f32::from_bits(bf16_bits(nan) << 16).is_nan(), "{nan:?}");
        }
        // A value bf16 holds exactly comes back unchanged.
        for v in [0.5f32, -3.0, 1.0e-3_f32, 65_536.0] {
            let kept = f32::from_bits(bf16_bits(v) << 16);
            assert!((kept - v).abs() <= v.abs() / 256.0, "{v} -> {kept}");
        }
        assert_eq!(f32::from_bits(bf16_bits(0.5) << 16), 0.5);
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
