// The shared expert's gate of a token: sigmoid(X[tok] . GATE) over pc.in_cols columns, by the
// includer's workgroup of WG (invocation t; every invocation gets it), summed by tree_sum.wgsl.
// The includer declares pc.in_cols, X, GATE, `const WG` and `red` (WG floats).
// moe_combine.wgsl applies it to the shared expert's row; moe_shared_gate.wgsl writes it for
// the down projection to scale its row by; moe_route_rank.wgsl makes it the weight of the
// shared expert's slot.

fn shared_gate(tok: u32, t: u32) -> f32 {
    let x0 = tok * pc.in_cols;
    var d = 0.0;
    var c = t;
    // Four columns' loads issued before their products (the same order of sums): one
    // round trip to memory per four columns rather than per column.
    for (; c + 3u * WG < pc.in_cols; c += 4u * WG) {
        let x = vec4<f32>(X[x0 + c], X[x0 + c + WG], X[x0 + c + 2u * WG], X[x0 + c + 3u * WG]);
        let g = vec4<f32>(GATE[c], GATE[c + WG], GATE[c + 2u * WG], GATE[c + 3u * WG]);
        d += x.x * g.x;
        d += x.y * g.y;
        d += x.z * g.z;
        d += x.w * g.w;
    }
    for (; c < pc.in_cols; c += WG) {
        d += X[x0 + c] * GATE[c];
    }
    return 1.0 / (1.0 + exp(-tree_sum(t, d)));
}
