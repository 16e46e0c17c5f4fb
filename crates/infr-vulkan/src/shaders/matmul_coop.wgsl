// Cooperative-matrix matmul for prefill: Y[n, m] = X[n, k] · W[m, k]ᵀ (+ bias) with 16x16x16
// f16 multiply-accumulate into f32. A workgroup computes a BM (weight rows) × BN (activation
// rows) tile with GM × GN subgroups (WG = GM·GN × the device's fixed subgroup size,
// templated from its capabilities); each subgroup owns FM × FN 16×16 accumulators
// (BM = 16·GM·FM, BN = 16·GN·FN). Each k-step of BK dequantizes a BM×BK slice of W once into
// workgroup memory as f16 and converts the matching BN×BK slice of X; the next slice is read
// from memory into registers while the current one is multiplied. Interior tiles without a
// bias store their accumulators straight to Y; edge tiles go through workgroup memory so
// rows and columns past the edge are masked per element.

enable f16;
enable wgpu_cooperative_matrix;

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

fn wload(i: u32) -> u32 {
    return W[i];
}

fn tload(i: u32) -> u32 {
    return TBL[i];
}

const QW: u32 = {{QW}}u;
const SB: u32 = {{SB}}u;
const BLOCK: u32 = {{BLOCK}}u;
const WG: u32 = {{WG}}u;
const SGS: u32 = {{SGS}}u;
const BM: u32 = {{BM}}u;
const BN: u32 = {{BN}}u;
const BK: u32 = {{BK}}u;
const GM: u32 = {{GM}}u;
const GN: u32 = {{GN}}u;
// Row stride of the staged slices in f16: BK plus 8 so that the 16 rows a fragment load
// reads fall in different banks.
const SK: u32 = {{SK}}u;
// Loader units (one row × 16 consecutive k) per row of a slice, and per thread for the W
// and X slices.
const KU: u32 = BK / 16u;
const UA: u32 = (KU * BM + WG - 1u) / WG;
const UB: u32 = (KU * BN + WG - 1u) / WG;

var<workgroup> ws: array<f16, {{BM}} * {{SK}}>;
var<workgroup> xs: array<f16, {{BN}} * {{SK}}>;
// One 16×16 f32 fragment per subgroup, column-major, for edge tiles.
var<workgroup> cs: array<f32, {{CS}}>;

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

fn put_w(u: u32, v: array<vec4<f16>, 4>) {
    let o = (u / KU) * SK + 16u * (u % KU);
    for (var q = 0u; q < 4u; q++) {
        ws[o + 4u * q] = v[q].x;
        ws[o + 4u * q + 1u] = v[q].y;
        ws[o + 4u * q + 2u] = v[q].z;
        ws[o + 4u * q + 3u] = v[q].w;
    }
}

fn put_x(u: u32, v: array<vec4<f16>, 4>) {
    let o = (u / KU) * SK + 16u * (u % KU);
    for (var q = 0u; q < 4u; q++) {
        xs[o + 4u * q] = v[q].x;
        xs[o + 4u * q + 1u] = v[q].y;
        xs[o + 4u * q + 2u] = v[q].z;
        xs[o + 4u * q + 3u] = v[q].w;
    }
}

// Write one 16×16 accumulator (weight rows rr.., activation rows cc..) of an edge tile
// through this subgroup's staging fragment, masking and adding the bias per element.
fn store_edge(sgid: u32, sgi: u32, rr: u32, cc: u32) {
    for (var e = sgi; e < 256u; e += SGS) {
        let r = e % 16u;
        let c = e / 16u;
        if rr + r < pc.m && cc + c < pc.n {
            let col = pc.out_col0 + rr + r;
            var v = cs[sgid * 256u + e];
            if pc.has_bias != 0u {
                v += BIAS[col];
            }
            Y[(cc + c) * pc.out_stride + col] = v;
        }
    }
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32, @builtin(subgroup_id) sgid: u32, @builtin(subgroup_invocation_id) sgi: u32) {
    let lin = wg_linear(wid, nwg);
    let tm = lin % pc.tiles_m;
    let tn = lin / pc.tiles_m;
    let r0 = tm * BM;
    let c0 = tn * BN;
    // Subgroup (sm, sn) of the GM×GN grid owns weight rows wr.. and activation rows wc...
    let wr = (sgid % GM) * (BM / GM);
    let wc = (sgid / GM) * (BN / GN);
    // No early return for padding workgroups (c0 >= n): cooperative operations need uniform
    // control flow; their loads are clamped and their stores masked below.
{{ACC_DECL}}
    var ra: array<array<vec4<f16>, 4>, UA>;
    var rb: array<array<vec4<f16>, 4>, UB>;
    for (var i = 0u; i < UA; i++) {
        let u = t + i * WG;
        if u < KU * BM {
            ra[i] = load_w(u, r0, 0u);
        }
    }
    for (var i = 0u; i < UB; i++) {
        let u = t + i * WG;
        if u < KU * BN {
            rb[i] = load_x(u, c0, 0u);
        }
    }
    for (var k0 = 0u; k0 < pc.k; k0 += BK) {
        for (var i = 0u; i < UA; i++) {
            let u = t + i * WG;
            if u < KU * BM {
                put_w(u, ra[i]);
            }
        }
        for (var i = 0u; i < UB; i++) {
            let u = t + i * WG;
            if u < KU * BN {
                put_x(u, rb[i]);
            }
        }
        workgroupBarrier();
        // Read the next slice while this one is multiplied.
        let kn = k0 + BK;
        if kn < pc.k {
            for (var i = 0u; i < UA; i++) {
                let u = t + i * WG;
                if u < KU * BM {
                    ra[i] = load_w(u, r0, kn);
                }
            }
            for (var i = 0u; i < UB; i++) {
                let u = t + i * WG;
                if u < KU * BN {
                    rb[i] = load_x(u, c0, kn);
                }
            }
        }
        for (var kk = 0u; kk < BK; kk += 16u) {
{{MMA}}
        }
        workgroupBarrier();
    }
    // Direct stores need 16-byte aligned columns.
    let interior = r0 + BM <= pc.m && c0 + BN <= pc.n && pc.has_bias == 0u && (pc.out_stride | pc.out_col0) % 4u == 0u;
    if interior {
        let ys = pc.out_stride;
        let yb = (c0 + wc) * ys + pc.out_col0 + r0 + wr;
{{STORE_DIRECT}}
    } else {
        let eo = sgid * 256u;
{{STORE_EDGE}}
    }
}
