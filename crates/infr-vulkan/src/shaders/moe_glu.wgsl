// Gated activation of the expert FFNs: H[p, j] = act(GU[p, j]) * GU[p, n_ff + j], the gate and
// up halves of each routed pair's row side by side (`ggml_swiglu` / `ggml_geglu` on the
// fused gate_up output). One element per thread.

struct Params {
    n_pairs: u32,
    n_ff: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> GU: array<f32>;
@group(0) @binding(1) var<storage, read_write> H: array<f32>;

fn op(a: f32, b: f32) -> f32 {
    {{OP}}
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = wg_linear(wid, nwg) * 64u + li;
    if i >= pc.n_pairs * pc.n_ff {
        return;
    }
    let p = i / pc.n_ff;
    let j = i % pc.n_ff;
    H[i] = op(GU[p * 2u * pc.n_ff + j], GU[p * 2u * pc.n_ff + pc.n_ff + j]);
}
