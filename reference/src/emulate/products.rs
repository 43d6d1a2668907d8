//! The non-negative f64 GEMMs of a GEMM stage's bound ([`super::stage`]), one tile of output rows at a
//! time, into buffers reused from tile to tile, and each distinct pair of operands only once.
//!
//! Why tiles: a weight gradient's output is 3M entries per expert, and its bound took four f64 products
//! of that size per expert (100 MB of fresh memory each time, which this VM hands out at 0.4-2.9 GB/s);
//! a tile of rows stays in cache and its buffers are reused. Why only once: a stage whose operands are
//! exact (bf16 weights read as stored, bf16 activations without error) has magnitudes, magnitudes plus
//! errors and fed magnitudes all equal, and four GEMMs of the same operands differ only in the factor
//! applied afterwards ([`abs_factor`]).
//!
//! Bit-identical to whole-matrix products: the `gemm` crate sums every output entry over K in blocks
//! whose length depends on K (and the cache sizes) only, on its general path. A tile takes that path
//! whenever it has more than 64 columns and at least 4 rows ([`row_tiles`] makes no other tiles); smaller
//! matrices are never split.

use std::ops::Range;

use gemm::Parallelism;
use ndarray::{s, Array2, ArrayView2, ArrayViewMut2};

/// Tiles are split only from this many output entries (8 MB of f64) on.
const SPLIT_FROM: usize = 1 << 20;
/// Entries per tile when split (512 KB of f64 per buffer).
const TILE_ENTRIES: usize = 1 << 16;

/// The row ranges an `[m, n]` output is computed in: one tile unless the output is large, then tiles of
/// about [`TILE_ENTRIES`] entries, at least 8 rows each.
pub fn row_tiles(m: usize, n: usize) -> Vec<Range<usize>> {
    if m * n < SPLIT_FROM || n <= 64 {
        return vec![0..m];
    }
    let per = (TILE_ENTRIES / n).max(8);
    let count = m.div_ceil(per);
    // Near-equal tiles (none short enough to take another path of the gemm crate).
    (0..count).map(|t| t * m / count..(t + 1) * m / count).collect()
}

/// `c = A·Bᵀ` in plain f64 (no rounding factor: see [`abs_factor`]), overwriting `c`.
pub fn abs_gemm_into(a: ArrayView2<f64>, b: ArrayView2<f64>, mut c: ArrayViewMut2<f64>) {
    let (m, k) = a.dim();
    let n = b.nrows();
    assert_eq!(c.dim(), (m, n), "output shape");
    let a = a.as_standard_layout();
    let b = b.as_standard_layout();
    if k == 0 || m == 0 || n == 0 {
        c.fill(0.0);
        return;
    }
    assert!(c.is_standard_layout(), "output buffer in standard layout");
    let par = if m * n * k > (1 << 22) && rayon::current_thread_index().is_none() { Parallelism::Rayon(0) } else { Parallelism::None };
    // SAFETY: standard-layout buffers of m·k, n·k and m·n elements with the strides given.
    unsafe {
        gemm::gemm(m, n, k, c.as_mut_ptr(), 1, n as isize, false, a.as_ptr(), 1, k as isize, b.as_ptr(), k as isize, 1, 0.0, 1.0, false, false, false, par);
    }
}

/// The factor that makes an f64 product of non-negative matrices with contraction length `k` an upper
/// bound of the real product (or, with `down`, a lower bound): its own worst rounding.
pub fn abs_factor(k: usize, down: bool) -> f64 {
    let f = (k as f64 + 2.0) * 2f64.powi(-52);
    if down {
        1.0 - f
    } else {
        1.0 + f
    }
}

/// An operand of the bound GEMMs. Operands with the same `id` hold the same values (the caller says so),
/// so a product of two already-computed ids is not computed again.
#[derive(Clone, Copy)]
pub struct Operand<'a> {
    pub id: u8,
    pub v: ArrayView2<'a, f64>,
}

/// The distinct products `|A|·|B|ᵀ` a stage needs, for one row tile at a time.
#[derive(Default)]
pub struct Products<'a> {
    pairs: Vec<(Operand<'a>, Operand<'a>)>,
    /// Output buffers, reused from tile to tile.
    bufs: Vec<Array2<f64>>,
    /// Per pair: its buffer and the first row of its tile there.
    at: Vec<(usize, usize)>,
    /// Stacked tiles of A operands.
    stacked: Array2<f64>,
    rows: usize,
}

impl<'a> Products<'a> {
    /// Give the tile buffers to this thread's next stage ([`crate::scratch`]; a stage runs per expert).
    pub fn recycle(self) {
        self.bufs.into_iter().chain([self.stacked]).for_each(crate::scratch::give_array);
    }

    /// The slot of the product `a·bᵀ` (a new one unless the same pair of ids is already there).
    pub fn add(&mut self, a: Operand<'a>, b: Operand<'a>) -> usize {
        if let Some(i) = self.pairs.iter().position(|(x, y)| x.id == a.id && y.id == b.id) {
            return i;
        }
        self.pairs.push((a, b));
        self.pairs.len() - 1
    }

    /// Compute every product for output rows `rows`. Products of the same B are one GEMM of their A tiles
    /// stacked (B read once, and a taller GEMM runs faster) when every block of the stack and the stack
    /// itself take the gemm crate's general path (see the module doc: at least 4 rows, more than 64
    /// columns), so that the bits do not change.
    pub fn compute(&mut self, rows: Range<usize>) {
        let t = rows.len();
        let count = self.pairs.len();
        self.at = vec![(0, 0); count];
        let mut done = vec![false; count];
        let mut used = 0;
        for i in 0..count {
            if done[i] {
                continue;
            }
            let b = self.pairs[i].1;
            let (n, k) = b.v.dim();
            let group: Vec<usize> = if t >= 4 && n > 64 {
                (i..count).filter(|&j| !done[j] && self.pairs[j].1.id == b.id).collect()
            } else {
                vec![i]
            };
            let height = group.len() * t;
            if self.bufs.len() <= used {
                self.bufs.push(Array2::zeros((0, 0)));
            }
            if self.bufs[used].dim().0 < height || self.bufs[used].ncols() != n {
                self.bufs[used] = crate::scratch::zeros2(height, n);
            }
            let out = self.bufs[used].slice_mut(s![..height, ..]);
            if let [only] = group[..] {
                abs_gemm_into(self.pairs[only].0.v.slice(s![rows.clone(), ..]), b.v, out);
            } else {
                if self.stacked.nrows() < height || self.stacked.ncols() != k {
                    self.stacked = crate::scratch::zeros2(height, k);
                }
                for (q, &j) in group.iter().enumerate() {
                    self.stacked.slice_mut(s![q * t..(q + 1) * t, ..]).assign(&self.pairs[j].0.v.slice(s![rows.clone(), ..]));
                }
                abs_gemm_into(self.stacked.slice(s![..height, ..]), b.v, out);
            }
            for (q, &j) in group.iter().enumerate() {
                self.at[j] = (used, q * t);
                done[j] = true;
            }
            used += 1;
        }
        self.rows = t;
    }

    /// Product `slot` on the current tile: `[rows, n]`, unscaled.
    pub fn tile(&self, slot: usize) -> ArrayView2<'_, f64> {
        let (buf, first) = self.at[slot];
        self.bufs[buf].slice(s![first..first + self.rows, ..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Row tiles give the bits of the whole product (the property the emulator's bit-identity rests on).
    #[test]
    fn tiles_equal_the_whole_product() {
        let mut g = crate::test_rng::XorShift(0x2545F4914F6CDD1D);
        let mut r = || {
            let x = g.next_u64();
            (x >> 11) as f64 / (1u64 << 53) as f64 * if x & 1 == 0 { 1.0 } else { 1e-3 }
        };
        for (m, n, k) in [(700, 1600, 64), (300, 2048, 700), (1536, 700, 13), (129, 65, 2100)] {
            let a = Array2::from_shape_fn((m, k), |_| r());
            let b = Array2::from_shape_fn((n, k), |_| r());
            let mut whole = Array2::zeros((m, n));
            abs_gemm_into(a.view(), b.view(), whole.view_mut());
            // A second A operand with the same B: stacked with the first when the tile allows.
            let a2 = a.mapv(|x| x * 3.0 + 1e-7);
            let mut whole2 = Array2::zeros((m, n));
            abs_gemm_into(a2.view(), b.view(), whole2.view_mut());
            let mut p = Products::default();
            let slot = p.add(Operand { id: 0, v: a.view() }, Operand { id: 0, v: b.view() });
            let slot2 = p.add(Operand { id: 1, v: a2.view() }, Operand { id: 0, v: b.view() });
            let same = |x: ArrayView2<f64>, y: ArrayView2<f64>| x.iter().zip(y.iter()).all(|(x, y)| x.to_bits() == y.to_bits());
            for rows in [0..m, 0..7, m - 5..m, 10..m / 2, 3..4, 0..2] {
                p.compute(rows.clone());
                for (slot, op, whole) in [(slot, &a, &whole), (slot2, &a2, &whole2)] {
                    // As one product of these rows (what the stage computed before tiles) ...
                    let mut alone = Array2::zeros((rows.len(), n));
                    abs_gemm_into(op.slice(s![rows.clone(), ..]), b.view(), alone.view_mut());
                    assert!(same(p.tile(slot), alone.view()), "m {m} n {n} k {k} rows {rows:?}");
                    // ... and, for tiles of at least 4 rows, as the whole product.
                    if rows.len() >= 4 {
                        assert!(same(p.tile(slot), whole.slice(s![rows.clone(), ..])), "m {m} n {n} k {k} rows {rows:?}");
                    }
                }
            }
            let tiles = row_tiles(m, n);
            assert_eq!(tiles.first().map(|t| t.start), Some(0));
            assert_eq!(tiles.last().map(|t| t.end), Some(m));
        }
    }
}
