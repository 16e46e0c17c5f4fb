//! Attention kernel specs (scalar and cooperative-matrix attention, the split merge, the
//! KV append) and their push-constant blocks; re-exported by `kernels`.

use bytemuck::{Pod, Zeroable};
use infr_core::KvDType;

use crate::kernels::push_size;
use crate::pipeline::KernelSpec;

/// Threads per workgroup of the attention kernel (also its key tile).
pub const ATTN_WG: u32 = 64;

/// Tiles of keys whose scores the two-pass (f16-probability) attention rows keep in shared
/// memory for their second pass (later tiles compute theirs again).
pub const ATTN_SCORE_TILES: u32 = 4;

/// Flag of the attention kernels' `window` word meaning "chunks of the low bits' size" rather
/// than a sliding window (`attn_first_key` in `common.wgsl`).
pub const ATTN_CHUNKED: u32 = 0x8000_0000;

/// Flag of the attention kernels' `window` word meaning "bidirectional over the step"
/// (`attn_keys` in `common.wgsl`).
pub const ATTN_BIDIR: u32 = 0x4000_0000;

/// The attention kernels' `window` word for a sliding window or chunked attention (0: neither),
/// with the bidirectional flag.
pub fn attn_mask_word(window: Option<u32>, chunk: Option<u32>, bidirectional: bool) -> u32 {
    let bidir = if bidirectional { ATTN_BIDIR } else { 0 };
    match (window, chunk) {
        (Some(w), _) => w | bidir,
        (None, Some(c)) => ATTN_CHUNKED | c,
        (None, None) => bidir,
    }
}

/// Push constants of `kv_write.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct KvWriteParams {
    pub kw: u32,
    pub vw: u32,
    pub n_tokens: u32,
    pub page_size: u32,
    pub pos_off: u32,
    pub pt_off: u32,
}

/// Push constants of `attention.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct AttnParamsGpu {
    pub n_head: u32,
    pub group: u32,
    pub dk: u32,
    pub dv: u32,
    pub scale: f32,
    pub softcap: f32,
    pub window: u32,
    pub page_size: u32,
    pub kw: u32,
    pub vw: u32,
    pub n_tokens: u32,
    pub pos_off: u32,
    pub pt_off: u32,
    pub round_q: u32,
    pub n_split: u32,
    /// Query rows per block of `attention_coop` when it ran before (those rows are done); 0 otherwise.
    pub flash_rows: u32,
    /// Whether binding 6 holds per-head sink logits.
    pub has_sinks: u32,
}

/// Push constants of `attention_combine.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct AttnCombineParams {
    pub n_rows: u32,
    pub dv: u32,
    pub n_split: u32,
    pub n_head: u32,
    pub window: u32,
    pub pos_off: u32,
}

pub(crate) fn kv_defines(spec: KernelSpec, dtype: KvDType) -> KernelSpec {
    match dtype {
        // A q8_0 slot of width w: w/4 words of int8 quants, then w/32 f32 scales (see
        // `KvCache::slot_bytes`). Element index i = slot * w + c. Writes go through
        // `kv_write_q8.wgsl` (whole blocks), never the pairwise STORE_* below.
        KvDType::Q8_0 => spec
            .define("KV_TY", "u32")
            .define(
                "K2",
                "let slot = i / pc.kw;
    let c = i % pc.kw;
    let base = slot * (pc.kw / 4u + pc.kw / 32u);
    let q = KC[base + c / 4u] >> ((c % 4u) * 8u);
    let s = bitcast<f32>(KC[base + pc.kw / 4u + c / 32u]);
    return vec2<f32>(f32(bitcast<i32>(q << 24u) >> 24u), f32(bitcast<i32>(q << 16u) >> 24u)) * s;",
            )
            .define(
                "V1",
                "let slot = i / pc.vw;
    let c = i % pc.vw;
    let base = slot * (pc.vw / 4u + pc.vw / 32u);
    let q = VC[base + c / 4u] >> ((c % 4u) * 8u);
    return f32(bitcast<i32>(q << 24u) >> 24u) * bitcast<f32>(VC[base + pc.vw / 4u + c / 32u]);",
            )
            .define("STORE_K", "")
            .define("STORE_V", ""),
        KvDType::F16 => spec
            .define("KV_TY", "u32")
            .define("K2", "return unpack2x16float(KC[i >> 1u]);")
            .define("V1", "return unpack2x16float(VC[i >> 1u])[i & 1u];")
            .define("STORE_K", "KC[(slot * pc.kw + e) >> 1u] = pack2x16float(vec2<f32>(round_f16(a), round_f16(b)));")
            .define("STORE_V", "VC[(slot * pc.vw + e) >> 1u] = pack2x16float(vec2<f32>(round_f16(a), round_f16(b)));"),
        _ => spec
            .define("KV_TY", "f32")
            .define("K2", "return vec2<f32>(KC[i], KC[i + 1u]);")
            .define("V1", "return VC[i];")
            .define("STORE_K", "KC[slot * pc.kw + e] = a; KC[slot * pc.kw + e + 1u] = b;")
            .define("STORE_V", "VC[slot * pc.vw + e] = a; VC[slot * pc.vw + e + 1u] = b;"),
    }
}

/// KV append for a cache element type (q8_0: one invocation per 32-element block).
pub fn kv_write(dtype: KvDType) -> KernelSpec {
    let name = format!("kv_write.{dtype:?}").to_lowercase();
    let body = if dtype == KvDType::Q8_0 { "kv_write_q8" } else { "kv_write" };
    kv_defines(KernelSpec::new(name, &["common", body], 5, push_size::<KvWriteParams>()), dtype)
}

/// Invocations of `kv_write(dtype)` for `n_tokens` rows of K width `kw` and V width `vw`.
pub fn kv_write_threads(dtype: KvDType, n_tokens: usize, kw: u32, vw: u32) -> usize {
    let per = if dtype == KvDType::Q8_0 { 32 } else { 2 };
    n_tokens * (kw + vw) as usize / per
}

/// Attention for head dims `dk`/`dv` and a cache element type.
pub fn attention(dtype: KvDType, dk: u32, dv: u32, subgroups: bool) -> KernelSpec {
    let name = format!("attention.{dtype:?}.d{dk}x{dv}").to_lowercase();
    let spec = KernelSpec::new(name, &["common", "attn_io", "attention"], 7, push_size::<AttnParamsGpu>())
        .define("WG", ATTN_WG)
        .define("DPT", dv.div_ceil(ATTN_WG).max(1))
        .define("DK", dk.max(2));
    // K rows are read 16 bytes at a time where the head dim allows (each invocation reads
    // its own key's row, so every load instruction touches a cache line per lane: a quarter
    // of the loads of reading 4 bytes at a time).
    // (`k2` keeps a body valid for the binding type; the score loop reads through `kdot`.)
    let (k_ty, kstep, k2, kdot) = match dtype {
        KvDType::F16 if dk % 8 == 0 => (
            "vec4<u32>",
            8,
            "return unpack2x16float(KC[i >> 3u][(i >> 1u) & 3u]);",
            "let w = KC[i >> 3u];
    let a = unpack2x16float(w.x);
    let b = unpack2x16float(w.y);
    let c = unpack2x16float(w.z);
    let e = unpack2x16float(w.w);
    var s = acc + (qs[d] * a.x + qs[d + 1u] * a.y);
    s += qs[d + 2u] * b.x + qs[d + 3u] * b.y;
    s += qs[d + 4u] * c.x + qs[d + 5u] * c.y;
    return s + (qs[d + 6u] * e.x + qs[d + 7u] * e.y);",
        ),
        KvDType::F32 if dk % 4 == 0 => (
            "vec4<f32>",
            4,
            "return vec2<f32>(KC[i >> 2u][i & 3u], KC[(i + 1u) >> 2u][(i + 1u) & 3u]);",
            "let w = KC[i >> 2u];
    let s = acc + (qs[d] * w.x + qs[d + 1u] * w.y);
    return s + (qs[d + 2u] * w.z + qs[d + 3u] * w.w);",
        ),
        _ => ("{{KV_TY}}", 2, "{{K2}}", "let kk = k2(i);\n    return acc + (qs[d] * kk.x + qs[d + 1u] * kk.y);"),
    };
    // V rows likewise, where a row is a power-of-two number of 16-byte reads that divides the
    // workgroup: invocations split a row's reads and the keys of a tile (see `vadd`).
    let v_reads = |per: u32| dv % per == 0 && (dv / per).is_power_of_two() && dv / per <= ATTN_WG;
    let (v_ty, vstep, v1, vadd) = match dtype {
        KvDType::F16 if v_reads(8) => (
            "vec4<u32>",
            8,
            "return unpack2x16float(VC[i >> 3u][(i >> 1u) & 3u])[i & 1u];",
            "let w = VC[i >> 3u];
    let q = array<vec2<f32>, 4>(unpack2x16float(w.x), unpack2x16float(w.y), unpack2x16float(w.z), unpack2x16float(w.w));
    for (var e = 0u; e < 4u; e++) {
        va[2u * e] += select(0.0, p * q[e].x, live);
        va[2u * e + 1u] += select(0.0, p * q[e].y, live);
    }",
        ),
        KvDType::F32 if v_reads(4) => (
            "vec4<f32>",
            4,
            "return VC[i >> 2u][i & 3u];",
            "let w = VC[i >> 2u];
    for (var e = 0u; e < 4u; e++) {
        va[e] += select(0.0, p * w[e], live);
    }",
        ),
        _ => ("{{KV_TY}}", 0, "{{V1}}", ""),
    };
    let spec = spec
        .define("K_TY", k_ty)
        .define("V_TY", v_ty)
        .define("VSTEP", vstep)
        .define("RPT", dv.checked_div(vstep).unwrap_or(1))
        .define("VSUM", (ATTN_WG * vstep).max(1))
        .define("SCORE_TILES", ATTN_SCORE_TILES)
        .define("SCS", ATTN_SCORE_TILES * ATTN_WG)
        .define("VA", vstep.max(1))
        .define("VADD", vadd)
        .define("V1", v1)
        .define("KSTEP", kstep)
        .define("KDOT", kdot)
        .define("K2", k2);
    kv_defines(with_workgroup_reductions(spec, subgroups), dtype)
}

/// `reduce_max` / `reduce_sum` over a workgroup of `WG` (the result in every invocation,
/// `red` reusable afterwards): subgroup operations and one exchange through workgroup
/// memory when the device has them, a shared-memory tree otherwise.
fn with_workgroup_reductions(spec: KernelSpec, subgroups: bool) -> KernelSpec {
    let tree = |op: &str| {
        format!(
            "    red[t] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {{
        if t < s {{
            red[t] = {op};
        }}
        workgroupBarrier();
    }}
    let r = red[0];
    workgroupBarrier();
    return r;"
        )
    };
    let sg = |sg_op: &str, op: &str| {
        format!(
            "    let s = {sg_op}(v);
    if sg_i == 0u {{
        red[sg_id] = s;
    }}
    workgroupBarrier();
    var r = red[0];
    for (var i = 1u; i < n_sg; i++) {{
        r = {op};
    }}
    workgroupBarrier();
    return r;"
        )
    };
    if subgroups {
        spec.define("REDUCE_MAX", sg("subgroupMax", "max(r, red[i])"))
            .define("REDUCE_SUM", sg("subgroupAdd", "r + red[i]"))
            .define(
                "SG_PARAMS",
                ", @builtin(subgroup_invocation_id) sgi: u32, @builtin(subgroup_id) sgid: u32, @builtin(num_subgroups) nsg: u32",
            )
            .define("SG_INIT", "    sg_i = sgi;\n    sg_id = sgid;\n    n_sg = nsg;")
    } else {
        spec.define("REDUCE_MAX", tree("max(red[t], red[t + s])"))
            .define("REDUCE_SUM", tree("red[t] + red[t + s]"))
            .define("SG_PARAMS", "")
            .define("SG_INIT", "")
    }
}

/// Query rows per workgroup of the cooperative-matrix attention with `frag`×`frag`
/// fragments (four subgroups of `frag` rows).
pub fn attn_coop_rows(frag: u32) -> u32 {
    4 * frag
}

/// The cooperative-matrix prefill attention for an f16 cache and head dim `d` (keys and
/// values; a multiple of 16 from 32 to 128), four subgroups of `subgroup_size` lanes (a
/// multiple of `frag`, at most 64), `frag`×`frag` fragments (16, or 8).
pub fn attention_coop(d: u32, frag: u32, subgroup_size: u32, dtype: KvDType) -> Option<KernelSpec> {
    // Above 128 the per-subgroup output accumulators no longer fit in registers; below 32
    // there is little to gain over the scalar kernel (not measured).
    let lanes_ok = subgroup_size % frag == 0 && (frag..=64).contains(&subgroup_size);
    if d % 16 != 0 || !(32..=128).contains(&d) || !lanes_ok || ![8, 16].contains(&frag) {
        return None;
    }
    let f = frag;
    let ty = |elem: &str, role: &str| format!("coop_mat{f}x{f}<{elem}, {role}>");
    let (mut q, mut o_decl, mut s_tile, mut pv, mut store, mut rescale) =
        (String::new(), String::new(), String::new(), String::new(), String::new(), String::new());
    s_tile.push_str("        var s0 = zero;\n        var s1 = zero;\n");
    for i in 0..d / f {
        let c = f * i;
        q.push_str(&format!(
            "    let qi{i} = qrow + {c}u;\n    let qf{i} = coopLoadT<{}>(&kv[qi{i}], KS);\n",
            ty("f16", "A")
        ));
        o_decl.push_str(&format!("    var o{i}: {};\n", ty("f32", "C")));
        // K rows are row-major: Kᵀ (dims × keys) is a column-major operand.
        s_tile.push_str(&format!(
            "        let ka{i} = coopLoad<{b}>(&kv[{c}u], KS);
        let kb{i} = coopLoad<{b}>(&kv[F * KS + {c}u], KS);
        s0 = coopMultiplyAdd(qf{i}, ka{i}, s0);
        s1 = coopMultiplyAdd(qf{i}, kb{i}, s1);\n",
            b = ty("f16", "B")
        ));
        // V rows are row-major (keys × dims): a row-major operand.
        pv.push_str(&format!(
            "        let va{i} = coopLoadT<{b}>(&kv[VOFF + {c}u], KS);
        let vb{i} = coopLoadT<{b}>(&kv[VOFF + F * KS + {c}u], KS);
        o{i} = coopMultiplyAdd(p0, va{i}, o{i});
        o{i} = coopMultiplyAdd(p1, vb{i}, o{i});\n",
            b = ty("f16", "B")
        ));
        store.push_str(&format!(
            "    coopStore(o{i}, &ss[sb], F);
    workgroupBarrier();
    store_rows(sb, sgi, F * sgid, tok0 + F * sgid, h, pt0, {c}u);
    workgroupBarrier();\n"
        ));
        // Through the two halves of the subgroup's score tile in turn: a half is stored again
        // only after the barrier that follows the load of the other.
        let half = if i % 2 == 0 { "sb" } else { "sb1" };
        rescale.push_str(&format!(
            "            coopStore(o{i}, &ss[{half}], F);
            workgroupBarrier();
            scale_rows({half}, sgi, F * sgid);
            workgroupBarrier();
            o{i} = coopLoad<{c_ty}>(&ss[{half}], F);\n",
            c_ty = ty("f32", "C")
        ));
    }
    s_tile.push_str(
        "        let sb1 = sb + F * F;\n        coopStore(s0, &ss[sb], F);\n        coopStore(s1, &ss[sb1], F);",
    );
    let (cache_ty, (fetch8, put8), suffix) = match dtype {
        KvDType::F16 => ("vec4<u32>", (FETCH8_F16, PUT8_F16), ""),
        KvDType::Q8_0 => ("u32", (FETCH8_Q8_0, PUT8_Q8_0), ".q8_0"),
        KvDType::F32 => return None,
    };
    let frag_name = if f == 16 { String::new() } else { format!(".frag{f}") };
    let spec = KernelSpec::new(
        format!("attention_coop.d{d}{frag_name}{suffix}"),
        &["common", "attn_io", "attention_coop"],
        7,
        push_size::<AttnParamsGpu>(),
    )
    .define("K_TY", cache_ty)
    .define("V_TY", cache_ty)
    .define("FETCH8", fetch8)
    .define("PUT8", put8)
    .define("WG", 4 * subgroup_size)
    .define("SGS", subgroup_size)
    .define("F", f)
    .define("D", d)
    .define("KV_LEN", 4 * f * (d + 8))
    .define("SS_LEN", 8 * f * f)
    .define("Q_LOAD", q)
    .define("O_DECL", o_decl)
    .define("S_TILE", s_tile)
    .define("PV", pv)
    .define("O_STORE", store)
    .define("O_RESCALE", rescale);
    Some(spec)
}

/// `attention_coop.wgsl`'s read of eight f16 dims: one 16-byte word.
const FETCH8_F16: &str = "    if slot == NO_SLOT {
        return vec4<u32>(0u);
    }
    if cache_is_v {
        return VC[(slot * pc.vw + kvh * pc.dv) / 8u + d8];
    }
    return KC[(slot * pc.kw + kvh * pc.dk) / 8u + d8];";

/// `attention_coop.wgsl`'s staging of eight f16 dims read by [`FETCH8_F16`].
const PUT8_F16: &str = "    let a = unpack2x16float(w.x);
    let b = unpack2x16float(w.y);
    let c = unpack2x16float(w.z);
    let d = unpack2x16float(w.w);
    kv[o] = f16(a.x);
    kv[o + 1u] = f16(a.y);
    kv[o + 2u] = f16(b.x);
    kv[o + 3u] = f16(b.y);
    kv[o + 4u] = f16(c.x);
    kv[o + 5u] = f16(c.y);
    kv[o + 6u] = f16(d.x);
    kv[o + 7u] = f16(d.y);";

/// `attention_coop.wgsl`'s read of eight q8_0 dims: two words of quants and their block's
/// scale bits (slot layout of `kv_defines`).
const FETCH8_Q8_0: &str = "    if slot == NO_SLOT {
        return vec4<u32>(0u);
    }
    if cache_is_v {
        let e = kvh * pc.dv + 8u * d8;
        let base = slot * (pc.vw / 4u + pc.vw / 32u);
        return vec4<u32>(VC[base + e / 4u], VC[base + e / 4u + 1u], VC[base + pc.vw / 4u + e / 32u], 0u);
    }
    let e = kvh * pc.dk + 8u * d8;
    let base = slot * (pc.kw / 4u + pc.kw / 32u);
    return vec4<u32>(KC[base + e / 4u], KC[base + e / 4u + 1u], KC[base + pc.kw / 4u + e / 32u], 0u);";

/// `attention_coop.wgsl`'s staging of eight q8_0 dims read by [`FETCH8_Q8_0`], dequantized to
/// f16 as llama.cpp's Vulkan flash attention does with a quantized cache.
const PUT8_Q8_0: &str = "    let d = bitcast<f32>(w.z);
    for (var i = 0u; i < 8u; i++) {
        let b = w[i / 4u] << (24u - 8u * (i % 4u));
        kv[o + i] = f16(f32(bitcast<i32>(b) >> 24u) * d);
    }";

/// Merge of split attention partials.
pub fn attention_combine() -> KernelSpec {
    KernelSpec::new("attention_combine", &["common", "attention_combine"], 3, push_size::<AttnCombineParams>())
        .define("MAX_DV", ATTN_COMBINE_MAX_DV)
        .define("SET_O", 4 * ATTN_COMBINE_MAX_DV)
}

/// Value dims per block of [`attention_combine`] (its four sets' sums of a block are held in
/// workgroup memory: 8 KiB; wider heads take several blocks).
pub const ATTN_COMBINE_MAX_DV: u32 = 512;

/// Most key splits [`attention_splits`] gives a (token, head): more would only make
/// workgroups with no keys (each split takes at least 64) and a larger partials buffer.
pub const MAX_ATTENTION_SPLITS: u32 = 256;

/// Key splits for attention with `rows` (token, head) pairs: one when there are many rows
/// (prefill); for fewer (decode), `forced` where set (`kernels.vulkan.flash_splits`, up to
/// [`MAX_ATTENTION_SPLITS`]), else enough workgroups to fill a device (at most 32). Each
/// split takes at least 64 keys, so short contexts use fewer than this count.
pub fn attention_splits(rows: usize, forced: Option<u32>) -> u32 {
    if rows >= 128 {
        return 1;
    }
    decode_splits(rows, forced, 32)
}

/// Key splits of a decode step of `rows` workgroup rows: `forced` where set (up to
/// [`MAX_ATTENTION_SPLITS`]), else enough workgroups to fill a device, at most `most`.
fn decode_splits(rows: usize, forced: Option<u32>, most: u32) -> u32 {
    match forced {
        Some(n) if n > 0 => n.min(MAX_ATTENTION_SPLITS),
        _ => (1024usize.div_ceil(rows.max(1)) as u32).min(most),
    }
}

/// Threads per workgroup of [`attention_decode`].
pub const ATTN_DECODE_WG: u32 = 128;

/// Most query heads one [`attention_decode`] workgroup takes (its registers grow with them).
pub const ATTN_DECODE_MAX_HEADS: u32 = 8;

/// Keys of a split whose scores [`attention_decode`]'s two-pass rows keep per head: all of
/// them for automatic splits (a row is one split only up to 64 keys), later ones computed again.
pub const ATTN_DECODE_SCORE_KEYS: u32 = 64;

/// Query heads per [`attention_decode`] workgroup for `group` query heads per KV head: the
/// largest divisor of the group up to [`ATTN_DECODE_MAX_HEADS`].
pub fn attention_decode_heads(group: u32) -> u32 {
    (1..=group.clamp(1, ATTN_DECODE_MAX_HEADS)).rev().find(|g| group % g == 0).unwrap_or(1)
}

/// Decode attention over an f16 cache by lane groups (`attention_decode.wgsl`): `heads` query
/// heads of one KV head per workgroup, so each K and V row is read once for them, and lanes
/// that share a key (each head's lanes splitting its rows) instead of a workgroup-wide tile.
/// `min_subgroup` is the device's smallest subgroup (the lanes of a key are part of one).
/// `None` where the heads (padded to a power of two) do not fit the lanes, a lane would hold
/// more than 16 chunks of query and output (registers), the head dims do not split into
/// 4-element chunks, or the workgroup memory would pass `max_shared` bytes. Its partials are
/// [`attention`]'s, merged by [`attention_combine`].
pub fn attention_decode(dk: u32, dv: u32, heads: u32, min_subgroup: u32, max_shared: u32) -> Option<KernelSpec> {
    if heads == 0 || heads > ATTN_DECODE_MAX_HEADS {
        return None;
    }
    let padded = heads.next_power_of_two();
    // The most lanes a head may take (a power of two): up to a 32-lane group, one chunk each.
    let most = (min_subgroup.min(32) / padded).min(dk / 4).min(dv / 4);
    if most == 0 {
        return None;
    }
    let per_head = 1 << most.ilog2();
    let lanes = per_head * padded;
    let (ck, cv) = (dk / (4 * per_head), dv / (4 * per_head));
    if dk % (4 * per_head) != 0 || dv % (4 * per_head) != 0 || ck == 0 || cv == 0 || ck + cv > 16 {
        return None;
    }
    let key_groups = ATTN_DECODE_WG / lanes;
    let (scs, mls, osh) = (padded * ATTN_DECODE_SCORE_KEYS, key_groups * padded, key_groups * padded * dv / 4);
    let shared = 4 * scs + 8 * mls + 16 * osh;
    if shared > max_shared {
        return None;
    }
    let name = format!("attention_decode.g{heads}.d{dk}x{dv}");
    let spec = KernelSpec::new(name, &["common", "attn_io", "attention_decode"], 7, push_size::<AttnParamsGpu>())
        .define("WG", ATTN_DECODE_WG)
        .define("LANES", lanes)
        .define("UNROLL", 4)
        .define("G", heads)
        .define("HP", padded)
        .define("DK", dk)
        .define("DV", dv)
        .define("SC_CAP", ATTN_DECODE_SCORE_KEYS)
        .define("SCS", scs)
        .define("MLS", mls)
        .define("OSH", osh)
        .define("K_TY", "vec2<u32>")
        .define("V_TY", "vec2<u32>");
    Some(spec)
}

/// Key splits of [`attention_decode`] for `rows` (token, head group) pairs: `forced` where set
/// (up to [`MAX_ATTENTION_SPLITS`]), else enough workgroups to fill a device, at most 64.
pub fn attention_decode_splits(rows: usize, forced: Option<u32>) -> u32 {
    decode_splits(rows, forced, 64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flash_splits_set_the_decode_split_count() {
        // Automatic: enough workgroups for a device, at most 32; prefill rows take one.
        assert_eq!(attention_splits(32, None), 32);
        assert_eq!(attention_splits(64, None), 16);
        assert_eq!(attention_splits(512, Some(8)), 1);
        // `kernels.vulkan.flash_splits` sets the count, above the automatic one too.
        assert_eq!(attention_splits(32, Some(2)), 2);
        assert_eq!(attention_splits(32, Some(64)), 64);
        assert_eq!(attention_splits(1, Some(100_000)), MAX_ATTENTION_SPLITS);
    }

    #[test]
    fn decode_attention_shapes() {
        let spec = |dk, dv, g, sg| attention_decode(dk, dv, g, sg, 32 << 10);
        // 8 heads of 128 over 32 lanes: 4 lanes a head, 8 + 8 chunks.
        assert!(spec(128, 128, 8, 32).is_some());
        assert!(spec(64, 64, 1, 32).is_some());
        assert!(spec(32, 32, 8, 8).is_some());
        // Heads that do not fit the lanes, too many chunks a lane (8 heads of 256: 16 + 16),
        // head dims that do not split into chunks, too many heads, or more workgroup memory
        // than the device has.
        assert!(spec(128, 128, 8, 4).is_none());
        assert!(spec(256, 256, 8, 32).is_none());
        assert!(spec(20, 20, 4, 32).is_none());
        assert!(spec(128, 128, 16, 32).is_none());
        assert!(attention_decode(128, 128, 8, 32, 4 << 10).is_none());
        // Heads per workgroup: the group's largest divisor up to 8.
        assert_eq!(attention_decode_heads(8), 8);
        assert_eq!(attention_decode_heads(5), 5);
        assert_eq!(attention_decode_heads(12), 6);
        assert_eq!(attention_decode_heads(16), 8);
        assert_eq!(attention_decode_heads(1), 1);
        assert_eq!(attention_decode_splits(4, None), 64);
        assert_eq!(attention_decode_splits(32, None), 32);
        assert_eq!(attention_decode_splits(4, Some(16)), 16);
    }
}
