//! Lowering of prefill matmuls over f16 operands: the activations rounded once into an f16
//! copy, each weight dequantized to f16 (whole, or in a few large slices where a device's
//! buffers are small), and one cooperative matmul (`matmul_coop.f16in`) per slice. On an
//! H200 the tile-by-tile dequantization was most of the cooperative matmul's time (8B pp512,
//! 12288x4096x512: 0.88 ms, 0.40 ms without the dequantization arithmetic); a slice costs
//! one bandwidth-bound pass instead. (Loading fragments straight from the storage buffers,
//! without staging in workgroup memory, measured 4x slower there.)

use std::collections::HashMap;

use infr_core::WeightId;

use crate::error::VkResult;
use crate::features::Coop;
use crate::features::Features;
use crate::kernels::{self, CoopOperands, DequantF16Params, MatmulParams};
use crate::lower::{bytes, u32_of, Res};
use crate::pipeline::KernelSpec;
use crate::weights::GpuWeight;

/// Fewest activation rows for which dequantizing the weight first pays (below, the
/// cooperative kernel that dequantizes tiles on the fly is used). On an H200 (Qwen3-8B
/// shapes) the f16 path ran pp256 at 4,878 t/s against 4,125 and pp1024 at 6,687 against
/// 5,414, while pp128 was no faster. `INFR_VK_F16_MIN_ROWS` overrides it for tuning.
fn min_rows() -> usize {
    std::env::var("INFR_VK_F16_MIN_ROWS").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
}

/// A temporary buffer holding one node's activations rounded as a weight type's matmul
/// reads them (`round_act.wgsl`), reused while the same node and rounding are asked for
/// again (q/k/v, gate/up); any other input overwrites it.
#[derive(Default)]
pub(crate) struct RoundedCopy {
    /// The buffer (`Res::Temp` index) and the node and rounding mode it holds now.
    held: Option<(u32, u32, u32)>,
}

impl RoundedCopy {
    /// The buffer for node `x` rounded by `mode` into `bytes` bytes, and the parameters of the
    /// rounding dispatch to emit first, unless the buffer already holds that.
    pub fn prepare(
        &mut self,
        x: u32,
        mode: u32,
        elements: usize,
        bytes: u64,
        temp_bytes: &mut Vec<u64>,
    ) -> VkResult<(u32, Option<kernels::RoundParams>)> {
        let buf = temp_slot(&mut self.held.map(|(b, _, _)| b), temp_bytes);
        grow_temp(temp_bytes, buf, bytes);
        if self.held == Some((buf, x, mode)) {
            return Ok((buf, None));
        }
        self.held = Some((buf, x, mode));
        Ok((buf, Some(round_params(elements, mode)?)))
    }
}

/// The push constants of a `round_act` / `round_act16` dispatch over `elements` values.
pub(crate) fn round_params(elements: usize, mode: u32) -> VkResult<kernels::RoundParams> {
    Ok(kernels::RoundParams {
        n_groups: u32_of(elements.div_ceil(256), "activation groups")?,
        n_vec4: u32_of(elements / 4, "activations")?,
        mode,
    })
}

/// One dispatch to emit.
pub(crate) struct Emit {
    pub spec: KernelSpec,
    pub res: Vec<Res>,
    pub push: Vec<u8>,
    pub groups: u32,
    pub shape: Option<String>,
}

/// The plan buffers (`Res::Temp` indices) the f16 matmuls share: the f16 activations and
/// which node and rounding they hold now (q/k/v and gate/up reuse one copy), and two
/// dequantized-weight buffers: while a matmul reads one, the next matmul's weight is
/// dequantized into the other (the two touch disjoint memory, so the plan records no
/// barrier between them and the bandwidth-bound dequantization overlaps the compute-bound
/// matmul).
#[derive(Default)]
pub(crate) struct F16Buffers {
    x16: RoundedCopy,
    w16: [Option<u32>; 2],
    /// The weight already dequantized into buffer `1` by the previous matmul.
    prefetched: Option<(WeightId, usize)>,
    /// The partial-product planes of split-K matmuls (`skinny_matmul.rs`): each buffer, and
    /// whether a deferred reduction still holds it.
    partials: Vec<(u32, bool)>,
    /// Split-K matmuls whose reduction the kernel reading them does, by node.
    deferred: HashMap<u32, Planes>,
}

/// The partial products of a split-K matmul left for its reader to add up (in
/// `split_reduce.wgsl`'s order), or its output itself where it ran as one range.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Planes {
    /// The buffer holding them.
    pub res: Res,
    /// How many (1: the output itself).
    pub parts: u32,
    /// vec4s from one plane to the next.
    pub stride_vec4: u32,
}

impl F16Buffers {
    /// The f16 copy of `n` rows of node `x` (`k` wide) rounded as a matmul with weight type
    /// `ty` reads them, pushing its rounding dispatch onto `emits` unless the copy holds that
    /// already.
    pub fn x16_copy(
        &mut self,
        x: u32,
        ty: infr_quant::GgmlType,
        n: usize,
        k: usize,
        temp_bytes: &mut Vec<u64>,
        emits: &mut Vec<Emit>,
    ) -> VkResult<u32> {
        let mode = kernels::act_round16_mode(ty, k);
        let (xi, round) = self.x16.prepare(x, mode, n * k, (n * k * 2) as u64, temp_bytes)?;
        if let Some(rp) = round {
            emits.push(Emit {
                spec: kernels::round_act16(),
                res: vec![Res::Act(x), Res::Temp(xi)],
                push: bytes(&rp),
                groups: rp.n_groups,
                shape: None,
            });
        }
        Ok(xi)
    }

    /// The f16 copy of `n` rows of node `x` (`k` wide) rounded by `mode`, for `x`'s own
    /// kernel to write (a norm or GLU that rounds its output, `fused_kernels::QuantOut::F16`):
    /// the copy holds that from then on, so the matmuls reading it emit no rounding.
    pub fn x16_written_by_producer(
        &mut self,
        x: u32,
        mode: u32,
        n: usize,
        k: usize,
        temp_bytes: &mut Vec<u64>,
    ) -> VkResult<u32> {
        Ok(self.x16.prepare(x, mode, n * k, (n * k * 2) as u64, temp_bytes)?.0)
    }

    /// A buffer for split-K partial products, at least `size` bytes, that no deferred
    /// reduction holds; `hold` keeps it from later products until [`Self::take_planes`].
    pub fn partials(&mut self, size: u64, hold: bool, temp_bytes: &mut Vec<u64>) -> u32 {
        let slot = match self.partials.iter().position(|&(_, held)| !held) {
            Some(s) => s,
            None => {
                temp_bytes.push(0);
                self.partials.push((temp_bytes.len() as u32 - 1, false));
                self.partials.len() - 1
            }
        };
        let (i, _) = self.partials[slot];
        self.partials[slot].1 = hold;
        grow_temp(temp_bytes, i, size);
        i
    }

    /// Record that node `node`'s split-K reduction is left to its reader: `res` holds its
    /// `parts` planes of `plane` elements (`res` is a buffer from [`Self::partials`] taken with
    /// `hold`, or the output itself with one part).
    pub fn defer(&mut self, node: u32, res: Res, parts: u32, plane: u32) {
        self.deferred.insert(node, Planes { res, parts, stride_vec4: plane / 4 });
    }

    /// The planes node `node` left for its reader (releasing their buffer), if it did.
    pub fn take_planes(&mut self, node: u32) -> Option<Planes> {
        let p = self.deferred.remove(&node)?;
        if let Res::Temp(b) = p.res {
            for slot in self.partials.iter_mut().filter(|s| s.0 == b) {
                slot.1 = false;
            }
        }
        Some(p)
    }

    fn w16(&mut self, slot: usize, temp_bytes: &mut Vec<u64>) -> u32 {
        temp_slot(&mut self.w16[slot], temp_bytes)
    }
}

/// The temporary buffer `slot` names, added to the plan's (empty, sized by its users) on
/// first use.
fn temp_slot(slot: &mut Option<u32>, temp_bytes: &mut Vec<u64>) -> u32 {
    *slot.get_or_insert_with(|| {
        temp_bytes.push(0);
        temp_bytes.len() as u32 - 1
    })
}

/// Make plan temporary `i` hold at least `bytes`.
pub(crate) fn grow_temp(temp_bytes: &mut [u64], i: u32, bytes: u64) {
    let b = &mut temp_bytes[i as usize];
    *b = (*b).max(bytes);
}

/// The cooperative configuration when the product of `n` activation rows with `lw` should
/// run as dequantize + f16 matmul.
pub(crate) fn eligible(feat: Features, lw: &GpuWeight, n: usize) -> Option<Coop> {
    let coop = feat.coopmat.filter(|_| feat.f16_prefill)?;
    let k = lw.cols;
    let x_bytes = (n * k * 2) as u64;
    let fits = x_bytes <= feat.max_binding_bytes && 128 * (k as u64) * 2 <= slice_cap(feat);
    let rows_ok = n > kernels::VEC_MAX_COLS && n >= min_rows();
    let f32_weight = lw.layout.ty == infr_quant::GgmlType::F32;
    (rows_ok && !f32_weight && k % 32 == 0 && !lw.chunks.is_empty() && fits).then_some(coop)
}

/// Bytes a dequantized slice may take on this device.
fn slice_cap(feat: Features) -> u64 {
    feat.max_binding_bytes.min(feat.f16_slice_bytes)
}

/// Rows per slice of a chunk of `rows` rows with `k` columns: the fewest slices that fit,
/// of equal size, in whole 128-row tiles.
fn slice_rows(feat: Features, rows: u32, k: usize) -> u32 {
    let max_rows = ((slice_cap(feat) / (k as u64 * 2)) as u32 / 128).max(1) * 128;
    let parts = rows.div_ceil(max_rows);
    rows.div_ceil(parts).div_ceil(128) * 128
}

/// Whether `lw` is dequantized as one slice (then it can be prefetched whole).
fn one_slice(feat: Features, lw: &GpuWeight) -> bool {
    lw.chunks.len() == 1 && slice_rows(feat, lw.chunks[0].rows, lw.cols) >= lw.chunks[0].rows
}

/// One matmul to lower: `out = x · Wᵀ (+ bias)` for `n` rows of node `x`.
pub(crate) struct F16Matmul<'a> {
    pub lw: &'a GpuWeight,
    pub weight: WeightId,
    pub x: u32,
    pub n: usize,
    pub bias: Res,
    pub out: Res,
}

/// The dequantization of rows `row0..row0+rows` of chunk `ci` of `lw` into buffer `wi`.
fn dequant(lw: &GpuWeight, weight: WeightId, ci: usize, (row0, rows): (u32, u32), wi: u32, feat: Features) -> Emit {
    let k = lw.cols;
    let dp = DequantF16Params { k: k as u32, rows, row0, soff: lw.chunks[ci].soff_words };
    let (spec, per_thread) = kernels::dequant_f16(&lw.layout, feat.striped_dequant);
    let threads = rows as u64 * k as u64 / per_thread as u64;
    Emit {
        spec,
        res: vec![Res::WeightChunk(weight, ci), Res::Temp(wi), Res::Tables],
        push: bytes(&dp),
        groups: threads.div_ceil(kernels::DEQUANT_F16_WG as u64) as u32,
        shape: Some(format!("{}x{}", lw.rows, lw.cols)),
    }
}

/// Dispatches of one matmul through f16 operands; `next` is the following matmul that takes
/// this path, whose weight is dequantized alongside this one's product when both are single
/// slices.
pub(crate) fn lower(
    m: &F16Matmul<'_>,
    next: Option<(WeightId, &GpuWeight)>,
    coop: Coop,
    feat: Features,
    bufs: &mut F16Buffers,
    temp_bytes: &mut Vec<u64>,
) -> VkResult<Vec<Emit>> {
    let (lw, n) = (m.lw, m.n);
    let k = lw.cols;
    let mut emits = Vec::new();
    let xi = bufs.x16_copy(m.x, lw.layout.ty, n, k, temp_bytes, &mut emits)?;
    let shape = format!("{}x{} n={n}", lw.rows, lw.cols);
    let prefetched = bufs.prefetched.take().filter(|&(w, _)| w == m.weight);
    let slot = prefetched.map_or(0, |(_, s)| s);
    let wi = bufs.w16(slot, temp_bytes);
    // When this weight and the next are single slices, the next one goes into the other
    // buffer alongside this product (or stays where it is when it is this weight again).
    let ahead = next.filter(|(_, nw)| one_slice(feat, nw) && one_slice(feat, lw));
    let mut prefetch = None;
    if let Some((nw_id, nw)) = ahead {
        if nw_id == m.weight {
            bufs.prefetched = Some((nw_id, slot));
        } else {
            let other = bufs.w16(1 - slot, temp_bytes);
            let nrows = nw.chunks[0].rows;
            grow_temp(temp_bytes, other, nrows as u64 * nw.cols as u64 * 2);
            prefetch = Some(dequant(nw, nw_id, 0, (0, nrows), other, feat));
            bufs.prefetched = Some((nw_id, 1 - slot));
        }
    }
    for (ci, ch) in lw.chunks.iter().enumerate() {
        let slice = slice_rows(feat, ch.rows, k);
        let mut r = 0;
        while r < ch.rows {
            let rows = slice.min(ch.rows - r);
            grow_temp(temp_bytes, wi, rows as u64 * k as u64 * 2);
            if prefetched.is_none() {
                emits.push(dequant(lw, m.weight, ci, (r, rows), wi, feat));
            }
            let tile = kernels::coop_tile(rows as usize, n, coop.frag, feat.shared_bytes, true);
            let mm = kernels::matmul_coop(CoopOperands::F16, coop, tile);
            let tiles_m = rows.div_ceil(tile.bm);
            let tiles_n = (n as u32).div_ceil(tile.bn);
            let mp = MatmulParams {
                k: k as u32,
                m: rows,
                n: n as u32,
                out_stride: lw.rows as u32,
                out_col0: ch.row0 + r,
                soff: 0,
                has_bias: (m.bias != Res::Dummy) as u32,
                tiles_m,
            };
            emits.push(Emit {
                spec: mm,
                res: vec![Res::Temp(wi), Res::Temp(xi), m.out, m.bias],
                push: bytes(&mp),
                groups: tiles_m * tiles_n,
                shape: Some(shape.clone()),
            });
            // The next weight's dequantization goes after the product (in one level of the
            // plan's order, nothing between them): the product's workgroups (one per SM on an H200, bound by registers) start first
            // and the bandwidth-bound dequantization fills the SMs beside them. (Dispatched
            // first, its many short workgroups took the SMs before the product's.) At most one
            // slice here when there is a prefetch (`one_slice`).
            emits.extend(prefetch.take());
            r += rows;
        }
    }
    Ok(emits)
}
