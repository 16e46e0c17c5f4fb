// Decode-time fusion of a residual add, an RMS norm over whole rows and the int8
// quantization of the result for the integer-dot matrix-vector kernels: S = A + B (when
// has_add; else A is the input; with pre_norm, A is first RMS-normed itself, * WA: the
// sandwich norm after attention; times add_scale, a layer's output scale), Y = S /
// sqrt(mean(S²) + eps) (* W), then Q/QS from Y
// (q8_block.wgsl). With NO_NORM, Q/QS are S's own (Y is not written). Same arithmetic as elementwise.wgsl's add and norm.wgsl. One workgroup
// of 256 per 1024 elements of a row (rows of up to NJ * 1024 elements). B may be the
// partial-product planes of a split-K matmul (b_parts of them, b_stride vec4s apart), summed
// here in split_reduce.wgsl's order instead of by a reduction dispatch.

struct Params {
    k: u32,
    n_rows: u32,
    eps: f32,
    has_weight: u32,
    has_add: u32,
    group: u32,
    scale_off: u32,
    b_parts: u32,
    b_stride: u32,
    pre_norm: u32,
    eps_a: f32,
    add_scale: f32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> A: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> B: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> S: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> Y: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> WT: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> Q: array<{{Q_ELEM}}>;
@group(0) @binding(6) var<storage, read_write> QS: array<vec4<f32>>;
@group(0) @binding(7) var<storage, read> WA: array<vec4<f32>>;

// fused_kernels.rs NORM_A, WEIGHT_A and NO_FINAL_NORM (bits of pre_norm).
const NORM_A: u32 = 1u;
const WEIGHT_A: u32 = 2u;
const NO_NORM: u32 = 4u;

// Element vec4 i of B: the sum of its planes, in order (split_reduce.wgsl).
fn sum_planes(i: u32) -> vec4<f32> {
    var v = B[i];
    for (var p = 1u; p < pc.b_parts; p++) {
        v += B[p * pc.b_stride + i];
    }
    return v;
}

const QWG: u32 = 256u;
const NJ: u32 = 8u;
var<workgroup> red: array<f32, 256>;
var<workgroup> red_a: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32, @builtin(subgroup_invocation_id) sgi: u32, @builtin(subgroup_id) sgid: u32, @builtin(num_subgroups) nsg: u32, @builtin(subgroup_size) sgs: u32) {
    let u = lane_index(sgid, sgs, sgi);
    // Workgroup `slice` of a row writes its QWG vec4s; every workgroup of the row sums the
    // whole row's squares itself (a few more reads from cache instead of a second pass).
    let nv = pc.k / 4u;
    let slices = (nv + QWG - 1u) / QWG;
    let lin = wg_linear(wid, nwg);
    let row = lin / slices;
    if row >= pc.n_rows {
        return;
    }
    let slice = lin % slices;
    let base = row * nv;
    // With pre_norm, A's own norm first: the whole row's squares of A.
    var inv_a = 1.0;
    if (pc.pre_norm & NORM_A) != 0u {
        var sa = 0.0;
        for (var j = 0u; j < NJ; j++) {
            let i = u + j * QWG;
            if i < nv {
                sa += sum_sq(A[base + i]);
            }
        }
        let ssa = subgroupAdd(sa);
        if sgi == 0u {
            red_a[sgid] = ssa;
        }
        workgroupBarrier();
        var ta = 0.0;
        for (var i = 0u; i < nsg; i++) {
            ta += red_a[i];
        }
        inv_a = 1.0 / sqrt(ta / f32(pc.k) + pc.eps_a);
    }
    var mine = vec4<f32>(0.0);
    var s = 0.0;
    for (var j = 0u; j < NJ; j++) {
        let i = u + j * QWG;
        if i < nv {
            var v = A[base + i];
            if (pc.pre_norm & NORM_A) != 0u {
                v = v * inv_a;
                if (pc.pre_norm & WEIGHT_A) != 0u {
                    v = v * WA[i];
                }
            }
            if pc.has_add != 0u {
                v += sum_planes(base + i);
                if pc.add_scale != 1.0 {
                    v *= pc.add_scale;
                }
                if j == slice {
                    S[base + i] = v;
                }
            }
            if j == slice {
                mine = v;
            }
            s += sum_sq(v);
        }
    }
    let ss = subgroupAdd(s);
    if sgi == 0u {
        red[sgid] = ss;
    }
    workgroupBarrier();
    var total = 0.0;
    for (var i = 0u; i < nsg; i++) {
        total += red[i];
    }
    let normed = (pc.pre_norm & NO_NORM) == 0u;
    let scale = select(1.0, 1.0 / sqrt(total / f32(pc.k) + pc.eps), normed);
    let i = u + slice * QWG;
    let valid = i < nv;
    var y = vec4<f32>(0.0);
    if valid {
        if normed {
            y = mine * scale;
            if pc.has_weight != 0u {
                y *= WT[i];
            }
            Y[base + i] = y;
        } else {
            y = mine;
        }
    }
    {{QUANT}}(u, y, valid, base + i, pc.group, pc.scale_off, sgs);
}
