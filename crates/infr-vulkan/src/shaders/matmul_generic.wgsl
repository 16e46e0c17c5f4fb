// Generic quantized matmul: Y[n, m] = X[n, k] · W[m, k]ᵀ (+ bias), dequantizing W on the fly
// with the type's `deq4` (see dequant.wgsl). A workgroup computes R weight rows × C activation
// rows; threads stride over the k/4 element quads (adjacent threads read adjacent words) and
// reduce through workgroup memory. Correct for every type; fast paths live in other kernels.

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
const QPB: u32 = BLOCK / 4u;

var<workgroup> red: array<f32, {{RED}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32{{SG_PARAMS}}) {
    let lin = wg_linear(wid, nwg);
    let tm = lin % pc.tiles_m;
    let tn = lin / pc.tiles_m;
    let r0 = tm * R;
    let c0 = tn * C;
    if c0 >= pc.n {
        return;
    }
    var acc: array<f32, {{RC}}>;
    for (var j = 0u; j < R * C; j++) {
        acc[j] = 0.0;
    }
    let nq = pc.k / 4u;
    let bpr = pc.k / BLOCK;
    let sbase = pc.soff * 4u;
    for (var q = t; q < nq; q += WG) {
        let bq = q / QPB;
        let i = q % QPB;
        var xv: array<vec4<f32>, {{C}}>;
        for (var c = 0u; c < C; c++) {
            xv[c] = X[min(c0 + c, pc.n - 1u) * nq + q];
        }
        for (var r = 0u; r < R; r++) {
            let blk = min(r0 + r, pc.m - 1u) * bpr + bq;
            let wv = {{DEQ}}(blk * QW, sbase + blk * SB, i);
            for (var c = 0u; c < C; c++) {
                acc[r * C + c] += dot(wv, xv[c]);
            }
        }
    }
    {{REDUCE}}
    if t < R * C {
        let r = t / C;
        let c = t % C;
        if r0 + r < pc.m && c0 + c < pc.n {
            var v = total;
            let col = pc.out_col0 + r0 + r;
            if pc.has_bias == 2u {
                // A factor per activation row (the shared expert's gate of each token).
                v *= BIAS[c0 + c];
            } else if pc.has_bias != 0u {
                v += BIAS[col];
            }
            Y[(c0 + c) * pc.out_stride + col] = v;
        }
    }
}
