// The shared expert's gate of a token: sigmoid(X[tok] . GATE) over pc.in_cols columns, by the
// includer's workgroup of WG (invocation t; every invocation gets it), summed by tree_sum.wgsl.
// The includer declares pc.in_cols, X, GATE, `const WG` and `red` (WG floats).
// moe_combine.wgsl applies it to the shared expert's row; moe_shared_gate.wgsl writes it for
// the down projection to scale its row by; moe_route_rank.wgsl makes it the weight of the
// shared expert's slot.

fn shared_gate(tok: u32, t: u32) -> f32 {
    var d = 0.0;
    for (var c = t; c < pc.in_cols; c += WG) {
        d += X[tok * pc.in_cols + c] * GATE[c];
    }
    return 1.0 / (1.0 + exp(-tree_sum(t, d)));
}
