// Attention temperature tuning (Llama 4's no-RoPE layers): each row times
// log(floor((pos + offset) / floor_scale) + 1) * scale + 1 of its token's position.

struct Params {
    cols: u32,
    n: u32,
    pos_off: u32,
    floor_scale: u32,
    scale: f32,
    offset: f32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> STEP: array<u32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = wg_linear(wid, nwg) * 64u + li;
    if i >= pc.n {
        return;
    }
    let pos = f32(STEP[pc.pos_off + i / pc.cols]);
    let f = log(floor((pos + pc.offset) / f32(pc.floor_scale)) + 1.0) * pc.scale + 1.0;
    Y[i] = X[i] * f;
}
