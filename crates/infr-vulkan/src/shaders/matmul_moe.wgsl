// Expert matmul of a mixture-of-experts FFN (`ggml_mul_mat_id`): for routed pair p,
// Y[p, m] = X[p / x_div] · W_e[m]ᵀ where e = ROUTE[p] and expert e is rows e*m .. (e+1)*m of
// the 3-D weight, dequantized on the fly as in matmul_generic.wgsl, plus the expert's bias row
// (BIAS[e*m + row], when has_bias), times the pair's routing weight (ROUTE[n_pairs + p], as
// f32 bits) with `scale` = 2 (moe_weigh.wgsl). A workgroup computes R weight rows of
// its work item: one pair (C = 1, decode: experts nobody chose cost nothing), or a tile of up
// to C pairs of one expert from moe_tiles.wgsl's list (batches: each weight block is read
// once for the whole tile).

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
const TILED: bool = {{TILED}};
const QPB: u32 = BLOCK / 4u;

var<workgroup> red: array<f32, {{RED}}>;
var<workgroup> n_items: u32;

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32{{SG_PARAMS}}) {
    let lin = wg_linear(wid, nwg);
    let tm = lin % pc.tiles_m;
    let item = lin / pc.tiles_m;
    if t == 0u {
        if TILED {
            n_items = TILES[0];
        } else {
            n_items = pc.n_pairs;
        }
    }
    if item >= workgroupUniformLoad(&n_items) {
        return;
    }
    // The item's expert and pairs (a tile's count may be below C: extra columns repeat its last).
    var e: u32;
    var cnt = 1u;
    var pr: array<u32, {{C}}>;
    if TILED {
        let tb = 1u + pc.n_pairs + 3u * item;
        e = TILES[tb];
        let first = TILES[tb + 1u];
        cnt = TILES[tb + 2u];
        for (var c = 0u; c < C; c++) {
            pr[c] = TILES[1u + first + min(c, cnt - 1u)];
        }
    } else {
        e = ROUTE[item];
        pr[0] = item;
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
            Y[p * pc.out_stride + pc.out_col0 + r0 + r] = moe_weigh(total, p, pc.has_bias != 0u, e * pc.m + r0 + r);
        }
    }
}
