//! Lowering of the linear op: which kernel a matmul takes (integer-dot matrix-vector, possibly
//! several matmuls of one input as one dispatch; f16 prefill; cooperative or tiled or generic
//! on the fly), with its activations rounded or quantized as llama.cpp's CPU does.

use std::collections::HashMap;

use infr_core::{Graph, Op, TensorId, WeightId};

use super::{bytes, u32_of, Features, Res};
use crate::error::{VkError, VkResult};
use crate::fusion::{Fusions, Q8Info};
use crate::kernels;
use crate::pipeline::KernelSpec;
use crate::prefill_matmul::{self, Emit, F16Buffers, RoundedCopy};
use crate::skinny_matmul;
use crate::weights::{GpuWeight, WeightChunk};

/// One linear node as the lowering sees it.
pub(super) struct LinearNode {
    pub index: usize,
    pub x: TensorId,
    pub weight: WeightId,
    pub bias: Option<WeightId>,
    pub out: Res,
    pub rows: usize,
}

/// Plan-wide state the matmul lowering adds to: temporaries, the int8 copies of inputs (shared
/// by the matmuls of one input), the rounded f32 copies and the f16 prefill buffers.
pub(super) struct Side<'a> {
    pub temp_bytes: &'a mut Vec<u64>,
    pub qact_of: &'a mut HashMap<(u32, u32), u32>,
    pub rounded: &'a mut RoundedCopy,
    pub f16_bufs: &'a mut F16Buffers,
}

fn emit(emits: &mut Vec<Emit>, spec: &KernelSpec, res: Vec<Res>, push: Vec<u8>, groups: u32, shape: Option<String>) {
    emits.push(Emit { spec: spec.clone(), res, push, groups, shape });
}

/// Emit the dispatches of one linear node. `f16_order`: the matmuls that take the f16 path,
/// in order (each prefetches the next one's weight).
pub(super) fn lower_linear(
    graph: &Graph,
    node: &LinearNode,
    fx: &Fusions,
    f16_order: &[(usize, WeightId)],
    feat: Features,
    weights: &HashMap<WeightId, GpuWeight>,
    side: &mut Side<'_>,
) -> VkResult<Vec<Emit>> {
    let (i, x, weight, bias, me) = (node.index, node.x, &node.weight, &node.bias, node.out);
    let w = |id: &WeightId| {
        weights.get(id).ok_or_else(|| VkError::Unsupported(format!("node {i} (linear): weight {} not loaded", id.0)))
    };
    let vec_of = |id: &WeightId, len: usize| -> VkResult<Res> {
        if w(id)?.vec_len() != Some(len) {
            return Err(VkError::Unsupported(format!("node {i}: weight {} is not a vector of {len}", id.0)));
        }
        Ok(Res::WeightVec(*id))
    };
    // The bias vector, or a dummy binding.
    let bias_of = |rows: usize| bias.as_ref().map_or(Ok(Res::Dummy), |b| vec_of(b, rows));
    let mut emits = Vec::new();
    let lw = w(weight)?;
    if lw.chunks.is_empty() {
        return Err(VkError::Unsupported(format!("node {i}: weight {} has no matrix form", weight.0)));
    }
    let n = node.rows;
    let k = lw.cols;
    // Activations as llama.cpp's CPU rounds them for this weight type.
    let single = [i];
    let members = fx.gemv_jobs.get(&i).map_or(&single[..], |m| &m[..]);
    let jw = members.iter().map(|&j| job_weight(graph, j, weights)).collect::<VkResult<Vec<_>>>()?;
    let m_max = jw.iter().map(|(w, _)| w.rows).max().unwrap_or(lw.rows);
    let q8_spec =
        q8_info(lw, n, feat).and_then(|q| Some((q.group, q8_kernel(lw, m_max, n, members.len(), feat.shared_bytes)?)));
    if let Some((group, (spec, r))) = q8_spec {
        let qi = match side.qact_of.get(&(x.0, group)) {
            Some(&qi) => qi,
            None => {
                let qi = side.temp_bytes.len() as u32;
                side.temp_bytes.push(kernels::qact_bytes(n, k));
                side.qact_of.insert((x.0, group), qi);
                let n_blocks = u32_of(n * k / 32, "activation blocks")?;
                let qp = kernels::QuantizeParams { k: k as u32, n_blocks, scale_off: (n * k / 16) as u32, group };
                let res = vec![Res::Act(x.0), Res::Temp(qi), Res::Temp(qi)];
                emit(&mut emits, &kernels::quantize_act(), res, bytes(&qp), n_blocks.div_ceil(8), None);
                qi
            }
        };
        if members.len() > 1 {
            let biases = jw
                .iter()
                .map(|(jwt, jb)| jb.map(|b| vec_of(&b, jwt.rows)).transpose())
                .collect::<VkResult<Vec<_>>>()?;
            let d = gemv_jobs(graph, members, &jw, &biases, qi, r, n, k, spec.bindings);
            emit(&mut emits, &spec, d.res, d.push, d.groups, Some(d.shape));
            return Ok(emits);
        }
        let bias_res = bias_of(lw.rows)?;
        let shape = format!("{}x{} n={n}", lw.rows, lw.cols);
        for (ci, ch) in lw.chunks.iter().enumerate() {
            let tiles_m = ch.rows.div_ceil(r);
            let mm = chunk_params(lw, ch, n, bias.is_some(), tiles_m);
            let p = kernels::MatmulQ8Params { mm, qs_off: (n * k / 16) as u32 };
            let res = vec![Res::WeightChunk(*weight, ci), Res::Temp(qi), me, bias_res, Res::Temp(qi)];
            emit(&mut emits, &spec, res, bytes(&p), tiles_m, Some(shape.clone()));
        }
        return Ok(emits);
    }
    if let Some(coop) = skinny_matmul::eligible(feat, lw, n) {
        let m = prefill_matmul::F16Matmul { lw, weight: *weight, x: x.0, n, bias: bias_of(lw.rows)?, out: me };
        let defer = fx.defer_reduce.contains(&i);
        emits.extend(skinny_matmul::lower(&m, defer.then_some(i as u32), coop, feat, side.f16_bufs, side.temp_bytes)?);
        return Ok(emits);
    }
    if let Some(coop) = prefill_matmul::eligible(feat, lw, n) {
        let bias_res = bias_of(lw.rows)?;
        let next = f16_order.iter().find(|&&(j, _)| j > i).map(|&(_, w)| w);
        let next = next.and_then(|w| weights.get(&w).map(|nw| (w, nw)));
        let m = prefill_matmul::F16Matmul { lw, weight: *weight, x: x.0, n, bias: bias_res, out: me };
        emits.extend(prefill_matmul::lower(&m, next, coop, feat, side.f16_bufs, side.temp_bytes)?);
        return Ok(emits);
    }
    let (spec, c, r) = float_matmul_kernel(lw, n, feat);
    let bias_res = bias_of(lw.rows)?;
    let x_res = if let Some(mode) = kernels::act_round_mode(lw.layout.ty, k) {
        let (ri, round) = side.rounded.prepare(x.0, mode, n * k, (n * k * 4) as u64, side.temp_bytes)?;
        if let Some(rp) = round {
            let res = vec![Res::Act(x.0), Res::Temp(ri)];
            emit(&mut emits, &kernels::round_act(), res, bytes(&rp), rp.n_groups, None);
        }
        Res::Temp(ri)
    } else {
        Res::Act(x.0)
    };
    let shape = format!("{}x{} n={n}", lw.rows, lw.cols);
    if spec.name.starts_with("matmul_tiled.") {
        if let Some(mut split) = tiled_split(lw, n)? {
            let plane_bytes = split.part_stride as u64 * 4;
            split.planes = side.f16_bufs.partials(plane_bytes * split.parts as u64, false, side.temp_bytes);
            let res = |ci| vec![Res::WeightChunk(*weight, ci), x_res, Res::Temp(split.planes), Res::Dummy, Res::Tables];
            for (ci, ch) in lw.chunks.iter().enumerate() {
                let tiles = ch.rows.div_ceil(r) * split.tiles_n;
                let mm = chunk_params(lw, ch, n, false, ch.rows.div_ceil(r));
                let p = kernels::SplitParams { mm, k_chunk: split.k_chunk, tiles, part_stride: split.part_stride };
                let groups = tiles * split.parts;
                emit(
                    &mut emits,
                    &kernels::matmul_tiled_split(&lw.layout),
                    res(ci),
                    bytes(&p),
                    groups,
                    Some(shape.clone()),
                );
            }
            let planes = Res::Temp(split.planes);
            emits.push(skinny_matmul::split_reduce(planes, me, bias_res, lw.rows as u32, n, split.parts, Some(shape))?);
            return Ok(emits);
        }
    }
    for (ci, ch) in lw.chunks.iter().enumerate() {
        let tiles_m = ch.rows.div_ceil(r);
        let tiles_n = (n as u32).div_ceil(c);
        let groups = tiles_m
            .checked_mul(tiles_n)
            .ok_or_else(|| VkError::Unsupported(format!("matmul grid {tiles_m}x{tiles_n}")))?;
        let p = chunk_params(lw, ch, n, bias.is_some(), tiles_m);
        let res = vec![Res::WeightChunk(*weight, ci), x_res, me, bias_res, Res::Tables];
        emit(&mut emits, &spec, res, bytes(&p), groups, Some(shape.clone()));
    }
    Ok(emits)
}

/// How the tiled kernel splits k for one matmul: ranges, elements per range, activation
/// tiles, the planes' temporary (set by the caller) and the elements of one plane.
struct TiledSplit {
    parts: u32,
    k_chunk: u32,
    tiles_n: u32,
    planes: u32,
    part_stride: u32,
}

/// Fewest output tiles for which the tiled kernel runs over the whole of k.
const TILED_SPLIT_BELOW: u32 = 64;

/// The k split of the tiled kernel for `n` activation rows, where an f32 weight (a MoE router,
/// which keeps f32 operands) leaves fewer than [`TILED_SPLIT_BELOW`] tiles: Qwen3-30B-A3B's
/// router (128 rows) at 512 tokens is 16 tiles of 64 k-steps each, 149 us on an H100 (2 of
/// its 132 multiprocessors' worth of work), 9% of a prefill layer.
fn tiled_split(lw: &GpuWeight, n: usize) -> VkResult<Option<TiledSplit>> {
    let tiles_n = (n as u32).div_ceil(kernels::TILE);
    let tiles = (lw.rows as u32).div_ceil(kernels::TILE) * tiles_n;
    if lw.layout.ty != infr_quant::GgmlType::F32 || tiles >= TILED_SPLIT_BELOW || lw.cols < 1024 {
        return Ok(None);
    }
    let plane = (n * lw.rows) as u64 * 4;
    let max_parts = u32_of(((skinny_matmul::PARTIALS_CAP / plane) as usize).clamp(1, 16), "partial planes")?;
    let (parts, k_chunk) = skinny_matmul::split(tiles, lw.cols as u32, 32, max_parts);
    if parts < 2 {
        return Ok(None);
    }
    let part_stride = u32_of(n * lw.rows, "partial plane")?;
    Ok(Some(TiledSplit { parts, k_chunk, tiles_n, planes: 0, part_stride }))
}

/// The kernel of a matmul over f32 activations (rounded as llama.cpp's CPU rounds them) with
/// weight `lw` and `n` activation rows, and its activation rows and weight rows per
/// workgroup: the matrix-vector kernel for few rows where there are subgroups, else the
/// cooperative-matrix kernel, else the tiled or generic one. All bind weight, x, y, bias,
/// tables and take [`kernels::MatmulParams`].
pub(super) fn float_matmul_kernel(lw: &GpuWeight, n: usize, feat: Features) -> (KernelSpec, u32, u32) {
    let vec_r = vec_rows(lw.layout.ty);
    let vec_spec = if feat.subgroups && n <= kernels::VEC_MAX_COLS {
        kernels::matmul_vec(&lw.layout, n as u32, vec_r)
    } else {
        None
    };
    match vec_spec {
        Some(s) => (s, n as u32, vec_r),
        // f32 weights (MoE routers, which llama.cpp keeps unquantized) keep f32
        // operands: an f16 router flips expert choices at near-ties.
        None if n > kernels::VEC_MAX_COLS => match feat.coopmat {
            Some(c) if lw.layout.ty != infr_quant::GgmlType::F32 => {
                let tile = kernels::coop_tile(lw.rows, n, c.frag, feat.shared_bytes, false);
                let ops = kernels::CoopOperands::Quantized(&lw.layout);
                (kernels::matmul_coop(ops, c, tile), tile.bn, tile.bm)
            }
            _ => (kernels::matmul_tiled(&lw.layout), kernels::TILE, kernels::TILE),
        },
        None => {
            let c = kernels::matmul_cols(n);
            (kernels::matmul_generic(&lw.layout, c, feat.subgroups), c, kernels::MATMUL_R)
        }
    }
}

/// Weight rows per workgroup of the matrix-vector kernel.
pub(super) const VEC_R: u32 = 2;

/// Weight rows per workgroup of the matrix-vector kernel over weight type `ty`: one for f32
/// (routers: a few hundred rows, so one a workgroup still leaves few workgroups), else
/// [`VEC_R`].
fn vec_rows(ty: infr_quant::GgmlType) -> u32 {
    if ty == infr_quant::GgmlType::F32 {
        1
    } else {
        VEC_R
    }
}

/// Weight rows per workgroup of the integer-dot matrix-vector kernel for `m` weight rows and
/// `n` activation rows: four for one or two rows when that still leaves a thousand
/// workgroups (more loads in flight per thread), else two (H100, Qwen3-8B decode steps of
/// 4 rows: 7.8 ms with two, 9.4 with four). `INFR_VK_Q8_R=1|2|4|8` (tuning) forces it.
pub(super) fn vec_q8_rows(m: usize, n: usize) -> u32 {
    // The reduction gives each output one thread of the workgroup.
    let fits = |r: u32| (r as usize) * n.max(1) <= kernels::VEC_WG as usize;
    if let Some(r) = std::env::var("INFR_VK_Q8_R").ok().and_then(|v| v.trim().parse().ok()) {
        if [1, 2, 4, 8].contains(&r) && fits(r) {
            return r;
        }
    }
    if m >= 4096 && n <= 2 {
        4
    } else {
        VEC_R
    }
}

/// The integer-dot kernel of `jobs` matmuls of weight `lw`'s type (at most `m` rows) over `n`
/// activation rows, and its weight rows per workgroup: from [`rows_q8_min`] activation rows
/// the tiled kernel (each activation word read once per tile of weight rows), below it the
/// matrix-vector kernel (also where the tile's partial sums would not fit `max_shared` bytes).
fn q8_kernel(lw: &GpuWeight, m: usize, n: usize, jobs: usize, max_shared: u32) -> Option<(KernelSpec, u32)> {
    if n >= rows_q8_min() {
        let r = rows_q8_tile(n);
        let spec = kernels::matmul_rows_q8(&lw.layout, n as u32, r, rows_q8_per_thread(), jobs, max_shared);
        if let Some(spec) = spec {
            return Some((spec, r));
        }
    }
    // Fewer rows whose weight rows misfit the matrix-vector kernel's slots: a fitted tile.
    if let Some(r) = fitted_rows(&lw.layout, lw.cols) {
        if let Some(spec) = kernels::matmul_rows_q8(&lw.layout, n as u32, r, 1, jobs, max_shared) {
            return Some((spec, r));
        }
    }
    let r = vec_q8_rows(m, n);
    Some((kernels::matmul_vec_q8(&lw.layout, n as u32, r, jobs)?, r))
}

/// Share of a row's passes' block slots that hold a block: `blocks` per row taken `slots` at
/// a time (20 blocks over 16 slots: two passes, 20 of 32 slots used).
fn slot_use(blocks: usize, slots: usize) -> f64 {
    blocks as f64 / (blocks.div_ceil(slots.max(1)) * slots.max(1)) as f64
}

/// Weight rows of a tile of the tiled integer-dot kernel for one to three activation rows,
/// where a weight row's blocks (`k` columns of `layout`) fill the matrix-vector kernel's block
/// slots poorly and a tile has fewer slots per row that fill it better: Qwen3-14B's 5,120
/// columns are 20 Q4_K blocks over the matrix-vector kernel's 16 slots (two passes, the second
/// with 4 of 16 slots busy), and over a 16-row tile's 4 slots (five full passes). H100, decode
/// t/s with tiles / without: Qwen3-14B 143 / 118, Qwen3-0.6B 552 / 479, Qwen3-30B-A3B 180 /
/// 169, Qwen3-8B (16 blocks) unchanged. `None` where the matrix-vector kernel uses 80% of its
/// slots (at 85%, Qwen3-14B's down product, the tile was 10% slower) or no tile does better.
/// `INFR_VK_Q8_FIT_SLOTS=0` (tuning) keeps the matrix-vector kernel.
pub(super) fn fitted_rows(layout: &crate::repack::GpuLayout, k: usize) -> Option<u32> {
    if std::env::var("INFR_VK_Q8_FIT_SLOTS").is_ok_and(|v| v.trim() == "0") {
        return None;
    }
    let lanes = kernels::vec_q8_lanes(layout.ty)? as usize;
    fitted_tile_rows(k / layout.ty.info().block_size, lanes)
}

/// The tile rows of [`fitted_rows`] for `blocks` per weight row of `lanes` threads each.
fn fitted_tile_rows(blocks: usize, lanes: usize) -> Option<u32> {
    let vec_use = slot_use(blocks, kernels::VEC_WG as usize / lanes);
    if vec_use >= 0.8 {
        return None;
    }
    let mut best: Option<(u32, f64)> = None;
    for r in [4u32, 8, 16, 32] {
        let slots = kernels::ROWS_Q8_WG as usize / (lanes * r as usize);
        let u = slot_use(blocks, slots);
        if slots > 0 && u > best.map_or(vec_use, |b| b.1) + 1e-9 {
            best = Some((r, u));
        }
    }
    best.map(|b| b.0)
}

/// Fewest activation rows that take the tiled integer-dot kernel: 4 (H100, Qwen3-8B decode, ms
/// per step, tiled against matrix-vector: 4 rows 7.28 / 8.17, 6 rows 9.25 / 10.21, 16 rows
/// 20.43 / 26.32; 3 rows in tiles of 32 weight rows took 13.16 against 7.71, tiles of 8 were
/// not measured there). `INFR_VK_Q8_TILED_MIN_ROWS` (tuning) overrides it; 17 turns the tiles
/// off.
fn rows_q8_min() -> usize {
    std::env::var("INFR_VK_Q8_TILED_MIN_ROWS").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(4)
}

/// Weight rows per thread of the tiled integer-dot kernel (`INFR_VK_Q8_TILE_RT`, tuning).
fn rows_q8_per_thread() -> u32 {
    std::env::var("INFR_VK_Q8_TILE_RT")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|&r| [1, 2, 4].contains(&r))
        .unwrap_or(1)
}

/// Weight rows per workgroup of the tiled integer-dot kernel for `n` activation rows: 8 (H100,
/// Qwen3-8B decode, ms per step at 8 / 16 rows: tiles of 4 rows 11.30 / 21.15, 8 rows 10.94 /
/// 20.43, 16 rows - / 21.85, 32 rows 14.52 / 21.53; the matrix-vector kernel 12.88 / 26.32).
/// `INFR_VK_Q8_TILE` (tuning) sets it, up to the most whose outputs the 256 threads hold.
fn rows_q8_tile(n: usize) -> u32 {
    let fit = (kernels::ROWS_Q8_WG / n.max(1) as u32).clamp(1, 32);
    let fit = 1 << fit.ilog2();
    std::env::var("INFR_VK_Q8_TILE").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(8u32).clamp(1, fit)
}

/// How a matmul with weight `lw` and `n` activation rows reads int8 activations, if it runs
/// the integer-dot kernel.
pub(super) fn q8_info(lw: &GpuWeight, n: usize, feat: Features) -> Option<Q8Info> {
    let k = lw.cols;
    let ty = lw.layout.ty;
    let skinny = skinny_matmul::eligible(feat, lw, n).is_some();
    let q8 = feat.int8 && n <= kernels::VEC_MAX_COLS && k % 32 == 0 && !lw.chunks.is_empty() && !skinny;
    (q8 && kernels::vec_q8_lanes(ty).is_some()).then_some(Q8Info {
        group: if kernels::q8k_acts(ty) && k % 256 == 0 { 8 } else { 1 },
        ty,
        k,
        single_chunk: lw.chunks.len() == 1,
    })
}

/// The weight and bias of matmul node `j` (a member of a multi-job matrix-vector dispatch).
pub(super) fn job_weight<'w>(
    graph: &Graph,
    j: usize,
    weights: &'w HashMap<WeightId, GpuWeight>,
) -> VkResult<(&'w GpuWeight, Option<WeightId>)> {
    match &graph.nodes[j].op {
        Op::Linear { weight, bias, .. } => weights
            .get(weight)
            .map(|w| (w, *bias))
            .ok_or_else(|| VkError::Unsupported(format!("node {j}: weight {} not loaded", weight.0))),
        _ => Err(VkError::Unsupported(format!("node {j} is not a matmul"))),
    }
}

/// The bindings, push constants, workgroups and profile shape of one integer-dot dispatch
/// over several matmuls of one input (job j's workgroups follow job j-1's).
pub(super) struct GemvJobs {
    pub res: Vec<Res>,
    pub push: Vec<u8>,
    pub groups: u32,
    pub shape: String,
}

#[allow(clippy::too_many_arguments)]
pub(super) fn gemv_jobs(
    graph: &Graph,
    members: &[usize],
    jw: &[(&GpuWeight, Option<WeightId>)],
    biases: &[Option<Res>],
    qi: u32,
    r: u32,
    n: usize,
    k: usize,
    bindings: u32,
) -> GemvJobs {
    let mut res = vec![Res::Dummy; bindings as usize];
    let mut jobs = Vec::new();
    let mut tile0 = 0u32;
    let mut shape = String::new();
    for (jn, ((&j, (jwt, _)), jb)) in members.iter().zip(jw).zip(biases).enumerate() {
        // Job 0 has the plain bindings (W 0, Y 2, bias 3); job j ≥ 1 has 5+3(j-1)...
        let (wi, yi, bi) = if jn == 0 { (0, 2, 3) } else { (5 + 3 * (jn - 1), 6 + 3 * (jn - 1), 7 + 3 * (jn - 1)) };
        if let Op::Linear { weight, .. } = &graph.nodes[j].op {
            res[wi] = Res::WeightChunk(*weight, 0);
        }
        res[yi] = Res::Act(j as u32);
        res[bi] = jb.unwrap_or(Res::Dummy);
        jobs.push(kernels::MatmulJobParams {
            m: jwt.rows as u32,
            soff: jwt.chunks[0].soff_words,
            has_bias: jb.is_some() as u32,
            tile0,
        });
        tile0 += (jwt.rows as u32).div_ceil(r);
        shape.push_str(&format!("{}{}x{}", if jn == 0 { "" } else { "+" }, jwt.rows, jwt.cols));
    }
    res[1] = Res::Temp(qi);
    res[4] = Res::Temp(qi);
    let j0 = jobs[0];
    let mm = kernels::MatmulParams {
        k: k as u32,
        m: j0.m,
        n: n as u32,
        out_stride: j0.m,
        out_col0: 0,
        soff: j0.soff,
        has_bias: j0.has_bias,
        tiles_m: tile0,
    };
    let mut push = bytes(&kernels::MatmulQ8Params { mm, qs_off: (n * k / 16) as u32 });
    for jp in &jobs[1..] {
        push.extend_from_slice(bytemuck::bytes_of(jp));
    }
    GemvJobs { res, push, groups: tile0, shape: format!("{shape} n={n}") }
}

/// Push constants of a matmul over row chunk `ch` of `lw` for `n` activation rows, written
/// into the full output row at the chunk's first row.
fn chunk_params(lw: &GpuWeight, ch: &WeightChunk, n: usize, has_bias: bool, tiles_m: u32) -> kernels::MatmulParams {
    kernels::MatmulParams {
        k: lw.cols as u32,
        m: ch.rows,
        n: n as u32,
        out_stride: lw.rows as u32,
        out_col0: ch.row0,
        soff: ch.soff_words,
        has_bias: has_bias as u32,
        tiles_m,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_that_fill_the_gemv_slots_poorly_take_a_fitted_tile() {
        assert_eq!(slot_use(20, 16), 20.0 / 32.0);
        // Q4_K (4 lanes a block): Qwen3-8B's 4,096 columns fill 16 slots; 14B's 5,120 do not.
        assert_eq!(fitted_tile_rows(16, 4), None);
        assert_eq!(fitted_tile_rows(20, 4), Some(16));
        assert_eq!(fitted_tile_rows(68, 4), None);
        assert_eq!(fitted_tile_rows(4, 4), Some(16));
        // Q6_K (8 lanes): 12 blocks over 8 slots, or over a tile of 8 rows' 4 slots.
        assert_eq!(fitted_tile_rows(12, 8), Some(8));
        // Q8_0 (1 lane, 32-element blocks): 4,096 columns fill 64 slots, 2,880 (90 blocks) do not.
        assert_eq!(fitted_tile_rows(128, 1), None);
        assert_eq!(fitted_tile_rows(90, 1), Some(8));
        // One block per row: no tile reaches 80%; the best one (2 slots) uses half of them.
        assert_eq!(fitted_tile_rows(1, 4), Some(32));
    }
}
