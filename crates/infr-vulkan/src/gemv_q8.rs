//! The integer-dot matrix-vector kernels for decode (`matmul_vec_q8.wgsl`): one to sixteen
//! activation rows against quantized weights, either every thread over a few weight rows (one
//! or two rows of activations) or a tile of weight rows with one row per thread slot (batched
//! decode, where each activation word then serves a whole tile of weight rows).

use crate::kernels::{
    push_size, vec_q8_lanes, with_layout, with_reduce, MatmulJobParams, MatmulQ8Params, MATMUL_BINDINGS, VEC_WG,
};
use crate::pipeline::KernelSpec;
use crate::repack::GpuLayout;

/// Most weights one integer-dot matrix-vector dispatch multiplies (q, k and v; a DeltaNet
/// layer's qkv, z, beta and alpha projections).
pub const MAX_GEMV_JOBS: usize = 4;

/// Jobs of one integer-dot dispatch a device with `max_bindings` storage buffers per stage
/// takes: the first binds 5, each other 3 more (up to [`MAX_GEMV_JOBS`]; 0 below 5).
pub fn gemv_jobs_fit(max_bindings: u32) -> usize {
    match max_bindings.checked_sub(5) {
        Some(more) => (more as usize / 3 + 1).min(MAX_GEMV_JOBS),
        None => 0,
    }
}

/// The integer-dot matrix-vector kernel (needs subgroup arithmetic and packed int8 dot) for
/// `c` activation rows and `r` weight rows per workgroup, every thread over all `r`, for
/// `jobs` weights of the layout at once (1 to [`MAX_GEMV_JOBS`]; see the shader).
pub fn matmul_vec_q8(l: &GpuLayout, c: u32, r: u32, jobs: usize) -> Option<KernelSpec> {
    let spec = gemv_jobs_spec(l, "matmul_vec_q8", jobs)?
        .define("WG", VEC_WG)
        .define("R", r)
        .define("S", 1)
        .define("C", c)
        .define("ACC", r * c)
        .define("RED", VEC_WG * r * c)
        .define("LOOP_HEAD", "    for (var b = t / TPB; b < bpr; b += WG / TPB)");
    let spec = with_reduce(spec, true);
    Some(if c > 1 && unroll_q8_rows() { unrolled_q8_body(spec, r, c, l.deq) } else { spec.define("BODY", Q8_ROW_LOOP) })
}

/// Threads per workgroup of the tiled integer-dot kernel.
pub const ROWS_Q8_WG: u32 = 256;

/// The tiled integer-dot kernel for batched decode: `c` activation rows (2 to 16) against a
/// tile of `r` weight rows per workgroup, each thread slot over `rt` of them (rows `slot`,
/// `slot + r / rt`, ...) and all `c` activation rows, so the threads of a subgroup read the
/// same activation words (one load serves several weight rows) and nothing is reduced across
/// threads until the end. `None` where the tile does not fit the workgroup (lanes x slots,
/// `r * c` outputs, the partial sums in `max_shared` bytes of shared memory).
pub fn matmul_rows_q8(l: &GpuLayout, c: u32, r: u32, rt: u32, jobs: usize, max_shared: u32) -> Option<KernelSpec> {
    let tpb = vec_q8_lanes(l.ty)?;
    let wg = ROWS_Q8_WG;
    if r == 0 || rt == 0 || r % rt != 0 {
        return None;
    }
    let slots = r / rt;
    let parts = wg / slots.max(1);
    if slots * tpb > wg || wg % (slots * tpb) != 0 || r * c > wg || c * r * parts * 4 > max_shared {
        return None;
    }
    let deq = l.deq;
    let mut body = String::new();
    let mut head = String::from("    let slot = tile_slot(t);\n");
    for j in 0..rt {
        head.push_str(&format!("    let row{j} = wrow0 + min(r0 + slot + {j}u * S, m - 1u);\n"));
        body.push_str(&format!(
            "        let blk{j} = row{j} * bpr + b;\n        let w{j} = wprep_{deq}(blk{j} * QW, sbase + blk{j} * SB, lane);\n"
        ));
    }
    head.push_str("    for (var b = tile_group(t); b < bpr; b += WG / (TPB * S))");
    let mut reduce = String::from("let part = tile_group(t) * TPB + lane;\n");
    for ci in 0..c {
        body.push_str(&format!("        {{\n            let x = xload_{deq}({ci}u, xb0, lane);\n"));
        for j in 0..rt {
            let a = j * c + ci;
            body.push_str(&format!("            acc[{a}] += wdot_{deq}(w{j}, x);\n"));
            reduce.push_str(&format!("    red[({ci}u * R + slot + {j}u * S) * (WG / S) + part] = acc[{a}];\n"));
        }
        body.push_str("        }\n");
    }
    reduce.push_str(
        "    workgroupBarrier();
    var total = 0.0;
    if t < R * C {
        let o = (t % C) * R + t / C;
        for (var i = 0u; i < WG / S; i++) {
            total += red[o * (WG / S) + i];
        }
    }",
    );
    let spec = gemv_jobs_spec(l, "matmul_rows_q8", jobs)?
        .define("WG", wg)
        .define("R", r)
        .define("S", slots)
        .define("C", c)
        .define("ACC", rt * c)
        .define("RED", c * r * parts)
        .define("LOOP_HEAD", head)
        .define("SG_PARAMS", "")
        .define("BODY", body)
        .define("REDUCE", reduce);
    Some(spec)
}

/// First weight row and activation row of a dense product: constants, so that the addresses
/// fold (the mixture-of-experts variant redefines them as variables, [`ROW0_PER_PAIR`]).
const ROW0_ZERO: &str = "const wrow0: u32 = 0u;\nconst xrow0: u32 = 0u;";

/// First weight row and activation row of an expert product, set per routed pair.
pub(crate) const ROW0_PER_PAIR: &str = "var<private> wrow0: u32;\nvar<private> xrow0: u32;";

/// The parts of an integer-dot kernel common to both layouts: `jobs` weights of one type
/// reading the same activations, their bindings, job selection and stores.
fn gemv_jobs_spec(l: &GpuLayout, kernel: &'static str, jobs: usize) -> Option<KernelSpec> {
    let tpb = vec_q8_lanes(l.ty)?;
    if !(1..=MAX_GEMV_JOBS).contains(&jobs) {
        return None;
    }
    let extra = jobs as u32 - 1;
    let mut fields = String::new();
    let mut binds = String::new();
    let mut wload = String::new();
    let mut select = String::new();
    let mut store = String::new();
    for j in 1..jobs {
        let b = 5 + 3 * (j - 1);
        fields.push_str(&format!("    m{j}: u32,\n    soff{j}: u32,\n    bias{j}: u32,\n    tile{j}: u32,\n"));
        binds.push_str(&format!(
            "@group(0) @binding({b}) var<storage, read> W{j}: array<vec4<u32>>;\n\
             @group(0) @binding({}) var<storage, read_write> Y{j}: array<f32>;\n\
             @group(0) @binding({}) var<storage, read> BIAS{j}: array<f32>;\n",
            b + 1,
            b + 2
        ));
        wload.push_str(&format!("    if job == {j}u {{\n        return W{j}[i >> 2u];\n    }}\n"));
        store.push_str(&format!(
            "            if job == {j}u {{\n                if has_bias != 0u {{\n                    v += BIAS{j}[col];\n                }}\n                Y{j}[at] = v;\n            }} else "
        ));
    }
    for j in (1..jobs).rev() {
        let kw = if j + 1 == jobs { "    if" } else { " else if" };
        select.push_str(&format!(
            "{kw} lin0 >= pc.tile{j} {{\n        job = {j}u;\n        lin = lin0 - pc.tile{j};\n        m = pc.m{j};\n        soff = pc.soff{j};\n        has_bias = pc.bias{j};\n        out_stride = pc.m{j};\n        out_col0 = 0u;\n    }}"
        ));
    }
    wload.push_str("    return W[i >> 2u];");
    let plain = "if has_bias != 0u {\n                v += BIAS[col];\n            }\n            Y[at] = v;";
    if jobs == 1 {
        store = format!("            {plain}");
    } else {
        store.push_str(&format!(
            "{{\n                {}\n            }}",
            plain.replace("\n            ", "\n                ")
        ));
    }
    let name = if jobs == 1 { format!("{kernel}.{}", l.ty) } else { format!("{kernel}.{}.x{jobs}", l.ty) };
    let spec = KernelSpec {
        name,
        parts: vec!["common", "dequant", "matmul_vec_q8"],
        defines: Vec::new(),
        bindings: MATMUL_BINDINGS + 3 * extra,
        push_bytes: push_size::<MatmulQ8Params>() + extra * push_size::<MatmulJobParams>(),
    }
    .define("JOB_FIELDS", fields)
    .define("JOB_BINDINGS", binds)
    .define("WLOAD4", wload)
    .define("JOB_SELECT", select)
    .define("GRID", "pc.tiles_m")
    .define("STORE", store)
    .define("ROW0", ROW0_ZERO)
    .define("TPB", tpb)
    .define("VDEQ", l.deq);
    Some(with_layout(spec, l))
}

/// The integer-dot kernel's block loop body as loops: weight row by weight row, each against
/// every activation row (`vdot8`).
const Q8_ROW_LOOP: &str = "        for (var r = 0u; r < R; r++) {
            let blk = (wrow0 + min(r0 + r, m - 1u)) * bpr + b;
            let v = vdot8(blk * QW, sbase + blk * SB, lane, xb0);
            for (var c = 0u; c < C; c++) {
                acc[r * C + c] += v[c];
            }
        }";

/// Whether matrix-vector products of several activation rows take the unrolled body
/// (`INFR_VK_Q8_UNROLL=0` keeps the loops, to compare).
fn unroll_q8_rows() -> bool {
    std::env::var("INFR_VK_Q8_UNROLL").map_or(true, |v| v != "0")
}

/// The block loop body and reduction written out for `r` weight rows x `c` activation rows:
/// each lane's weight words are read once per weight row, each activation row's words once
/// for all weight rows, and every accumulator has a constant index (a driver that does not
/// unroll loops would otherwise keep them in memory).
fn unrolled_q8_body(spec: KernelSpec, r: u32, c: u32, deq: &str) -> KernelSpec {
    let mut body = String::new();
    for ri in 0..r {
        body.push_str(&format!(
            "        let blk{ri} = (wrow0 + min(r0 + {ri}u, m - 1u)) * bpr + b;\n        \
             let w{ri} = wprep_{deq}(blk{ri} * QW, sbase + blk{ri} * SB, lane);\n"
        ));
    }
    for ci in 0..c {
        body.push_str(&format!("        {{\n            let x = xload_{deq}({ci}u, xb0, lane);\n"));
        for ri in 0..r {
            body.push_str(&format!("            acc[{}] += wdot_{deq}(w{ri}, x);\n", ri * c + ci));
        }
        body.push_str("        }\n");
    }
    let mut reduce = String::new();
    for j in 0..r * c {
        reduce.push_str(&format!(
            "    {{\n        let s = subgroupAdd(acc[{j}]);\n        if sgi == 0u {{\n            red[{j}u * WG + sgid] = s;\n        }}\n    }}\n"
        ));
    }
    reduce.push_str(
        "    workgroupBarrier();
    var total = 0.0;
    if t < R * C {
        for (var i = 0u; i < nsg; i++) {
            total += red[t * WG + i];
        }
    }",
    );
    spec.define("BODY", body).redefine("REDUCE", reduce)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_fit_the_bindings() {
        assert_eq!(gemv_jobs_fit(4), 0);
        assert_eq!(gemv_jobs_fit(5), 1);
        assert_eq!(gemv_jobs_fit(8), 2);
        assert_eq!(gemv_jobs_fit(13), 3);
        assert_eq!(gemv_jobs_fit(14), 4);
        assert_eq!(gemv_jobs_fit(1 << 20), MAX_GEMV_JOBS);
    }
}
