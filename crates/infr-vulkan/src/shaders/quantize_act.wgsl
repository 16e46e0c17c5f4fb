// Quantize activations to int8 blocks of 32 for the integer-dot matrix-vector kernels:
// Q[row][k/4] packed int8 words, then per block vec4(d, Σq of the first 16, Σq of the last 16, 0)
// with x ≈ d * q. A workgroup of 64 threads takes eight consecutive blocks (256 elements),
// one vec4 per thread, with the maxima and sums reduced in workgroup memory. With group = 8
// the eight blocks share one scale (max over the 256), the rounding of llama.cpp's Q8_K
// activations for k-quants.

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

var<workgroup> amax_t: array<f32, 64>;
var<workgroup> sum_t: array<i32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let g = wg_linear(wid, nwg);
    let b = 8u * g + t / 8u;
    let valid = b < pc.n_blocks;
    let w = 64u * g + t;
    var v = vec4<f32>(0.0);
    if valid {
        v = X[w];
    }
    let a = abs(v);
    amax_t[t] = max(max(a.x, a.y), max(a.z, a.w));
    workgroupBarrier();
    // Max over this thread's block (group 1) or over all eight blocks (group 8).
    var first = t - t % 8u;
    var cnt = 8u;
    if pc.group > 1u {
        first = 0u;
        cnt = 64u;
    }
    var amax = 0.0;
    for (var i = 0u; i < cnt; i++) {
        amax = max(amax, amax_t[first + i]);
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
    let q = vec4<i32>(round(v * id));
    if valid {
        Q[w] = (u32(q.x) & 0xffu) | ((u32(q.y) & 0xffu) << 8u) | ((u32(q.z) & 0xffu) << 16u) | ((u32(q.w) & 0xffu) << 24u);
    }
    sum_t[t] = q.x + q.y + q.z + q.w;
    workgroupBarrier();
    if valid && t % 8u == 0u {
        let s0 = sum_t[t] + sum_t[t + 1u] + sum_t[t + 2u] + sum_t[t + 3u];
        let s1 = sum_t[t + 4u] + sum_t[t + 5u] + sum_t[t + 6u] + sum_t[t + 7u];
        // Q8_0 / Q8_1 keep their scale as f16 (quantize_row_q8_0_ref); Q8_K keeps f32.
        if pc.group == 1u {
            d = round_f16(d);
        }
        QS[pc.scale_off + b] = vec4<f32>(d, f32(s0), f32(s1), 0.0);
    }
}
