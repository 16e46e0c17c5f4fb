// Integer-dot matrix-vector product for decode: weights against int8-quantized activations
// (quantize_act.wgsl) with dot4I8Packed. Same workgroup shape and reduction as matmul_vec.wgsl;
// TPB lanes per weight block, each lane covering whole 32-element activation blocks so their
// precomputed sums handle the weight offsets (Q4_K mins, Q6_K's -32).

struct Params {
    k: u32,
    m: u32,
    n: u32,
    out_stride: u32,
    out_col0: u32,
    soff: u32,
    has_bias: u32,
    tiles_m: u32,
    qs_off: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read> XQ: array<u32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<storage, read> BIAS: array<f32>;
@group(0) @binding(4) var<storage, read> XS: array<vec4<f32>>;

fn wload(i: u32) -> u32 {
    return W[i];
}

const WG: u32 = {{WG}}u;
const R: u32 = {{R}}u;
const C: u32 = {{C}}u;
const QW: u32 = {{QW}}u;
const SB: u32 = {{SB}}u;
const BLOCK: u32 = {{BLOCK}}u;
const TPB: u32 = {{TPB}}u;

var<workgroup> red: array<f32, {{RED}}>;

// Activation word w (elements 4w..4w+3) and block scales of activation block `xb` of column c.
fn xw(c: u32, w: u32) -> i32 {
    return bitcast<i32>(XQ[min(c, pc.n - 1u) * (pc.k / 4u) + w]);
}

fn xs(c: u32, xb: u32) -> vec4<f32> {
    return XS[pc.qs_off + min(c, pc.n - 1u) * (pc.k / 32u) + xb];
}

fn idot(a: u32, b: i32) -> i32 {
    return dot4I8Packed(a, bitcast<u32>(b));
}

// Q8_0, one lane per block.
fn vdot8_q8_0(qb: u32, sb: u32, lane: u32, xb0: u32) -> array<f32, {{C}}> {
    var out: array<f32, {{C}}>;
    let d = sf16(sb, 0u);
    var w: array<u32, 8>;
    for (var i = 0u; i < 8u; i++) {
        w[i] = wload(qb + i);
    }
    for (var c = 0u; c < C; c++) {
        var s = 0;
        for (var i = 0u; i < 8u; i++) {
            s += idot(w[i], xw(c, 8u * xb0 + i));
        }
        out[c] = d * xs(c, xb0).x * f32(s);
    }
    return out;
}

fn kbyte(s: vec3<u32>, j: u32) -> u32 {
    return (s[j >> 2u] >> ((j & 3u) * 8u)) & 0xffu;
}

fn kscale_min(s: vec3<u32>, j: u32) -> vec2<f32> {
    if j < 4u {
        return vec2<f32>(f32(kbyte(s, j) & 63u), f32(kbyte(s, j + 4u) & 63u));
    }
    let a = kbyte(s, j + 4u);
    return vec2<f32>(f32((a & 0xfu) | ((kbyte(s, j - 4u) >> 6u) << 4u)), f32((a >> 4u) | ((kbyte(s, j) >> 6u) << 4u)));
}

// Q4_K, 4 lanes per super-block: lane c covers the 32-byte chunk c = groups 2c (low nibbles)
// and 2c+1 (high nibbles), i.e. activation blocks 2c and 2c+1.
fn vdot8_q4_k(qb: u32, sb: u32, lane: u32, xb0: u32) -> array<f32, {{C}}> {
    var out: array<f32, {{C}}>;
    let sw = sb >> 2u;
    let dd = unpack2x16float(wload(sw));
    let s = vec3<u32>(wload(sw + 1u), wload(sw + 2u), wload(sw + 3u));
    let lo = kscale_min(s, 2u * lane);
    let hi = kscale_min(s, 2u * lane + 1u);
    var w: array<u32, 8>;
    for (var i = 0u; i < 8u; i++) {
        w[i] = wload(qb + 8u * lane + i);
    }
    let xl = xb0 + 2u * lane;
    for (var c = 0u; c < C; c++) {
        var sl = 0;
        var sh = 0;
        for (var i = 0u; i < 8u; i++) {
            sl += idot(w[i] & 0x0f0f0f0fu, xw(c, 8u * xl + i));
            sh += idot((w[i] >> 4u) & 0x0f0f0f0fu, xw(c, 8u * (xl + 1u) + i));
        }
        let xa = xs(c, xl);
        let xb = xs(c, xl + 1u);
        out[c] = dd.x * (lo.x * xa.x * f32(sl) + hi.x * xb.x * f32(sh))
            - dd.y * (lo.y * xa.x * (xa.y + xa.z) + hi.y * xb.x * (xb.y + xb.z));
    }
    return out;
}

fn sc_i8(sb: u32, j: u32) -> f32 {
    return f32(i32(sbyte(sb, j) << 24u) >> 24u);
}

// Q6_K, 8 lanes per super-block: lane (hn, t) covers the 32 elements 128hn + 32t + l,
// i.e. activation block 4hn + t, with scales for l < 16 and l >= 16.
fn vdot8_q6_k(qb: u32, sb: u32, lane: u32, xb0: u32) -> array<f32, {{C}}> {
    var out: array<f32, {{C}}>;
    let hn = lane >> 2u;
    let t = lane & 3u;
    let d = sf16(sb, 16u);
    let si = 8u * hn + 2u * t;
    let sc0 = d * sc_i8(sb, si);
    let sc1 = d * sc_i8(sb, si + 1u);
    var v: array<u32, 8>;
    let qlw = (64u * hn + 32u * (t & 1u)) / 4u;
    let qhw = 32u + (32u * hn) / 4u;
    for (var i = 0u; i < 8u; i++) {
        let lo = (wload(qb + qlw + i) >> (4u * (t >> 1u))) & 0x0f0f0f0fu;
        let hi = (wload(qb + qhw + i) >> (2u * t)) & 0x03030303u;
        v[i] = lo | (hi << 4u);
    }
    let xb = xb0 + 4u * hn + t;
    for (var c = 0u; c < C; c++) {
        var s0 = 0;
        var s1 = 0;
        for (var i = 0u; i < 4u; i++) {
            s0 += idot(v[i], xw(c, 8u * xb + i));
            s1 += idot(v[i + 4u], xw(c, 8u * xb + 4u + i));
        }
        let x = xs(c, xb);
        out[c] = x.x * (sc0 * (f32(s0) - 32.0 * x.y) + sc1 * (f32(s1) - 32.0 * x.z));
    }
    return out;
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32{{SG_PARAMS}}) {
    let lin = wg_linear(wid, nwg);
    if lin >= pc.tiles_m {
        return;
    }
    let r0 = lin * R;
    var acc: array<f32, {{RC}}>;
    let bpr = pc.k / BLOCK;
    let lane = t % TPB;
    let sbase = pc.soff * 4u;
    for (var b = t / TPB; b < bpr; b += WG / TPB) {
        let xb0 = b * (BLOCK / 32u);
        for (var r = 0u; r < R; r++) {
            let blk = min(r0 + r, pc.m - 1u) * bpr + b;
            let v = {{VDOT}}(blk * QW, sbase + blk * SB, lane, xb0);
            for (var c = 0u; c < C; c++) {
                acc[r * C + c] += v[c];
            }
        }
    }
    {{REDUCE}}
    if t < R * C {
        let r = t / C;
        let c = t % C;
        if r0 + r < pc.m && c < pc.n {
            let col = pc.out_col0 + r0 + r;
            var v = total;
            if pc.has_bias != 0u {
                v += BIAS[col];
            }
            Y[c * pc.out_stride + col] = v;
        }
    }
}
