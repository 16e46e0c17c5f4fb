// Rotary position embedding (rope_math.wgsl). One thread per column pair.

struct Params {
    rope: Rope,
    cols: u32,
    head_dim: u32,
    n_rows: u32,
    pos_off: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<storage, read> S: array<u32>;
@group(0) @binding(3) var<storage, read> FF: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let g = wg_linear(wid, nwg) * 64u + li;
    let half_cols = pc.cols / 2u;
    let row = g / half_cols;
    if row >= pc.n_rows {
        return;
    }
    let j = g % half_cols;
    let hh = pc.head_dim / 2u;
    let head = j / hh;
    let jj = j % hh;
    let base = row * pc.cols + head * pc.head_dim;
    if jj >= pc.rope.n_rot / 2u {
        Y[base + 2u * jj] = X[base + 2u * jj];
        Y[base + 2u * jj + 1u] = X[base + 2u * jj + 1u];
        return;
    }
    let ix = rope_pair(jj);
    let r = rope_rotate(X[base + ix.x], X[base + ix.y], jj, S[pc.pos_off + row]);
    Y[base + ix.x] = r.x;
    Y[base + ix.y] = r.y;
}
