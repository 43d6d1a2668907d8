//! Block shapes of block-scaled quantisation: which elements share one scale.

use std::fmt;

use super::QuantError;

/// The elements that share one scale, in a 2-D tensor `[rows, cols]` whose last axis is the contraction
/// axis of the GEMM it feeds (so "1x128" groups run along the contraction, as DeepSeek-V3 quantises
/// activations, and "128x1" groups run along tokens, as its weight gradient re-quantises them).
///
/// The last block of a row or column may be shorter ("ragged"): a tensor of 200 columns in `1x128` blocks
/// has two blocks per row, of 128 and 72 elements. Each ragged block has its own amax and scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Block {
    /// `1xN`: N consecutive elements of a row (along the last axis).
    Rows(usize),
    /// `Nx1`: N consecutive elements of a column (along the first axis).
    Cols(usize),
    /// `RxC`: a tile of R rows and C columns (DeepSeek-V3's 128x128 weight blocks).
    Tile(usize, usize),
}

impl Block {
    /// Parse `"1x128"`, `"128x1"`, `"128x128"`, `"1x32"`, `"32x1"`, ... A `1xN` shape becomes [`Block::Rows`],
    /// `Nx1` (N > 1) [`Block::Cols`], anything else [`Block::Tile`]. Sizes must be positive integers.
    pub fn parse(s: &str) -> Result<Block, QuantError> {
        let bad = || QuantError::BadBlock(s.to_string());
        let (r, c) = s.split_once(['x', 'X']).ok_or_else(bad)?;
        let parse = |t: &str| t.trim().parse::<usize>().ok().filter(|&v| v > 0);
        let (r, c) = (parse(r).ok_or_else(bad)?, parse(c).ok_or_else(bad)?);
        Ok(match (r, c) {
            (1, c) => Block::Rows(c),
            (r, 1) => Block::Cols(r),
            (r, c) => Block::Tile(r, c),
        })
    }

    /// The block's extent `(rows, cols)`.
    pub fn dims(&self) -> (usize, usize) {
        match *self {
            Block::Rows(n) => (1, n),
            Block::Cols(n) => (n, 1),
            Block::Tile(r, c) => (r, c),
        }
    }

    /// The shape of the scale array of a `[rows, cols]` tensor: one scale per block, ragged last blocks
    /// included (`ceil(rows / R), ceil(cols / C)`).
    pub fn grid(&self, rows: usize, cols: usize) -> (usize, usize) {
        let (r, c) = self.dims();
        (rows.div_ceil(r.max(1)), cols.div_ceil(c.max(1)))
    }

    /// The block index `(bi, bj)` that element `(r, c)` belongs to.
    pub fn block_of(&self, r: usize, c: usize) -> (usize, usize) {
        let (br, bc) = self.dims();
        (r / br, c / bc)
    }
}

impl fmt::Display for Block {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (r, c) = self.dims();
        write!(f, "{r}x{c}")
    }
}
