// The result `v` of routed pair `p` as the expert matmuls store it (matmul_moe.wgsl, the
// cooperative and integer-dot expert kernels): times the pair's routing weight (ROUTE[n_pairs +
// p], f32 bits) before the expert's bias row BIAS[bias_at] (scale 1: llama.cpp's weight before
// the FFN, the scaled input) or after it (scale 2: the weighted expert output).

fn moe_weigh(v: f32, p: u32, has_bias: bool, bias_at: u32) -> f32 {
    var bias = 0.0;
    if has_bias {
        bias = BIAS[bias_at];
    }
    return moe_weigh_bias(v, p, bias);
}

// `moe_weigh` with the bias value read by the caller (0 without one).
fn moe_weigh_bias(v: f32, p: u32, bias: f32) -> f32 {
    let w = bitcast<f32>(ROUTE[pc.n_pairs + p]);
    var out = v;
    if pc.scale == 1u {
        out *= w;
    }
    out += bias;
    if pc.scale == 2u {
        out *= w;
    }
    return out;
}
