// Gated activation of the expert FFNs: H[p, j] = act(GU[p, j]) * GU[p, n_ff + j], the gate and
// up halves of each routed pair's row side by side (`ggml_swiglu` / `ggml_geglu` on the
// fused gate_up output). One element per thread. With `gate_cols` set (one token: a decode
// step's shared expert), H is also scaled by sigmoid(X · GATE) over that many columns, the
// shared expert's gate (llama.cpp multiplies its output by it; the down projection is linear,
// so the scale moves before it).

struct Params {
    n_pairs: u32,
    n_ff: u32,
    gate_cols: u32,
    pad: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> GU: array<f32>;
@group(0) @binding(1) var<storage, read_write> H: array<f32>;
@group(0) @binding(2) var<storage, read> X: array<f32>;
@group(0) @binding(3) var<storage, read> GATE: array<f32>;

var<workgroup> red: array<f32, 64>;

fn op(a: f32, b: f32) -> f32 {
    {{OP}}
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = wg_linear(wid, nwg) * 64u + li;
    var scale = 1.0;
    if pc.gate_cols != 0u {
        var d = 0.0;
        for (var c = li; c < pc.gate_cols; c += 64u) {
            d += X[c] * GATE[c];
        }
        red[li] = d;
        workgroupBarrier();
        for (var s = 32u; s > 0u; s >>= 1u) {
            if li < s {
                red[li] += red[li + s];
            }
            workgroupBarrier();
        }
        scale = 1.0 / (1.0 + exp(-red[0]));
    }
    if i >= pc.n_pairs * pc.n_ff {
        return;
    }
    let p = i / pc.n_ff;
    let j = i % pc.n_ff;
    H[i] = op(GU[p * 2u * pc.n_ff + j], GU[p * 2u * pc.n_ff + pc.n_ff + j]) * scale;
}
