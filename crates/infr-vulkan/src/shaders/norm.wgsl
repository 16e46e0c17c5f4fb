// RMS norm over groups of `group` columns: y = x / sqrt(mean(x²) + eps) (* w). One workgroup
// per group.

struct Params {
    group: u32,
    n_groups: u32,
    eps: f32,
    has_weight: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<storage, read> WT: array<f32>;

const WG: u32 = 64u;
var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let gi = wg_linear(wid, nwg);
    if gi >= pc.n_groups {
        return;
    }
    let base = gi * pc.group;
    var s = 0.0;
    for (var i = t; i < pc.group; i += WG) {
        let v = X[base + i];
        s += v * v;
    }
    red[t] = s;
    workgroupBarrier();
    for (var w = WG / 2u; w > 0u; w >>= 1u) {
        if t < w {
            red[t] += red[t + w];
        }
        workgroupBarrier();
    }
    let mean = red[0] / f32(pc.group);
    let scale = 1.0 / sqrt(mean + pc.eps);
    for (var i = t; i < pc.group; i += WG) {
        var v = X[base + i] * scale;
        if pc.has_weight != 0u {
            v *= WT[i];
        }
        Y[base + i] = v;
    }
}
