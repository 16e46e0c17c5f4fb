// Fast matrix-vector product for decode (n ≤ 8 activation rows): Y[n, m] = X[n, k] · W[m, k]ᵀ.
// Each workgroup computes R weight rows for all C activation rows; TPB lanes share one block
// (adjacent lanes read adjacent quant words), partial sums are reduced with subgroupAdd and
// combined across subgroups in workgroup memory. Type-specific dot products below avoid the
// per-element scale decoding of the generic kernel.

struct Params {
    k: u32,
    m: u32,
    n: u32,
    out_stride: u32,
    out_col0: u32,
    soff: u32,
    has_bias: u32,
    tiles_m: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<storage, read> BIAS: array<f32>;
@group(0) @binding(4) var<storage, read> TBL: array<u32>;

const WG: u32 = {{WG}}u;
const R: u32 = {{R}}u;
const C: u32 = {{C}}u;
const TPB: u32 = {{TPB}}u;

var<workgroup> red: array<f32, {{RED}}>;

// Activation quad `q` (element 4q) of column c.
fn xq(c: u32, q: u32) -> vec4<f32> {
    return X[min(c, pc.n - 1u) * (pc.k / 4u) + q];
}

// F32, one lane per 4-element block (MoE routers).
fn vdot_f32(qb: u32, sb: u32, lane: u32, xq0: u32) -> array<f32, {{C}}> {
    var out: array<f32, {{C}}>;
    let w = bitcast<vec4<f32>>(vec4<u32>(W[qb], W[qb + 1u], W[qb + 2u], W[qb + 3u]));
    for (var c = 0u; c < C; c++) {
        out[c] = dot(w, xq(c, xq0));
    }
    return out;
}

// Q8_0, 8 lanes per block: lane = quant word.
fn vdot_q8_0(qb: u32, sb: u32, lane: u32, xq0: u32) -> array<f32, {{C}}> {
    var out: array<f32, {{C}}>;
    let q = sbytes4(wload(qb + lane));
    let d = sf16(sb, 0u);
    for (var c = 0u; c < C; c++) {
        out[c] = d * dot(q, xq(c, xq0 + lane));
    }
    return out;
}

// Q4_K, 16 lanes per super-block: lane covers 8 low-nibble and 8 high-nibble elements of
// one 64-element chunk.
fn vdot_q4_k(qb: u32, sb: u32, lane: u32, xq0: u32) -> array<f32, {{C}}> {
    var out: array<f32, {{C}}>;
    let ch = lane >> 2u;
    let w = (lane & 3u) * 2u;
    let q0 = wload(qb + 8u * ch + w);
    let q1 = wload(qb + 8u * ch + w + 1u);
    let sw = sb >> 2u;
    let dd = unpack2x16float(wload(sw));
    let s = vec3<u32>(wload(sw + 1u), wload(sw + 2u), wload(sw + 3u));
    let lo = kscale_min(s, 2u * ch);
    let hi = kscale_min(s, 2u * ch + 1u);
    let l0 = nib4(q0, 0u);
    let l1 = nib4(q1, 0u);
    let h0 = nib4(q0, 4u);
    let h1 = nib4(q1, 4u);
    let ql = xq0 + 16u * ch + w;
    let one = vec4<f32>(1.0);
    for (var c = 0u; c < C; c++) {
        let xl0 = xq(c, ql);
        let xl1 = xq(c, ql + 1u);
        let xh0 = xq(c, ql + 8u);
        let xh1 = xq(c, ql + 9u);
        let dl = dot(l0, xl0) + dot(l1, xl1);
        let dh = dot(h0, xh0) + dot(h1, xh1);
        let sl = dot(xl0 + xl1, one);
        let sh = dot(xh0 + xh1, one);
        out[c] = dd.x * (lo.x * dl + hi.x * dh) - dd.y * (lo.y * sl + hi.y * sh);
    }
    return out;
}

fn sc_i8(sb: u32, j: u32) -> f32 {
    return f32(i32(sbyte(sb, j) << 24u) >> 24u);
}

// Q6_K, 16 lanes per super-block: lane covers 4 positions l of one 128-element half for all
// four quarters t.
fn vdot_q6_k(qb: u32, sb: u32, lane: u32, xq0: u32) -> array<f32, {{C}}> {
    var out: array<f32, {{C}}>;
    let hn = lane >> 3u;
    let l4 = (lane & 7u) * 4u;
    let qa = wload(qb + (64u * hn + l4) / 4u);
    let qbw = wload(qb + (64u * hn + 32u + l4) / 4u);
    let qh = wload(qb + 32u + (32u * hn + l4) / 4u);
    let d = sf16(sb, 16u);
    let si = 8u * hn + l4 / 16u;
    let s0 = d * sc_i8(sb, si);
    let s1 = d * sc_i8(sb, si + 2u);
    let s2 = d * sc_i8(sb, si + 4u);
    let s3 = d * sc_i8(sb, si + 6u);
    let v0 = nib4(qa, 0u) + 16.0 * crumb4(qh, 0u) - 32.0;
    let v1 = nib4(qbw, 0u) + 16.0 * crumb4(qh, 2u) - 32.0;
    let v2 = nib4(qa, 4u) + 16.0 * crumb4(qh, 4u) - 32.0;
    let v3 = nib4(qbw, 4u) + 16.0 * crumb4(qh, 6u) - 32.0;
    let xb = xq0 + 32u * hn + l4 / 4u;
    for (var c = 0u; c < C; c++) {
        out[c] = s0 * dot(v0, xq(c, xb)) + s1 * dot(v1, xq(c, xb + 8u)) + s2 * dot(v2, xq(c, xb + 16u)) + s3 * dot(v3, xq(c, xb + 24u));
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
        let xq0 = b * (BLOCK / 4u);
        for (var r = 0u; r < R; r++) {
            let blk = min(r0 + r, pc.m - 1u) * bpr + b;
            let v = {{VDOT}}(blk * QW, sbase + blk * SB, lane, xq0);
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
            if pc.has_bias == 2u {
                // A factor per activation row (the shared expert's gate of each token).
                v *= BIAS[c];
            } else if pc.has_bias != 0u {
                v += BIAS[col];
            }
            Y[c * pc.out_stride + col] = v;
        }
    }
}
