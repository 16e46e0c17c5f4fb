//! Cooperative-matrix kernel specs for prefill: the matmul that stages f16 tiles in
//! workgroup memory (`matmul_coop`), fed either by dequantizing weight tiles on the fly or
//! by a weight slice dequantized to f16 beforehand (`dequant_f16`).
//! Re-exported by `kernels`.

use bytemuck::{Pod, Zeroable};

use crate::features::Coop;
use crate::kernels::{dequant_parts, push_size, with_layout, MatmulParams, MATMUL_BINDINGS};
use crate::pipeline::KernelSpec;
use crate::repack::GpuLayout;

/// A tile shape of the cooperative-matrix matmul: `bm` weight rows × `bn` activation rows
/// computed by `gm × gn` subgroups (each `bm/frag/gm × bn/frag/gn` accumulators of
/// `frag`×`frag`), `bk` (32 or 64) of the inner dimension staged per step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoopTile {
    /// Fragment edge: 16, or 8 on devices that offer only 8x8x8.
    pub frag: u32,
    /// Weight rows per workgroup.
    pub bm: u32,
    /// Activation rows per workgroup.
    pub bn: u32,
    /// Subgroups along the weight rows.
    pub gm: u32,
    /// Subgroups along the activation rows.
    pub gn: u32,
    /// Inner-dimension elements per step.
    pub bk: u32,
    /// Weight-row tiles per band of the workgroup order, activation tiles next within a band
    /// (0: weight-row tiles fastest over the whole grid).
    pub raster: u32,
    /// k-steps read ahead into registers while the current one is multiplied (0: each step's
    /// slices are read at its start), 1 or 2.
    pub stages: u32,
}

impl CoopTile {
    /// Workgroup memory of the kernel in bytes (staged slices and edge fragments).
    pub fn shared_bytes(&self) -> u32 {
        (self.bm + self.bn) * (self.bk + 8) * 2 + self.gm * self.gn * self.frag * self.frag * 4
    }
}

/// The tile for an `m` (weight rows) × `n` (activation rows) product with `frag`×`frag`
/// fragments: the largest tile that still gives at least `min_groups` workgroups (small
/// products want more, smaller workgroups to fill the device). `f16_operands`: the product
/// reads f16 operands ([`CoopOperands::F16`]), which sets how far it reads ahead.
pub fn coop_tile(m: usize, n: usize, frag: u32, max_shared: u32, f16_operands: bool) -> CoopTile {
    const MIN_GROUPS: usize = 96;
    let groups = |bm: usize, bn: usize| m.div_ceil(bm) * n.div_ceil(bn);
    let (gm, gn, bk) = coop_grid();
    let raster = coop_raster();
    // Every subgroup needs at least one fragment each way, and the slices must fit.
    let usable =
        |t: &CoopTile| t.bm % (frag * t.gm) == 0 && t.bn % (frag * t.gn) == 0 && t.shared_bytes() <= max_shared;
    // The tier is chosen in 16×16-fragment sizes (as the device with those would); see
    // [`fragment_scaled`] for 8×8 fragments.
    let tile = |bm: u32, bn: u32| {
        let stages = coop_stages(bm, bn, f16_operands);
        let (bm, bn) = (fragment_scaled(bm, frag), fragment_scaled(bn, frag));
        let t = CoopTile { frag, bm, bn, gm, gn, bk, raster, stages };
        if usable(&t) {
            t
        } else {
            CoopTile { frag, bm, bn, gm: 2, gn: 2, bk: 32, raster, stages }
        }
    };
    if let Some((bm, bn)) = forced_tile() {
        let t = CoopTile { frag, bm, bn, gm, gn, bk, raster, stages: coop_stages(bm, bn, f16_operands) };
        if usable(&t) {
            return t;
        }
    }
    for (bm, bn) in [(128, 128), (128, 64), (64, 64)] {
        if groups(bm, bn) >= MIN_GROUPS {
            return tile(bm as u32, bn as u32);
        }
    }
    // Few activation rows (batched decode of 10-64 sequences): 32-row weight tiles double the
    // workgroups of a small grid, which otherwise leaves most of the device idle.
    tile(32, 64)
}

/// A tile edge sized for 16×16 fragments, on a device whose fragments are `frag`×`frag`: scaled
/// by `frag / 16`, so that each subgroup holds the same grid of fragments (and runs the same
/// kernel structure) as on a 16×16 device. The devices with 8×8 fragments are software ones
/// (Mesa lavapipe, where the cooperative kernels are tested): full-size tiles there meant four
/// times the fragments per subgroup and a JIT compile to match (sid's lavapipe, cold shader
/// cache: `few_rows_take_split_k_products` 124 s with full-size tiles, 82 s with scaled ones).
pub(crate) fn fragment_scaled(edge: u32, frag: u32) -> u32 {
    if frag >= 16 {
        edge
    } else {
        (edge * frag / 16).max(frag)
    }
}

/// `INFR_VK_COOP_TILE=bm,bn` (tuning): every cooperative matmul uses that tile where the
/// grid divides it and it fits the workgroup memory.
fn forced_tile() -> Option<(u32, u32)> {
    let v = std::env::var("INFR_VK_COOP_TILE").ok()?;
    let p: Vec<u32> = v.split(',').filter_map(|x| x.trim().parse().ok()).collect();
    match p[..] {
        [bm, bn] if bm > 0 && bn > 0 && bm <= 512 && bn <= 512 => Some((bm, bn)),
        _ => None,
    }
}

/// Subgroup grid and k-step of the cooperative matmul: 2×4 subgroups (eight per workgroup),
/// k-steps of 64 (on an H200, 8B pp512: 3,876 → 5,086 t/s against 2×2 and 32 with on-the-fly
/// dequantization; with f16 operands 7,124 against 7,083 for 4×2). `INFR_VK_COOP_GRID=gm,gn,bk`
/// overrides them for tuning on a new device; tiles that do not fit the device's workgroup
/// memory fall back to 2×2 and 32. (Double-buffered staging, which fits 48 KiB only with
/// k-steps of 32, ran 8B pp512 at 5,200 t/s against 7,532 on the H200 and was dropped.)
fn coop_grid() -> (u32, u32, u32) {
    let parsed = std::env::var("INFR_VK_COOP_GRID").ok().and_then(|v| {
        let p: Vec<u32> = v.split(',').filter_map(|x| x.trim().parse().ok()).collect();
        match p[..] {
            [gm, gn, bk] if [1, 2, 4].contains(&gm) && [1, 2, 4].contains(&gn) && [32, 64].contains(&bk) => {
                Some((gm, gn, bk))
            }
            _ => None,
        }
    });
    parsed.unwrap_or((2, 4, 64))
}

/// Workgroup order of the cooperative matmul: bands of 8 weight-row tiles with the activation
/// tiles next within a band (a grouped raster order), so the workgroups in flight share their
/// W tiles. On an H200 (8B pp512) 7,595 / 7,616 / 7,608 t/s against 7,532 / 7,562 / 7,566 in
/// weight-rows-first order, three pairs in one session. `INFR_VK_COOP_RASTER=G` sets the band
/// (0: weight-row tiles fastest over the whole grid).
fn coop_raster() -> u32 {
    std::env::var("INFR_VK_COOP_RASTER").ok().and_then(|v| v.trim().parse().ok()).filter(|&g| g <= 64).unwrap_or(8)
}

/// k-steps the cooperative matmul reads ahead for a `bm`×`bn` tile. With f16 operands: one
/// for tiles of 128×128 and larger, two for smaller ones, whose workgroups read fewer units
/// per step (the second register set is cheap) and whose grids are the small products that
/// have few workgroups per SM to hide memory latency with. On an H200, two calls of one
/// session (five samples each): 8B pp512 (128×128 tiles) ~10,450 t/s with this rule against
/// ~9,900 with two steps everywhere (232 registers against 173), pp2048 8,660 against 8,265;
/// 0.6B pp512 51,295 / 51,503 with this rule, 49,422 / 49,679 with one step everywhere,
/// 51,662 / 52,360 with two. Quantized operands are dequantized as they are read, so a unit
/// read ahead waits for its load there anyway: one step (8B pp200 3,159 t/s against 2,752
/// with the f16 rule and 2,787 with two steps; pp128 2,913 against 3,065 and 3,125; 0.6B
/// pp200 18,178 against 17,687 and 17,611). `INFR_VK_COOP_STAGES=0|1|2` forces a depth for
/// tuning.
fn coop_stages(bm: u32, bn: u32, f16_operands: bool) -> u32 {
    let forced = std::env::var("INFR_VK_COOP_STAGES").ok().and_then(|v| v.trim().parse().ok()).filter(|&s| s <= 2);
    forced.unwrap_or(if !f16_operands || bm * bn >= 128 * 128 { 1 } else { 2 })
}

/// What the cooperative matmul reads: a quantized (or float) weight with f32 activations,
/// dequantized and converted as tiles are staged, or operands already in f16.
#[derive(Debug, Clone, Copy)]
pub enum CoopOperands<'a> {
    /// W in its GPU layout, X in f32.
    Quantized(&'a GpuLayout),
    /// W16 from [`dequant_f16`], X16 from [`crate::kernels::round_act16`].
    F16,
    /// A 3-D expert weight in its GPU layout, f16 activations (from
    /// [`crate::kernels::round_act16`]) gathered per routed pair (`coop_load_moe.wgsl`; push
    /// constants [`MoeCoopParams`]).
    Experts(&'a GpuLayout),
    /// W in its GPU layout, X16 from [`crate::kernels::round_act16`], the inner dimension
    /// split into ranges whose partial products go to separate planes of Y (push constants
    /// [`SplitParams`]; [`split_reduce`] adds them up). For products of few activation rows,
    /// whose grid of output tiles alone leaves most of the device idle.
    SplitK(&'a GpuLayout),
}

/// Push constants of the split-K cooperative matmul ([`CoopOperands::SplitK`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct SplitParams {
    /// `out_stride` is the row stride of each plane; `has_bias` must be 0 (the reduction adds
    /// the bias).
    pub mm: MatmulParams,
    /// Inner-dimension elements per range (a multiple of the k-step).
    pub k_chunk: u32,
    /// Output tiles (weight-row tiles × activation tiles): workgroup `g` computes tile
    /// `g % tiles` over range `g / tiles`.
    pub tiles: u32,
    /// Elements between the partial-product planes of consecutive ranges.
    pub part_stride: u32,
}

/// Push constants of `split_reduce.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct SplitReduceParams {
    /// Output rows.
    pub m: u32,
    pub n: u32,
    pub parts: u32,
    pub has_bias: u32,
}

/// Threads per workgroup of `split_reduce` (one output each).
pub const SPLIT_REDUCE_WG: u32 = 256;

/// The sum of a split-K product's partial planes (binds the planes, Y and the bias).
pub fn split_reduce() -> KernelSpec {
    KernelSpec::new("split_reduce", &["common", "split_reduce"], 3, push_size::<SplitReduceParams>())
}

/// The cooperative-matrix matmul for prefill: `tile` shaped workgroups of `gm × gn`
/// subgroups of the device's `coop.subgroup` lanes (needs f16 `frag`³ → f32 cooperative
/// matrices). Where `coop.raw_units` (the default), the quantized loader reads Q4_K and Q6_K
/// units as raw words and dequantizes them when staging: a unit dequantized as read makes its
/// thread wait for the load before the current step's multiplications, so reading ahead hides
/// nothing. On an H100 (c40, Qwen3-8B Q4_K_M) raw units took 32-row decode steps from 24.7 to
/// 20.4 ms and the split-K Q4_K products from 196-294 to 316-384 GB/s.
pub(crate) fn matmul_coop(ops: CoopOperands<'_>, coop: Coop, tile: CoopTile) -> KernelSpec {
    let subgroup_size = coop.subgroup;
    let f = tile.frag;
    let (fm, fnn) = (tile.bm / f / tile.gm, tile.bn / f / tile.gn);
    let mut acc = String::new();
    let mut mma = String::new();
    let mut direct = String::new();
    let mut edge = String::new();
    for i in 0..fm {
        mma.push_str(&format!(
            "            let a{i} = coopLoadT<coop_mat{f}x{f}<f16, A>>(&ws[(wr + {}u) * SK8 + kk / 8u][0], SK4);\n",
            f * i
        ));
    }
    for j in 0..fnn {
        mma.push_str(&format!(
            "            let b{j} = coopLoad<coop_mat{f}x{f}<f16, B>>(&xs[(wc + {}u) * SK8 + kk / 8u][0], SK4);\n",
            f * j
        ));
    }
    for i in 0..fm {
        for j in 0..fnn {
            acc.push_str(&format!("    var acc{i}_{j}: coop_mat{f}x{f}<f32, C>;\n"));
            mma.push_str(&format!("            acc{i}_{j} = coopMultiplyAdd(a{i}, b{j}, acc{i}_{j});\n"));
            // The index goes through a `let`: naga 30 fails on an index expression written
            // inside a cooperative store ("Expression … is not cached").
            direct.push_str(&format!(
                "        let y{i}_{j} = yb + {}u * ys + {}u;\n        coopStore(acc{i}_{j}, &Y[y{i}_{j}], ys);\n",
                f * j,
                f * i
            ));
            edge.push_str(&format!(
                "        coopStore(acc{i}_{j}, &cs[eo], {f}u);
        workgroupBarrier();
        store_edge(sgid, sgi, r0 + wr + {}u, c0 + wc + {}u);
        workgroupBarrier();\n",
                f * i,
                f * j
            ));
        }
    }
    // W's 16-element unit at `row_blk` (the unit's row, in blocks) and `ke`, read as raw words
    // and opened when staged: Q4_K and Q6_K with `coop.raw_units` (the unit type and its load).
    let raw = coop.raw_units;
    let raw_unit = |l: &GpuLayout| match l.deq {
        "q4_k" if raw => Some((
            "alias WUnit = RawQ4K;\n\nfn open_w(v: WUnit) -> array<vec4<f16>, 4> {\n    return open_q4_k(v);\n}",
            "let blk = row_blk + ke / BLOCK;
    let e0 = ke % BLOCK;
    let sw = pc.soff + blk * (SB / 4u);
    return RawQ4K(W[q4k_word(blk * QW, e0) >> 2u], W[sw >> 2u], e0 >> 5u);",
        )),
        "q6_k" if raw => Some((
            "alias WUnit = RawQ6K;\n\nfn open_w(v: WUnit) -> array<vec4<f16>, 4> {\n    return open_q6_k(v);\n}",
            "let blk = row_blk + ke / BLOCK;
    let a = q6k_where(blk * QW, pc.soff * 4u + blk * SB, ke % BLOCK);
    return RawQ6K(W[a[0] >> 2u], W[a[1] >> 2u], wload(a[2]), wload(a[3]), a[4]);",
        )),
        _ => None,
    };
    // The quantized weight loader, then the X loader and output parts.
    let quantized = |l: &GpuLayout, name: String, x_out: &[&'static str], bindings: u32, push_bytes: u32| {
        let mut parts = dequant_parts(l, "coop_load_quant");
        parts.extend(x_out);
        parts.extend(["deq16_generic", "deq16_k", "matmul_coop"]);
        let spec = KernelSpec { name, parts, defines: Vec::new(), bindings, push_bytes };
        match raw_unit(l) {
            // Raw units bind W as 16-byte words (whole quant runs per load).
            Some((unit, load)) => with_layout(spec.define("W_UNIT", unit).define("LOAD_W", load), l)
                .define("W_ELEM", "vec4<u32>")
                .redefine("W_WORD", "W[i >> 2u][i & 3u]"),
            // Other units are dequantized as read, through single words as the other kernels
            // read them.
            None => with_layout(
                spec.define(
                    "W_UNIT",
                    "alias WUnit = array<vec4<f16>, 4>;\n\nfn open_w(v: WUnit) -> array<vec4<f16>, 4> {\n    return v;\n}",
                )
                .define("LOAD_W", "return deq16_generic(row_blk, pc.soff * 4u, ke);"),
                l,
            )
            .define("W_ELEM", "u32"),
        }
    };
    let spec = match ops {
        CoopOperands::Quantized(l) => {
            let spec = quantized(
                l,
                format!("matmul_coop.{}", l.ty),
                &["coop_x_f32", "coop_dense"],
                MATMUL_BINDINGS,
                push_size::<MatmulParams>(),
            );
            spec.define("TILE_GUARD", "")
        }
        CoopOperands::SplitK(l) => {
            let spec = quantized(
                l,
                format!("matmul_coop_split.{}", l.ty),
                &["f16_words", "coop_x_f16", "coop_dense"],
                MATMUL_BINDINGS,
                push_size::<SplitParams>(),
            );
            spec.define("TILE_GUARD", "")
                .define("SPLIT_FIELDS", "    k_chunk: u32,\n    tiles: u32,\n    part_stride: u32,\n")
                .define(
                    "K_RANGE",
                    "    let lin = lin_all % pc.tiles;\n    let part = lin_all / pc.tiles;\n    k_lo = part * pc.k_chunk;\n    k_end = min(pc.k, k_lo + pc.k_chunk);\n    yoff = part * pc.part_stride;",
                )
                .define("K_SPAN", "pc.k_chunk")
        }
        CoopOperands::F16 => KernelSpec::new(
            "matmul_coop.f16in",
            &["common", "f16_words", "coop_x_f16", "coop_load_f16", "coop_dense", "matmul_coop"],
            4,
            push_size::<MatmulParams>(),
        )
        .define("TILE_GUARD", ""),
        CoopOperands::Experts(l) => {
            let spec = quantized(
                l,
                format!("matmul_coop_moe.{}", l.ty),
                &["f16_words", "coop_load_moe", "moe_weigh"],
                MOE_COOP_BINDINGS,
                push_size::<MoeCoopParams>(),
            );
            // Tiles past the list's count end at once, uniformly to naga: the test goes
            // through workgroup memory (it tracks `tn`, a variable, as non-uniform).
            spec.define(
                "TILE_GUARD",
                "    if t == 0u {\n        moe_live = u32(tn < TILES[0]);\n    }\n    if workgroupUniformLoad(&moe_live) == 0u {\n        return;\n    }\n    moe_begin(tn);",
            )
        }
    };
    // Whole-k products (every kind but the split one, which set these above).
    let spec = spec
        .define("SPLIT_FIELDS", "")
        .define("K_RANGE", "    let lin = lin_all;\n    k_end = pc.k;")
        .define("K_SPAN", "pc.k");
    spec.define("F", f)
        .define("WG", tile.gm * tile.gn * subgroup_size)
        .define("SGS", subgroup_size)
        .define("BM", tile.bm)
        .define("BN", tile.bn)
        .define("GM", tile.gm)
        .define("GN", tile.gn)
        .define("BK", tile.bk)
        .define("SK", tile.bk + 8)
        .define("RASTER", tile.raster)
        .define("STAGES", tile.stages)
        .define("CS", tile.gm * tile.gn * f * f)
        .define("ACC_DECL", acc)
        .define("MMA", mma)
        .define("STORE_DIRECT", direct)
        .define("STORE_EDGE", edge)
}

/// Bindings of the expert cooperative matmul: W, X, Y, bias, tables, route, tiles.
pub const MOE_COOP_BINDINGS: u32 = 7;

/// Push constants of the expert cooperative matmul (`coop_load_moe.wgsl`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct MoeCoopParams {
    /// Input width.
    pub k: u32,
    /// Rows of one expert.
    pub m: u32,
    /// Activation rows of the grid: the most tiles the list can hold, times the tile's rows.
    pub n: u32,
    pub out_stride: u32,
    pub out_col0: u32,
    pub soff: u32,
    pub has_bias: u32,
    pub tiles_m: u32,
    pub n_pairs: u32,
    /// Pairs per input row (the experts per token reading the token's row, or 1).
    pub x_div: u32,
    /// Multiply by the pair's routing weight: 0 no, 1 before the bias, 2 after it.
    pub scale: u32,
}

/// Push constants of `dequant_f16.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct DequantF16Params {
    pub k: u32,
    /// Rows written (from `row0` of the weight chunk).
    pub rows: u32,
    pub row0: u32,
    /// Scale-plane offset of the chunk (words), as `MatmulParams::soff`.
    pub soff: u32,
}

/// Threads per workgroup of `dequant_f16`.
pub const DEQUANT_F16_WG: u32 = 256;

/// Dequantize rows of a weight chunk to row-major f16 (k must be a multiple of 32), and the
/// elements each thread converts: 32 for Q4_K / Q6_K, 8 for the other types. With `striped`
/// (Q4_K / Q6_K only) a thread's 32 elements are four runs of 8 a workgroup apart, so that
/// each of its 16-byte stores lands next to its neighbours' (same workgroup count).
pub fn dequant_f16(l: &GpuLayout, striped: bool) -> (KernelSpec, u32) {
    let mut parts = dequant_parts(l, "dequant_f16");
    let f = l.deq;
    let k_quant = matches!(f, "q4_k" | "q6_k");
    let striped = striped && k_quant;
    let (ept, convert) = if k_quant {
        parts.push("deq16_k");
        (
            32,
            format!(
                "    let blk = row * (pc.k / BLOCK) + e / BLOCK;
    let qb = blk * QW;
    let sb = pc.soff * 4u + blk * SB;
    let a = deq16_{f}(qb, sb, e % BLOCK);
    let b = deq16_{f}(qb, sb, e % BLOCK + 16u);
    W16[o] = vec4<u32>(pack4(a[0]), pack4(a[1]));
    W16[o + 1u] = vec4<u32>(pack4(a[2]), pack4(a[3]));
    W16[o + 2u] = vec4<u32>(pack4(b[0]), pack4(b[1]));
    W16[o + 3u] = vec4<u32>(pack4(b[2]), pack4(b[3]));"
            ),
        )
    } else {
        (
            8,
            "    let a = vec4<f16>(quad(row, e));
    let b = vec4<f16>(quad(row, e + 4u));
    W16[o] = vec4<u32>(pack4(a), pack4(b));"
                .to_owned(),
        )
    };
    let stripe = if striped {
        format!(
            "    let f = 8u * g;
    let r = f / pc.k;
    let e = f % pc.k;
    let blk = (pc.row0 + r) * (pc.k / BLOCK) + e / BLOCK;
    let v = deq8_{f}(blk * QW, pc.soff * 4u + blk * SB, e % BLOCK);
    W16[g] = vec4<u32>(pack4(v[0]), pack4(v[1]));"
        )
    } else {
        String::new()
    };
    let name = if striped { format!("dequant_f16.{}.striped", l.ty) } else { format!("dequant_f16.{}", l.ty) };
    let spec = KernelSpec::new(name, &parts, 3, push_size::<DequantF16Params>())
        .define("EPT", ept)
        .define("WG", DEQUANT_F16_WG)
        .define("CONVERT", convert)
        .define("STRIPED", striped)
        .define("STRIPE", stripe);
    (with_layout(spec, l), ept)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With 8×8 fragments each subgroup holds the grid of fragments that 16×16 ones give, in
    /// every tier of `coop_tile` and in the expert tile (the structure NVIDIA runs is the
    /// one lavapipe tests).
    #[test]
    fn tiles_hold_the_same_fragment_grid_for_both_fragment_sizes() {
        let grid = |t: CoopTile| (t.bm / t.frag / t.gm, t.bn / t.frag / t.gn, t.gm, t.gn, t.bk, t.stages);
        for (m, n) in [(4096, 512), (1024, 512), (4096, 100), (1024, 100), (64, 64), (37, 260)] {
            for f16 in [false, true] {
                let (big, small) = (coop_tile(m, n, 16, 49152, f16), coop_tile(m, n, 8, 49152, f16));
                assert_eq!(grid(small), grid(big), "{m}x{n}: {small:?} against {big:?}");
                assert_eq!((small.bm * 2, small.bn * 2), (big.bm, big.bn), "{m}x{n}");
            }
        }
        let moe = |f| crate::moe_kernels::moe_coop_tile(f, 49152);
        assert_eq!(grid(moe(8)), grid(moe(16)));
    }

    /// The f16-operand matmul compiles for both fragment sizes (8 runs on lavapipe, 16 on
    /// NVIDIA), in the tile shapes `coop_tile` picks, with 0 to 2 k-steps read ahead.
    #[test]
    fn f16_matmul_compiles_for_both_fragment_sizes() {
        for f in [8, 16] {
            for tile in [coop_tile(4096, 512, f, 49152, true), coop_tile(64, 64, f, 32768, true)] {
                let spec = matmul_coop(CoopOperands::F16, Coop { frag: f, subgroup: 32, raw_units: false }, tile);
                crate::pipeline::compile_wgsl(&spec.name, &spec.wgsl().unwrap(), true).unwrap();
                // And the order without bands, and every read-ahead depth.
                for stages in 0..=2 {
                    let plain = CoopTile { raster: 0, stages, ..tile };
                    let spec = matmul_coop(CoopOperands::F16, Coop { frag: f, subgroup: 32, raw_units: false }, plain);
                    crate::pipeline::compile_wgsl(&spec.name, &spec.wgsl().unwrap(), true).unwrap();
                }
            }
        }
    }
}
