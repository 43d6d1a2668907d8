//! The forward's launches: routing to rows, GEMM1 with SwiGLU in its epilogue, GEMM2, the weighted combine; and
//! H's selective recomputation for the backward.

use super::*;

impl FastLayer<'_> {
    /// Routing to rows, GEMM1 + SwiGLU, GEMM2, combine. Asynchronous (on the GPU's stream).
    pub fn forward(&mut self) -> Result<(), GpuError> {
        let FastDims { tokens: t, hidden: hd, inter: id, experts: e, top_k: kk } = self.dims;
        let slots = t * kk;
        let (slots_i, e_i, k_i) = (slots as i32, e as i32, kk as i32);
        if slots > 0 {
            let chunks = slots.div_ceil(ROUTE_CHUNK);
            let chunks_i = chunks as i32;
            let grid = LaunchConfig { grid_dim: (chunks as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
            let one = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1024, 1, 1), shared_mem_bytes: (12 * e + 4 * e.max(1024)) as u32 };
            // SAFETY (three launches): argument lists match cuda/fast/fast_route.cu; counts holds chunks*E,
            // tiles 3*max_tiles (a bound on the tiles fr_scan writes), tiles2 3*(max_tiles + E) (one pad per
            // expert at most), the row arrays `rows` entries.
            self.launch("route_count", |me| {
                unsafe { me.gpu.stream.launch_builder(me.k.f("fr_count")).arg(&me.ids).arg(&slots_i).arg(&e_i).arg(&me.counts).launch(grid)? };
                Ok(())
            })?;
            self.launch("route_scan", |me| {
                unsafe {
                    me.gpu.stream.launch_builder(me.k.f("fr_scan")).arg(&me.counts).arg(&chunks_i).arg(&e_i).arg(&me.offsets).arg(&me.tiles).arg(&me.tile_count)
                        .arg(&me.tiles2).arg(&me.tile_count2).launch(one)?
                };
                Ok(())
            })?;
            self.launch("route_fill", |me| {
                unsafe {
                    me.gpu.stream.launch_builder(me.k.f("fr_fill"))
                        .arg(&me.ids).arg(&me.weights).arg(&slots_i).arg(&k_i).arg(&e_i).arg(&me.counts).arg(&me.offsets)
                        .arg(&me.row_token).arg(&me.row_slot).arg(&me.row_w).arg(&me.slot_row)
                        .launch(grid)?
                };
                Ok(())
            })?;
        }
        // X's rows: gathered in GEMM1's loads, or copied into expert order first (into x_rows, kept for the
        // backward, or into the o buffer, which GEMM2 overwrites)
        self.x_rows_fresh = false;
        let copy_into = if !self.persistent || self.rows == 0 {
            None
        } else if self.save_x_rows {
            if self.x_rows.len() < self.rows * hd {
                self.x_rows = zeros(self.gpu, self.rows * hd)?;
            }
            Some(self.ptr(&self.x_rows))
        } else if self.gemm1_gather_first {
            Some(self.ptr(&self.o))
        } else {
            None
        };
        self.gemm1(copy_into)?;
        self.x_rows_fresh = self.save_x_rows && copy_into.is_some();
        let tiles = if self.rows > 0 { self.max_tiles } else { 0 };
        let mut p = self.base_params();
        p.a = self.ptr(&self.a);
        p.lda = id as i64;
        p.b = self.ptr(&self.w2);
        p.ldb = id as i64;
        p.b_estride = (hd * id) as i64;
        p.c = self.ptr(&self.o);
        p.ldc = hd as i64;
        p.n_dim = hd as i32;
        p.k_dim = id as i32;
        if self.wgmma {
            self.gemm("wg_rows", "gemm2", (hd.div_ceil(WG_TILE_N), tiles, 1), p)?;
        } else {
            self.gemm("fg_rows_nt", "gemm2", (hd.div_ceil(TILE_N), tiles, 1), p)?;
        }
        if t > 0 {
            let (o, w, sr, y) = (self.ptr(&self.o), self.ptr(&self.weights), self.ptr(&self.slot_row), self.ptr(&self.y));
            self.combine("combine", o, w, sr, y)?;
        }
        Ok(())
    }

    /// GEMM1 with the SwiGLU in its epilogue: H and A rows from the gathered rows of X (`copy_into`: copied
    /// into expert order in that buffer (rows x H) first, then read in order; else gathered in the loads).
    fn gemm1(&mut self, copy_into: Option<u64>) -> Result<(), GpuError> {
        let FastDims { hidden: hd, inter: id, .. } = self.dims;
        let tiles = if self.rows > 0 { self.max_tiles } else { 0 };
        let mut p = self.base_params();
        if let Some(dst) = copy_into {
            let x = self.ptr(&self.x);
            self.gather_rows("gather_x_fwd", x, dst, hd)?;
            p.a = dst;
        } else {
            p.a = self.ptr(&self.x);
            p.a_idx = self.ptr(&self.row_token);
        }
        p.lda = hd as i64;
        p.b = self.ptr(&self.w13);
        p.ldb = hd as i64;
        p.b_estride = (2 * id * hd) as i64;
        p.c = self.ptr(&self.h);
        p.ldc = (2 * id) as i64;
        p.c2 = self.ptr(&self.a);
        p.n_dim = (2 * id) as i32;
        p.k_dim = hd as i32;
        if self.wgmma {
            self.gemm("wg_gemm1_swiglu", "gemm1+swiglu", (id.div_ceil(WG_TILE_N / 2), tiles, 1), p)?;
        } else {
            self.gemm("fg_gemm1_swiglu", "gemm1+swiglu", (id.div_ceil(TILE_N / 2), tiles, 1), p)?;
        }
        Ok(())
    }

    /// Selective recomputation: recompute H (and A) from X before `backward`, for a caller that keeps only X
    /// and the routing from forward (`bytes_kept_per_token_recompute`) instead of H. Bitwise the forward's H
    /// (same kernel, same inputs); costs one GEMM1 (bench-gpu reports it).
    pub fn recompute_h(&mut self) -> Result<(), GpuError> {
        // (X's rows gathered in the loads: the o buffer may still be read after forward)
        self.gemm1(None)
    }

    /// Overwrite H and A with NaN: what a caller that drops them after forward leaves (for testing
    /// `recompute_h`: a backward that read anything not recomputed would show NaN).
    pub fn forget_h(&mut self) -> Result<(), GpuError> {
        fill_nan(self.gpu, self.k, [&mut self.h, &mut self.a])
    }
}
