// The output of a mixture-of-experts FFN: per token, the sum of its k routed experts' rows in
// routing order (already weighted), plus the shared expert's row, itself gated by
// sigmoid(x · gate_inp) when the family gates it. One workgroup per 64 columns of a token (one
// per token left a decode step's single workgroup walking all columns: ~25 us on an H200).

struct Params {
    n_tokens: u32,
    k: u32,
    out_cols: u32,
    in_cols: u32,
    has_shared: u32,
    gated: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> EXPERTS: array<f32>;
@group(0) @binding(1) var<storage, read> SHARED: array<f32>;
@group(0) @binding(2) var<storage, read> X: array<f32>;
@group(0) @binding(3) var<storage, read> GATE: array<f32>;
@group(0) @binding(4) var<storage, read_write> Y: array<f32>;

const WG: u32 = 64u;

var<workgroup> red: array<f32, WG>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let chunks = (pc.out_cols + 63u) / 64u;
    let lin = wg_linear(wid, nwg);
    let tok = lin / chunks;
    let c = (lin % chunks) * 64u + t;
    if tok >= pc.n_tokens {
        return;
    }
    var gate = 1.0;
    if pc.gated != 0u {
        gate = shared_gate(tok, t);
    }
    if c < pc.out_cols {
        var v = 0.0;
        for (var s = 0u; s < pc.k; s++) {
            v += EXPERTS[(tok * pc.k + s) * pc.out_cols + c];
        }
        if pc.has_shared != 0u {
            v += gate * SHARED[tok * pc.out_cols + c];
        }
        Y[tok * pc.out_cols + c] = v;
    }
}
