// Quantize each routed pair's own expert input to int8 blocks of 32 (q8_block.wgsl), for
// mixtures whose routing weight scales the expert's input rather than its output (Llama 4,
// `weight_before_ffn`): row p of Q is token p / ppt's row of X times pair p's weight
// (ROUTE[n_pairs + p]), quantized after the scaling as llama.cpp's CPU quantizes
// `ggml_mul(cur, weights)` for the expert matmuls. Quantizing the token's row once and
// scaling the dot products instead gives the same integers but block scales rounded to f16
// before the weight rather than after it. Layout and workgroups as quantize_act.wgsl.

struct Params {
    k: u32,
    n_blocks: u32,
    scale_off: u32,
    group: u32,
    pairs_per_token: u32,
    n_pairs: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> Q: array<u32>;
@group(0) @binding(2) var<storage, read_write> QS: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> ROUTE: array<u32>;

const QWG: u32 = 64u;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32, @builtin(subgroup_invocation_id) sgi: u32, @builtin(subgroup_id) sgid: u32, @builtin(subgroup_size) sgs: u32) {
    let u = lane_index(sgid, sgs, sgi);
    let w = 64u * wg_linear(wid, nwg) + u;
    let valid = w / 8u < pc.n_blocks;
    var v = vec4<f32>(0.0);
    if valid {
        let words = pc.k / 4u;
        let p = w / words;
        let weight = bitcast<f32>(ROUTE[pc.n_pairs + p]);
        v = X[(p / pc.pairs_per_token) * words + w % words] * weight;
    }
    quant_vec4(u, v, valid, w, pc.group, pc.scale_off, sgs);
}
