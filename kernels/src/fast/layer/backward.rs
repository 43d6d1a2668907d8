//! The backward's launches: dA_raw and the row-wise SwiGLU backward, the routing-weight gradient, the weight
//! gradients over each expert's rows, dX rows and the un-dispatch.

use super::*;

impl FastLayer<'_> {
    /// dA (+ SwiGLU backward, A', routing-weight partials), routing-weight gradient, dX rows, un-dispatch,
    /// dW13, dW2. Needs a forward first. Asynchronous.
    pub fn backward(&mut self) -> Result<(), GpuError> {
        let FastDims { tokens: t, hidden: hd, inter: id, experts: e, top_k: kk } = self.dims;
        let tiles = if self.rows > 0 { self.max_tiles } else { 0 };
        let n_tiles_i = if self.direct {
            1
        } else if self.wgmma {
            id.div_ceil(WG_TILE_N)
        } else {
            id.div_ceil(TILE_N)
        };
        if self.wgmma && !self.direct {
            // K-major copies of the weights for the wgmma data-gradient GEMMs
            if self.w2t.len() < e * hd * id {
                self.w2t = zeros(self.gpu, e * hd * id)?;
                self.w13t = zeros(self.gpu, e * 2 * id * hd)?;
            }
            let (w2, w2t, w13, w13t) = (self.ptr(&self.w2), self.ptr(&self.w2t), self.ptr(&self.w13), self.ptr(&self.w13t));
            self.transpose("transpose_w2", w2, w2t, hd, id)?;
            self.transpose("transpose_w13", w13, w13t, 2 * id, hd)?;
        }
        // dY's rows in expert order in the dX-rows buffer (free until dX), for dA_raw and grad_w2; then X's, for
        // grad_w13
        let gather_first = self.persistent && self.gather_first && self.rows > 0;
        // with dy_rows_from_da, dA_raw gathers dY's rows and writes them into the dX-rows buffer as it goes
        let dy_from_da = gather_first && self.direct && self.dy_rows_from_da;
        let (dy_rows, dy_idx) = if gather_first && !dy_from_da {
            let (dy, dst) = (self.ptr(&self.dy), self.ptr(&self.dx_rows));
            self.gather_rows("gather_dy", dy, dst, hd)?;
            (dst, 0)
        } else {
            (self.ptr(&self.dy), self.ptr(&self.row_token))
        };
        let mut p = self.base_params();
        p.a = dy_rows;
        p.a_idx = dy_idx;
        if dy_from_da {
            p.a_rows = self.ptr(&self.dx_rows);
        }
        p.lda = hd as i64;
        if self.wgmma && !self.direct {
            p.b = self.ptr(&self.w2t);
            p.ldb = hd as i64;
        } else {
            p.b = self.ptr(&self.w2);
            p.ldb = id as i64;
        }
        p.b_estride = (hd * id) as i64;
        p.c = self.ptr(&self.dh);
        p.c2 = self.ptr(&self.aw);
        p.h = self.ptr(&self.h);
        p.row_w = self.ptr(&self.row_w);
        p.ds_part = self.ptr(&self.ds_part);
        p.n_dim = id as i32;
        p.k_dim = hd as i32;
        if self.direct {
            p.c = self.ptr(&self.da_raw);
            p.ldc = id as i64;
            self.gemm("wg_rows_bmn", "dA_raw", (id.div_ceil(WG_TILE_N), tiles, 1), p)?;
            if self.rows > 0 {
                let (rows_i, ii) = (self.rows as i32, id as i32);
                let (alpha, limit) = (self.alpha, self.limit);
                let cfg = LaunchConfig { grid_dim: (self.rows.div_ceil(8) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
                self.launch("swiglu_bwd_rows", |me| {
                    // SAFETY: fc_swiglu_bwd_rows(const bf16*, const bf16*, const float*, bf16*, bf16*, float*, int,
                    // int, float, float); da_raw rows x I, h and dh rows x 2I, aw rows x I, ds_part >= rows.
                    unsafe {
                        me.gpu.stream.launch_builder(me.k.f("fc_swiglu_bwd_rows"))
                            .arg(&me.da_raw).arg(&me.h).arg(&me.row_w).arg(&me.dh).arg(&me.aw).arg(&me.ds_part)
                            .arg(&rows_i).arg(&ii).arg(&alpha).arg(&limit)
                            .launch(cfg)?
                    };
                    Ok(())
                })?;
            }
        } else if self.wgmma {
            self.gemm("wg_dgrad_swiglu", "dA+swiglu_bwd", (n_tiles_i, tiles, 1), p)?;
        } else {
            self.gemm("fg_dgrad_swiglu", "dA+swiglu_bwd", (n_tiles_i, tiles, 1), p)?;
        }
        if t * kk > 0 {
            let slots = t * kk;
            let (nt, sl) = (n_tiles_i as i32, slots as i32);
            let cfg = LaunchConfig { grid_dim: (slots.div_ceil(256) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
            self.launch("slot_grad", |me| {
                // SAFETY: fc_slot_grad(const float*, int, const int*, float*, int); ds_part is rows x n_tiles.
                unsafe { me.gpu.stream.launch_builder(me.k.f("fc_slot_grad")).arg(&me.ds_part).arg(&nt).arg(&me.slot_row).arg(&me.grad_tw).arg(&sl).launch(cfg)? };
                Ok(())
            })?;
        }
        if gather_first {
            // both weight gradients before dX, whose rows then overwrite the gathered copies: the buffer ends
            // holding the dX rows, as without gathering first. dY's rows are in it either way (gather_dy's
            // copy or dA_raw's stores).
            let dy_rows = self.ptr(&self.dx_rows);
            self.wgrad_w2(dy_rows, 0)?;
            let x_rows = if self.x_rows_fresh {
                self.ptr(&self.x_rows)
            } else {
                let (x, dst) = (self.ptr(&self.x), self.ptr(&self.dx_rows));
                self.gather_rows("gather_x", x, dst, hd)?;
                dst
            };
            self.wgrad_w13(x_rows, 0)?;
        }
        let mut p = self.base_params();
        p.a = self.ptr(&self.dh);
        p.lda = (2 * id) as i64;
        p.b_estride = (2 * id * hd) as i64;
        p.c = self.ptr(&self.dx_rows);
        p.ldc = hd as i64;
        p.n_dim = hd as i32;
        p.k_dim = (2 * id) as i32;
        if self.direct {
            p.b = self.ptr(&self.w13);
            p.ldb = hd as i64;
            self.gemm("wg_rows_bmn", "dX_rows", (hd.div_ceil(WG_TILE_N), tiles, 1), p)?;
        } else if self.wgmma {
            p.b = self.ptr(&self.w13t);
            p.ldb = (2 * id) as i64;
            self.gemm("wg_rows", "dX_rows", (hd.div_ceil(WG_TILE_N), tiles, 1), p)?;
        } else {
            p.b = self.ptr(&self.w13);
            p.ldb = hd as i64;
            self.gemm("fg_rows_nn", "dX_rows", (hd.div_ceil(TILE_N), tiles, 1), p)?;
        }
        if t > 0 {
            let (dx, sr, gx) = (self.ptr(&self.dx_rows), self.ptr(&self.slot_row), self.ptr(&self.grad_x));
            self.combine("undispatch", dx, 0, sr, gx)?;
        }
        if !gather_first {
            let (x, idx) = if self.x_rows_fresh { (self.ptr(&self.x_rows), 0) } else { (self.ptr(&self.x), self.ptr(&self.row_token)) };
            self.wgrad_w13(x, idx)?;
            self.wgrad_w2(dy_rows, dy_idx)?;
        }
        Ok(())
    }

    /// grad_w13[e] = dH_eᵀ · X_e over each expert's rows; X's rows from `x` (gathered by `x_idx` unless 0).
    /// Weight gradients run for every expert, so experts without rows get exact zeros.
    fn wgrad_w13(&mut self, x: u64, x_idx: u64) -> Result<(), GpuError> {
        let FastDims { hidden: hd, inter: id, .. } = self.dims;
        let (dh, grad) = (self.ptr(&self.dh), self.ptr(&self.grad_w13));
        self.gemm_wgrad("wgrad_w13", (dh, 0, 2 * id), (x, x_idx, hd), grad)
    }

    /// grad_w2[e] = dY_eᵀ · A'_e; dY's rows from `dy` (gathered by `dy_idx` unless 0).
    fn wgrad_w2(&mut self, dy: u64, dy_idx: u64) -> Result<(), GpuError> {
        let FastDims { hidden: hd, inter: id, .. } = self.dims;
        let (aw, grad) = (self.ptr(&self.aw), self.ptr(&self.grad_w2));
        self.gemm_wgrad("wgrad_w2", (dy, dy_idx, hd), (aw, 0, id), grad)
    }

    /// `out[e] = in[e]ᵀ` for each expert's [rows, cols] matrix.
    fn transpose(&mut self, label: &'static str, input: u64, out: u64, rows: usize, cols: usize) -> Result<(), GpuError> {
        let e = self.dims.experts;
        let cfg = LaunchConfig { grid_dim: (cols.div_ceil(64) as u32, rows.div_ceil(64) as u32, e as u32), block_dim: (32, 8, 1), shared_mem_bytes: 0 };
        let (r, c) = (rows as i32, cols as i32);
        self.launch(label, |me| {
            // SAFETY: fc_transpose(const bf16*, bf16*, int, int); both buffers hold E x rows x cols.
            unsafe { me.gpu.stream.launch_builder(me.k.f("fc_transpose")).arg(&input).arg(&out).arg(&r).arg(&c).launch(cfg)? };
            Ok(())
        })
    }

    /// `c[e] = a_eᵀ · b_e` (m x n per expert, row-major) over each expert's rows, for every expert; each operand
    /// is (pointer, row index (0: rows in expert order), columns).
    fn gemm_wgrad(&mut self, label: &'static str, a: WgradOperand, b: WgradOperand, c: u64) -> Result<(), GpuError> {
        let (mut p, grid) = wgrad_params(self.base_params(), a, b, c, self.dims.experts);
        let (kernel, cfg) = if self.wgrad_wgmma && self.persistent {
            // the expert count travels in k_dim (the k ranges come from the offsets)
            p.k_dim = grid.2 as i32;
            ("ws_wgrad", self.persistent_config("ws_wgrad", (grid.0.div_ceil(2), grid.1, grid.2)))
        } else {
            let (kernel, grid, smem) = if self.wgrad_wgmma {
                // 128 x 256 tiles instead of 128 x 128
                ("wg_wgrad", (grid.0.div_ceil(2), grid.1, grid.2), source::WG_SMEM as u32)
            } else {
                ("fg_wgrad", grid, self.k.smem())
            };
            (kernel, LaunchConfig { grid_dim: (grid.0 as u32, grid.1 as u32, grid.2 as u32), block_dim: (256, 1, 1), shared_mem_bytes: smem })
        };
        // the persistent kernel's tensor maps of the operands in row order ([rows][columns], boxes of 64 k lines
        // x 64 columns); zeros for a gathered one
        let rows = self.rows.max(1) as u64;
        let map = |ptr: u64, idx: u64, cols: i32, ld: i64| if idx == 0 { tma_desc(ptr, &[cols as u64, rows], &[ld as u64], &[64, 64]) } else { Ok(TmaDesc::default()) };
        let (ta, tb) = if kernel == "ws_wgrad" { (map(p.a, p.a_idx, p.m_dim, p.lda)?, map(p.b, p.b_idx, p.n_dim, p.ldb)?) } else { Default::default() };
        // the output, [E][m_dim][n_dim] in boxes of 64 rows x 64 columns (the TMA-store epilogue)
        let (m, n, e) = (p.m_dim as u64, p.n_dim as u64, self.dims.experts as u64);
        let tc = if kernel == "ws_wgrad" { tma_desc(p.c, &[n, m, e], &[p.ldc as u64, p.c_estride as u64], &[64, 64, 1])? } else { TmaDesc::default() };
        let td = TmaDesc::default();
        self.launch(label, |me| {
            if kernel == "ws_wgrad" {
                // (p.k_dim = experts, and offsets has E + 1 entries)
                return me.launch_persistent(kernel, cfg, &p, &[ta, tb, tc, td]);
            }
            // SAFETY: as in `gemm`; the plain kernels' grid.z = experts, and offsets has E + 1 entries.
            unsafe { me.gpu.stream.launch_builder(me.k.f(kernel)).arg(&p).launch(cfg)? };
            Ok(())
        })
    }
}

/// A weight gradient's operand: (pointer, row index (0: rows in expert order), columns).
type WgradOperand = (u64, u64, usize);

/// The parameters and the 128 x 128-tile grid of `c[e] = a_eᵀ · b_e` (m x n per expert, row-major, both operands
/// with their rows' columns contiguous) for `experts` experts.
fn wgrad_params(mut p: GemmParams, (a, a_idx, m): WgradOperand, (b, b_idx, n): WgradOperand, c: u64, experts: usize) -> (GemmParams, (usize, usize, usize)) {
    (p.a, p.a_idx, p.lda, p.m_dim) = (a, a_idx, m as i64, m as i32);
    (p.b, p.b_idx, p.ldb, p.n_dim) = (b, b_idx, n as i64, n as i32);
    (p.c, p.ldc, p.c_estride) = (c, n as i64, (m * n) as i64);
    (p, (n.div_ceil(TILE_N), m.div_ceil(TILE_M), experts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weight_gradient_parameters_follow_the_operand_shapes() {
        // grad_w13 of qwen3-30b-a3b (H 2048, I 768, E 128): dH [rows, 2I] in expert order, X gathered by index
        let base = GemmParams { inter: 768, tiles: 7, ..Default::default() };
        let (p, grid) = wgrad_params(base, (100, 0, 1536), (200, 300, 2048), 400, 128);
        assert_eq!((p.a, p.a_idx, p.lda, p.m_dim), (100, 0, 1536, 1536));
        assert_eq!((p.b, p.b_idx, p.ldb, p.n_dim), (200, 300, 2048, 2048));
        assert_eq!((p.c, p.ldc, p.c_estride), (400, 2048, 1536 * 2048));
        assert_eq!(grid, (16, 12, 128));
        assert_eq!((p.inter, p.tiles, p.k_dim), (768, 7, 0)); // the base's fields are kept
        // grad_w2 with ragged shapes: dY gathered [rows, 72], A' [rows, 40]
        let (p, grid) = wgrad_params(GemmParams::default(), (1, 2, 72), (3, 0, 40), 5, 3);
        assert_eq!((p.a_idx, p.lda, p.m_dim, p.b_idx, p.ldb, p.n_dim), (2, 72, 72, 0, 40, 40));
        assert_eq!((p.ldc, p.c_estride), (40, 72 * 40));
        assert_eq!(grid, (1, 1, 3));
    }
}
