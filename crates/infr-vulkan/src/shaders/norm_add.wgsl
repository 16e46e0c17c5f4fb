// Whole-row RMS norms with the add and scale after them, in one dispatch (fusion.rs `NormAdd`):
// Y = s · (f(A) + g(B)), where f(A) = A / sqrt(mean(A²) + eps_a) (* WA) when A is normed, else
// A, g likewise for B, and without B, Y = s · f(A). Per element the arithmetic of norm.wgsl
// and of elementwise.wgsl's add and scale, in their order. One workgroup of 256 per row, the
// row held in registers (up to NJ vec4s per invocation).

struct Params {
    k: u32,
    n_rows: u32,
    eps_a: f32,
    eps_b: f32,
    flags: u32,
    s: f32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> A: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> B: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> WA: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> WB: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> Y: array<vec4<f32>>;

// fused_kernels.rs NORM_A, WEIGHT_A, HAS_B, NORM_B, WEIGHT_B.
const NORM_A: u32 = 1u;
const WEIGHT_A: u32 = 2u;
const HAS_B: u32 = 4u;
const NORM_B: u32 = 8u;
const WEIGHT_B: u32 = 16u;

const WG: u32 = 256u;
const NJ: u32 = 8u;
// Per-subgroup sums of squares of A (x) and B (y).
var<workgroup> red: array<vec2<f32>, 256>;

// 1 / sqrt(mean square + eps) of a row whose squares sum to `ss`, or 1 without a norm.
fn inv_rms(ss: f32, normed: bool, eps: f32) -> f32 {
    if !normed {
        return 1.0;
    }
    return 1.0 / sqrt(ss / f32(pc.k) + eps);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32, @builtin(subgroup_invocation_id) sgi: u32, @builtin(subgroup_id) sgid: u32, @builtin(num_subgroups) nsg: u32) {
    let row = wg_linear(wid, nwg);
    if row >= pc.n_rows {
        return;
    }
    let f = pc.flags;
    let has_b = (f & HAS_B) != 0u;
    let nv = pc.k / 4u;
    let base = row * nv;
    var av: array<vec4<f32>, NJ>;
    var bv: array<vec4<f32>, NJ>;
    var ss = vec2<f32>(0.0);
    for (var j = 0u; j < NJ; j++) {
        let i = t + j * WG;
        if i < nv {
            av[j] = A[base + i];
            ss.x += sum_sq(av[j]);
            if has_b {
                bv[j] = B[base + i];
                ss.y += sum_sq(bv[j]);
            }
        }
    }
    let part = vec2<f32>(subgroupAdd(ss.x), subgroupAdd(ss.y));
    if sgi == 0u {
        red[sgid] = part;
    }
    workgroupBarrier();
    var total = vec2<f32>(0.0);
    for (var i = 0u; i < nsg; i++) {
        total += red[i];
    }
    let sa = inv_rms(total.x, (f & NORM_A) != 0u, pc.eps_a);
    let sb = inv_rms(total.y, (f & NORM_B) != 0u, pc.eps_b);
    for (var j = 0u; j < NJ; j++) {
        let i = t + j * WG;
        if i < nv {
            var y = av[j];
            if (f & NORM_A) != 0u {
                y = y * sa;
                if (f & WEIGHT_A) != 0u {
                    y = y * WA[i];
                }
            }
            if has_b {
                var z = bv[j];
                if (f & NORM_B) != 0u {
                    z = z * sb;
                    if (f & WEIGHT_B) != 0u {
                        z = z * WB[i];
                    }
                }
                y = y + z;
            }
            if pc.s != 1.0 {
                y = y * pc.s;
            }
            Y[base + i] = y;
        }
    }
}
