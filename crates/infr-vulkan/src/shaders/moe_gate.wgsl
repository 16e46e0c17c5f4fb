// The shared expert's gate of a token: sigmoid(X[tok] . GATE) over pc.in_cols columns, by a
// workgroup of 64 (invocation t; every invocation gets it). The includer declares pc.in_cols,
// X, GATE and `red` (64 floats). moe_combine.wgsl applies it to the shared expert's row;
// moe_shared_gate.wgsl writes it for the down projection to scale its row by.

fn shared_gate(tok: u32, t: u32) -> f32 {
    var d = 0.0;
    for (var c = t; c < pc.in_cols; c += 64u) {
        d += X[tok * pc.in_cols + c] * GATE[c];
    }
    red[t] = d;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if t < s {
            red[t] += red[t + s];
        }
        workgroupBarrier();
    }
    return 1.0 / (1.0 + exp(-red[0]));
}
