// Quantize activations to int8 blocks of 32 for the integer-dot matrix-vector kernels
// (q8_block.wgsl): Q[row][k/4] packed int8 words, then per block vec4(d, Σq of the first 16,
// Σq of the last 16, 0). A workgroup of 64 invocations takes eight consecutive blocks (256
// elements), one vec4 each. With group = 8 the eight blocks share one scale (Q8_K rounding).
// With PAIRS, row p of Q is routed pair p's own expert input: token p / pairs_per_token's row
// of X times the pair's routing weight (ROUTE[n_pairs + p], f32 bits), quantized after the
// scaling as llama.cpp's CPU quantizes `ggml_mul(cur, weights)` for Llama 4's experts
// (quantizing the token's row once and scaling the products instead gives the same integers
// but each block's f16 scale rounded before the weight rather than after it).

struct Params {
    k: u32,
    n_blocks: u32,
    scale_off: u32,
    group: u32,
{{PAIR_FIELDS}}}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> Q: array<u32>;
@group(0) @binding(2) var<storage, read_write> QS: array<vec4<f32>>;
{{PAIR_BINDING}}

const QWG: u32 = 64u;

// Input vec4 `w` of the rows being quantized.
fn input_word(w: u32) -> vec4<f32> {
{{INPUT_WORD}}
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32, @builtin(subgroup_invocation_id) sgi: u32, @builtin(subgroup_id) sgid: u32, @builtin(subgroup_size) sgs: u32) {
    let u = lane_index(sgid, sgs, sgi);
    let w = 64u * wg_linear(wid, nwg) + u;
    let valid = w / 8u < pc.n_blocks;
    var v = vec4<f32>(0.0);
    if valid {
        v = input_word(w);
    }
    quant_vec4(u, v, valid, w, pc.group, pc.scale_off, sgs);
}
