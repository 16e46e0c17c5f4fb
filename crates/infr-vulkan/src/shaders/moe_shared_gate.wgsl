// The shared expert's gate of every token into G (moe_gate.wgsl), one workgroup per token:
// where the shared expert's row is added up with the routed rows by the reader (one decode
// token), its down projection scales the row by it (`has_bias` 2 of the float matmuls), the
// same product moe_combine.wgsl would form.

struct Params {
    n_tokens: u32,
    in_cols: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> GATE: array<f32>;
@group(0) @binding(2) var<storage, read_write> G: array<f32>;

const WG: u32 = 64u;

var<workgroup> red: array<f32, WG>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let tok = wg_linear(wid, nwg);
    if tok >= pc.n_tokens {
        return;
    }
    let g = shared_gate(tok, t);
    if t == 0u {
        G[tok] = g;
    }
}
