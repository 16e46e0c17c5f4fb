// Elementwise ops: Y = op(A, B) with `op` templated (add, mul, scale, softcap, GLUs).

struct Params {
    n: u32,
    s: f32,
    inv_s: f32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> A: array<f32>;
@group(0) @binding(1) var<storage, read> B: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;

// ggml_gelu through its f16 table: input and output rounded to f16, saturating outside ±10.
fn gelu_f16(x: f32) -> f32 {
    if x <= -10.0 {
        return 0.0;
    }
    if x >= 10.0 {
        return x;
    }
    let h = round_f16(x);
    return round_f16(0.5 * h * (1.0 + tanh_exp(0.7978846 * h * (1.0 + 0.044715 * h * h))));
}

fn op(a: f32, b: f32) -> f32 {
    {{OP}}
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let g = wg_linear(wid, nwg) * 64u + li;
    if g < pc.n {
        Y[g] = op(A[g], B[g]);
    }
}
