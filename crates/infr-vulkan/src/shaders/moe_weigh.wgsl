// The result `v` of routed pair `p` as the expert matmuls store it (matmul_moe.wgsl, the
// cooperative and integer-dot expert kernels): plus the expert's bias row BIAS[bias_at], then
// with scale 2 times the pair's routing weight (ROUTE[n_pairs + p], f32 bits: the weighted
// expert output). Where the weight scales the expert input instead (Llama 4), the pair inputs
// carry it (moe_pair_inputs.wgsl, quantize_pairs.wgsl) and scale is 0.

fn moe_weigh(v: f32, p: u32, has_bias: bool, bias_at: u32) -> f32 {
    var bias = 0.0;
    if has_bias {
        bias = BIAS[bias_at];
    }
    return moe_weigh_bias(v, p, bias);
}

// `moe_weigh` with the bias value read by the caller (0 without one).
fn moe_weigh_bias(v: f32, p: u32, bias: f32) -> f32 {
    var out = v + bias;
    if pc.scale == 2u {
        out *= bitcast<f32>(ROUTE[pc.n_pairs + p]);
    }
    return out;
}
