//! Lowering of prefill matmuls over f16 operands: the activations rounded once into an f16
//! copy, each weight chunk dequantized to f16 in slices small enough to be read back from
//! the GPU's L2 cache, and one cooperative matmul (`matmul_coop.f16in`) per slice. On an
//! H200 the tile-by-tile dequantization was most of the cooperative matmul's time (8B pp512,
//! 12288x4096x512: 0.88 ms, 0.40 ms without the dequantization arithmetic); a slice costs
//! one bandwidth-bound pass instead. (Loading fragments straight from the storage buffers,
//! without staging in workgroup memory, measured 4x slower there.)

use infr_core::WeightId;

use crate::error::VkResult;
use crate::features::Coop;
use crate::features::Features;
use crate::kernels::{self, CoopOperands, DequantF16Params, MatmulParams, RoundParams};
use crate::lower::Res;
use crate::pipeline::KernelSpec;
use crate::weights::GpuWeight;

/// Bytes of one dequantized weight slice: about the L2 cache of a large GPU, so the matmul
/// reads what the dequantization just wrote from the cache.
const SLICE_BYTES: u64 = 32 << 20;

/// Fewest activation rows for which dequantizing the weight first pays (below, the
/// cooperative kernel that dequantizes tiles on the fly is used). `INFR_VK_F16_MIN_ROWS`
/// overrides it for tuning.
fn min_rows() -> usize {
    std::env::var("INFR_VK_F16_MIN_ROWS").ok().and_then(|v| v.parse().ok()).unwrap_or(128)
}

/// One dispatch to emit.
pub(crate) struct Emit {
    pub spec: KernelSpec,
    pub res: Vec<Res>,
    pub push: Vec<u8>,
    pub groups: u32,
    pub shape: Option<String>,
}

/// The plan buffers (`Res::ActQ` indices) the f16 matmuls share: the f16 activations and
/// which node and rounding they hold now (q/k/v and gate/up reuse one copy), and the
/// dequantized weight slice.
#[derive(Default)]
pub(crate) struct F16Buffers {
    x16: Option<(u32, u32, u32)>,
    w16: Option<u32>,
}

/// The cooperative configuration when the product of `n` activation rows with `lw` should
/// run as dequantize + f16 matmul.
pub(crate) fn eligible(feat: Features, lw: &GpuWeight, n: usize) -> Option<Coop> {
    let coop = feat.coopmat?;
    let k = lw.cols;
    let x_bytes = (n * k * 2) as u64;
    let fits = x_bytes <= feat.max_binding_bytes && 128 * (k as u64) * 2 <= SLICE_BYTES;
    (n >= min_rows() && k % 16 == 0 && !lw.chunks.is_empty() && fits).then_some(coop)
}

fn bytes<T: bytemuck::Pod>(p: &T) -> Vec<u8> {
    bytemuck::bytes_of(p).to_vec()
}

/// Dispatches of `Y = X · Wᵀ (+ bias)` for `n` rows of node `x` through f16 operands.
#[allow(clippy::too_many_arguments)]
pub(crate) fn lower(
    lw: &GpuWeight,
    weight: WeightId,
    x: u32,
    n: usize,
    bias: Res,
    out: Res,
    coop: Coop,
    max_shared: u32,
    bufs: &mut F16Buffers,
    qact_bytes: &mut Vec<u64>,
) -> VkResult<Vec<Emit>> {
    let k = lw.cols;
    let mut emits = Vec::new();
    let mode = kernels::act_round_mode(lw.layout.ty, k).unwrap_or(kernels::ROUND_F16);
    let x_need = (n * k * 2) as u64;
    let xi = match bufs.x16 {
        Some((xi, _, _)) => xi,
        None => {
            qact_bytes.push(0);
            qact_bytes.len() as u32 - 1
        }
    };
    qact_bytes[xi as usize] = qact_bytes[xi as usize].max(x_need);
    if bufs.x16 != Some((xi, x, mode)) {
        let n_groups = ((n * k).div_ceil(256)) as u32;
        let rp = RoundParams { n_groups, n_vec4: (n * k / 4) as u32, mode };
        emits.push(Emit {
            spec: kernels::round_act16(),
            res: vec![Res::Act(x), Res::ActQ(xi)],
            push: bytes(&rp),
            groups: n_groups,
            shape: None,
        });
        bufs.x16 = Some((xi, x, mode));
    }
    let wi = *bufs.w16.get_or_insert_with(|| {
        qact_bytes.push(0);
        qact_bytes.len() as u32 - 1
    });
    // Rows per dequantized slice: a multiple of 128 (whole tiles) within the slice budget.
    let slice_rows = ((SLICE_BYTES / (k as u64 * 2)) as u32 / 128).max(1) * 128;
    let deq = kernels::dequant_f16(&lw.layout);
    let shape = format!("{}x{} n={n}", lw.rows, lw.cols);
    for (ci, ch) in lw.chunks.iter().enumerate() {
        let mut r = 0;
        while r < ch.rows {
            let rows = slice_rows.min(ch.rows - r);
            let tile = kernels::coop_tile(rows as usize, n, coop.frag, max_shared);
            let mm = kernels::matmul_coop(CoopOperands::F16, coop.subgroup, tile);
            let tiles_m = rows.div_ceil(tile.bm);
            let tiles_n = (n as u32).div_ceil(tile.bn);
            let w_need = rows as u64 * k as u64 * 2;
            qact_bytes[wi as usize] = qact_bytes[wi as usize].max(w_need);
            let dp = DequantF16Params { k: k as u32, rows, row0: r, soff: ch.soff_words };
            let threads = rows as u64 * k as u64 / 8;
            emits.push(Emit {
                spec: deq.clone(),
                res: vec![Res::WeightChunk(weight, ci), Res::ActQ(wi), Res::Tables],
                push: bytes(&dp),
                groups: threads.div_ceil(kernels::DEQUANT_F16_WG as u64) as u32,
                shape: Some(shape.clone()),
            });
            let mp = MatmulParams {
                k: k as u32,
                m: rows,
                n: n as u32,
                out_stride: lw.rows as u32,
                out_col0: ch.row0 + r,
                soff: 0,
                has_bias: (bias != Res::Dummy) as u32,
                tiles_m,
            };
            emits.push(Emit {
                spec: mm,
                res: vec![Res::ActQ(wi), Res::ActQ(xi), out, bias],
                push: bytes(&mp),
                groups: tiles_m * tiles_n,
                shape: Some(shape.clone()),
            });
            r += rows;
        }
    }
    Ok(emits)
}
