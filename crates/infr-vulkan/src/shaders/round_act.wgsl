// Round activations through 8-bit quants with one scale per 256 elements and back to f32,
// as llama.cpp's CPU does before every matmul with a k-quant or i-quant weight
// (`quantize_row_q8_K_ref`: iscale = 127 / max|x|, q = round_even(x * iscale), x' = q / iscale).
// With one large value in a group (the "massive activations" of the first token of Qwen2.5)
// the other 255 lose most of their precision; matching the reference needs the same loss.
// One workgroup per group of 256, four elements per thread.

struct Params {
    n_groups: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> Y: array<vec4<f32>>;

var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let g = wg_linear(wid, nwg);
    if g >= pc.n_groups {
        return;
    }
    let x = X[64u * g + t];
    let a = abs(x);
    red[t] = max(max(a.x, a.y), max(a.z, a.w));
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if t < s {
            red[t] = max(red[t], red[t + s]);
        }
        workgroupBarrier();
    }
    let amax = red[0];
    var y = vec4<f32>(0.0);
    if amax > 0.0 {
        let iscale = 127.0 / amax;
        y = round(x * iscale) * (1.0 / iscale);
    }
    Y[64u * g + t] = y;
}
