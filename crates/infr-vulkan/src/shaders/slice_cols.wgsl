// Column slice: Y[r, g * len + j] = X[r, g * period + offset + j] for each `period`-wide
// group g of a row (splits fused projections and per-head interleaved ones). One element
// per thread.

struct Params {
    n: u32,
    in_cols: u32,
    out_cols: u32,
    period: u32,
    offset: u32,
    len: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = wg_linear(wid, nwg) * 64u + li;
    if i >= pc.n {
        return;
    }
    let r = i / pc.out_cols;
    let c = i % pc.out_cols;
    Y[i] = X[r * pc.in_cols + (c / pc.len) * pc.period + pc.offset + c % pc.len];
}
