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

// 256 threads. Rows of up to NJ * 256 elements are read once into registers by a loop of
// constant trip count (independent, coalesced loads in flight together: a single 4096-wide
// decode row is latency-bound) and scaled from there; wider rows loop over memory twice.
const WG: u32 = 256u;
const NJ: u32 = 16u;
var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let gi = wg_linear(wid, nwg);
    if gi >= pc.n_groups {
        return;
    }
    let base = gi * pc.group;
    let in_regs = pc.group <= NJ * WG;
    var xv: array<f32, NJ>;
    var s = 0.0;
    if in_regs {
        for (var j = 0u; j < NJ; j++) {
            let i = t + j * WG;
            if i < pc.group {
                xv[j] = X[base + i];
            }
        }
        for (var j = 0u; j < NJ; j++) {
            s += xv[j] * xv[j];
        }
    } else {
        for (var i = t; i < pc.group; i += WG) {
            let v = X[base + i];
            s += v * v;
        }
    }
    let mean = tree_sum(t, s) / f32(pc.group);
    let scale = 1.0 / sqrt(mean + pc.eps);
    if in_regs {
        for (var j = 0u; j < NJ; j++) {
            let i = t + j * WG;
            if i < pc.group {
                var v = xv[j] * scale;
                if pc.has_weight != 0u {
                    v *= WT[i];
                }
                Y[base + i] = v;
            }
        }
    } else {
        for (var i = t; i < pc.group; i += WG) {
            var v = X[base + i] * scale;
            if pc.has_weight != 0u {
                v *= WT[i];
            }
            Y[base + i] = v;
        }
    }
}
