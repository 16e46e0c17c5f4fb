// The sum of a split-K matmul's partial products (`matmul_coop.wgsl` with one k range per
// workgroup): Y[c, r] = Σ_p P[p, c, r] (+ bias), over the parts in order, so the result does
// not depend on which workgroup finished first.

struct Params {
    // Output rows (the row stride of Y and of each part).
    m: u32,
    n: u32,
    parts: u32,
    has_bias: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> P: array<f32>;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<storage, read> BIAS: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = wg_linear(wid, nwg) * 256u + t;
    let part = pc.m * pc.n;
    if i >= part {
        return;
    }
    var v = P[i];
    for (var p = 1u; p < pc.parts; p++) {
        v += P[p * part + i];
    }
    if pc.has_bias != 0u {
        v += BIAS[i % pc.m];
    }
    Y[i] = v;
}
