// Elementwise ops: Y = op(A, B) with `op` templated (add, mul, scale, softcap, GLUs). With
// VEC = 4 each thread takes one vec4 (element counts that are multiples of 4: 16-byte loads
// and stores, a quarter of the workgroups), with VEC = 1 one element.

struct Params {
    n: u32,
    s: f32,
    inv_s: f32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> A: array<{{T}}>;
@group(0) @binding(1) var<storage, read> B: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> Y: array<{{T}}>;

const VEC: u32 = {{VEC}}u;

fn op(a: f32, b: f32) -> f32 {
    {{OP}}
}

fn op_v(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(op(a.x, b.x), op(a.y, b.y), op(a.z, b.z), op(a.w, b.w));
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let g = wg_linear(wid, nwg) * {{WG}}u + li;
    if g < pc.n / VEC {
        Y[g] = {{APPLY}}(A[g], B[g]);
    }
}
