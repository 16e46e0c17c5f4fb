// Loader of `matmul_coop.wgsl` for quantized (or plain float) weights and f32 activations:
// W tiles are dequantized and X converted to f16 as they are staged.

@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<storage, read> BIAS: array<f32>;
@group(0) @binding(4) var<storage, read> TBL: array<u32>;

fn wload(i: u32) -> u32 {
    return W[i];
}

fn tload(i: u32) -> u32 {
    return TBL[i];
}

const QW: u32 = {{QW}}u;
const SB: u32 = {{SB}}u;
const BLOCK: u32 = {{BLOCK}}u;

// Q4_K elements e0..e0+15 of a super-block (e0 a multiple of 16): one scale/min pair.
fn deq16_q4_k(qb: u32, sb: u32, e0: u32) -> array<vec4<f16>, 4> {
    let g = e0 >> 5u;
    let sm = scale_min_k4(sb, g);
    let dd = unpack2x16float(wload(sb >> 2u));
    let d1 = dd.x * sm.x;
    let m1 = dd.y * sm.y;
    let w0 = qb + 8u * (e0 >> 6u) + ((e0 & 31u) >> 2u);
    let sh = 4u * (g & 1u);
    var out: array<vec4<f16>, 4>;
    for (var q = 0u; q < 4u; q++) {
        out[q] = vec4<f16>(d1 * nib4(wload(w0 + q), sh) - m1);
    }
    return out;
}

// Q6_K elements e0..e0+15 of a super-block (e0 a multiple of 16): one scale.
fn deq16_q6_k(qb: u32, sb: u32, e0: u32) -> array<vec4<f16>, 4> {
    let n = e0 >> 7u;
    let t = (e0 & 127u) >> 5u;
    let l = e0 & 31u;
    let sc = f32(i32(sbyte(sb, 8u * n + (l >> 4u) + 2u * t) << 24u) >> 24u);
    let ds = sf16(sb, 16u) * sc;
    let lw = qb + (64u * n + 32u * (t & 1u) + l) / 4u;
    let hw = qb + 32u + (32u * n + l) / 4u;
    var out: array<vec4<f16>, 4>;
    for (var q = 0u; q < 4u; q++) {
        let lo = nib4(wload(lw + q), 4u * (t >> 1u));
        let hi = crumb4(wload(hw + q), 2u * t);
        out[q] = vec4<f16>(ds * (lo + 16.0 * hi - 32.0));
    }
    return out;
}

// Generic: four 4-element dequantizations (pseudo-blocks of plain float types hold 4).
fn deq16_generic(row_blk: u32, sb_base: u32, ke: u32) -> array<vec4<f16>, 4> {
    var out: array<vec4<f16>, 4>;
    for (var q = 0u; q < 4u; q++) {
        let e = ke + 4u * q;
        if e < pc.k {
            let blk = row_blk + e / BLOCK;
            out[q] = vec4<f16>({{DEQ}}(blk * QW, sb_base + blk * SB, (e % BLOCK) / 4u));
        } else {
            out[q] = vec4<f16>(0.0);
        }
    }
    return out;
}

fn load_w(u: u32, r0: u32, k0: u32) -> array<vec4<f16>, 4> {
    let row = u / KU;
    let ke = k0 + 16u * (u % KU);
    let bpr = pc.k / BLOCK;
    let row_blk = min(r0 + row, pc.m - 1u) * bpr;
    {{LOAD_W}}
}

fn load_x(u: u32, c0: u32, k0: u32) -> array<vec4<f16>, 4> {
    let row = u / KU;
    let ke = k0 + 16u * (u % KU);
    let base = min(c0 + row, pc.n - 1u) * (pc.k / 4u) + ke / 4u;
    var out: array<vec4<f16>, 4>;
    for (var q = 0u; q < 4u; q++) {
        if ke + 4u * q < pc.k {
            out[q] = vec4<f16>(X[base + q]);
        } else {
            out[q] = vec4<f16>(0.0);
        }
    }
    return out;
}

