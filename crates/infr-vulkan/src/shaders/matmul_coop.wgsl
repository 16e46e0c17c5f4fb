// Cooperative-matrix matmul for prefill: Y[n, m] = X[n, k] · W[m, k]ᵀ (+ bias) with 16x16x16
// f16 multiply-accumulate into f32. A workgroup computes a 64 (weight rows) × 64 (activation
// rows) tile: each k-step dequantizes a 64×32 slice of W and converts the matching 64×32 slice
// of X to f16 in workgroup memory. The workgroup is four subgroups (WG = 4 × the device's
// fixed subgroup size, templated from its capabilities); subgroup s owns the four 16×16
// sub-tiles of weight rows 16s..16s+15. Results go through workgroup memory so edges and
// bias are handled per element.

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
const BK: u32 = 32u;

// Row-major [64 rows][BK] slices of W and X.
var<workgroup> ws: array<f16, 2048>;
var<workgroup> xs: array<f16, 2048>;
// Column-major [64 activation rows][64 weight rows] f32 results.
var<workgroup> cs: array<f32, 4096>;

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32, @builtin(subgroup_id) sgid: u32) {
    let lin = wg_linear(wid, nwg);
    let tm = lin % pc.tiles_m;
    let tn = lin / pc.tiles_m;
    let r0 = tm * 64u;
    let c0 = tn * 64u;
    // No early return for padding workgroups (c0 >= n): cooperative operations need uniform
    // control flow; their loads are clamped and their stores masked below.
    var acc0: coop_mat16x16<f32, C>;
    var acc1: coop_mat16x16<f32, C>;
    var acc2: coop_mat16x16<f32, C>;
    var acc3: coop_mat16x16<f32, C>;
    let bpr = pc.k / BLOCK;
    let nq = pc.k / 4u;
    let sbase = pc.soff * 4u;
    let arow = sgid * 16u * BK;
    for (var k0 = 0u; k0 < pc.k; k0 += BK) {
        for (var idx = t; idx < 512u; idx += WG) {
            let row = idx / 8u;
            let kq = idx % 8u;
            let ke = k0 + 4u * kq;
            var wv = vec4<f32>(0.0);
            var xv = vec4<f32>(0.0);
            if ke < pc.k {
                let blk = min(r0 + row, pc.m - 1u) * bpr + ke / BLOCK;
                wv = {{DEQ}}(blk * QW, sbase + blk * SB, (ke % BLOCK) / 4u);
                xv = X[min(c0 + row, pc.n - 1u) * nq + ke / 4u];
            }
            for (var e = 0u; e < 4u; e++) {
                ws[row * BK + 4u * kq + e] = f16(wv[e]);
                xs[row * BK + 4u * kq + e] = f16(xv[e]);
            }
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk += 16u) {
            let a = coopLoadT<coop_mat16x16<f16, A>>(&ws[arow + kk], BK);
            acc0 = coopMultiplyAdd(a, coopLoad<coop_mat16x16<f16, B>>(&xs[kk], BK), acc0);
            acc1 = coopMultiplyAdd(a, coopLoad<coop_mat16x16<f16, B>>(&xs[16u * BK + kk], BK), acc1);
            acc2 = coopMultiplyAdd(a, coopLoad<coop_mat16x16<f16, B>>(&xs[32u * BK + kk], BK), acc2);
            acc3 = coopMultiplyAdd(a, coopLoad<coop_mat16x16<f16, B>>(&xs[48u * BK + kk], BK), acc3);
        }
        workgroupBarrier();
    }
    coopStore(acc0, &cs[sgid * 16u], 64u);
    coopStore(acc1, &cs[16u * 64u + sgid * 16u], 64u);
    coopStore(acc2, &cs[32u * 64u + sgid * 16u], 64u);
    coopStore(acc3, &cs[48u * 64u + sgid * 16u], 64u);
    workgroupBarrier();
    for (var i = t; i < 4096u; i += WG) {
        let r = i % 64u;
        let c = i / 64u;
        if r0 + r < pc.m && c0 + c < pc.n {
            let col = pc.out_col0 + r0 + r;
            var v = cs[i];
            if pc.has_bias != 0u {
                v += BIAS[col];
            }
            Y[(c0 + c) * pc.out_stride + col] = v;
        }
    }
}
