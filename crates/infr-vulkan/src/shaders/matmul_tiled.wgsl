// Tiled matmul for prefill (many activation rows): Y[n, m] = X[n, k] · W[m, k]ᵀ (+ bias).
// A workgroup of 256 threads computes a 64 (weight rows) × 64 (activation rows) tile; each
// k-step dequantizes a 64×32 slice of W once into workgroup memory (shared by all 64
// activation rows) next to the matching 64×32 slice of X; every thread accumulates 4×4
// outputs. Portable (no subgroup operations); cooperative-matrix kernels replace it where
// the device has them. The split variant (SplitParams) gives each workgroup one range of k
// and writes its partial product to that range's plane, for `split_reduce` to add up: a
// product of few tiles (a MoE router: 128 rows) still fills a large GPU.

struct Params {
    k: u32,
    m: u32,
    n: u32,
    out_stride: u32,
    out_col0: u32,
    soff: u32,
    has_bias: u32,
    tiles_m: u32,
{{SPLIT_FIELDS}}
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<storage, read> BIAS: array<f32>;
@group(0) @binding(4) var<storage, read> TBL: array<u32>;

const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 32u;

// [BK][BM] and [BK][BN], as vec4 over the row / column index.
var<workgroup> ws: array<vec4<f32>, 512>;
var<workgroup> xs: array<vec4<f32>, 512>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let lin = wg_linear(wid, nwg);
{{SPLIT_RANGE}}
    let tm = tile % pc.tiles_m;
    let tn = tile / pc.tiles_m;
    let r0 = tm * BM;
    let c0 = tn * BN;
    if c0 >= pc.n {
        return;
    }
    let tx = t % 16u;
    let ty = t / 16u;
    var acc: array<vec4<f32>, 4>;
    let bpr = pc.k / BLOCK;
    let nq = pc.k / 4u;
    let sbase = pc.soff * 4u;
    for (var k0 = k_begin; k0 < k_end; k0 += BK) {
        // Each thread loads 2 quads of W and 2 quads of X: 512 quads per tile each.
        for (var h = 0u; h < 2u; h++) {
            let idx = t + 256u * h;
            let row = idx / 8u;
            let kq = idx % 8u;
            let ke = k0 + 4u * kq;
            var wv = vec4<f32>(0.0);
            var xv = vec4<f32>(0.0);
            if ke < k_end {
                let wr = min(r0 + row, pc.m - 1u);
                let blk = wr * bpr + ke / BLOCK;
                wv = {{DEQ}}(blk * QW, sbase + blk * SB, (ke % BLOCK) / 4u);
                xv = X[min(c0 + row, pc.n - 1u) * nq + ke / 4u];
            }
            for (var e = 0u; e < 4u; e++) {
                let i = (4u * kq + e) * 16u + row / 4u;
                ws[i][row & 3u] = wv[e];
                xs[i][row & 3u] = xv[e];
            }
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk++) {
            let a = ws[kk * 16u + ty];
            let b = xs[kk * 16u + tx];
            acc[0] += a.x * b;
            acc[1] += a.y * b;
            acc[2] += a.z * b;
            acc[3] += a.w * b;
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let r = r0 + 4u * ty + i;
        if r < pc.m {
            let col = pc.out_col0 + r;
            var bias = 0.0;
            if pc.has_bias != 0u {
                bias = BIAS[col];
            }
            for (var j = 0u; j < 4u; j++) {
                let c = c0 + 4u * tx + j;
                if c < pc.n {
                    Y[plane + c * pc.out_stride + col] = acc[i][j] + bias;
                }
            }
        }
    }
}
