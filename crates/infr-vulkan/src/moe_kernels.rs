//! Kernel specs and push constants of the mixture-of-experts FFN (`shaders/matmul_moe.wgsl`,
//! `moe_route.wgsl`, `moe_glu.wgsl`, `moe_combine.wgsl`).

use bytemuck::{Pod, Zeroable};
use infr_core::Activation;

use crate::coop_kernels::fragment_scaled;
use crate::kernels::{dequant_parts, elt_body, push_size, with_layout, with_reduce, CoopTile, Elt, MATMUL_WG};
use crate::pipeline::KernelSpec;
use crate::repack::GpuLayout;

/// Most experts per token the routing kernel keeps (real models use up to 10).
pub const MOE_MAX_USED: u32 = 32;

/// Weight rows per workgroup of the expert matmuls: the per-pair kernel (decode) and the
/// tiled one. `INFR_VK_MOE_R=pair,tiled` overrides them for tuning (each 1..=8).
pub fn moe_rows() -> (u32, u32) {
    let forced = std::env::var("INFR_VK_MOE_R").ok().and_then(|v| {
        let p: Vec<u32> = v.split(',').filter_map(|x| x.trim().parse().ok()).collect();
        match p[..] {
            [a, b] if (1..=8).contains(&a) && (1..=8).contains(&b) => Some((a, b)),
            _ => None,
        }
    });
    forced.unwrap_or((MOE_R_PAIR, MOE_R_TILED))
}

/// Default weight rows per workgroup of the per-pair expert matmul.
pub const MOE_R_PAIR: u32 = 2;
/// Default weight rows per workgroup of the tiled expert matmul.
pub const MOE_R_TILED: u32 = 2;

/// Pairs per tile of the tiled expert matmul (one weight read serves this many pairs).
pub const MOE_TILE_C: u32 = 8;

/// Tokens from which a step's expert matmuls run over tiles of pairs (fewer: a decode step's
/// pairs mostly have an expert each, and the per-pair kernel does no wasted columns).
pub const MOE_TILED_MIN_TOKENS: usize = 16;

/// Most experts the tile builder counts in workgroup memory.
pub const MOE_TILES_MAX_EXPERTS: u32 = 1024;

/// Push constants of `moe_tiles.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct MoeTilesParams {
    pub n_pairs: u32,
    pub n_expert: u32,
    /// Pairs per tile.
    pub c: u32,
}

/// Words of the tile list for `n_pairs` pairs over `n_expert` experts in tiles of up to `c`
/// pairs (count, pair order, three words per tile).
pub fn moe_tile_words(n_pairs: usize, n_expert: usize, c: u32) -> usize {
    1 + n_pairs + 3 * moe_max_tiles(n_pairs, n_expert, c)
}

/// Most tiles of up to `c` pairs that `n_pairs` pairs can need: every expert's last tile may
/// be partial.
pub fn moe_max_tiles(n_pairs: usize, n_expert: usize, c: u32) -> usize {
    n_pairs.div_ceil(c as usize) + n_expert.min(n_pairs)
}

/// Fewest tokens for which a batch's expert matmuls run on cooperative matrices (when the
/// device has them). `INFR_VK_MOE_COOP_MIN` overrides it for tuning.
pub fn moe_coop_min_tokens() -> usize {
    std::env::var("INFR_VK_MOE_COOP_MIN").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(64)
}

/// The cooperative tile of the expert matmuls: 128 weight rows by 64 pairs in 4×2 subgroups
/// (2×2 fragments each), k-steps of 32 read two ahead. A tile holds pairs of one expert only,
/// so an expert whose pairs spill past one tile has its weights dequantized again for the
/// next: with ~32 pairs per expert
/// (Qwen3-30B-A3B, pp512: 4,096 pairs over 128 experts), 32-pair tiles gave 5,356 t/s and
/// 64-pair tiles 6,734 on an H100 in one run (128x32 reading two steps ahead: 4,107; 64x64:
/// 5,790; 64x32: 5,552; 256x32: 5,375). With f16 activations and raw weight units (c51,
/// H100, all 48 layers, three warm-up runs): k-steps of 32 two ahead 9,351 / 9,328 t/s
/// against 8,763 / 8,774 for k-steps of 64 one ahead (24 layers: 128x32 12,578, 64x64
/// 13,363 against 16,833); in a later call 4×2 subgroups 9,637 against 9,306 for 2×4 (4×1
/// fragments each) and 8,980 for k-steps of 64 two ahead. Scaled for 8×8 fragments
/// ([`fragment_scaled`]).
pub fn moe_coop_tile(frag: u32, max_shared: u32) -> CoopTile {
    let (bm, bn) = (fragment_scaled(128, frag), fragment_scaled(64, frag));
    let tile = CoopTile { frag, bm, bn, gm: 4, gn: 2, bk: 32, raster: 0, stages: 2 };
    if let Some(t) = forced_moe_tile(frag).filter(|t| t.shared_bytes() <= max_shared) {
        return t;
    }
    if tile.shared_bytes() <= max_shared {
        tile
    } else {
        CoopTile { bn: fragment_scaled(32, frag), gn: 1, ..tile }
    }
}

/// `INFR_VK_MOE_TILE=bm,bn,gm,gn,bk,stages` (tuning): the expert matmuls' cooperative tile,
/// where every subgroup gets whole fragments.
fn forced_moe_tile(frag: u32) -> Option<CoopTile> {
    let v = std::env::var("INFR_VK_MOE_TILE").ok()?;
    let p: Vec<u32> = v.split(',').filter_map(|x| x.trim().parse().ok()).collect();
    let [bm, bn, gm, gn, bk, stages] = p[..] else { return None };
    let ok = [1, 2, 4, 8].contains(&gm)
        && [1, 2, 4, 8].contains(&gn)
        && gm * gn <= 16
        && [32, 64].contains(&bk)
        && stages <= 2
        && bm % (frag * gm) == 0
        && bn % (frag * gn) == 0
        && bm <= 256
        && bn <= 256;
    ok.then_some(CoopTile { frag, bm, bn, gm, gn, bk, raster: 0, stages })
}

/// Push constants of `moe_route.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct MoeRouteParams {
    pub n_tokens: u32,
    pub n_expert: u32,
    pub k: u32,
    /// 0 softmax, 1 sigmoid, 2 softmax over the chosen.
    pub gating: u32,
    pub renorm: u32,
    pub has_scale: u32,
    /// The op's expert slice (`MoeParams::held_experts`): ids in it are written local to
    /// it, any other as expert 0 with weight 0.
    pub first: u32,
    pub count: u32,
    /// 1: each token's pairs end with the shared expert's slot, weight 1; 2: weighted by its
    /// sigmoid gate of the input (bindings X and the gate vector); 0: no slot.
    pub shared_slot: u32,
    /// Input columns (the gate's dot product, with `shared_slot` 2).
    pub in_cols: u32,
}

/// Push constants of `matmul_moe.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct MoeMatmulParams {
    /// Input width.
    pub k: u32,
    /// Rows of one expert.
    pub m: u32,
    pub n_pairs: u32,
    pub out_stride: u32,
    pub out_col0: u32,
    pub soff: u32,
    /// Pairs per input row (k experts per token reading the token's row, or 1).
    pub x_div: u32,
    /// Multiply by the pair's routing weight after the bias: 2 yes, 0 no (an input weighted
    /// by it already: `moe_pair_inputs`, `quantize_pairs`).
    pub scale: u32,
    pub tiles_m: u32,
    pub has_bias: u32,
}

/// Whether decode steps may run the expert matmuls on the integer-dot kernel
/// (`INFR_VK_MOE_Q8=0` turns it off, to compare with the scalar per-pair kernel).
pub fn moe_q8_enabled() -> bool {
    std::env::var("INFR_VK_MOE_Q8").map_or(true, |v| v.trim() != "0")
}

/// Whether a decode step may run the shared expert as one more routed pair of each token
/// (`INFR_VK_MOE_SHARED_SLOT=0` keeps its own matmuls, to compare).
pub fn moe_shared_slot_enabled() -> bool {
    std::env::var("INFR_VK_MOE_SHARED_SLOT").map_or(true, |v| v.trim() != "0")
}

/// Push constants of the integer-dot expert matmul ([`matmul_vec_q8_moe`]): the dense
/// kernel's, then the routing fields.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct MoeQ8Params {
    pub q: crate::kernels::MatmulQ8Params,
    pub n_pairs: u32,
    /// Pairs per input row (the experts per token reading the token's row, or 1).
    pub x_div: u32,
    /// Multiply by the pair's routing weight after the bias: 2 yes, 0 no (an input weighted
    /// by it already: `moe_pair_inputs`, `quantize_pairs`).
    pub scale: u32,
}

/// The expert matmul of decode steps on the integer-dot kernel (`matmul_vec_q8.wgsl`):
/// `r` weight rows of one routed pair's expert per workgroup against the pair's input row,
/// quantized to int8 as llama.cpp's CPU quantizes it (`mul_mat_vec_id` reads q8_1 the same
/// way). Bindings: W, XQ, Y, bias (per expert), XS, route. `gate_up`: a second weight of
/// the same shape and type (the up weight, bindings W1 and BIAS1, push constants
/// [`MoeQ8GateUpParams`]) in the same dispatch, its rows written after the first one's.
/// `None` where the weight type has no integer-dot form. `tiled`: the tiled layout's kernel
/// (`crate::gemv_q8::matmul_rows_q8`, `r` weight rows a tile, one per thread slot) within
/// that many bytes of shared memory, for expert rows whose blocks fill the matrix-vector
/// kernel's block slots poorly (Qwen3-30B-A3B's 768-column down product: 3 Q4_K blocks over
/// 16 slots). `shared`: pairs routed to the shared expert's slot (id `SHARED_SLOT` of
/// moe_gating.wgsl) read its own weights, of the same type and shape: bindings WS (and WS1
/// for the up weight) after the others, push constants [`MoeQ8SharedParams`] /
/// [`MoeQ8GateUpSharedParams`].
pub fn matmul_vec_q8_moe(l: &GpuLayout, r: u32, gate_up: bool, tiled: Option<u32>, shared: bool) -> Option<KernelSpec> {
    let (dense, kernel) = match tiled {
        Some(max_shared) => (crate::gemv_q8::matmul_rows_q8(l, 1, r, 1, 1, max_shared)?, "matmul_rows_q8_moe"),
        None => (crate::kernels::matmul_vec_q8(l, 1, r, 1)?, "matmul_vec_q8_moe"),
    };
    // Bias value of the row this lane stores, from the job's bias rows.
    let bias = if gate_up {
        "            var bias = 0.0;
            if has_bias != 0u {
                if job == 1u {
                    bias = BIAS1[wrow0 + r0 + r];
                } else {
                    bias = BIAS[wrow0 + r0 + r];
                }
            }"
    } else {
        "            var bias = 0.0;
            if has_bias != 0u {
                bias = BIAS[wrow0 + r0 + r];
            }"
    };
    let store = format!("{bias}\n            Y[moe_pair * out_stride + col] = moe_weigh_bias(v, moe_pair, bias);");
    // The second job (the up weight) follows the first one's grid and writes the columns
    // after it.
    let second = if gate_up {
        "    if jl >= pc.tiles_m * pc.n_pairs {
        jl -= pc.tiles_m * pc.n_pairs;
        job = 1u;
        soff = pc.soff1;
        has_bias = pc.bias1;
        out_col0 = pc.out_col0 + pc.m;
    }\n"
    } else {
        ""
    };
    // The shared expert's slot: its weights from row 0 of WS / WS1, their scale planes.
    let expert_row = if shared {
        let soff = if gate_up { "select(pc.soff_s, pc.soff_s1, job == 1u)" } else { "pc.soff_s" };
        format!(
            "    shared_w = ROUTE[pair] == 0xffffffffu;
    if shared_w {{
        wrow0 = 0u;
        soff = {soff};
    }} else {{
        wrow0 = ROUTE[pair] * pc.m;
    }}"
        )
    } else {
        "    wrow0 = ROUTE[pair] * pc.m;".to_string()
    };
    let select = format!(
        "    var jl = lin0;
{second}    let pair = jl / pc.tiles_m;
    lin = jl % pc.tiles_m;
    moe_pair = pair;
{expert_row}
    xrow0 = pair / pc.x_div;"
    );
    let mut parts = dense.parts.clone();
    parts.insert(parts.len() - 1, "moe_weigh");
    let (name, extra) = if gate_up { (".x2", 2) } else { ("", 0) };
    let (sh_name, sh_extra) = match (shared, gate_up) {
        (false, _) => ("", 0),
        (true, false) => (".sh", 1),
        (true, true) => (".sh", 2),
    };
    let push_bytes = match (shared, gate_up) {
        (false, false) => push_size::<MoeQ8Params>(),
        (false, true) => push_size::<MoeQ8GateUpParams>(),
        (true, false) => push_size::<MoeQ8SharedParams>(),
        (true, true) => push_size::<MoeQ8GateUpSharedParams>(),
    };
    let spec = KernelSpec {
        name: format!("{kernel}.{}{name}{sh_name}", l.ty),
        parts,
        bindings: crate::kernels::MATMUL_BINDINGS + 1 + extra + sh_extra,
        push_bytes,
        ..dense
    };
    let (fields, binds, wload, grid) = if gate_up {
        (
            "    n_pairs: u32,\n    x_div: u32,\n    scale: u32,\n    soff1: u32,\n    bias1: u32,\n",
            "@group(0) @binding(6) var<storage, read> W1: array<vec4<u32>>;\n@group(0) @binding(7) var<storage, read> BIAS1: array<f32>;\n",
            "    if job == 1u {\n        return W1[i >> 2u];\n    }\n    return W[i >> 2u];",
            "pc.tiles_m * pc.n_pairs * 2u",
        )
    } else {
        (
            "    n_pairs: u32,\n    x_div: u32,\n    scale: u32,\n",
            "",
            "    return W[i >> 2u];",
            "pc.tiles_m * pc.n_pairs",
        )
    };
    // The shared expert's weights and scale planes after the others.
    let (fields, binds, wload) = match (shared, gate_up) {
        (false, _) => (fields.to_string(), binds.to_string(), wload.to_string()),
        (true, false) => (
            format!("{fields}    soff_s: u32,\n"),
            format!("{binds}@group(0) @binding(6) var<storage, read> WS: array<vec4<u32>>;\n"),
            format!("    if shared_w {{\n        return WS[i >> 2u];\n    }}\n{wload}"),
        ),
        (true, true) => (
            format!("{fields}    soff_s: u32,\n    soff_s1: u32,\n"),
            format!("{binds}@group(0) @binding(8) var<storage, read> WS: array<vec4<u32>>;\n@group(0) @binding(9) var<storage, read> WS1: array<vec4<u32>>;\n"),
            format!("    if shared_w {{\n        if job == 1u {{\n            return WS1[i >> 2u];\n        }}\n        return WS[i >> 2u];\n    }}\n{wload}"),
        ),
    };
    let shared_var = if shared {
        "// Whether this workgroup's pair is the shared expert's slot.\nvar<private> shared_w: bool;\n"
    } else {
        ""
    };
    Some(
        spec.redefine("JOB_FIELDS", fields)
            .redefine(
                "JOB_BINDINGS",
                format!("@group(0) @binding(5) var<storage, read> ROUTE: array<u32>;\n{binds}// The routed pair of this workgroup.\nvar<private> moe_pair: u32;\n{shared_var}"),
            )
            .redefine("WLOAD4", wload)
            .redefine("JOB_SELECT", select)
            .redefine("GRID", grid)
            .redefine("STORE", store)
            .redefine("ROW0", crate::gemv_q8::ROW0_PER_PAIR),
    )
}

/// Push constants of the gate/up form of [`matmul_vec_q8_moe`]: the gate's, then the up
/// weight's scale-plane offset and bias flag (its rows, shape and routing are the gate's).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct MoeQ8GateUpParams {
    pub gate: MoeQ8Params,
    pub soff1: u32,
    pub bias1: u32,
}

/// Push constants of the shared-slot form of [`matmul_vec_q8_moe`]: the routed experts', then
/// the shared expert's scale-plane offset.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct MoeQ8SharedParams {
    pub routed: MoeQ8Params,
    pub soff_s: u32,
}

/// Push constants of the gate/up shared-slot form of [`matmul_vec_q8_moe`]: the gate/up
/// form's, then the shared expert's gate and up scale-plane offsets.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct MoeQ8GateUpSharedParams {
    pub routed: MoeQ8GateUpParams,
    pub soff_s: u32,
    pub soff_s1: u32,
}

/// Push constants of `moe_glu.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct MoeGluParams {
    pub n_pairs: u32,
    pub n_ff: u32,
}

/// Push constants of `moe_combine.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct MoeCombineParams {
    pub n_tokens: u32,
    pub k: u32,
    pub out_cols: u32,
    pub in_cols: u32,
    pub has_shared: u32,
    pub gated: u32,
}

/// Most experts the rank-based routing kernel takes (its logits are held in shared memory).
pub const MOE_ROUTE_RANK_MAX_EXPERTS: u32 = 1024;

/// Top-k routing and gating: every expert ranked against all others at once (up to
/// [`MOE_ROUTE_RANK_MAX_EXPERTS`]), else picks by a workgroup tree. Bindings: logits, expert
/// scales, route, and for the shared expert's slot (rank form only) the input and its gate.
pub fn moe_route(n_expert: u32) -> KernelSpec {
    if n_expert <= MOE_ROUTE_RANK_MAX_EXPERTS {
        KernelSpec::new(
            "moe_route_rank",
            &["common", "tree_sum", "moe_gating", "moe_gate", "moe_route_rank"],
            5,
            push_size::<MoeRouteParams>(),
        )
        .define("MAX_K", MOE_MAX_USED)
        .define("MAX_E", MOE_ROUTE_RANK_MAX_EXPERTS)
    } else {
        KernelSpec::new(
            "moe_route",
            &["common", "tree_sum", "moe_gating", "moe_route"],
            5,
            push_size::<MoeRouteParams>(),
        )
        .define("MAX_K", MOE_MAX_USED)
    }
}

/// The expert matmul for a weight layout, `r` weight rows per workgroup, one routed pair per
/// work item, or (`tiled`) a tile of up to [`MOE_TILE_C`] pairs of one expert. Bindings: W, X,
/// Y, route, tables, bias, tiles (unread when not tiled).
pub fn matmul_moe(l: &GpuLayout, subgroups: bool, r: u32, tiled: bool) -> KernelSpec {
    let c = if tiled { MOE_TILE_C } else { 1 };
    let spec = KernelSpec {
        name: format!("matmul_moe{}.{}", if tiled { "_tiled" } else { "" }, l.ty),
        parts: [dequant_parts(l, "matmul_moe"), vec!["moe_weigh"]].concat(),
        defines: Vec::new(),
        bindings: 7,
        push_bytes: push_size::<MoeMatmulParams>(),
    }
    .define("WG", MATMUL_WG)
    .define("R", r)
    .define("C", c)
    .define("TILED", tiled)
    .define("RC", r * c)
    .define("RED", MATMUL_WG * r * c);
    with_reduce(with_layout(spec, l), subgroups)
}

/// The grouping of pairs by expert into tiles. Bindings: route, tiles.
pub fn moe_tiles() -> KernelSpec {
    KernelSpec::new("moe_tiles", &["common", "moe_tiles"], 2, push_size::<MoeTilesParams>())
        .define("MAXE", MOE_TILES_MAX_EXPERTS)
}

/// Push constants of `moe_pair_inputs.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct MoePairInputParams {
    pub n_pairs: u32,
    /// vec4 words per input row.
    pub words: u32,
    pub pairs_per_token: u32,
    pub pad: u32,
}

/// Each routed pair's input row times its routing weight (mixtures that weight the input:
/// Llama 4), for the float expert matmuls. Bindings: x, route, pair inputs.
pub fn moe_pair_inputs() -> KernelSpec {
    KernelSpec::new(
        "moe_pair_inputs",
        &["common", "moe_pair_row", "moe_pair_inputs"],
        3,
        push_size::<MoePairInputParams>(),
    )
}

/// Gated activation over side-by-side gate and up halves. Bindings: GU, H.
pub fn moe_glu(act: Activation) -> KernelSpec {
    let (name, body) = elt_body(Elt::Glu(act));
    KernelSpec::new(format!("moe_{name}"), &["common", "moe_glu"], 2, push_size::<MoeGluParams>()).define("OP", body)
}

/// Sum of the routed experts plus the (gated) shared expert. Bindings: experts, shared, x,
/// shared gate weights, output.
pub fn moe_combine() -> KernelSpec {
    KernelSpec::new(
        "moe_combine",
        &["common", "tree_sum", "moe_gate", "moe_combine"],
        5,
        push_size::<MoeCombineParams>(),
    )
}

/// Push constants of `moe_shared_gate.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct MoeSharedGateParams {
    pub n_tokens: u32,
    pub in_cols: u32,
}

/// The shared expert's sigmoid gate of every token (for its down projection to scale its row
/// by, where the reader adds the rows up). Bindings: x, gate weights, gates.
pub fn moe_shared_gate() -> KernelSpec {
    KernelSpec::new(
        "moe_shared_gate",
        &["common", "tree_sum", "moe_gate", "moe_shared_gate"],
        3,
        push_size::<MoeSharedGateParams>(),
    )
}
