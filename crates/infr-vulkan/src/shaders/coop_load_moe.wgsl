// X loader and output part of `matmul_coop.wgsl` (after `coop_load_quant.wgsl`) for the
// expert matmuls of a mixture-of-experts FFN over batches (`ggml_mul_mat_id` with the rows
// grouped by expert, as llama.cpp's `mul_mm_id` does): activation tile tn is tile tn of
// moe_tiles.wgsl's list, up to BN routed pairs of one expert e. Its W slice is rows
// e*m .. (e+1)*m of the 3-D weight (`wrow0`), dequantized on the fly; its X rows are the
// pairs' input rows (pair / x_div, in f16), gathered; each result goes to its pair's output
// row, weighted as `moe_weigh.wgsl` says. Tiles past the list's count end at once.

struct Params {
    k: u32,
    m: u32,
    // Activation rows of the grid: the most tiles the list can hold, times BN.
    n: u32,
    out_stride: u32,
    out_col0: u32,
    soff: u32,
    has_bias: u32,
    tiles_m: u32,
    n_pairs: u32,
    x_div: u32,
    scale: u32,
}

var<immediate> pc: Params;

// Bindings 0 and 2-4 (W, Y, BIAS, TBL) are coop_load_quant.wgsl's.
@group(0) @binding(1) var<storage, read> X: array<vec4<u32>>;
@group(0) @binding(5) var<storage, read> ROUTE: array<u32>;
@group(0) @binding(6) var<storage, read> TILES: array<u32>;

// Rows are scattered to their pairs: every tile stores through workgroup memory.
const DIRECT: bool = false;

// Whether this workgroup's tile is in the list (1) or past its count (0).
var<workgroup> moe_live: u32;
// This workgroup's tile: expert, first index into the pair order, pair count.
var<private> moe_e: u32;
var<private> moe_first: u32;
var<private> moe_count: u32;

fn moe_begin(tn: u32) {
    let tb = 1u + pc.n_pairs + 3u * tn;
    moe_e = TILES[tb];
    moe_first = TILES[tb + 1u];
    moe_count = TILES[tb + 2u];
    wrow0 = moe_e * pc.m;
}

// The pair of row j of this workgroup's tile (j < moe_count).
fn moe_pair(j: u32) -> u32 {
    return TILES[1u + moe_first + j];
}

// A unit of activations as read: two 16-byte words of f16 (X16, from `round_act16`), opened
// only when staged so that the next step's gathered rows stay in flight while the current one
// is multiplied (as `coop_x_f16.wgsl` does for dense products).
alias XUnit = array<vec4<u32>, 2>;

fn open_x(v: XUnit) -> array<vec4<f16>, 4> {
    return halves16(v[0], v[1]);
}

fn fetch_x(u: u32, c0: u32, k0: u32) -> XUnit {
    let j = u / KU;
    let ke = k0 + 16u * (u % KU);
    if j >= moe_count || ke >= pc.k {
        return XUnit();
    }
    let w = ((moe_pair(j) / pc.x_div) * pc.k + ke) / 8u;
    return XUnit(X[w], X[w + 1u]);
}

// Write one F×F accumulator (weight rows rr.., tile rows cc.. counted from the grid's
// activation rows) to the pairs' output rows, weighted and biased per element.
fn store_edge(sgid: u32, sgi: u32, rr: u32, cc: u32) {
    let j0 = cc % BN;
    for (var e = sgi; e < F * F; e += SGS) {
        let r = e % F;
        let c = e / F;
        if rr + r < pc.m && j0 + c < moe_count {
            let p = moe_pair(j0 + c);
            let v = moe_weigh(cs[sgid * F * F + e], p, pc.has_bias != 0u, moe_e * pc.m + rr + r);
            Y[p * pc.out_stride + pc.out_col0 + rr + r] = v;
        }
    }
}
