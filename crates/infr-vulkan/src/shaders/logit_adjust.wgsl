// A sampler's logit bias and penalties applied to the output rows in place, before the top-k
// passes select from them (`infr_core::LogitAdjust`: l += bias; l = l / repeat if positive,
// l * repeat otherwise; l -= sub). The adjustment buffer holds each row's count (one u32 per
// row, `pc.parts` 16-byte words in all), then `pc.k` entries per row as (token, bias, repeat,
// sub) with one entry per token, so threads never touch one logit twice.

struct Params {
    // Row width (vocabulary).
    n_in: u32,
    n_rows: u32,
    // Entries per row in the buffer.
    k: u32,
    // 16-byte words of counts before the entries.
    parts: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read_write> X: array<f32>;
@group(0) @binding(1) var<storage, read> ADJ: array<vec4<u32>>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let row = wg_linear(wid, nwg);
    if row >= pc.n_rows {
        return;
    }
    let count = min(ADJ[row / 4u][row % 4u], pc.k);
    for (var j = t; j < count; j += 64u) {
        let e = ADJ[pc.parts + row * pc.k + j];
        if e.x < pc.n_in {
            let i = row * pc.n_in + e.x;
            let l = X[i] + bitcast<f32>(e.y);
            let r = bitcast<f32>(e.z);
            X[i] = select(l / r, l * r, l <= 0.0) - bitcast<f32>(e.w);
        }
    }
}
