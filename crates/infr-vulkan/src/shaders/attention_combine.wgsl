// Merge the per-split partials of `attention.wgsl`: out = Σ acc_s e^(m_s - M) / Σ l_s e^(m_s - M)
// over the splits that had keys (a row whose keys fit one split was written directly).

struct Params {
    n_rows: u32,
    dv: u32,
    n_split: u32,
    n_head: u32,
    window: u32,
    pos_off: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> PART: array<f32>;
@group(0) @binding(1) var<storage, read_write> O: array<f32>;
@group(0) @binding(2) var<storage, read> S: array<u32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let row = wg_linear(wid, nwg);
    if row >= pc.n_rows {
        return;
    }
    let pos = S[pc.pos_off + row / pc.n_head];
    let keys = attn_keys(pos, S[pc.pos_off], S[pc.pos_off + pc.n_rows / pc.n_head - 1u], pc.window);
    let n_active = attn_splits_used(keys.y - keys.x, pc.n_split);
    if n_active <= 1u {
        return;
    }
    let stride = pc.dv + 2u;
    let base = row * pc.n_split * stride;
    var mx = -1e30;
    for (var s = 0u; s < n_active; s++) {
        mx = max(mx, PART[base + s * stride]);
    }
    var l = 0.0;
    for (var s = 0u; s < n_active; s++) {
        l += PART[base + s * stride + 1u] * exp(PART[base + s * stride] - mx);
    }
    let inv = 1.0 / l;
    for (var d = t; d < pc.dv; d += 64u) {
        var a = 0.0;
        for (var s = 0u; s < n_active; s++) {
            a += PART[base + s * stride + 2u + d] * exp(PART[base + s * stride] - mx);
        }
        O[row * pc.dv + d] = a * inv;
    }
}
