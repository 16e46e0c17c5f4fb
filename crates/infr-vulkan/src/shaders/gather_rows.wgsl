// Output-row gather: Y[r, :] = X[rows[r], :].

struct Params {
    cols: u32,
    n_out: u32,
    rows_off: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> S: array<u32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let g = wg_linear(wid, nwg) * 64u + li;
    let r = g / pc.cols;
    if r >= pc.n_out {
        return;
    }
    let c = g % pc.cols;
    Y[g] = X[S[pc.rows_off + r] * pc.cols + c];
}
