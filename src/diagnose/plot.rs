//! `--plot`: a PNG heat map of error/bound, experts (rows) by feature blocks (columns) of one stage.
//!
//! Each cell is the largest |got − exact| / bound of the stage's elements of that expert and feature
//! block (tokens of `y`/`grad.x` count for every expert they visit). Colours on a log scale: blue shades
//! for ratios up to 1 (within bound; darker = tighter), yellow to red above 1 (violations, red at 1000x
//! and beyond), magenta for NaN or infinity, grey where no element falls. The PNG is written with
//! uncompressed (stored) deflate blocks: no dependency, and any viewer reads it.

use std::path::Path;

use moe_reference::dispatch::RowMap;
use ndarray::Array2;

use super::replay::Replayed;
use crate::check::coords::row_experts;

/// Grid of max ratios [experts, blocks] (NaN where no element falls; +inf for non-finite candidates).
pub fn ratio_grid(st: &Replayed, rows: &RowMap, topk_ids: &Array2<i32>) -> Array2<f64> {
    let shape = st.got.shape();
    let width = shape[shape.len() - 1].max(1);
    let blocks = width.min(64);
    let per = width.div_ceil(blocks);
    let mut grid = Array2::from_elem((rows.experts, blocks), f64::NAN);
    let re = row_experts(rows);
    let k = rows.top_k;
    let mut put = |e: usize, blk: usize, r: f64| {
        let g = &mut grid[[e, blk]];
        if g.is_nan() || r > *g {
            *g = r;
        }
    };
    let lead: usize = shape[1..shape.len() - 1].iter().product::<usize>().max(1) * width;
    for (i, ((&g, &x), &b)) in st.got.iter().zip(st.exact.iter()).zip(st.bound.iter()).enumerate() {
        let err = (g - x).abs();
        let ratio = if !err.is_finite() { f64::INFINITY } else if err == 0.0 { 0.0 } else if b > 0.0 { err / b } else { f64::INFINITY };
        let blk = (i % width) / per;
        let first = i / lead;
        match st.name {
            "grad.w13" | "grad.w2" | "grad.router.weight" => put(first, blk, ratio),
            "grad.topk_weights" => {
                let id = topk_ids[[i / k, i % k]];
                if id >= 0 {
                    put(id as usize, 0, ratio);
                }
            }
            "y" | "grad.x" => {
                for j in 0..k {
                    let id = topk_ids[[first, j]];
                    if id >= 0 {
                        put(id as usize, blk, ratio);
                    }
                }
            }
            _ => put(re[first], blk, ratio),
        }
    }
    grid
}

fn colour(r: f64) -> [u8; 3] {
    if r.is_nan() {
        return [160, 160, 160];
    }
    if r.is_infinite() {
        return [255, 0, 255];
    }
    let l = if r > 0.0 { r.log10().clamp(-3.0, 3.0) } else { -3.0 };
    if l <= 0.0 {
        // -3 (tight) .. 0 (at the bound): dark blue to light blue.
        let f = (l + 3.0) / 3.0;
        [(20.0 + 150.0 * f) as u8, (40.0 + 170.0 * f) as u8, (120.0 + 135.0 * f) as u8]
    } else {
        // 0 .. 3: yellow to red.
        let f = l / 3.0;
        [255, (230.0 * (1.0 - f)) as u8, 0]
    }
}

/// The heat map as RGB pixels, `cell` pixels per grid cell.
pub fn render(grid: &Array2<f64>) -> (usize, usize, Vec<u8>) {
    let (gh, gw) = grid.dim();
    let cw = (512 / gw.max(1)).clamp(2, 24);
    let ch = (512 / gh.max(1)).clamp(2, 24);
    let (w, h) = (gw * cw, gh * ch);
    let mut px = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            px.extend_from_slice(&colour(grid[[y / ch, x / cw]]));
        }
    }
    (w, h, px)
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut c = 0xFFFF_FFFFu32;
    for &b in bytes {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
        }
    }
    !c
}

fn adler32(bytes: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for &x in bytes {
        a = (a + x as u32) % 65521;
        b = (b + a) % 65521;
    }
    (b << 16) | a
}

/// A PNG (8-bit RGB) of `w` x `h` pixels.
pub fn encode_png(w: usize, h: usize, rgb: &[u8]) -> Vec<u8> {
    let mut raw = Vec::with_capacity(h * (1 + 3 * w));
    for y in 0..h {
        raw.push(0); // filter: none
        raw.extend_from_slice(&rgb[y * 3 * w..(y + 1) * 3 * w]);
    }
    let mut z = vec![0x78, 0x01];
    let chunks: Vec<&[u8]> = if raw.is_empty() { vec![&[][..]] } else { raw.chunks(65535).collect() };
    for (i, c) in chunks.iter().enumerate() {
        z.push(u8::from(i + 1 == chunks.len()));
        let n = c.len() as u16;
        z.extend_from_slice(&n.to_le_bytes());
        z.extend_from_slice(&(!n).to_le_bytes());
        z.extend_from_slice(c);
    }
    z.extend_from_slice(&adler32(&raw).to_be_bytes());
    let mut out = vec![0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];
    let mut chunk = |kind: &[u8; 4], data: &[u8]| {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let mut body = kind.to_vec();
        body.extend_from_slice(data);
        out.extend_from_slice(&body);
        out.extend_from_slice(&crc32(&body).to_be_bytes());
    };
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&(w as u32).to_be_bytes());
    ihdr.extend_from_slice(&(h as u32).to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    chunk(b"IHDR", &ihdr);
    chunk(b"IDAT", &z);
    chunk(b"IEND", &[]);
    out
}

/// Write the heat map of a stage to `path`.
pub fn write_plot(path: &Path, st: &Replayed, rows: &RowMap, topk_ids: &Array2<i32>) -> std::io::Result<()> {
    let grid = ratio_grid(st, rows, topk_ids);
    let (w, h, px) = render(&grid);
    let tmp = tempfile::Builder::new()
        .prefix(".plot.")
        .suffix(".tmp")
        .tempfile_in(match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        })?;
    std::fs::write(tmp.path(), encode_png(w, h, &px))?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_match_known_values() {
        // CRC-32 and Adler-32 of "123456789" (the standard check values).
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
    }

    #[test]
    fn colours_separate_pass_fail_and_nonfinite() {
        assert_eq!(colour(f64::INFINITY), [255, 0, 255]);
        assert_eq!(colour(1000.0), [255, 0, 0]);
        assert!(colour(0.5)[2] > 200 && colour(0.5)[0] < 200, "within bound is blue");
        assert_eq!(colour(f64::NAN), [160, 160, 160]);
    }
}
