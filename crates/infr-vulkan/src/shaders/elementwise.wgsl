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
