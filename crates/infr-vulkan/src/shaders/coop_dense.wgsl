// Output part of `matmul_coop.wgsl` for a plain product Y[n, m] = X[n, k] · W[m, k]ᵀ (+ bias):
// its parameters, and the per-element store of edge tiles.

struct Params {
    k: u32,
    m: u32,
    n: u32,
    out_stride: u32,
    out_col0: u32,
    soff: u32,
    has_bias: u32,
    tiles_m: u32,
{{SPLIT_FIELDS}}}

var<immediate> pc: Params;

// Interior tiles store their fragments straight to Y.
const DIRECT: bool = true;

// Write one F×F accumulator (weight rows rr.., activation rows cc..) of an edge tile
// through this subgroup's staging fragment, masking and adding the bias per element.
fn store_edge(sgid: u32, sgi: u32, rr: u32, cc: u32) {
    for (var e = sgi; e < F * F; e += SGS) {
        let r = e % F;
        let c = e / F;
        if rr + r < pc.m && cc + c < pc.n && k_lo < pc.k {
            let col = pc.out_col0 + rr + r;
            var v = cs[sgid * F * F + e];
            if pc.has_bias != 0u {
                v += BIAS[col];
            }
            Y[yoff + (cc + c) * pc.out_stride + col] = v;
        }
    }
}
