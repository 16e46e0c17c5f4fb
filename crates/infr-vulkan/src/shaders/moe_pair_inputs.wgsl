// Each routed pair's expert input where the routing weight scales the input rather than the
// output (Llama 4, `weight_before_ffn`): XP[p] = X[p / ppt] * ROUTE[n_pairs + p] (moe_pair_row.wgsl),
// so that the float expert matmuls round (to int8 blocks as llama.cpp's CPU quantizes, or to
// f16) the scaled rows, as llama.cpp multiplies `ggml_mul(cur, weights)`. Rounding the token's
// row and scaling the products instead rounds each block's scale to f16 before the weight
// rather than after it (Q8_0: ~5e-4 relative). One vec4 per invocation.

struct Params {
    n_pairs: u32,
    words: u32,
    pairs_per_token: u32,
    pad: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> ROUTE: array<u32>;
@group(0) @binding(2) var<storage, read_write> XP: array<vec4<f32>>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = wg_linear(wid, nwg) * 64u + li;
    if i >= pc.n_pairs * pc.words {
        return;
    }
    XP[i] = pair_input_word(i, pc.words);
}
