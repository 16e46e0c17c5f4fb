// The result `v` of routed pair `p` as the expert matmuls store it (matmul_moe.wgsl, the
// cooperative and integer-dot expert kernels): times the pair's routing weight (ROUTE[n_pairs +
// p], f32 bits) before the expert's bias row BIAS[bias_at] (scale 1: llama.cpp's weight before
// the FFN, the scaled input) or after it (scale 2: the weighted expert output).

fn moe_weigh(v: f32, p: u32, has_bias: bool, bias_at: u32) -> f32 {
    let w = bitcast<f32>(ROUTE[pc.n_pairs + p]);
    var out = v;
    if pc.scale == 1u {
        out *= w;
    }
    if has_bias {
        out += BIAS[bias_at];
    }
    if pc.scale == 2u {
        out *= w;
    }
    return out;
}
