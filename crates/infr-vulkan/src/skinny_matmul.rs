//! Lowering of matmuls over few activation rows (batched decode of several sequences, short
//! prompts) to the split-K cooperative matmul: the weight is read once per step through
//! tensor-core fragments, and the inner dimension is split into ranges so that a product of
//! only a few output tiles still spreads over the whole device. Each range writes its partial
//! product to its own plane of a temporary buffer; `split_reduce` adds the planes (and the
//! bias) in order. On an H100 (Qwen3-8B Q4_K_M, 32 rows) the whole-k cooperative kernel took
//! 79 µs for a 1024x4096 product and as long for 4096x4096: its 64 k-steps one after another,
//! not the bytes, set the time.

use crate::error::VkResult;
use crate::features::{Coop, Features};
use crate::kernels::{self, CoopOperands, CoopTile, MatmulParams, SplitParams, SplitReduceParams};
use crate::lower::{bytes, u32_of, Res};
use crate::prefill_matmul::{Emit, F16Buffers, F16Matmul, Planes};
use crate::weights::GpuWeight;

/// Most activation rows the split-K path takes (one activation tile of 64 rows).
pub(crate) const MAX_ROWS: usize = 64;

/// Fewest activation rows for which the split-K path is taken. `INFR_VK_SKINNY_MIN_ROWS`
/// overrides it for tuning (past [`MAX_ROWS`]: never).
fn min_rows() -> usize {
    std::env::var("INFR_VK_SKINNY_MIN_ROWS").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(DEFAULT_MIN_ROWS)
}

/// See [`min_rows`]: where the split-K product overtakes the integer-dot kernels. On an H100
/// (synthetic Qwen3-8B Q4_K_M, ms per decode step with the logits read back, int8 against
/// split-K): 2 rows 6.20 / 11.89, 4 rows 7.60 / 11.86, 8 rows 11.17 / 13.01, 12 rows
/// 16.23 / 14.02, 16 rows 20.14 / 15.10; served, 16 streams ran at 947 t/s from 17 rows,
/// 1,311 from 9 and 1,320 from 10, while 4 streams fell from 562 to 347 from 2 rows.
/// Products of 10-16 rows then round like llama.cpp's Vulkan build (f16 operands) rather
/// than its CPU (int8 activations).
const DEFAULT_MIN_ROWS: usize = 10;

/// The fewest activation rows whose quantized matmuls run over f16 operands on a device with
/// `feat` (split-K from [`min_rows`], the cooperative kernels past [`kernels::VEC_MAX_COLS`]
/// rows); `None` without cooperative matrices.
pub(crate) fn f16_min_rows(feat: Features) -> Option<usize> {
    feat.coopmat.map(|_| min_rows().clamp(2, kernels::VEC_MAX_COLS + 1))
}

/// Workgroups the split aims for: enough to keep several per multiprocessor of a large GPU in
/// flight. `INFR_VK_SKINNY_GROUPS` overrides it for tuning.
fn target_groups() -> u32 {
    std::env::var("INFR_VK_SKINNY_GROUPS").ok().and_then(|v| v.trim().parse().ok()).filter(|&g| g > 0).unwrap_or(1024)
}

/// Most bytes of the partial-product planes of one matmul.
pub(crate) const PARTIALS_CAP: u64 = 64 << 20;

/// The cooperative configuration when the product of `n` activation rows with `lw` should run
/// on the split-K path.
pub(crate) fn eligible(feat: Features, lw: &GpuWeight, n: usize) -> Option<Coop> {
    let coop = feat.coopmat?;
    let k = lw.cols;
    let rows_ok = (min_rows().max(2)..=MAX_ROWS).contains(&n);
    let quantized = lw.layout.ty != infr_quant::GgmlType::F32;
    let fits = (n * k * 2) as u64 <= feat.max_binding_bytes;
    (rows_ok && quantized && fits && k % 64 == 0 && !lw.chunks.is_empty()).then_some(coop)
}

/// The quantization group (blocks of 32 per scale) by which the split-K product of `n` rows
/// with `lw` rounds its f16 operand, where that rounding is an int8 one (k-quants: 8, legacy
/// quants: 1) and so can be written by the kernel producing the input
/// (`fused_kernels::QuantOut::F16`).
pub(crate) fn round16_group(feat: Features, lw: &GpuWeight, n: usize) -> Option<u32> {
    eligible(feat, lw, n)?;
    kernels::int8_round_group(kernels::act_round_mode(lw.layout.ty, lw.cols)?)
}

/// The tile for `n` activation rows: 4 subgroups along 64 weight rows (one fragment row each;
/// 32 with 8×8 fragments), one activation tile of `n` rounded up to fragments, k-steps of 32
/// (64 for up to 16 rows), two steps read ahead. On an H100 (8B decode, 32 rows, ms per step)
/// with units dequantized as read, 64 weight rows in k-steps of 64 with one read ahead beat 128 rows (25.0 against
/// 34.1; 57.3 against 65.4 at 64 rows) and 128 rows with 8 subgroups or k-steps of 32
/// (26.3-26.5); with raw Q4_K/Q6_K units (c41) k-steps of 32 two ahead took 18.96 ms against
/// 21.30 (64, one ahead), 19.71 (64, two), 20.24 (128 rows) and 21.43 (128 rows in 8
/// subgroups). Up to 16 rows, k-steps of 64 (two ahead) do as well or better (c51, 8B decode,
/// ms per step against 32: 12 rows 12.33 / 13.14, 16 rows 13.13 / 13.55 and 13.92 / 13.89),
/// past that worse (24 rows 19.01 / 16.38, 32 rows 20.11 / 18.68).
/// `INFR_VK_SKINNY_TILE=bm,gm,bk,stages` overrides it for tuning.
pub(crate) fn tile(frag: u32, n: usize, max_shared: u32) -> CoopTile {
    let bn = (n as u32).div_ceil(frag) * frag;
    let bk = if n <= 16 { 64 } else { 32 };
    let plain = CoopTile { frag, bm: 4 * frag, bn, gm: 4, gn: 1, bk, raster: 0, stages: 2 };
    let forced = std::env::var("INFR_VK_SKINNY_TILE").ok().and_then(|v| {
        let p: Vec<u32> = v.split(',').filter_map(|x| x.trim().parse().ok()).collect();
        match p[..] {
            [bm, gm, bk, stages] if [1, 2, 4, 8].contains(&gm) && [32, 64].contains(&bk) && stages <= 2 => {
                Some(CoopTile { bm, gm, bk, stages, ..plain })
            }
            _ => None,
        }
    });
    let usable = |t: &CoopTile| t.bm % (frag * t.gm) == 0 && t.bm > 0 && t.shared_bytes() <= max_shared;
    match forced {
        Some(t) if usable(&t) => t,
        _ if usable(&plain) => plain,
        _ => CoopTile { bm: 2 * frag, gm: 2, bk: 32, ..plain },
    }
}

/// How to split an inner dimension of `k` for a product of `tiles` output tiles read in
/// k-steps of `step`: the number of ranges and the elements per range (a multiple of the
/// step; the last range may be shorter).
pub(crate) fn split(tiles: u32, k: u32, step: u32, max_parts: u32) -> (u32, u32) {
    // Ranges no shorter than four steps (each range pays for filling its read-ahead).
    let most = (k / (4 * step)).clamp(1, max_parts.max(1));
    let parts = target_groups().div_ceil(tiles.max(1)).clamp(1, most);
    let chunk = k.div_ceil(parts).div_ceil(step) * step;
    (k.div_ceil(chunk), chunk)
}

/// Dispatches of one matmul over few rows: the activations rounded into the f16 copy, one
/// split product per weight chunk into the partial planes, and their sum into the output (or,
/// with one range, the product straight into the output). With `defer` (the matmul's node;
/// the fusion plan's `defer_reduce`, no bias) the sum is left to the kernel reading the
/// output, which finds the planes through `F16Buffers::take_planes`.
pub(crate) fn lower(
    m: &F16Matmul<'_>,
    defer: Option<u32>,
    coop: Coop,
    feat: Features,
    bufs: &mut F16Buffers,
    temp_bytes: &mut Vec<u64>,
) -> VkResult<Vec<Emit>> {
    let (lw, n) = (m.lw, m.n);
    let k = lw.cols;
    let mut emits = Vec::new();
    let xi = bufs.x16_copy(m.x, lw.layout.ty, n, k, temp_bytes, &mut emits)?;
    let t = tile(coop.frag, n, feat.shared_bytes);
    let spec = kernels::matmul_coop(CoopOperands::SplitK(&lw.layout), coop, t);
    let step = t.bk * t.stages.max(1);
    let plane = (n * lw.rows) as u64 * 4;
    let max_parts = u32_of(((PARTIALS_CAP / plane) as usize).max(1), "partial planes")?;
    let shape = format!("{}x{} n={n}", lw.rows, lw.cols);
    let has_bias = m.bias != Res::Dummy;
    // One range count for every chunk (chunks of one weight differ only in rows).
    let tiles_n = (n as u32).div_ceil(t.bn);
    let widest = lw.chunks.iter().map(|c| c.rows).max().unwrap_or(0);
    let (parts, k_chunk) = split(widest.div_ceil(t.bm) * tiles_n, k as u32, step, max_parts);
    let direct = parts == 1;
    let part_stride = u32_of(n * lw.rows, "partial plane")?;
    let defer = defer.filter(|_| !has_bias && part_stride % 4 == 0);
    let out = if direct { m.out } else { Res::Temp(bufs.partials(plane * parts as u64, defer.is_some(), temp_bytes)) };
    for (ci, ch) in lw.chunks.iter().enumerate() {
        let tiles = ch.rows.div_ceil(t.bm) * tiles_n;
        let mm = MatmulParams {
            k: k as u32,
            m: ch.rows,
            n: n as u32,
            out_stride: lw.rows as u32,
            out_col0: ch.row0,
            soff: ch.soff_words,
            has_bias: (direct && has_bias) as u32,
            tiles_m: ch.rows.div_ceil(t.bm),
        };
        let p = SplitParams { mm, k_chunk, tiles, part_stride };
        emits.push(Emit {
            spec: spec.clone(),
            res: vec![
                Res::WeightChunk(m.weight, ci),
                Res::Temp(xi),
                out,
                if direct { m.bias } else { Res::Dummy },
                Res::Tables,
            ],
            push: bytes(&p),
            groups: tiles * parts,
            shape: Some(shape.clone()),
        });
    }
    if let Some(node) = defer {
        bufs.defer(node, out, parts, part_stride);
    } else if !direct {
        emits.push(split_reduce(out, m.out, m.bias, lw.rows as u32, n, parts, Some(shape))?);
    }
    Ok(emits)
}

/// The reduction a deferred split-K product skipped, for a reader that cannot sum `planes`
/// itself: their sum (`n` rows of `m`) into `out`; nothing where the product ran as one range
/// straight into its output.
pub(crate) fn reduce_planes(planes: &Planes, out: Res, n: usize, m: u32) -> VkResult<Option<Emit>> {
    if planes.parts <= 1 {
        return Ok(None);
    }
    split_reduce(planes.res, out, Res::Dummy, m, n, planes.parts, None).map(Some)
}

/// The `split_reduce` dispatch adding `parts` planes of `n` rows of `m` from `planes` (and
/// `bias`, unless a dummy) into `out`.
pub(crate) fn split_reduce(
    planes: Res,
    out: Res,
    bias: Res,
    m: u32,
    n: usize,
    parts: u32,
    shape: Option<String>,
) -> VkResult<Emit> {
    let rp = SplitReduceParams { m, n: n as u32, parts, has_bias: (bias != Res::Dummy) as u32 };
    Ok(Emit {
        spec: kernels::split_reduce(),
        res: vec![planes, out, bias],
        push: bytes(&rp),
        groups: u32_of((n * m as usize).div_ceil(kernels::SPLIT_REDUCE_WG as usize), "reduce groups")?,
        shape,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ranges are whole steps, cover k, and give short products more of them.
    #[test]
    fn splits_cover_k_in_whole_steps() {
        for (tiles, k) in [(8u32, 4096u32), (32, 4096), (96, 4096), (32, 12288), (2000, 4096), (4, 128)] {
            let (parts, chunk) = split(tiles, k, 64, 64);
            assert_eq!(chunk % 64, 0);
            assert!(parts * chunk >= k && (parts - 1) * chunk < k, "{tiles} {k}: {parts} x {chunk}");
        }
        assert!(split(8, 4096, 64, 64).0 > split(96, 4096, 64, 64).0);
        assert_eq!(split(2000, 4096, 64, 64).0, 1);
        assert_eq!(split(8, 4096, 64, 2).0, 2);
    }

    /// The split kernel compiles for both fragment sizes, every activation tile and both ways
    /// of reading Q4_K / Q6_K units.
    #[test]
    fn split_matmul_compiles() {
        for ty in [infr_quant::GgmlType::Q4_K, infr_quant::GgmlType::Q6_K] {
            let layout = crate::repack::gpu_layout(ty).unwrap();
            for f in [8, 16] {
                for n in [8, 16, 24, 64] {
                    for raw_units in [false, true] {
                        let coop = Coop { frag: f, subgroup: 32, raw_units };
                        let spec = kernels::matmul_coop(CoopOperands::SplitK(&layout), coop, tile(f, n, 49152));
                        crate::pipeline::compile_wgsl(&spec.name, &spec.wgsl().unwrap(), true).unwrap();
                    }
                }
            }
        }
        let spec = kernels::split_reduce();
        crate::pipeline::compile_wgsl(&spec.name, &spec.wgsl().unwrap(), true).unwrap();
    }
}
