// Expert matmul over tiles of pairs (`ggml_mul_mat_id` for batches): the workgroup of tile t
// (moe_tiles.wgsl) computes R weight rows of its expert for up to C routed pairs, reading each
// weight block once for all of them, dequantized on the fly as in matmul_generic.wgsl. Results,
// routing weight and bias are applied per pair as in matmul_moe.wgsl (same push constants).

struct Params {
    k: u32,
    m: u32,
    n_pairs: u32,
    out_stride: u32,
    out_col0: u32,
    soff: u32,
    x_div: u32,
    scale: u32,
    tiles_m: u32,
    has_bias: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<storage, read> ROUTE: array<u32>;
@group(0) @binding(4) var<storage, read> TBL: array<u32>;
@group(0) @binding(5) var<storage, read> BIAS: array<f32>;
@group(0) @binding(6) var<storage, read> TILES: array<u32>;

const WG: u32 = {{WG}}u;
const R: u32 = {{R}}u;
const C: u32 = {{C}}u;
const QPB: u32 = BLOCK / 4u;

var<workgroup> red: array<f32, {{RED}}>;
var<workgroup> n_tiles: u32;

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32{{SG_PARAMS}}) {
    let lin = wg_linear(wid, nwg);
    let tm = lin % pc.tiles_m;
    let ti = lin / pc.tiles_m;
    if t == 0u {
        n_tiles = TILES[0];
    }
    if ti >= workgroupUniformLoad(&n_tiles) {
        return;
    }
    let tb = 1u + pc.n_pairs + 3u * ti;
    let e = TILES[tb];
    let first = TILES[tb + 1u];
    let cnt = TILES[tb + 2u];
    var pr: array<u32, {{C}}>;
    for (var c = 0u; c < C; c++) {
        pr[c] = TILES[1u + first + min(c, cnt - 1u)];
    }
    let r0 = tm * R;
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
            xv[c] = X[(pr[c] / pc.x_div) * nq + q];
        }
        for (var r = 0u; r < R; r++) {
            let blk = (e * pc.m + min(r0 + r, pc.m - 1u)) * bpr + bq;
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
        if r0 + r < pc.m && c < cnt {
            let p = pr[c];
            var v = total;
            let w = bitcast<f32>(ROUTE[pc.n_pairs + p]);
            if pc.scale == 1u {
                v *= w;
            }
            if pc.has_bias != 0u {
                v += BIAS[e * pc.m + r0 + r];
            }
            if pc.scale == 2u {
                v *= w;
            }
            Y[p * pc.out_stride + pc.out_col0 + r0 + r] = v;
        }
    }
}
