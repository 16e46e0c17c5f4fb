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

// 256 threads, each loading four neighbouring values per pass: a 4096-wide row takes four
// passes of independent loads instead of 64 dependent ones (latency-bound at decode).
const WG: u32 = 256u;
var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let gi = wg_linear(wid, nwg);
    if gi >= pc.n_groups {
        return;
    }
    let base = gi * pc.group;
    var s = 0.0;
    for (var i = 4u * t; i < pc.group; i += 4u * WG) {
        let n = min(4u, pc.group - i);
        var v = vec4<f32>(0.0);
        v.x = X[base + i];
        if n > 1u {
            v.y = X[base + i + 1u];
        }
        if n > 2u {
            v.z = X[base + i + 2u];
        }
        if n > 3u {
            v.w = X[base + i + 3u];
        }
        s += dot(v, v);
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
