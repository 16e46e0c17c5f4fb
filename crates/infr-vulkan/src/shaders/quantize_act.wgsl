// Quantize activations to int8 blocks of 32 for the integer-dot matrix-vector kernels:
// Q[row][k/4] packed int8 words, then per block vec4(d, Σq of the first 16, Σq of the last 16, 0)
// with x ≈ d * q. One thread per block. With group = 8 the eight blocks of each 256 share
// one scale (max over the 256), the rounding of llama.cpp's Q8_K activations for k-quants.

struct Params {
    k: u32,
    n_blocks: u32,
    scale_off: u32,
    group: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> Q: array<u32>;
@group(0) @binding(2) var<storage, read_write> QS: array<vec4<f32>>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let b = wg_linear(wid, nwg) * 64u + li;
    if b >= pc.n_blocks {
        return;
    }
    var amax = 0.0;
    let b0 = b - b % pc.group;
    for (var i = 8u * b0; i < 8u * (b0 + pc.group); i++) {
        let v = abs(X[i]);
        amax = max(amax, max(max(v.x, v.y), max(v.z, v.w)));
    }
    var d = amax / 127.0;
    var id = 0.0;
    if pc.group > 1u && amax > 0.0 {
        // quantize_row_q8_K_ref's order of operations.
        id = 127.0 / amax;
        d = 1.0 / id;
    } else if d > 0.0 {
        id = 1.0 / d;
    }
    var s0 = 0;
    var s1 = 0;
    for (var i = 0u; i < 8u; i++) {
        let q = vec4<i32>(round(X[8u * b + i] * id));
        let s = q.x + q.y + q.z + q.w;
        if i < 4u {
            s0 += s;
        } else {
            s1 += s;
        }
        Q[8u * b + i] = (u32(q.x) & 0xffu) | ((u32(q.y) & 0xffu) << 8u) | ((u32(q.z) & 0xffu) << 16u) | ((u32(q.w) & 0xffu) << 24u);
    }
    // Q8_0 / Q8_1 keep their scale as f16 (quantize_row_q8_0_ref); Q8_K keeps f32.
    if pc.group == 1u {
        d = round_f16(d);
    }
    QS[pc.scale_off + b] = vec4<f32>(d, f32(s0), f32(s1), 0.0);
}
